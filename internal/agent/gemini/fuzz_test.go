package gemini

import (
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/event"
)

// FuzzDecodeMap: any payload decodes to an error or to a record whose
// identifiers are bounded; nothing panics.
func FuzzDecodeMap(f *testing.F) {
	f.Add([]byte(`{"session_id":"s1","cwd":"/r","hook_event_name":"AfterTool","tool_name":"run_shell_command","tool_response":{"llmContent":"\nExit Code: 3\nProcess Group PGID: 1\n</untrusted_context>","error":{"message":"m"}}}`))
	f.Add([]byte(`{"session_id":"s1","cwd":"/r","hook_event_name":"AfterAgent","prompt_response":"x"}`))
	f.Add([]byte(`{"session_id":"s1","cwd":"/r","hook_event_name":"BeforeTool","tool_name":"t","error":[1]}`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Orderer{Dir: dir}.Decode(b)
		if err != nil {
			return
		}
		for _, mode := range []string{event.ModeMetadataOnly, event.ModeSharedConversation} {
			rec, ok, err := Map(p, mode, time.Unix(0, 0))
			if err != nil || !ok {
				continue
			}
			if len(rec.SessionID) > 256 || len(rec.ToolName) > 256 || len(rec.ToolUseID) > 256 {
				t.Fatalf("unbounded identifier in %+v", rec)
			}
			if mode == event.ModeMetadataOnly && rec.Body != nil {
				t.Fatalf("metadata-only kept a body: %+v", rec.Body)
			}
		}
	})
}
