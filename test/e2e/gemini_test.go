//go:build e2e

package e2e

import (
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
	"github.com/agentscm/agentscm/test/e2e/scriptedgemini"
)

// GeminiVersion is the Gemini CLI release the suite qualifies.
const GeminiVersion = "0.61.0"

// geminiCLI is the pinned Gemini CLI in the e2e cache.
var geminiCLI = &npmCLI{pkg: "@google/gemini-cli", version: GeminiVersion, dir: "gemini-cli-" + GeminiVersion, bin: "gemini"}

// ensureGemini installs the pinned Gemini CLI when missing (npmCLI.ensure).
func ensureGemini(t *testing.T) string { return geminiCLI.ensure(t) }

// configureGemini writes ~/.gemini/settings.json for a headless run
// against a base URL: API-key auth, no updates, no telemetry.
func (c *checkout) configureGemini() {
	c.t.Helper()
	dir := filepath.Join(c.home, ".gemini")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		c.t.Fatal(err)
	}
	s := `{"security":{"auth":{"selectedType":"gemini-api-key"}},"general":{"enableAutoUpdate":false,"enableAutoUpdateNotification":false},"privacy":{"usageStatisticsEnabled":false},"telemetry":{"enabled":false}}`
	if err := os.WriteFile(filepath.Join(dir, "settings.json"), []byte(s), 0o600); err != nil {
		c.t.Fatal(err)
	}
}

// runGemini runs `gemini -p` headlessly in the checkout and returns the
// session id of its JSON output.
func (c *checkout) runGemini(api *scriptedgemini.Server, args ...string) string {
	c.t.Helper()
	bin := ensureGemini(c.t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	full := append([]string{"--yolo", "--output-format", "json"}, args...)
	cmd := exec.CommandContext(ctx, bin, full...)
	cmd.Dir = c.root
	cmd.Env = append(c.env(), "GEMINI_API_KEY=e2e-dummy-key", "GOOGLE_GEMINI_BASE_URL="+api.URL, "GEMINI_CLI_TRUST_WORKSPACE=true")
	cmd.Stdin = nil
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	c.waitDelivered() // deliverwait_test.go: the hooks' background deliverers
	if err != nil {
		c.t.Fatalf("gemini %v: %v\nstdout: %s\nstderr: %s", full, err, stdout.String(), stderr.String())
	}
	var res struct {
		SessionID string `json:"session_id"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil || res.SessionID == "" {
		c.t.Fatalf("gemini output: %v\n%s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	return res.SessionID
}

// TestGeminiCaptureRewindResume drives the real Gemini CLI against a
// scripted Gemini API (model router included): one session writes a file
// (write_file), edits it (replace), deletes a file with a shell command and
// runs a failing command. The capture hook keeps every event with starts and
// finishes paired by order, the failing command failed from its result
// text, the record reaches a real `hub serve`, the changelog rewinds to
// each call with the files exact, and --resume-conversation binds the chat
// cut after call 2 to a fresh session that `gemini --resume` continues.
func TestGeminiCaptureRewindResume(t *testing.T) {
	ensureGemini(t)
	c := newCheckout(t)
	url, tok, _ := c.serveHub()
	c.agentscm("client", "setup", "--root", c.root, "--hub", url, "--repository", "proj", "--token-file", tok)
	work := c.startWork("gemini e2e")
	var en struct {
		Spool string `json:"spool"`
		Agent string `json:"agent"`
	}
	if err := json.Unmarshal([]byte(c.agentscm("change-capture", "enable", "--root", c.root, "--agent", "gemini", "--mode", "local-conversation", "--format", "json")), &en); err != nil {
		t.Fatal(err)
	}
	if en.Agent != "gemini" {
		t.Fatalf("enable: %+v", en)
	}
	c.spool = en.Spool
	c.agentscm("changelog", "enable", "--root", c.root, "--agent", "gemini")
	hooks, _ := os.ReadFile(filepath.Join(c.root, ".gemini", "settings.json"))
	for _, want := range []string{"agentscm-hook-intake change-capture hook-gemini", "agentscm-hook changelog hook-gemini", `"timeout": 20000`} {
		if !strings.Contains(string(hooks), want) {
			t.Fatalf(".gemini/settings.json lacks %q:\n%s", want, hooks)
		}
	}
	c.configureGemini()
	a := filepath.Join(c.root, "a.txt")
	api, err := scriptedgemini.Start(
		scriptedgemini.Turn{Marker: "GEMINI-FIRST", Steps: [][]scriptedgemini.Call{
			{{Name: "write_file", Args: map[string]any{"file_path": a, "content": "hello\n"}}},
			{{Name: "replace", Args: map[string]any{"file_path": a, "instruction": "extend the greeting", "old_string": "hello", "new_string": "hello world"}}},
			{{Name: "run_shell_command", Args: map[string]any{"command": "rm b.txt", "description": "delete b.txt"}}},
			{{Name: "run_shell_command", Args: map[string]any{"command": "echo oops; exit 3", "description": "fail"}}},
			// A tool error: AfterTool carries an error field.
			{{Name: "replace", Args: map[string]any{"file_path": a, "instruction": "no match", "old_string": "not in the file", "new_string": "x"}}},
		}, FinalText: "all four done"},
		scriptedgemini.Turn{Marker: "GEMINI-RESUMED", FinalText: "resumed"},
	)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	session := c.runGemini(api, "-p", "Run GEMINI-FIRST please.")

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
		if r.Agent != "gemini" {
			t.Fatalf("record of agent %q: %+v", r.Agent, r)
		}
		s := string(r.Kind) + " " + r.HookEvent
		if r.ToolName != "" {
			s += " " + r.ToolName + " " + r.ToolUseID
		}
		if r.Outcome != "" {
			s += " " + r.Outcome
		}
		got = append(got, s)
	}
	want := []string{
		"session_start SessionStart", "prompt_submit BeforeAgent",
		"tool_start BeforeTool write_file order-1", "tool_finish AfterTool write_file order-1 returned",
		"tool_start BeforeTool replace order-2", "tool_finish AfterTool replace order-2 returned",
		"tool_start BeforeTool run_shell_command order-3", "tool_finish AfterTool run_shell_command order-3 returned",
		"tool_start BeforeTool run_shell_command order-4", "tool_finish AfterTool run_shell_command order-4 failed",
		"tool_start BeforeTool replace order-5", "tool_finish AfterTool replace order-5 failed",
		"turn_end AfterAgent", "session_end SessionEnd",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("captured events:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	for _, r := range evs {
		if r.Kind == event.PromptSubmit && (r.Body == nil || !strings.Contains(r.Body.Prompt, "GEMINI-FIRST")) {
			t.Fatalf("local-conversation prompt body %+v", r.Body)
		}
		if r.Kind == event.TurnEnd && (r.Body == nil || r.Body.Message != "all four done") {
			t.Fatalf("turn end body %+v", r.Body)
		}
	}
	checkSequences(t, evs)

	rec := c.record(work)
	spoolEvs, _ := split(evs)
	if len(rec.Events) != len(spoolEvs) {
		t.Fatalf("hub has %d events, spool %d", len(rec.Events), len(spoolEvs))
	}
	for i, e := range rec.Events {
		if s := spoolEvs[i]; e.Seq != int64(s.SharedSeq) || e.Kind != string(s.Kind) || e.ToolUseID != s.ToolUseID || e.Outcome != s.Outcome {
			t.Fatalf("hub event %d %+v != spool %+v", i, e, s)
		}
	}

	// Both failures are flagged: the shell call that exited 3 (from its
	// result text) and the replace the tool refused (its error field).
	checkPositions(t, c.changelogList(), []string{"write_file", "replace", "run_shell_command", "run_shell_command", "replace"}, 3, 4)
	states := []string{
		`a.txt="hello\n" b.txt="to be deleted\n" README.md="scratch checkout\n"`,
		`a.txt="hello world\n" b.txt="to be deleted\n" README.md="scratch checkout\n"`,
		`a.txt="hello world\n" b.txt=absent README.md="scratch checkout\n"`,
		`a.txt="hello world\n" b.txt=absent README.md="scratch checkout\n"`,
	}
	checkRewinds(t, c, states)

	r := resumeAt1(t, c, session, "gemini --resume")
	before := len(api.Requests())
	resumed := c.runGemini(api, "--resume", r.SessionID, "-p", "Go on with GEMINI-RESUMED.")
	if resumed != r.SessionID {
		t.Fatalf("gemini resumed session %s, want %s", resumed, r.SessionID)
	}
	var main string
	for _, q := range api.Requests()[before:] {
		if q.Main {
			main = string(q.Body)
		}
	}
	if !strings.Contains(main, "GEMINI-RESUMED") || !strings.Contains(main, `"replace"`) || strings.Contains(main, "rm b.txt") {
		t.Fatalf("the resumed conversation is not cut after call 2:\n%.4000s", main)
	}
}

// TestGeminiOutsideEditBetweenCalls: with the real Gemini CLI, the user's
// edit between two calls is its own outside position (found by the
// BeforeTool hook), never the second call's, and a rewind to the first
// call refuses (status 6) to undo it.
func TestGeminiOutsideEditBetweenCalls(t *testing.T) {
	ensureGemini(t)
	c := newCheckout(t)
	c.agentscm("changelog", "enable", "--root", c.root, "--agent", "gemini")
	c.configureGemini()
	api, err := scriptedgemini.Start(scriptedgemini.Turn{Marker: "GEMINI-OUT", FinalText: "done",
		Steps: [][]scriptedgemini.Call{
			{{Name: "write_file", Args: map[string]any{"file_path": filepath.Join(c.root, "one.txt"), "content": "1\n"}}},
			{{Name: "write_file", Args: map[string]any{"file_path": filepath.Join(c.root, "two.txt"), "content": "2\n"}}},
		},
		OnStep: func(step int) {
			if step == 1 {
				os.WriteFile(filepath.Join(c.root, "README.md"), []byte("the user's edit\n"), 0o644)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	c.runGemini(api, "-p", "Run GEMINI-OUT please.")
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
	if code, _, stderr := c.agentscmExit("rewind", "--root", c.root, "--to", fmt.Sprint(list[0].Position)); code != 6 || !strings.Contains(stderr, "outside") {
		t.Fatalf("rewind over the user's edit: exit %d\n%s", code, stderr)
	}
}
