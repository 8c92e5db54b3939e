package delivery

import (
	"testing"
)

// TestAgentSentOnlyToHubThatAcceptsIt: a Hub before the envelope's agent
// (whoami lists no features; an envelope with an agent would be refused
// as an unknown field) gets every envelope without it and refuses none;
// the session's agent stays unknown there. Once the Hub lists
// envelope_agent, the next envelopes carry it and the Hub's record names
// the session's agent (claude-code) on the session and its events.
func TestAgentSentOnlyToHubThatAcceptsIt(t *testing.T) {
	f, front := newHTTPFixture(t)
	work := f.startWork(t)
	front.preAgent.Store(true)
	f.hook(t, f.payload("SessionStart", `,"source":"startup"`))
	if res := f.hook(t, f.payload("UserPromptSubmit", `,"prompt":"hello"`)); res.Refused != 0 {
		t.Fatalf("the Hub before the agent refused: %+v", res)
	}
	if n := pendingCount(t, f.spool); n != 0 {
		t.Fatalf("%d pending with the Hub before the agent", n)
	}
	rec := f.record(t, work)
	if len(rec.Sessions) != 1 || rec.Sessions[0].Agent != "" || len(rec.Events) != 2 {
		t.Fatalf("before the upgrade: sessions %+v, %d events", rec.Sessions, len(rec.Events))
	}

	front.preAgent.Store(false) // the Hub is upgraded
	if res := f.hook(t, f.payload("Stop", "")); res.Refused != 0 {
		t.Fatalf("the upgraded Hub refused: %+v", res)
	}
	rec = f.record(t, work)
	if len(rec.Sessions) != 1 || rec.Sessions[0].Agent != "claude-code" || len(rec.Events) != 3 {
		t.Fatalf("after the upgrade: sessions %+v, %d events", rec.Sessions, len(rec.Events))
	}
	for _, e := range rec.Events {
		if e.Agent != "claude-code" {
			t.Fatalf("event %+v: agent %q", e, e.Agent)
		}
	}
}
