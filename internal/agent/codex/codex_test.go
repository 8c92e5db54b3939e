package codex

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/agent/hookfile"
	"github.com/agentscm/agentscm/internal/event"
)

func TestCapabilitiesNeverClaimCompleteCapture(t *testing.T) {
	d := Capabilities()
	if d.CompleteCapture {
		t.Fatal("Codex must not claim complete capture")
	}
	for _, f := range []string{"session_boundaries", "user_prompts", "tool_starts", "tool_completions", "assistant_messages"} {
		if !slices.Contains(d.Available(), f) {
			t.Fatalf("%s must be declared available (the live 0.169.0 payloads carry it): %v", f, d.Available())
		}
	}
	for _, f := range []string{"exit_codes", "provider_usage", "retrospective_history", "subagents"} {
		if !slices.Contains(d.Unavailable(), f) {
			t.Fatalf("%s must be declared unavailable: %v", f, d.Unavailable())
		}
	}
	seen := map[string]bool{}
	for _, f := range d.Fields {
		if seen[f.Name] || f.Note == "" {
			t.Fatalf("field %+v repeated or unexplained", f)
		}
		seen[f.Name] = true
	}
}

const session = "01a23177-cfad-7232-85ad-393085876478"

// rollout writes a rollout file with the lines Codex 0.169.0 writes for a
// failing command (call_fail, exit 3), a passing one (call_ok) and a patch.
func rollout(t *testing.T) (home, path string) {
	t.Helper()
	home = t.TempDir()
	dir := filepath.Join(home, "sessions", "2026", "12", "01")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, "rollout-2026-12-01T11-57-45-"+session+".jsonl")
	lines := []string{
		`{"type":"session_meta","payload":{"session_id":"` + session + `","id":"` + session + `"}}`,
		`{"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"go"}]}}`,
		`{"type":"response_item","payload":{"type":"custom_tool_call","call_id":"call_patch","name":"apply_patch","input":"x"}}`,
		`{"type":"event_msg","payload":{"type":"item_completed","thread_id":"` + session + `","item":{"type":"FileChange","id":"call_patch","status":"completed"}}}`,
		`{"type":"response_item","payload":{"type":"custom_tool_call_output","call_id":"call_patch","output":"Exit code: 0\nOutput:\nSuccess."}}`,
		`{"type":"response_item","payload":{"type":"function_call","call_id":"call_fail","name":"exec_command","arguments":"{}"}}`,
		`{"type":"event_msg","payload":{"type":"item_completed","item":{"type":"CommandExecution","id":"call_fail","status":"failed","exit_code":3}}}`,
		`{"type":"response_item","payload":{"type":"function_call_output","call_id":"call_fail","output":"Process exited with code 3\nOutput:\noops\n"}}`,
		`{"type":"response_item","payload":{"type":"function_call","call_id":"call_out","name":"exec_command","arguments":"{}"}}`,
		`{"type":"response_item","payload":{"type":"function_call_output","call_id":"call_out","output":"Chunk ID: x\nProcess exited with code 0\nOutput:\n"}}`,
		`{"type":"response_item","payload":{"type":"function_call","call_id":"call_pending","name":"exec_command","arguments":"{}"}}`,
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return home, path
}

func payload(ev, tool, id, transcript string, resp any) []byte {
	m := map[string]any{"session_id": session, "cwd": "/repo", "hook_event_name": ev, "transcript_path": transcript,
		"model": "gpt-5.5", "permission_mode": "bypassPermissions", "turn_id": "t1"}
	if tool != "" {
		m["tool_name"], m["tool_use_id"], m["tool_input"] = tool, id, map[string]any{"command": "rm b.txt"}
	}
	if resp != nil {
		m["tool_response"] = resp
	}
	b, _ := json.Marshal(m)
	return b
}

func TestDecodeMapExitCodeFromRollout(t *testing.T) {
	_, path := rollout(t)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, id, transcript string
		outcome, reason      string
	}{
		{"failing command", "call_fail", path, event.OutcomeFailed, ""},
		{"passing command from its output", "call_out", path, event.OutcomeReturned, ""},
		{"completed patch", "call_patch", path, event.OutcomeReturned, ""},
		{"call not completed in the rollout", "call_pending", path, event.OutcomeUnknown, "exit_code_not_in_rollout"},
		{"no rollout (--ephemeral)", "call_fail", "", event.OutcomeUnknown, "exit_code_no_rollout"},
		{"a path that is not this session's rollout", "call_fail", filepath.Join(filepath.Dir(path), "rollout-x-other.jsonl"), event.OutcomeUnknown, "exit_code_no_rollout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Decode(payload("PostToolUse", "Bash", tc.id, tc.transcript, "oops\n"))
			if err != nil {
				t.Fatal(err)
			}
			rec, ok, err := Map(p, event.ModeMetadataOnly, now)
			if err != nil || !ok {
				t.Fatalf("map: %v %v", ok, err)
			}
			if rec.Agent != AgentName || rec.Kind != event.ToolFinish || rec.ToolUseID != tc.id || rec.Outcome != tc.outcome || rec.Reason != tc.reason {
				t.Fatalf("record %+v, want outcome %s reason %q", rec, tc.outcome, tc.reason)
			}
			if rec.Body != nil {
				t.Fatalf("metadata-only kept a body: %+v", rec.Body)
			}
			if rec.Setup == nil || rec.Setup.Model != "gpt-5.5" {
				t.Fatalf("setup %+v", rec.Setup)
			}
		})
	}
}

func TestDecodeRejectsInvalid(t *testing.T) {
	for _, b := range []string{
		`{}`,
		`{"session_id":"s","hook_event_name":"PreToolUse","cwd":"relative"}`,
		`{"session_id":"has space","hook_event_name":"PreToolUse","cwd":"/r"}`,
		`{"session_id":"s","hook_event_name":"PreToolUse","cwd":"/r"} trailing`,
	} {
		if _, err := Decode([]byte(b)); err == nil {
			t.Errorf("Decode(%s) accepted", b)
		}
	}
}

func TestMapConversationBodies(t *testing.T) {
	now := time.Now()
	stop := []byte(`{"session_id":"` + session + `","cwd":"/r","hook_event_name":"Stop","last_assistant_message":"done, key sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}`)
	p, err := Decode(stop)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode   string
		body   bool
		redact bool
	}{{event.ModeMetadataOnly, false, false}, {event.ModeLocalConversation, true, false}, {event.ModeSharedConversation, true, true}} {
		rec, _, err := Map(p, tc.mode, now)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Kind != event.TurnEnd || (rec.Body != nil) != tc.body {
			t.Fatalf("%s: %+v", tc.mode, rec)
		}
		if tc.body && strings.Contains(rec.Body.Message, "AAAAAAAAAAAAAAAA") == tc.redact {
			t.Fatalf("%s: message %q", tc.mode, rec.Body.Message)
		}
	}
}

func TestResumeConversationCutsAfterCall(t *testing.T) {
	home, path := rollout(t)
	r, err := ResumeConversation(home, session, "call_fail", time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if !r.IncludesResult || r.FromSession != session || r.Command != "codex exec resume "+r.SessionID || filepath.Dir(r.Transcript) != filepath.Dir(path) {
		t.Fatalf("%+v", r)
	}
	if !strings.HasSuffix(r.Transcript, "-"+r.SessionID+".jsonl") {
		t.Fatalf("rollout name %s", r.Transcript)
	}
	b, _ := os.ReadFile(r.Transcript)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 8 || strings.Contains(string(b), session) || !strings.Contains(lines[0], r.SessionID) || !strings.Contains(lines[7], `"function_call_output","call_id":"call_fail"`) {
		t.Fatalf("cut rollout:\n%s", b)
	}
	if got, err := FindRollout(home, r.SessionID); err != nil || got != r.Transcript {
		t.Fatalf("FindRollout = %s, %v", got, err)
	}
	if _, err := ResumeConversation(home, session, "call_absent", time.Now()); err == nil {
		t.Fatal("a call not in the rollout was resumed")
	}
	if _, err := ResumeConversation(home, "../x", "call_fail", time.Now()); err == nil {
		t.Fatal("an invalid session id was accepted")
	}
}

func TestInstallPreservesOtherHooks(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".codex", "hooks.json")
	os.MkdirAll(filepath.Dir(path), 0o755)
	mine := `{"hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[{"type":"command","command":"my-guard"}]}]},"other":1}`
	os.WriteFile(path, []byte(mine), 0o644)
	cmd := hookfile.CommandFor("/usr/bin/agentscm", HookSubcommand)
	for range 2 {
		if _, err := hookfile.InstallHooks(path, cmd, HookEvents); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := os.ReadFile(path)
	var compact bytes.Buffer
	json.Compact(&compact, b)
	if !strings.Contains(string(b), "my-guard") || !strings.Contains(compact.String(), `"other":1`) || strings.Count(string(b), HookSubcommand) != len(HookEvents) {
		t.Fatalf("hooks.json after install:\n%s", b)
	}
	if ev, _ := hookfile.MarkedEventsFor(path, HookSubcommand); len(ev) != len(HookEvents) {
		t.Fatalf("marked events %v", ev)
	}
	if _, err := hookfile.RemoveHooksFor(path, HookSubcommand); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(path)
	if !strings.Contains(string(b), "my-guard") || strings.Contains(string(b), HookSubcommand) {
		t.Fatalf("hooks.json after removal:\n%s", b)
	}
}

// TestRolloutExitCodeBeyondTheTail: a completion further back than the tail
// window is still found (the whole file is read then), one in the tail
// without reading the rest.
func TestRolloutExitCodeBeyondTheTail(t *testing.T) {
	_, path := rollout(t)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	pad := `{"type":"event_msg","payload":{"type":"token_count","text":"` + strings.Repeat("x", 1000) + `"}}` + "\n"
	for range (rolloutTailBytes / len(pad)) + 10 {
		f.WriteString(pad)
	}
	f.WriteString(`{"type":"event_msg","payload":{"type":"item_completed","item":{"type":"CommandExecution","id":"call_late","status":"failed","exit_code":7}}}` + "\n")
	f.Close()
	for id, want := range map[string]int{"call_fail": 3, "call_late": 7} {
		c, src := RolloutExitCode(path, session, id)
		if c == nil || *c != want || src != ExitFromRollout {
			t.Fatalf("%s: %v %s, want %d", id, c, src, want)
		}
	}
	if c, src := RolloutExitCode(path, session, "call_pending"); c != nil || src != ExitNotInRollout {
		t.Fatalf("pending: %v %s", c, src)
	}
}
