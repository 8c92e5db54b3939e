//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/test/e2e/scriptedapi"
)

// Text that must never be stored in metadata-only mode.
const (
	promptSecret = "PROMPT-SECRET-7f3a"
	writeSecret  = "WRITE-SECRET-91c2"
	bashSecret   = "BASH-SECRET-44d0"
	outputSecret = "OUTPUT-SECRET-0b6e"
	errorSecret  = "ERROR-SECRET-c5a9"
	editSecret   = "EDIT-SECRET-3e1f"
	resumeSecret = "RESUME-SECRET-d802"
)

func firstTurn(root string) scriptedapi.Turn {
	return scriptedapi.Turn{
		Marker: "SCENARIO-FIRST",
		Steps: [][]scriptedapi.ToolCall{
			{{Name: "Write", Input: map[string]any{"file_path": filepath.Join(root, "a.txt"), "content": "hello " + writeSecret + "\n"}}},
			{{Name: "Bash", Input: map[string]any{"command": "echo " + outputSecret + " && rm b.txt # " + bashSecret, "description": "delete b.txt"}}},
			{{Name: "Bash", Input: map[string]any{"command": "echo " + errorSecret + " >&2; exit 3", "description": "fail on purpose"}}},
			{{Name: "Edit", Input: map[string]any{"file_path": filepath.Join(root, "a.txt"), "old_string": "hello", "new_string": "bye " + editSecret}}},
		},
		FinalText: "First turn finished.",
	}
}

func resumeTurn() scriptedapi.Turn {
	return scriptedapi.Turn{
		Marker: "SCENARIO-RESUME",
		Steps: [][]scriptedapi.ToolCall{
			{{Name: "Bash", Input: map[string]any{"command": "echo " + resumeSecret + " > c.txt", "description": "write c"}}},
		},
		FinalText: "Resumed turn finished.",
	}
}

// step is the expected shape of one captured event.
type step struct {
	kind    event.Kind
	tool    string
	outcome string
	source  string
}

func (s step) String() string {
	return strings.TrimSpace(string(s.kind) + " " + s.tool + " " + s.outcome + " " + s.source)
}

// shape reduces captured events to their kinds, tools, outcomes and sources,
// leaving out assistant-message fragments, whose number depends on how the
// host batches display flushes.
func shape(recs []event.Record) []step {
	var out []step
	for _, r := range recs {
		if r.Kind == event.MessageDisplay || r.Kind == event.KindGap {
			continue
		}
		out = append(out, step{kind: r.Kind, tool: r.ToolName, outcome: r.Outcome, source: r.Source})
	}
	return out
}

func checkShape(t *testing.T, got []event.Record, want []step) {
	t.Helper()
	g := shape(got)
	if len(g) != len(want) {
		t.Fatalf("captured %d events %v, want %d %v", len(g), g, len(want), want)
	}
	for i := range want {
		if g[i] != want[i] {
			t.Fatalf("event %d is %v, want %v\nall: %v", i, g[i], want[i], g)
		}
	}
}

func TestSessionCapturedEndToEnd(t *testing.T) {
	c := newCheckout(t)
	c.configure(event.ModeMetadataOnly)
	api, err := scriptedapi.Start(firstTurn(c.root), resumeTurn())
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()

	res := c.runClaude(api, "-p", "Please run SCENARIO-FIRST now. "+promptSecret)
	if res.Result != "First turn finished." {
		t.Fatalf("claude result %q", res.Result)
	}
	// The tools really ran: a.txt written then edited, b.txt deleted.
	if b, err := os.ReadFile(filepath.Join(c.root, "a.txt")); err != nil || !strings.HasPrefix(string(b), "bye "+editSecret) {
		t.Fatalf("a.txt = %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(c.root, "b.txt")); !os.IsNotExist(err) {
		t.Fatalf("b.txt still exists: %v", err)
	}

	out := c.inspect()
	if len(out.Sessions) != 1 || out.Sessions[0].SessionID != res.SessionID {
		t.Fatalf("sessions %+v, want one with id %s", out.Sessions, res.SessionID)
	}
	first := out.Sessions[0].Events
	checkShape(t, first, []step{
		{kind: event.SessionStart, source: "startup"},
		{kind: event.PromptSubmit},
		{kind: event.ToolStart, tool: "Write"},
		{kind: event.ToolFinish, tool: "Write", outcome: event.OutcomeReturned},
		{kind: event.ToolStart, tool: "Bash"},
		{kind: event.ToolFinish, tool: "Bash", outcome: event.OutcomeReturned},
		{kind: event.ToolStart, tool: "Bash"},
		{kind: event.ToolFinish, tool: "Bash", outcome: event.OutcomeFailed},
		{kind: event.ToolStart, tool: "Edit"},
		{kind: event.ToolFinish, tool: "Edit", outcome: event.OutcomeReturned},
		{kind: event.TurnEnd},
		{kind: event.SessionEnd},
	})
	checkSequences(t, first)
	for i, r := range first {
		if r.SessionID != res.SessionID || r.CaptureMode != event.ModeMetadataOnly || r.Body != nil {
			t.Errorf("event %d: %+v", i, r)
		}
		if r.ObservedAt.IsZero() {
			t.Errorf("event %d has no receipt time", i)
		}
	}
	// Each tool start and finish pair shares the host's tool_use_id.
	var toolIDs []string
	for _, r := range first {
		if r.Kind == event.ToolStart || r.Kind == event.ToolFinish {
			toolIDs = append(toolIDs, r.ToolUseID)
		}
	}
	for i := 0; i+1 < len(toolIDs); i += 2 {
		if toolIDs[i] == "" || toolIDs[i] != toolIDs[i+1] {
			t.Fatalf("tool start/finish ids %v do not pair up", toolIDs)
		}
	}

	// Resume the same session with a new prompt.
	res2 := c.runClaude(api, "-p", "--resume", res.SessionID, "Continue with SCENARIO-RESUME.")
	if res2.SessionID != res.SessionID {
		t.Fatalf("resumed session id %s, want %s", res2.SessionID, res.SessionID)
	}
	if b, err := os.ReadFile(filepath.Join(c.root, "c.txt")); err != nil || !strings.Contains(string(b), resumeSecret) {
		t.Fatalf("c.txt = %q, %v", b, err)
	}
	// The scripted model saw the first turn's history on resume.
	var sawHistory bool
	for _, r := range api.Requests() {
		if r.Main && bytes.Contains(r.Body, []byte("SCENARIO-RESUME")) && bytes.Contains(r.Body, []byte("SCENARIO-FIRST")) {
			sawHistory = true
		}
	}
	if !sawHistory {
		t.Fatal("the resumed conversation did not carry the first turn")
	}
	out = c.inspect()
	if len(out.Sessions) != 1 {
		t.Fatalf("after resume: %d sessions, want 1", len(out.Sessions))
	}
	all := out.Sessions[0].Events
	checkShape(t, all[len(first):], []step{
		{kind: event.SessionStart, source: "resume"},
		{kind: event.PromptSubmit},
		{kind: event.ToolStart, tool: "Bash"},
		{kind: event.ToolFinish, tool: "Bash", outcome: event.OutcomeReturned},
		{kind: event.TurnEnd},
		{kind: event.SessionEnd},
	})

	// Metadata-only stored none of the prompt's or the tools' text anywhere
	// agentscm writes: the spool and the config directory.
	secrets := []string{promptSecret, writeSecret, bashSecret, outputSecret, errorSecret, editSecret, resumeSecret, "SCENARIO-FIRST", "SCENARIO-RESUME"}
	for _, dir := range []string{c.spool, c.config} {
		assertNoSecrets(t, dir, secrets)
	}
	assertPrivateModes(t, c.spool)
}

// split separates a session's spool records into events and gap records.
func split(recs []event.Record) (evs, gaps []event.Record) {
	for _, r := range recs {
		if r.Kind == event.KindGap {
			gaps = append(gaps, r)
		} else {
			evs = append(evs, r)
		}
	}
	return evs, gaps
}

// checkSequences checks shared sequences in one stream: the events carry
// 1, 2, 3... with no hole, and exactly the events without a provider
// identity (prompts, non-startup starts, session ends, unidentified
// fragments; never the informational markers) are each followed by one
// identity_uncertain gap naming their sequence.
func checkSequences(t *testing.T, recs []event.Record) {
	t.Helper()
	var next uint64 = 1
	for i, r := range recs {
		if !r.Sequenced {
			t.Fatalf("record %d is not sequenced: %+v", i, r)
		}
		if r.Kind == event.KindGap {
			continue
		}
		if r.SharedSeq != next {
			t.Fatalf("event %d (%s) has shared seq %d, want %d", i, r.Kind, r.SharedSeq, next)
		}
		next++
		identified := r.ToolUseID != "" || r.AgentID != "" || (r.Kind == event.SessionStart && r.Source == "startup") ||
			(r.Kind == event.MessageDisplay && r.MessageID != "" && r.FragmentIndex != nil)
		informational := r.Kind == event.TurnEnd || r.Kind == event.PreCompact || r.Kind == event.SubagentStart || r.Kind == event.SubagentStop
		gotGap := i+1 < len(recs) && recs[i+1].Kind == event.KindGap && recs[i+1].Gap.Kind == "identity_uncertain"
		if gotGap && recs[i+1].SharedSeq != r.SharedSeq {
			t.Fatalf("identity_uncertain gap after event %d names seq %d", i, recs[i+1].SharedSeq)
		}
		if want := !identified && !informational; gotGap != want {
			t.Fatalf("event %d (%s %s): identity_uncertain gap %v, want %v", i, r.Kind, r.HookEvent, gotGap, want)
		}
	}
}

// assertNoSecrets reads every file below dir and fails if any holds one of
// the secrets.
func assertNoSecrets(t *testing.T, dir string, secrets []string) {
	t.Helper()
	files := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		for _, s := range secrets {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s holds %q", path, s)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatalf("no files below %s", dir)
	}
}

// assertPrivateModes checks directories 0700 and files 0600 below dir.
func assertPrivateModes(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s has mode %04o, want %04o", path, fi.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestLocalConversationKeepsBodies(t *testing.T) {
	c := newCheckout(t)
	c.configure(event.ModeLocalConversation)
	work := c.startWork("local bodies")
	api, err := scriptedapi.Start(firstTurn(c.root))
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	c.runClaude(api, "-p", "Please run SCENARIO-FIRST now. "+promptSecret)
	out := c.inspect()
	if len(out.Sessions) != 1 {
		t.Fatalf("%d sessions", len(out.Sessions))
	}
	var prompt, input, result, errText, message bool
	for _, r := range out.Sessions[0].Events {
		if r.CaptureMode != event.ModeLocalConversation {
			t.Fatalf("event %d mode %q", r.Seq, r.CaptureMode)
		}
		if r.Body == nil {
			continue
		}
		prompt = prompt || strings.Contains(r.Body.Prompt, promptSecret)
		input = input || bytes.Contains(r.Body.ToolInput, []byte(writeSecret))
		result = result || bytes.Contains(r.Body.ToolResponse, []byte(outputSecret))
		errText = errText || strings.Contains(r.Body.Error, errorSecret)
		message = message || strings.Contains(r.Body.Message, "SCENARIO-FIRST")
	}
	if !prompt || !input || !result || !errText || !message {
		t.Fatalf("bodies kept: prompt=%v tool input=%v tool result=%v error=%v message=%v", prompt, input, result, errText, message)
	}
	// Bodies stay local: the Hub's change record has none of them.
	rec := c.record(work)
	b, _ := json.Marshal(rec)
	for _, s := range []string{promptSecret, writeSecret, outputSecret, errorSecret} {
		if strings.Contains(string(b), s) {
			t.Fatalf("the Hub holds %q", s)
		}
	}
}

// TestDeferredFactsKeepNoBodies: with no current Work, even
// local-conversation capture keeps only sanitized deferred facts.
func TestDeferredFactsKeepNoBodies(t *testing.T) {
	c := newCheckout(t)
	c.configure(event.ModeLocalConversation)
	api, err := scriptedapi.Start(firstTurn(c.root))
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	c.runClaude(api, "-p", "Please run SCENARIO-FIRST now. "+promptSecret)
	out := c.inspect()
	if len(out.Sessions) != 1 || len(out.Sessions[0].Events) < 12 {
		t.Fatalf("inspect %+v", out)
	}
	for _, r := range out.Sessions[0].Events {
		if !r.Deferred || r.Body != nil || r.WorkID != "" {
			t.Fatalf("event %d: deferred=%v body=%v work=%q", r.Seq, r.Deferred, r.Body != nil, r.WorkID)
		}
	}
	assertNoSecrets(t, c.spool, []string{promptSecret, writeSecret, bashSecret, outputSecret, errorSecret, editSecret})
}

func TestBrokenSpoolLetsSessionFinish(t *testing.T) {
	c := newCheckout(t)
	c.configure(event.ModeMetadataOnly)
	// Break the spool: its events directory becomes a regular file, so every
	// append fails.
	events := filepath.Join(c.spool, "events")
	if err := os.RemoveAll(events); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(events, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	api, err := scriptedapi.Start(firstTurn(c.root))
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	res := c.runClaude(api, "-p", "Please run SCENARIO-FIRST now.")
	if res.Result != "First turn finished." {
		t.Fatalf("claude result %q", res.Result)
	}
	if b, err := os.ReadFile(filepath.Join(c.root, "a.txt")); err != nil || !strings.HasPrefix(string(b), "bye ") {
		t.Fatalf("a.txt = %q, %v: the session did not run its tools", b, err)
	}
	if _, err := os.Stat(filepath.Join(c.root, "b.txt")); !os.IsNotExist(err) {
		t.Fatalf("b.txt still exists: %v", err)
	}
}

func TestUnconfigureStopsCapture(t *testing.T) {
	c := newCheckout(t)
	c.configure(event.ModeMetadataOnly)
	c.agentscm("change-capture", "unconfigure", "--root", c.root)
	api, err := scriptedapi.Start(firstTurn(c.root))
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	c.runClaude(api, "-p", "Please run SCENARIO-FIRST now.")
	if out := c.inspect(); out.Events != 0 {
		t.Fatalf("captured %d events after unconfigure", out.Events)
	}
}
