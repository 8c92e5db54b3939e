package transcript

import (
	"testing"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/hub/api"
)

// TestHubBounds pins the parser's bounds to the Hub's and checks that a
// transcript with counts or times beyond them yields records the Hub
// accepts: such a count is unknown, such a time the receipt time.
func TestHubBounds(t *testing.T) {
	if maxTokenCount != api.MaxTokenCount || maxUnixTime != api.MaxUnixTime {
		t.Fatalf("transcript bounds %d/%d, Hub bounds %d/%d", maxTokenCount, maxUnixTime, int64(api.MaxTokenCount), int64(api.MaxUnixTime))
	}
	line := `{"type":"assistant","sessionId":"` + sess + `","timestamp":"9999-12-31T23:59:59-23:59","message":{"id":"msg_big","model":"m","content":[],` +
		`"usage":{"input_tokens":1099511627777,"output_tokens":1099511627776,"cache_creation_input_tokens":9223372036854775807,"cache_read_input_tokens":0}}}`
	p := Parser{Session: sess, Now: now, Select: Selection{AssistantText: true}}
	var usage *event.Usage
	for _, r := range p.Flush(p.Line([]byte(line), nil)) {
		if r.ObservedAt.Unix() > api.MaxUnixTime || r.ObservedAt.Unix() <= 0 {
			t.Fatalf("observed at %v", r.ObservedAt)
		}
		if r.Usage != nil {
			usage = r.Usage
		}
	}
	if usage == nil {
		t.Fatal("no usage record")
	}
	if usage.InputTokens != nil || usage.CacheCreationInputTokens != nil || usage.OutputTokens == nil || *usage.OutputTokens != api.MaxTokenCount || usage.CacheReadInputTokens == nil {
		t.Fatalf("usage = in %v out %v cc %v cr %v", usage.InputTokens, usage.OutputTokens, usage.CacheCreationInputTokens, usage.CacheReadInputTokens)
	}
}
