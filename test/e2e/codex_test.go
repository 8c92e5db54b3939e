//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/test/e2e/scriptedresponses"
)

// CodexVersion is the Codex CLI release the suite qualifies.
const CodexVersion = "0.169.0"

// codexModel is a model Codex 0.169.0 ships (`codex debug models
// --bundled`): an unknown name silently drops the apply_patch tool.
const codexModel = "gpt-5.5"

// codexCLI is the pinned Codex CLI in the e2e cache.
var codexCLI = &npmCLI{pkg: "@openai/codex", version: CodexVersion, dir: "codex-" + CodexVersion, bin: "codex"}

// ensureCodex installs the pinned Codex CLI when missing (npmCLI.ensure).
func ensureCodex(t *testing.T) string { return codexCLI.ensure(t) }

// codexHome is the checkout's private CODEX_HOME.
func (c *checkout) codexHome() string { return filepath.Join(c.home, ".codex") }

// configureCodex writes $CODEX_HOME/config.toml: the scripted provider and
// the checkout marked trusted (Codex runs repository hooks only then).
func (c *checkout) configureCodex(api *scriptedresponses.Server) {
	c.t.Helper()
	cfg := fmt.Sprintf("[model_providers.local]\nname = \"local\"\nbase_url = %q\nwire_api = \"responses\"\nenv_key = \"LOCAL_OPENAI_KEY\"\n\n[projects.%q]\ntrust_level = \"trusted\"\n", api.URL, c.root)
	if err := os.MkdirAll(c.codexHome(), 0o700); err != nil {
		c.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.codexHome(), "config.toml"), []byte(cfg), 0o600); err != nil {
		c.t.Fatal(err)
	}
}

// runCodex runs `codex exec` headlessly in the checkout (stdin closed) and
// returns the thread id of its first --json line.
func (c *checkout) runCodex(args ...string) string {
	c.t.Helper()
	bin := ensureCodex(c.t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	full := []string{"exec", "--json", "--color", "never", "--dangerously-bypass-approvals-and-sandbox", "--dangerously-bypass-hook-trust",
		"-c", fmt.Sprintf("model=%q", codexModel), "-c", `model_provider="local"`}
	// `codex exec resume ID PROMPT`: the flags go before resume.
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, bin, full...)
	cmd.Dir = c.root
	cmd.Env = append(c.env(), "CODEX_HOME="+c.codexHome(), "LOCAL_OPENAI_KEY=sk-e2e-dummy")
	cmd.Stdin = nil
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	c.waitDelivered() // deliverwait_test.go: the hooks' background deliverers
	if err != nil {
		c.t.Fatalf("codex %v: %v\nstdout: %s\nstderr: %s", full, err, stdout.String(), stderr.String())
	}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var l struct {
			Type     string `json:"type"`
			ThreadID string `json:"thread_id"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Type == "thread.started" {
			return l.ThreadID
		}
	}
	c.t.Fatalf("codex printed no thread.started line:\n%s\nstderr: %s", stdout.String(), stderr.String())
	return ""
}

// codexState describes every file of the checkout except .git: the
// content of each, except the agent's hook file (present, constant).
func codexState(t *testing.T, root string) string {
	t.Helper()
	var parts []string
	for _, f := range []string{"a.txt", "b.txt", "README.md"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			parts = append(parts, f+"=absent")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s=%q", f, b))
	}
	for rel := range treeOf(t, root) {
		switch rel {
		case "a.txt", "b.txt", "README.md", filepath.Join(".codex", "hooks.json"), filepath.Join(".gemini", "settings.json"):
		default:
			parts = append(parts, "unexpected "+rel)
		}
	}
	return strings.Join(parts, " ")
}

// TestCodexCaptureRewindResume drives the real Codex CLI against a scripted
// Responses API: one session writes a file (apply_patch add), edits it
// (apply_patch update), deletes a file with a shell command and runs a
// failing command. The capture hook keeps every event with Codex's own
// identities and the exit codes from the rollout, the record reaches a real
// `hub serve`, the changelog rewinds to each call with the files exact, and
// --resume-conversation binds the conversation cut after call 1 to a fresh
// session that `codex exec resume` continues.
func TestCodexCaptureRewindResume(t *testing.T) {
	ensureCodex(t)
	c := newCheckout(t)
	url, tok, _ := c.serveHub()
	c.agentscm("client", "setup", "--root", c.root, "--hub", url, "--repository", "proj", "--token-file", tok)
	work := c.startWork("codex e2e")
	c.write("b.txt", "to be deleted\n")
	var en struct {
		Spool string `json:"spool"`
		Agent string `json:"agent"`
	}
	if err := json.Unmarshal([]byte(c.agentscm("change-capture", "enable", "--root", c.root, "--agent", "codex", "--mode", "local-conversation", "--format", "json")), &en); err != nil {
		t.Fatal(err)
	}
	if en.Agent != "codex" || en.Spool == "" {
		t.Fatalf("enable: %+v", en)
	}
	c.spool = en.Spool
	c.agentscm("changelog", "enable", "--root", c.root, "--agent", "codex")
	hooks, _ := os.ReadFile(filepath.Join(c.root, ".codex", "hooks.json"))
	for _, want := range []string{"agentscm-hook-intake change-capture hook-codex", "agentscm-hook changelog hook-codex"} {
		if !strings.Contains(string(hooks), want) {
			t.Fatalf(".codex/hooks.json lacks %q:\n%s", want, hooks)
		}
	}
	api, err := scriptedresponses.Start(
		scriptedresponses.Turn{Marker: "CODEX-FIRST", Steps: [][]scriptedresponses.Call{
			{{Patch: "*** Begin Patch\n*** Add File: a.txt\n+hello\n*** End Patch\n"}},
			{{Patch: "*** Begin Patch\n*** Update File: a.txt\n@@\n-hello\n+hello world\n*** End Patch\n"}},
			{{Shell: "rm b.txt"}},
			{{Shell: "echo oops; exit 3"}},
			// A patch that does not apply: Codex fires PreToolUse only.
			{{Patch: "*** Begin Patch\n*** Update File: missing.txt\n@@\n-x\n+y\n*** End Patch\n"}},
		}, FinalText: "all four done"},
		scriptedresponses.Turn{Marker: "CODEX-RESUMED", FinalText: "resumed"},
	)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	c.configureCodex(api)
	session := c.runCodex("Run CODEX-FIRST please.")

	// The spool: Codex's events in order, with its call ids and outcomes.
	var evs []event.Record
	for _, s := range c.inspect().Sessions {
		if s.SessionID == session {
			evs = s.Events
		}
	}
	var got []string
	for _, r := range evs {
		if r.Kind == event.KindGap {
			continue
		}
		if r.Agent != "codex" {
			t.Fatalf("record of agent %q: %+v", r.Agent, r)
		}
		s := string(r.Kind)
		if r.ToolName != "" {
			s += " " + r.ToolName + " " + r.ToolUseID
		}
		if r.Outcome != "" {
			s += " " + r.Outcome
		}
		got = append(got, s)
	}
	want := []string{
		"session_start", "prompt_submit",
		"tool_start apply_patch call_CODEX_FIRST_0_0", "tool_finish apply_patch call_CODEX_FIRST_0_0 returned",
		"tool_start apply_patch call_CODEX_FIRST_1_0", "tool_finish apply_patch call_CODEX_FIRST_1_0 returned",
		// The default rule Bash=execution:partial:process_exit_code turns
		// each shell call into an action whose result is the exit code the
		// adapter read from the rollout (the hook payload has none).
		"tool_start Bash call_CODEX_FIRST_2_0", "action_start Bash call_CODEX_FIRST_2_0",
		"tool_finish Bash call_CODEX_FIRST_2_0 returned", "action_finish Bash call_CODEX_FIRST_2_0 returned",
		"tool_start Bash call_CODEX_FIRST_3_0", "action_start Bash call_CODEX_FIRST_3_0",
		"tool_finish Bash call_CODEX_FIRST_3_0 failed", "action_finish Bash call_CODEX_FIRST_3_0 failed",
		"tool_start apply_patch call_CODEX_FIRST_4_0", // and no finish: capabilities say so
		"turn_end", "session_end",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("captured events:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	for _, r := range evs {
		if r.Kind == event.PromptSubmit && (r.Body == nil || !strings.Contains(r.Body.Prompt, "CODEX-FIRST")) {
			t.Fatalf("local-conversation prompt body %+v", r.Body)
		}
		if r.Kind == event.TurnEnd && (r.Body == nil || r.Body.Message != "all four done") {
			t.Fatalf("turn end body %+v", r.Body)
		}
	}

	// The record on the served Hub: the same events, in order.
	rec := c.record(work)
	var hubEvents []string
	for _, e := range rec.Events {
		s := e.Kind
		if e.ToolUseID != "" {
			s += " " + e.ToolUseID
		}
		if e.Outcome != "" {
			s += " " + e.Outcome
		}
		hubEvents = append(hubEvents, s)
	}
	// Actions go to the record's actions, not its events.
	var spoolEvs, sequenced []event.Record
	for _, r := range evs {
		if r.Kind != event.ActionStart && r.Kind != event.ActionFinish {
			sequenced = append(sequenced, r)
			if r.Kind != event.KindGap {
				spoolEvs = append(spoolEvs, r)
			}
		}
	}
	if len(rec.Events) != len(spoolEvs) || !strings.Contains(strings.Join(hubEvents, ","), "tool_finish call_CODEX_FIRST_3_0 failed") {
		t.Fatalf("hub events %v, spool has %d", hubEvents, len(spoolEvs))
	}
	for i, e := range rec.Events {
		if s := spoolEvs[i]; e.Seq != int64(s.SharedSeq) || e.Kind != string(s.Kind) || e.ToolUseID != s.ToolUseID || e.Outcome != s.Outcome {
			t.Fatalf("hub event %d %+v != spool %+v", i, e, s)
		}
	}
	checkSequences(t, sequenced)
	if len(rec.Sessions) != 1 || rec.Sessions[0].NativeSessionIDs[0] != session {
		t.Fatalf("hub sessions %+v", rec.Sessions)
	}

	// The changelog: one increment per finished call; the shell call that
	// exited 3 is flagged failed (its exit code read from the rollout).
	checkPositions(t, c.changelogList(), []string{"apply_patch", "apply_patch", "Bash", "Bash"}, 3)
	states := []string{
		`a.txt="hello\n" b.txt="to be deleted\n" README.md="scratch checkout\n"`,
		`a.txt="hello world\n" b.txt="to be deleted\n" README.md="scratch checkout\n"`,
		`a.txt="hello world\n" b.txt=absent README.md="scratch checkout\n"`,
		`a.txt="hello world\n" b.txt=absent README.md="scratch checkout\n"`,
	}
	checkRewinds(t, c, states)

	// Rewind to call 1 with the conversation: a fresh session cut after
	// the edit's output, continued by codex exec resume.
	r := resumeAt1(t, c, session, "codex exec resume")
	if got := codexState(t, c.root); got != states[1] {
		t.Fatalf("after rewind to 1 with the conversation: %s", got)
	}
	before := len(api.Requests())
	resumed := c.runCodex(append(strings.Fields(r.Command)[2:], "Go on with CODEX-RESUMED.")...)
	if resumed != r.SessionID {
		t.Fatalf("codex resumed thread %s, want %s", resumed, r.SessionID)
	}
	reqs := api.Requests()[before:]
	if len(reqs) == 0 {
		t.Fatal("the resumed session sent no request")
	}
	body := string(reqs[0].Body)
	if !strings.Contains(body, `call_CODEX_FIRST_1_0`) || strings.Contains(body, `call_CODEX_FIRST_2_0`) || !strings.Contains(body, "CODEX-RESUMED") {
		t.Fatalf("the resumed conversation is not cut after call 1:\n%.3000s", body)
	}
	// The resumed session is captured too, as a resume.
	var starts []string
	late := 0
	for _, s := range c.inspect().Sessions {
		if s.SessionID == r.SessionID {
			for _, e := range s.Events {
				if e.Kind == event.SessionStart {
					starts = append(starts, e.Source)
				}
				if e.Gap != nil && e.Gap.Kind == event.GapAdapterStartedLate {
					late++
				}
			}
		}
	}
	// Its start under the new id was never observed: one late-start gap.
	if strings.Join(starts, ",") != "resume" || late != 1 {
		t.Fatalf("resumed session starts %v, %d adapter_started_late gaps", starts, late)
	}
}

// TestCodexOutsideEditBetweenCalls: with the real Codex CLI, the user's
// edit between two shell calls is its own outside position (before the
// second call), never the second call's, and a rewind to the first call
// refuses (status 6) to undo it.
func TestCodexOutsideEditBetweenCalls(t *testing.T) {
	ensureCodex(t)
	c := newCheckout(t)
	c.agentscm("changelog", "enable", "--root", c.root, "--agent", "codex")
	api, err := scriptedresponses.Start(scriptedresponses.Turn{Marker: "CODEX-OUT", FinalText: "done",
		Steps: [][]scriptedresponses.Call{{{Shell: "echo 1 > one.txt"}}, {{Shell: "echo 2 > two.txt"}}},
		OnStep: func(step int) {
			if step == 1 {
				os.WriteFile(filepath.Join(c.root, "README.md"), []byte("the user's edit\n"), 0o644)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	c.configureCodex(api)
	c.runCodex("Run CODEX-OUT please.")
	list := c.changelogList()
	var kinds []string
	for _, in := range list {
		kinds = append(kinds, in.Kind)
		if in.Kind == "call" && in.Changes != nil && slices.Contains(in.Changes.Modified, "README.md") {
			t.Errorf("call %d claims the user's edit: %+v", in.Position, in.Changes)
		}
	}
	if strings.Join(kinds, ",") != "call,outside,call" {
		t.Fatalf("kinds %v, want call,outside,call: %+v", kinds, list)
	}
	if ch := list[1].Changes; ch == nil || strings.Join(ch.Modified, ",") != "README.md" {
		t.Fatalf("the outside position: %+v", ch)
	}
	if code, _, stderr := c.agentscmExit("rewind", "--root", c.root, "--to", fmt.Sprint(list[0].Position)); code != 6 || !strings.Contains(stderr, "outside") {
		t.Fatalf("rewind over the user's edit: exit %d\n%s", code, stderr)
	}
}
