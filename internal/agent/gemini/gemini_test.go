package gemini

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/event"
)

const session = "b3e7552a-1f93-4165-b8e9-8c4210725c26"

func hook(ev string, extra map[string]any) []byte {
	m := map[string]any{"session_id": session, "cwd": "/repo", "hook_event_name": ev, "timestamp": "2026-12-01T12:12:20.604Z",
		"transcript_path": "/home/u/.gemini/tmp/repo/chats/session-2026-12-01T12-12-b3e7552a.jsonl"}
	for k, v := range extra {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return b
}

func shell(text string) map[string]any {
	return map[string]any{"tool_name": "run_shell_command", "tool_input": map[string]any{"command": "x"},
		"tool_response": map[string]any{"llmContent": text, "returnDisplay": ""}}
}

// TestSessionMapsInOrder replays the payloads Gemini CLI 0.61.0 sent in one
// session: the events map to the capture kinds, every start and finish is
// paired by order, and a shell result stating exit code 3 is failed.
func TestSessionMapsInOrder(t *testing.T) {
	o := Orderer{Dir: t.TempDir()}
	now := time.Now()
	steps := []struct {
		ev    string
		extra map[string]any
		want  string
	}{
		{"SessionStart", map[string]any{"source": "startup"}, "session_start SessionStart  "},
		{"BeforeAgent", map[string]any{"prompt": "GO1"}, "prompt_submit BeforeAgent  "},
		{"BeforeModel", nil, ""},
		{"BeforeTool", map[string]any{"tool_name": "write_file", "tool_input": map[string]any{"file_path": "/repo/a.txt"}}, "tool_start BeforeTool order-1 "},
		{"AfterTool", map[string]any{"tool_name": "write_file", "tool_input": map[string]any{"file_path": "/repo/a.txt"}, "tool_response": map[string]any{"llmContent": "ok"}}, "tool_finish AfterTool order-1 returned"},
		{"BeforeTool", shell(""), "tool_start BeforeTool order-2 "},
		{"AfterTool", shell("<untrusted_context>\nOutput: (empty)\nProcess Group PGID: 7500\n</untrusted_context>"), "tool_finish AfterTool order-2 returned"},
		{"BeforeTool", shell(""), "tool_start BeforeTool order-3 "},
		{"AfterTool", shell("<untrusted_context>\nOutput: oops\nExit Code: 3\nProcess Group PGID: 7527\n</untrusted_context>"), "tool_finish AfterTool order-3 failed"},
		{"BeforeTool", shell(""), "tool_start BeforeTool order-4 "},
		{"AfterTool", map[string]any{"tool_name": "replace", "error": "old_string not found"}, "tool_finish AfterTool order-4 failed"},
		{"BeforeTool", map[string]any{"tool_name": "replace"}, "tool_start BeforeTool order-5 "},
		// As 0.61.0 sends a tool error: inside tool_response.
		{"AfterTool", map[string]any{"tool_name": "replace", "tool_response": map[string]any{"llmContent": "Could not find", "returnDisplay": "Error: x",
			"error": map[string]any{"message": "Could not find an exact match", "type": "edit_no_occurrence_found"}}}, "tool_finish AfterTool order-5 failed"},
		{"AfterAgent", map[string]any{"prompt": "GO1", "prompt_response": "done"}, "turn_end AfterAgent  "},
		{"SessionEnd", map[string]any{"reason": "exit"}, "session_end SessionEnd  "},
	}
	for i, s := range steps {
		p, err := o.Decode(hook(s.ev, s.extra))
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		rec, ok, err := Map(p, event.ModeMetadataOnly, now)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		got := ""
		if ok {
			got = string(rec.Kind) + " " + rec.HookEvent + " " + rec.ToolUseID + " " + rec.Outcome
			if rec.Agent != AgentName || rec.Body != nil {
				t.Fatalf("step %d: %+v", i, rec)
			}
		}
		if got != s.want {
			t.Fatalf("step %d (%s): %q, want %q", i, s.ev, got, s.want)
		}
	}
}

func TestShellExitCodeIsNotSpoofedByOutput(t *testing.T) {
	for _, tc := range []struct {
		text string
		want string
	}{
		{"<untrusted_context>\nOutput: Exit Code: 9\nProcess Group PGID: 1\n</untrusted_context>", "0"},
		{"<untrusted_context>\nOutput: x\nExit Code: 9\nProcess Group PGID: 1\n</untrusted_context>\nExit Code: 0", "nil"},
		{"<untrusted_context>\nOutput: x\nExit Code: 2\nProcess Group PGID: 1\n</untrusted_context>", "2"},
		{"free text", "nil"},
	} {
		b, _ := json.Marshal(map[string]any{"llmContent": tc.text})
		c := shellExitCode("run_shell_command", b)
		got := "nil"
		if c != nil {
			got = strconv.Itoa(*c)
		}
		if got != tc.want {
			t.Errorf("%q: %s, want %s", tc.text, got, tc.want)
		}
	}
	if shellExitCode("write_file", []byte(`{"llmContent":"\nExit Code: 3\nProcess Group PGID: 1\n</untrusted_context>"}`)) != nil {
		t.Error("a non-shell tool got an exit code")
	}
}

func TestConversationBodiesOnlyInConversationModes(t *testing.T) {
	o := Orderer{Dir: t.TempDir()}
	p, err := o.Decode(hook("AfterAgent", map[string]any{"prompt": "q", "prompt_response": "the answer"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{event.ModeMetadataOnly, event.ModeLocalConversation, event.ModeSharedConversation} {
		rec, _, err := Map(p, mode, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if (rec.Body != nil) != (mode != event.ModeMetadataOnly) || (rec.Body != nil && rec.Body.Message != "the answer") {
			t.Fatalf("%s: %+v", mode, rec.Body)
		}
	}
}

func TestDecodeRejectsHostile(t *testing.T) {
	o := Orderer{Dir: t.TempDir()}
	for _, b := range []string{
		`{}`,
		`{"session_id":"s","hook_event_name":"BeforeTool","cwd":"rel"}`,
		`{"session_id":"../../etc","hook_event_name":"BeforeTool","cwd":"/r","tool_name":"x"}`,
	} {
		if _, err := o.Decode([]byte(b)); err == nil {
			t.Errorf("Decode(%s) accepted", b)
		}
	}
}

func chat(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), ".gemini")
	chats := filepath.Join(dir, "tmp", "repo", "chats")
	os.MkdirAll(chats, 0o755)
	header := `{"sessionId":"` + session + `","projectHash":"h","startTime":"t","kind":"main"}`
	lines := []string{
		header,
		`{"id":"u1","type":"user","content":[{"text":"GO1"}]}`,
		`{"id":"g1","type":"gemini","content":""}`,
		`{"id":"g1","type":"gemini","content":"","toolCalls":[{"id":"write_file_1","name":"write_file"}]}`,
		`{"id":"u2","type":"user","content":[{"functionResponse":{"id":"write_file_1","name":"write_file","response":{}}}]}`,
		`{"$set":{"lastUpdated":"t"}}`,
		`{"id":"g2","type":"gemini","content":"","toolCalls":[{"id":"replace_2","name":"replace"}]}`,
		`{"id":"u3","type":"user","content":[{"functionResponse":{"id":"replace_2","name":"replace","response":{}}}]}`,
		`{"id":"g3","type":"gemini","content":"done"}`,
		// A resume appends a new header and the whole history again.
		header,
		`{"id":"g1","type":"gemini","content":"","toolCalls":[{"id":"write_file_1","name":"write_file"}]}`,
		`{"id":"u2","type":"user","content":[{"functionResponse":{"id":"write_file_1","name":"write_file","response":{}}}]}`,
		`{"id":"g2","type":"gemini","content":"","toolCalls":[{"id":"replace_2","name":"replace"}]}`,
		`{"id":"u3","type":"user","content":[{"functionResponse":{"id":"replace_2","name":"replace","response":{}}}]}`,
		`{"id":"g4","type":"gemini","content":"","toolCalls":[{"id":"shell_3","name":"run_shell_command"}]}`,
		`{"id":"u4","type":"user","content":[{"functionResponse":{"id":"shell_3","name":"run_shell_command","response":{}}}]}`,
	}
	os.WriteFile(filepath.Join(chats, "session-2026-12-01T12-12-b3e7552a.jsonl"), []byte(strings.Join(lines, "\n")+"\n"), 0o600)
	return dir
}

func TestResumeConversationCutsAfterTheKthCall(t *testing.T) {
	dir := chat(t)
	r, err := ResumeConversation(dir, session, OrderID(1), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(r.Transcript)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if !r.IncludesResult || len(lines) != 5 || strings.Contains(string(b), session) || !strings.Contains(lines[0], r.SessionID) ||
		!strings.Contains(lines[4], "write_file_1") || r.Command != "gemini --resume "+r.SessionID {
		t.Fatalf("%+v\n%s", r, b)
	}
	if got, err := FindChat(dir, r.SessionID); err != nil || got != r.Transcript {
		t.Fatalf("FindChat = %s %v", got, err)
	}
	if r2, err := ResumeConversation(dir, session, OrderID(2), time.Now()); err != nil || !r2.IncludesResult {
		t.Fatalf("call 2: %+v %v", r2, err)
	}
	// The third call came after a resume of the same id: found past the
	// repeated history, both headers rewritten.
	r3, err := ResumeConversation(dir, session, OrderID(3), time.Now())
	if err != nil || !r3.IncludesResult {
		t.Fatalf("call 3: %+v %v", r3, err)
	}
	b3, _ := os.ReadFile(r3.Transcript)
	if strings.Count(string(b3), r3.SessionID) != 2 || strings.Contains(string(b3), session) || !strings.HasSuffix(strings.TrimSpace(string(b3)), `"response":{}}}]}`) {
		t.Fatalf("call 3 cut:\n%s", b3)
	}
	if _, err := ResumeConversation(dir, session, OrderID(4), time.Now()); err == nil {
		t.Fatal("a call the chat does not hold was resumed")
	}
	if _, err := ResumeConversation(dir, session, "toolu_x", time.Now()); err == nil {
		t.Fatal("a non-order id was accepted")
	}
}

func TestCapabilitiesDeclareWhatIsMissing(t *testing.T) {
	d := Capabilities()
	if d.CompleteCapture {
		t.Fatal("Gemini must not claim complete capture")
	}
	for _, f := range []string{"tool_call_ids", "exit_codes", "setup"} {
		if !slices.Contains(d.Unavailable(), f) {
			t.Fatalf("%s must be declared unavailable", f)
		}
	}
}
