package claude

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/agent"
	"github.com/agentscm/agentscm/internal/event"
)

var now = time.Date(2026, 11, 29, 12, 0, 0, 500, time.UTC)

func TestMapEvents(t *testing.T) {
	base := `"session_id":"s-1","cwd":"/repo","transcript_path":"/h/t.jsonl"`
	cases := []struct {
		name    string
		payload string
		mode    string
		ignored bool
		check   func(t *testing.T, r *event.Record)
	}{
		{"session start startup", `{` + base + `,"hook_event_name":"SessionStart","source":"startup"}`, event.ModeMetadataOnly, false,
			func(t *testing.T, r *event.Record) {
				expect(t, r.Kind == event.SessionStart && r.Source == "startup", r)
			}},
		{"session start compact", `{` + base + `,"hook_event_name":"SessionStart","source":"compact"}`, event.ModeMetadataOnly, false,
			func(t *testing.T, r *event.Record) { expect(t, r.Source == "compact", r) }},
		{"session start fork is not allowlisted", `{` + base + `,"hook_event_name":"SessionStart","source":"fork"}`, event.ModeMetadataOnly, false,
			func(t *testing.T, r *event.Record) { expect(t, r.Source == "other", r) }},
		{"prompt metadata-only drops text", `{` + base + `,"hook_event_name":"UserPromptSubmit","prompt":"secret"}`, event.ModeMetadataOnly, false,
			func(t *testing.T, r *event.Record) { expect(t, r.Kind == event.PromptSubmit && r.Body == nil, r) }},
		{"prompt local keeps text", `{` + base + `,"hook_event_name":"UserPromptSubmit","prompt":"secret"}`, event.ModeLocalConversation, false,
			func(t *testing.T, r *event.Record) { expect(t, r.Body != nil && r.Body.Prompt == "secret", r) }},
		{"pre tool", `{` + base + `,"hook_event_name":"PreToolUse","tool_name":"mcp__srv__tool","tool_use_id":"toolu_1","tool_input":{"a":1}}`, event.ModeMetadataOnly, false,
			func(t *testing.T, r *event.Record) {
				expect(t, r.Kind == event.ToolStart && r.ToolName == "mcp__srv__tool" && r.ToolUseID == "toolu_1" && r.Outcome == "" && r.Body == nil, r)
			}},
		{"post tool local", `{` + base + `,"hook_event_name":"PostToolUse","tool_name":"Bash","tool_use_id":"toolu_1","tool_input":{"command":"ls"},"tool_response":{"stdout":"x"}}`, event.ModeLocalConversation, false,
			func(t *testing.T, r *event.Record) {
				expect(t, r.Kind == event.ToolFinish && r.Outcome == event.OutcomeReturned && string(r.Body.ToolInput) == `{"command":"ls"}` && string(r.Body.ToolResponse) == `{"stdout":"x"}`, r)
			}},
		{"post tool failure", `{` + base + `,"hook_event_name":"PostToolUseFailure","tool_name":"Bash","tool_use_id":"toolu_1","tool_input":{},"error":"Exit code 3"}`, event.ModeMetadataOnly, false,
			func(t *testing.T, r *event.Record) {
				expect(t, r.Kind == event.ToolFinish && r.Outcome == event.OutcomeFailed && r.Body == nil, r)
			}},
		{"post tool failure local keeps error", `{` + base + `,"hook_event_name":"PostToolUseFailure","tool_name":"Bash","tool_use_id":"toolu_1","error":"Exit code 3"}`, event.ModeLocalConversation, false,
			func(t *testing.T, r *event.Record) { expect(t, r.Body != nil && r.Body.Error == "Exit code 3", r) }},
		{"message display", `{` + base + `,"hook_event_name":"MessageDisplay","turn_id":"t","message_id":"m-1","index":2,"final":true,"delta":"hi\n"}`, event.ModeMetadataOnly, false,
			func(t *testing.T, r *event.Record) {
				expect(t, r.Kind == event.MessageDisplay && r.MessageID == "m-1" && *r.FragmentIndex == 2 && *r.Final && r.Body == nil, r)
			}},
		{"stop", `{` + base + `,"hook_event_name":"Stop","stop_hook_active":false}`, event.ModeMetadataOnly, false,
			func(t *testing.T, r *event.Record) { expect(t, r.Kind == event.TurnEnd, r) }},
		{"pre compact", `{` + base + `,"hook_event_name":"PreCompact","trigger":"auto"}`, event.ModeMetadataOnly, false,
			func(t *testing.T, r *event.Record) { expect(t, r.Kind == event.PreCompact, r) }},
		{"subagent start", `{` + base + `,"hook_event_name":"SubagentStart","agent_id":"ag-1","agent_type":"Explore"}`, event.ModeMetadataOnly, false,
			func(t *testing.T, r *event.Record) {
				expect(t, r.Kind == event.SubagentStart && r.AgentID == "ag-1" && r.AgentType == "Explore", r)
			}},
		{"subagent stop without agent id is ignored", `{` + base + `,"hook_event_name":"SubagentStop"}`, event.ModeMetadataOnly, true, nil},
		{"session end allowlisted", `{` + base + `,"hook_event_name":"SessionEnd","reason":"prompt_input_exit"}`, event.ModeMetadataOnly, false,
			func(t *testing.T, r *event.Record) {
				expect(t, r.Kind == event.SessionEnd && r.Reason == "prompt_input_exit", r)
			}},
		{"session end other", `{` + base + `,"hook_event_name":"SessionEnd","reason":"bye; rm -rf"}`, event.ModeMetadataOnly, false,
			func(t *testing.T, r *event.Record) { expect(t, r.Reason == "other", r) }},
		{"shared mode keeps bodies redacted", `{` + base + `,"hook_event_name":"PostToolUse","tool_name":"Bash","tool_use_id":"t","tool_input":{"command":"curl -H 'Authorization: Bearer abcdefghijklmnopqrstuvwxyz123456' https://x"},"tool_response":{"stdout":"ghp_abcdefghijklmnopqrstuvwxyz0123456789"}}`, event.ModeSharedConversation, false,
			func(t *testing.T, r *event.Record) {
				b := r.Body
				expect(t, b != nil && b.Redactions >= 2 && !strings.Contains(string(b.ToolResponse), "ghp_abcdef") && !strings.Contains(string(b.ToolInput), "abcdefghijklmnopqrstuvwxyz123456"), r)
			}},
		{"unrecognised event", `{` + base + `,"hook_event_name":"Notification","message":"x"}`, event.ModeMetadataOnly, true, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := agent.DecodePayload([]byte(tc.payload))
			if err != nil {
				t.Fatal(err)
			}
			r, ok, err := Map(p, tc.mode, now)
			if err != nil {
				t.Fatal(err)
			}
			if ok == tc.ignored {
				t.Fatalf("ok=%v, want ignored=%v", ok, tc.ignored)
			}
			if !ok {
				return
			}
			if r.SessionID != "s-1" || r.Agent != AgentName || r.CaptureMode != tc.mode || !r.ObservedAt.Equal(now.Truncate(time.Second)) {
				t.Fatalf("common fields: %+v", r)
			}
			tc.check(t, r)
		})
	}
}

func expect(t *testing.T, ok bool, r *event.Record) {
	t.Helper()
	if !ok {
		t.Fatalf("unexpected record %+v (body %+v)", r, r.Body)
	}
}

func TestDecodeRefusals(t *testing.T) {
	cases := map[string]string{
		"not json":          `{`,
		"array":             `[]`,
		"no session":        `{"cwd":"/r","hook_event_name":"Stop"}`,
		"no event":          `{"cwd":"/r","session_id":"s"}`,
		"relative cwd":      `{"cwd":"r","session_id":"s","hook_event_name":"Stop"}`,
		"space in session":  `{"cwd":"/r","session_id":"a b","hook_event_name":"Stop"}`,
		"control in event":  `{"cwd":"/r","session_id":"s","hook_event_name":"St\u0001op"}`,
		"long session":      `{"cwd":"/r","session_id":"` + strings.Repeat("x", 300) + `","hook_event_name":"Stop"}`,
		"trailing":          `{"cwd":"/r","session_id":"s","hook_event_name":"Stop"} {}`,
		"session wrong typ": `{"cwd":"/r","session_id":5,"hook_event_name":"Stop"}`,
	}
	for name, p := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := agent.DecodePayload([]byte(p)); !errors.Is(err, agent.ErrInvalidPayload) {
				t.Fatalf("err = %v, want agent.ErrInvalidPayload", err)
			}
		})
	}
	if _, err := agent.DecodePayload(make([]byte, agent.MaxPayloadBytes+1)); !errors.Is(err, agent.ErrInvalidPayload) {
		t.Fatalf("oversized payload: %v", err)
	}
}

func TestToolEventNeedsToolName(t *testing.T) {
	p, err := agent.DecodePayload([]byte(`{"cwd":"/r","session_id":"s","hook_event_name":"PreToolUse","tool_name":"` + strings.Repeat("t", 300) + `"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := Map(p, event.ModeMetadataOnly, now); !errors.Is(err, agent.ErrInvalidPayload) {
		t.Fatalf("oversized tool name accepted: %v", err)
	}
}

// FuzzDecodeAndMap checks that no payload crashes the decoder or the
// mapping, and that metadata-only records never carry a body.
func FuzzDecodeAndMap(f *testing.F) {
	f.Add([]byte(`{"session_id":"s","cwd":"/r","hook_event_name":"PostToolUse","tool_name":"Bash","tool_use_id":"t","tool_input":{"a":1},"tool_response":"x"}`))
	f.Add([]byte(`{"session_id":"s","cwd":"/r","hook_event_name":"MessageDisplay","message_id":"m","index":-1,"final":true,"delta":"d"}`))
	f.Add([]byte(`{"session_id":"s","cwd":"/r","hook_event_name":"SubagentStart","agent_id":"","agent_type":"x"}`))
	f.Add([]byte(`{"session_id":"s","cwd":"/r","hook_event_name":"UserPromptSubmit","prompt":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := agent.DecodePayload(b)
		if err != nil {
			return
		}
		for _, mode := range []string{event.ModeMetadataOnly, event.ModeLocalConversation} {
			r, ok, err := Map(p, mode, now)
			if err != nil || !ok {
				continue
			}
			if mode == event.ModeMetadataOnly && r.Body != nil {
				t.Fatalf("metadata-only record has a body: %+v", r.Body)
			}
			if r.SessionID == "" || r.Kind == "" {
				t.Fatalf("record without session or kind: %+v", r)
			}
		}
	})
}
