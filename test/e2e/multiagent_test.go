//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/test/e2e/scriptedapi"
	"github.com/agentscm/agentscm/test/e2e/scriptedgemini"
	"github.com/agentscm/agentscm/test/e2e/scriptedresponses"
)

// TestThreeAgentsOneCheckout: Claude Code, Codex CLI and Gemini CLI
// captured in one checkout by the real CLIs (issue 29). `agentscm enable
// --agent X` adds each agent's hooks where it reads them, keeping the
// others' (it was refused: "the capture binding of this checkout installs
// codex hooks, not gemini"); one binding lists the three; each CLI's
// session writes a file; every spool record of a session carries that
// session's agent, every event reaches the served Hub under its session
// and the Hub stores each session's agent (events and actions name it),
// the timeline (agentscm show) names each session's agent, and the changelog holds one
// increment per call of the three. `agentscm disable --agent gemini`
// then removes only Gemini's hooks.
func TestThreeAgentsOneCheckout(t *testing.T) {
	ensureCodex(t)
	ensureGemini(t)
	c := newCheckout(t)
	url, tok, _ := c.serveHub()
	c.agentscm("client", "setup", "--root", c.root, "--hub", url, "--repository", "proj", "--token-file", tok)
	work := c.startWork("three agents")
	for _, agent := range []string{"codex", "gemini", "claude-code"} {
		var rep struct {
			Capture struct {
				Spool  string `json:"spool"`
				Agent  string `json:"agent"`
				Agents []struct {
					Agent string `json:"agent"`
				} `json:"agents"`
			} `json:"capture"`
		}
		if err := json.Unmarshal([]byte(c.agentscm("enable", "--root", c.root, "--agent", agent, "--format", "json")), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Capture.Agent != agent || rep.Capture.Spool == "" {
			t.Fatalf("enable --agent %s: %+v", agent, rep.Capture)
		}
		c.spool = rep.Capture.Spool
	}
	for file, want := range map[string][]string{
		".codex/hooks.json":           {"agentscm-hook-intake change-capture hook-codex", "agentscm-hook changelog hook-codex"},
		".gemini/settings.json":       {"agentscm-hook-intake change-capture hook-gemini", "agentscm-hook changelog hook-gemini"},
		".claude/settings.local.json": {"change-capture hook-claude"},
	} {
		b, _ := os.ReadFile(filepath.Join(c.root, filepath.FromSlash(file)))
		for _, w := range want {
			if !strings.Contains(string(b), w) {
				t.Fatalf("%s lacks %q:\n%s", file, w, b)
			}
		}
	}

	// Codex writes codex.txt with a shell command.
	codexAPI, err := scriptedresponses.Start(scriptedresponses.Turn{Marker: "CODEX-TURN", Steps: [][]scriptedresponses.Call{
		{{Shell: "echo from-codex > codex.txt"}},
	}, FinalText: "codex done"})
	if err != nil {
		t.Fatal(err)
	}
	defer codexAPI.Close()
	c.configureCodex(codexAPI)
	codexSession := c.runCodex("Run CODEX-TURN please.")

	// Gemini writes gemini.txt.
	c.configureGemini()
	geminiAPI, err := scriptedgemini.Start(scriptedgemini.Turn{Marker: "GEMINI-TURN", Steps: [][]scriptedgemini.Call{
		{{Name: "write_file", Args: map[string]any{"file_path": filepath.Join(c.root, "gemini.txt"), "content": "from-gemini\n"}}},
	}, FinalText: "gemini done"})
	if err != nil {
		t.Fatal(err)
	}
	defer geminiAPI.Close()
	geminiSession := c.runGemini(geminiAPI, "-p", "Run GEMINI-TURN please.")

	// Claude Code writes claude.txt.
	claudeAPI, err := scriptedapi.Start(scriptedapi.Turn{Marker: "CLAUDE-TURN", Steps: [][]scriptedapi.ToolCall{
		{{Name: "Write", Input: map[string]any{"file_path": filepath.Join(c.root, "claude.txt"), "content": "from-claude\n"}}},
	}, FinalText: "claude done"})
	if err != nil {
		t.Fatal(err)
	}
	defer claudeAPI.Close()
	claudeSession := c.runClaude(claudeAPI, "-p", "Run CLAUDE-TURN please.").SessionID
	for f, want := range map[string]string{"codex.txt": "from-codex\n", "gemini.txt": "from-gemini\n", "claude.txt": "from-claude\n"} {
		if b, err := os.ReadFile(filepath.Join(c.root, f)); err != nil || string(b) != want {
			t.Fatalf("%s = %q, %v", f, b, err)
		}
	}

	// The spool: each session's records, every one under its agent, with
	// the session's tool call started and finished.
	agentOf := map[string]string{codexSession: "codex", geminiSession: "gemini", claudeSession: "claude-code"}
	tools := map[string]string{codexSession: "Bash", geminiSession: "write_file", claudeSession: "Write"}
	perSession := map[string][]event.Record{}
	for _, s := range c.inspect().Sessions {
		perSession[s.SessionID] = s.Events
	}
	for session, agent := range agentOf {
		recs := perSession[session]
		var kinds []string
		for _, r := range recs {
			if r.Agent != agent {
				t.Fatalf("session %s (%s): record of agent %q: %+v", session, agent, r.Agent, r)
			}
			if r.ToolName == tools[session] && (r.Kind == event.ToolStart || r.Kind == event.ToolFinish) {
				kinds = append(kinds, string(r.Kind)+" "+r.Outcome)
			}
		}
		if !slices.Contains(kinds, "tool_start ") || !slices.Contains(kinds, "tool_finish returned") {
			t.Fatalf("session %s (%s): %s calls %v in %d records", session, agent, tools[session], kinds, len(recs))
		}
		// Actions go to the record's actions, outside the event sequence.
		checkSequences(t, slices.DeleteFunc(slices.Clone(recs), func(r event.Record) bool {
			return r.Kind == event.ActionStart || r.Kind == event.ActionFinish
		}))
	}
	if len(perSession) != 3 {
		t.Fatalf("the spool holds %d sessions, want 3", len(perSession))
	}

	// The served Hub: three sessions, each with its spool events, and the
	// timeline names each session's host.
	rec := c.record(work)
	if len(rec.Sessions) != 3 {
		t.Fatalf("hub sessions %+v", rec.Sessions)
	}
	canonical := map[string]string{} // canonical session -> native
	for _, s := range rec.Sessions {
		if len(s.NativeSessionIDs) != 1 || agentOf[s.NativeSessionIDs[0]] == "" {
			t.Fatalf("hub session %+v is none of %v", s, agentOf)
		}
		// The Hub stores each session's agent (the envelopes carry it).
		if want := agentOf[s.NativeSessionIDs[0]]; s.Agent != want {
			t.Fatalf("hub session %s (native %s): agent %q, want %q", s.Session, s.NativeSessionIDs[0], s.Agent, want)
		}
		canonical[s.Session] = s.NativeSessionIDs[0]
	}
	hubEvents := map[string]int{}
	for _, e := range rec.Events {
		hubEvents[canonical[e.Session]]++
		if want := agentOf[canonical[e.Session]]; e.Agent != want {
			t.Fatalf("hub event %+v: agent %q, want %q", e, e.Agent, want)
		}
	}
	for _, a := range rec.Actions {
		if want := agentOf[canonical[a.Session]]; a.Agent != want {
			t.Fatalf("hub action %+v: agent %q, want %q", a, a.Agent, want)
		}
	}
	for session := range agentOf {
		evs, _ := split(perSession[session])
		n := 0
		for _, r := range evs {
			if r.Kind != event.ActionStart && r.Kind != event.ActionFinish {
				n++
			}
		}
		if hubEvents[session] != n {
			t.Fatalf("session %s (%s): %d events on the Hub, %d in the spool", session, agentOf[session], hubEvents[session], n)
		}
	}
	var tl struct {
		Sessions []struct {
			NativeSessionIDs []string `json:"native_session_ids"`
			Agent            string   `json:"agent"`
		} `json:"sessions"`
	}
	if err := json.Unmarshal([]byte(c.agentscm("change-capture", "show", "--root", c.root, "--work-id", work, "--format", "json")), &tl); err != nil {
		t.Fatal(err)
	}
	for _, s := range tl.Sessions {
		// The Hub's record names every session's agent, Claude Code's
		// too.
		if want := agentOf[s.NativeSessionIDs[0]]; s.Agent != want {
			t.Fatalf("timeline session %v: agent %q, want %q", s.NativeSessionIDs, s.Agent, agentOf[s.NativeSessionIDs[0]])
		}
	}

	// The changelog: one increment per call of the three agents.
	var calls []string
	for _, in := range c.changelogList() {
		if in.Tool != "" {
			calls = append(calls, in.Tool)
		}
	}
	for _, tool := range tools {
		if !slices.Contains(calls, tool) {
			t.Fatalf("changelog calls %v lack %s", calls, tool)
		}
	}

	// disable --agent gemini removes Gemini's hooks only.
	c.agentscm("disable", "--root", c.root, "--agent", "gemini")
	if b, _ := os.ReadFile(filepath.Join(c.root, ".gemini", "settings.json")); strings.Contains(string(b), "hook-gemini") {
		t.Fatalf("gemini hooks left:\n%s", b)
	}
	for file, want := range map[string]string{".codex/hooks.json": "change-capture hook-codex", ".claude/settings.local.json": "change-capture hook-claude"} {
		if b, _ := os.ReadFile(filepath.Join(c.root, filepath.FromSlash(file))); !strings.Contains(string(b), want) {
			t.Fatalf("disable --agent gemini removed %s from %s:\n%s", want, file, b)
		}
	}
}
