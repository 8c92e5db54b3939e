package capture

import (
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/agent"
	"github.com/agentscm/agentscm/internal/agent/claude"
	"github.com/agentscm/agentscm/internal/event"
)

// FuzzPayloadIdentity: any payload that decodes maps, gets a provider
// identity or none, and a fingerprint that receipt time and capture mode
// never change; wrong shapes never crash.
func FuzzPayloadIdentity(f *testing.F) {
	f.Add([]byte(`{"session_id":"s","cwd":"/r","hook_event_name":"PostToolUse","tool_name":"Bash","tool_use_id":"t","tool_input":{"a":1e400},"tool_response":[1,{"b":null}]}`))
	f.Add([]byte(`{"session_id":"s","cwd":"/r","hook_event_name":"PreToolUse","tool_name":"Bash","tool_use_id":"t","tool_input":"{not json"}`))
	f.Add([]byte(`{"session_id":"s","cwd":"/r","hook_event_name":"MessageDisplay","message_id":"m","index":3,"final":true,"delta":"d"}`))
	f.Add([]byte(`{"session_id":"s","cwd":"/r","hook_event_name":"SubagentStop","agent_id":"a","agent_type":"x"}`))
	f.Add([]byte(`{"session_id":"s","cwd":"/r","hook_event_name":"SessionStart","source":"startup"}`))
	f.Add([]byte(`{"session_id":"s","cwd":"/r","hook_event_name":"PostToolUseFailure","tool_name":"Bash","tool_use_id":"t","error":7}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := agent.DecodePayload(b)
		if err != nil {
			return
		}
		r1, ok, err := claude.Map(p, event.ModeMetadataOnly, time.Unix(1, 0))
		if err != nil || !ok {
			return
		}
		r2, _, _ := claude.Map(p, event.ModeLocalConversation, time.Unix(99999, 0))
		if PhaseFingerprint(p, r1) != PhaseFingerprint(p, r2) {
			t.Fatal("fingerprint depends on receipt time or capture mode")
		}
		o1, ok1 := ProviderOccurrence(r1)
		o2, ok2 := ProviderOccurrence(r2)
		if o1 != o2 || ok1 != ok2 {
			t.Fatal("provider identity depends on receipt time or capture mode")
		}
		if ok1 && (o1.Session == "" || o1.Phase == "" || o1.Identity == "") {
			t.Fatalf("incomplete occurrence %+v", o1)
		}
	})
}
