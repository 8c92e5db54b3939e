package codex

import (
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/event"
)

// FuzzDecodeMap: any payload decodes to an error or to a record whose
// identifiers are bounded; nothing panics, metadata-only keeps no body.
func FuzzDecodeMap(f *testing.F) {
	f.Add([]byte(`{"session_id":"s1","cwd":"/r","hook_event_name":"PostToolUse","tool_name":"Bash","tool_use_id":"call_1","tool_response":"x","transcript_path":"/h/sessions/rollout-x-s1.jsonl"}`))
	f.Add([]byte(`{"session_id":"s1","cwd":"/r","hook_event_name":"Stop","last_assistant_message":"done"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Decode(b)
		if err != nil {
			return
		}
		for _, mode := range []string{event.ModeMetadataOnly, event.ModeSharedConversation} {
			rec, ok, err := Map(p, mode, time.Unix(0, 0))
			if err != nil || !ok {
				continue
			}
			if len(rec.SessionID) > 256 || len(rec.ToolName) > 256 || len(rec.ToolUseID) > 256 || len(rec.Reason) > 64 {
				t.Fatalf("unbounded field in %+v", rec)
			}
			if mode == event.ModeMetadataOnly && rec.Body != nil {
				t.Fatalf("metadata-only kept a body: %+v", rec.Body)
			}
		}
	})
}
