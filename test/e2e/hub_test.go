//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/spool"
	"github.com/agentscm/agentscm/test/e2e/scriptedapi"
)

func (c *checkout) startWork(title string) string {
	c.t.Helper()
	var w api.Work
	if err := json.Unmarshal([]byte(c.agentscm("work", "start", "--root", c.root, "--title", title, "--format", "json")), &w); err != nil {
		c.t.Fatal(err)
	}
	if !strings.HasPrefix(w.ID, "wrk_") {
		c.t.Fatalf("work id %q", w.ID)
	}
	return w.ID
}

func (c *checkout) record(work string) api.ChangeRecord {
	c.t.Helper()
	var r api.ChangeRecord
	if err := json.Unmarshal([]byte(c.agentscm("change-capture", "show", "--root", c.root, "--work-id", work, "--record")), &r); err != nil {
		c.t.Fatal(err)
	}
	return r
}

// TestSessionDeliveredToHub: with the embedded Hub and a current Work, every
// captured event reaches the Work's change record, in order, exactly once;
// SessionEnd pauses the Work and a resumed session keeps capturing into it.
func TestSessionDeliveredToHub(t *testing.T) {
	c := newCheckout(t)
	c.configure("metadata-only")
	work := c.startWork("e2e delivery")
	api1, err := scriptedapi.Start(firstTurn(c.root), resumeTurn())
	if err != nil {
		t.Fatal(err)
	}
	defer api1.Close()
	res := c.runClaude(api1, "-p", "Please run SCENARIO-FIRST now. "+promptSecret)
	res2 := c.runClaude(api1, "-p", "--resume", res.SessionID, "Continue with SCENARIO-RESUME.")
	if res2.SessionID != res.SessionID {
		t.Fatalf("resume changed the session id")
	}
	spoolEvents := c.inspect().Sessions[0].Events
	rec := c.record(work)
	if rec.Work.State != "paused" {
		t.Fatalf("work state %q, want paused after SessionEnd", rec.Work.State)
	}
	if len(rec.Sessions) != 1 || len(rec.Sessions[0].NativeSessionIDs) != 1 || rec.Sessions[0].NativeSessionIDs[0] != res.SessionID {
		t.Fatalf("sessions %+v", rec.Sessions)
	}
	checkSequences(t, spoolEvents)
	evs, gaps := split(spoolEvents)
	if len(rec.Events) != len(evs) {
		t.Fatalf("hub has %d events, spool %d", len(rec.Events), len(evs))
	}
	for i, e := range rec.Events {
		s := evs[i]
		if e.Seq != int64(s.SharedSeq) || e.Kind != string(s.Kind) || e.ToolUseID != s.ToolUseID || e.Outcome != s.Outcome {
			t.Fatalf("hub event %d %+v != spool %+v", i, e, s)
		}
	}
	// Exactly the spool's gaps reach the Hub: one identity_uncertain gap
	// per event without a provider identity, nothing else.
	checkOnlyUncertain(t, rec, len(gaps))
	// The spool's own classification agrees: everything acknowledged,
	// nothing pending, nothing quarantined.
	var rep spool.Report
	if err := json.Unmarshal([]byte(c.agentscm("change-capture", "inspect", "--spool", c.spool, "--format", "json")), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Acknowledged != len(spoolEvents) || rep.Pending.Total != 0 || rep.Quarantine.Total != 0 || !rep.IdentityMatches || !rep.AuthoritySafe ||
		!rep.Health.Healthy || rep.DeliveryStopped {
		t.Fatalf("inspect: acknowledged %d of %d, pending %d, quarantine %d, identity %v, authority %v, health %+v",
			rep.Acknowledged, len(spoolEvents), rep.Pending.Total, rep.Quarantine.Total, rep.IdentityMatches, rep.AuthoritySafe, rep.Health.Failing)
	}
	// The Hub holds none of the conversation text either.
	b, _ := json.Marshal(rec)
	for _, s := range []string{promptSecret, writeSecret, bashSecret, outputSecret, errorSecret} {
		if strings.Contains(string(b), s) {
			t.Fatalf("change record holds %q", s)
		}
	}
}

// TestResumedUnobservedSessionStartsLate: a session begun before capture was
// on, then resumed, carries one adapter_started_late gap and never claims
// complete coverage.
func TestResumedUnobservedSessionStartsLate(t *testing.T) {
	c := newCheckout(t)
	api1, err := scriptedapi.Start(firstTurn(c.root), resumeTurn())
	if err != nil {
		t.Fatal(err)
	}
	defer api1.Close()
	res := c.runClaude(api1, "-p", "Please run SCENARIO-FIRST now.")
	c.configure("metadata-only")
	work := c.startWork("late")
	c.runClaude(api1, "-p", "--resume", res.SessionID, "Continue with SCENARIO-RESUME.")
	rec := c.record(work)
	// One late-start gap, plus one identity_uncertain gap for each event
	// without a provider identity (the resume start, the prompt, the end).
	late := 0
	for _, g := range rec.Gaps {
		switch {
		case g.Kind == "adapter_started_late" && g.Reason == "session_start_resume":
			late++
		case g.Kind == "identity_uncertain":
		default:
			t.Fatalf("unexpected gap %+v", g)
		}
	}
	_, gaps := split(c.inspect().Sessions[0].Events)
	if late != 1 || len(rec.Gaps) != len(gaps) {
		t.Fatalf("gaps %+v", rec.Gaps)
	}
	if rec.Coverage.State == "complete" {
		t.Fatalf("coverage %+v claims complete for a late start", rec.Coverage)
	}
	if len(rec.Events) == 0 || rec.Events[0].Kind != "session_start" || rec.Events[0].Source != "resume" {
		t.Fatalf("events %+v", rec.Events)
	}
}

// TestParallelToolCallsDelivered: several tool_use blocks in one reply run
// as concurrent hook processes; every start and finish reaches the Hub once.
func TestParallelToolCallsDelivered(t *testing.T) {
	c := newCheckout(t)
	c.configure("metadata-only")
	work := c.startWork("parallel")
	api1, err := scriptedapi.Start(scriptedapi.Turn{Marker: "SCENARIO-PAR", Steps: [][]scriptedapi.ToolCall{{
		bash("echo one > p1.txt"), bash("echo two > p2.txt"), bash("echo three > p3.txt"),
	}}, FinalText: "parallel done"})
	if err != nil {
		t.Fatal(err)
	}
	defer api1.Close()
	c.runClaude(api1, "-p", "Run SCENARIO-PAR.")
	rec := c.record(work)
	starts, finishes := map[string]int{}, map[string]int{}
	for _, e := range rec.Events {
		switch e.Kind {
		case "tool_start":
			starts[e.ToolUseID]++
		case "tool_finish":
			finishes[e.ToolUseID]++
		}
	}
	if len(starts) != 3 || len(finishes) != 3 {
		t.Fatalf("starts %v finishes %v", starts, finishes)
	}
	for id, n := range starts {
		if n != 1 || finishes[id] != 1 {
			t.Fatalf("tool %s: %d starts, %d finishes", id, n, finishes[id])
		}
	}
	spool := c.inspect().Sessions[0].Events
	checkSequences(t, spool)
	_, gaps := split(spool)
	checkOnlyUncertain(t, rec, len(gaps))
}

// checkOnlyUncertain: the record has no missing sequence, and its only
// gaps (and coverage reasons besides an open session) are n
// identity_uncertain gaps.
func checkOnlyUncertain(t *testing.T, rec api.ChangeRecord, n int) {
	t.Helper()
	for _, s := range rec.Sessions {
		if s.MissingSeqs != 0 {
			t.Fatalf("session %+v has missing sequences", s)
		}
	}
	if len(rec.Gaps) != n {
		t.Fatalf("hub has %d gaps, want %d: %+v", len(rec.Gaps), n, rec.Gaps)
	}
	for _, g := range rec.Gaps {
		if g.Kind != "identity_uncertain" || g.FromSeq < 1 || g.FromSeq != g.ToSeq {
			t.Fatalf("unexpected gap %+v", g)
		}
	}
	if n > 0 && (rec.Coverage.State != "partial" || !strings.Contains(strings.Join(rec.Coverage.Reasons, ";"), fmt.Sprintf("%d identity_uncertain gaps", n))) {
		t.Fatalf("coverage %+v", rec.Coverage)
	}
}
