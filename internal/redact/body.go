package redact

import (
	"encoding/json"
	"strconv"

	"github.com/agentscm/agentscm/internal/event"
)

// Body redacts every field of a conversation body in place with Redact
// (text fields as text, tool input and response as JSON, valid JSON kept
// valid) and records the count in b.Redactions. It returns the combined
// result (Text empty). Hook payload bodies, transcript records and
// anything else that retains an event.Body for sharing go through it.
func Body(b *event.Body) Result {
	var t tally
	str := func(s string) string { return redactText(s, &t) }
	js := func(raw json.RawMessage) json.RawMessage {
		if len(raw) == 0 {
			return raw
		}
		if !json.Valid(raw) {
			// Not JSON after all: kept as a redacted JSON string.
			return json.RawMessage(strconv.Quote(str(string(raw))))
		}
		return json.RawMessage(redactJSON(string(raw), &t))
	}
	b.Prompt, b.Error, b.Message = str(b.Prompt), str(b.Error), str(b.Message)
	b.ToolInput, b.ToolResponse = js(b.ToolInput), js(b.ToolResponse)
	b.Redactions = t.n
	return t.result("")
}

// ForMode prepares a body for retention under a capture mode: redacted
// (Body) in shared-conversation mode, unchanged in local-conversation mode,
// whose bodies stay on the machine unredacted. Every path that retains a
// body calls it (or Body, when the mode is known to be shared).
func ForMode(mode string, b *event.Body) Result {
	if b == nil || mode != event.ModeSharedConversation {
		return Result{}
	}
	return Body(b)
}
