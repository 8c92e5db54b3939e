package api

import (
	"strings"
	"testing"
)

// TestEnvelopeAgent: an agent is optional, any short lowercase name is
// accepted and anything else refused; it never changes the digest.
func TestEnvelopeAgent(t *testing.T) {
	for _, tc := range []struct {
		agent string
		ok    bool
	}{
		{"", true}, {"claude-code", true}, {"codex", true}, {"gemini", true}, {"new_agent.2", true},
		{strings.Repeat("a", MaxAgentLen), true}, {strings.Repeat("a", MaxAgentLen+1), false},
		{"Codex", false}, {"codex cli", false}, {"codex/1", false}, {"codex\n", false},
	} {
		e := Envelope{Identity: strings.Repeat("a", 64), Type: TypeEvents, WorkID: "w", Generation: 1, Session: "s",
			Agent: tc.agent, Events: []Event{{Seq: 1, Kind: "session_start"}}}
		if err := e.Validate(); (err == nil) != tc.ok {
			t.Errorf("agent %q: %v, want ok=%v", tc.agent, err, tc.ok)
		}
	}
	e := Envelope{Identity: strings.Repeat("a", 64), Type: TypeEvents, WorkID: "w", Generation: 1, Session: "s",
		Events: []Event{{Seq: 1, Kind: "session_start"}}}
	without := e.Digest()
	e.Agent = "codex"
	if e.Digest() != without {
		t.Fatal("the agent changed the envelope's digest")
	}
}
