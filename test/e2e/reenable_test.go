//go:build e2e

package e2e

import (
	"encoding/json"
	"testing"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/spool"
	"github.com/agentscm/agentscm/test/e2e/scriptedapi"
)

// TestReEnableMidSession: capture is unconfigured, forgotten and enabled
// again (one-step enable: a new spool) while a Claude session goes on. On
// main every later event was refused (sequence_taken / identity_reused) and
// stayed pending forever. Now each spool is its own stream on the Hub:
// every event of both spools is acknowledged, the session shows two
// streams with no missing number, and the boundary between the two
// accounts is a named gap (the Hub's stream_boundary and the new spool's
// adapter_started_late).
func TestReEnableMidSession(t *testing.T) {
	c := newCheckout(t)
	c.configure(event.ModeMetadataOnly)
	work := c.startWork("re-enable")
	api1, err := scriptedapi.Start(firstTurn(c.root), resumeTurn())
	if err != nil {
		t.Fatal(err)
	}
	defer api1.Close()
	res := c.runClaude(api1, "-p", "Please run SCENARIO-FIRST now. "+promptSecret)
	oldSpool := c.spool
	c.agentscm("change-capture", "unconfigure", "--root", c.root)
	c.agentscm("change-capture", "forget", "--root", c.root)
	c.agentscm("change-capture", "enable", "--root", c.root)
	var st binding.Setting
	if err := json.Unmarshal([]byte(c.agentscm("change-capture", "status", "--root", c.root, "--format", "json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Spool == "" || st.Spool == oldSpool || !st.Enabled {
		t.Fatalf("status after enable %+v", st)
	}
	c.spool = st.Spool
	c.runClaude(api1, "-p", "--resume", res.SessionID, "Continue with SCENARIO-RESUME.")

	// Nothing is left pending or refused in either spool.
	// Every record of both spools is accounted for: a sequenced event
	// (a Hub event), an action start or finish of the one-step setup's
	// Bash execution rule (a Hub action, not an event: it has no place in
	// the sequence), a gap or a usage record; nothing is deferred.
	delivered, actions := 0, 0
	for _, dir := range []string{oldSpool, c.spool} {
		c.spool = dir
		var rep spool.Report
		if err := json.Unmarshal([]byte(c.agentscm("change-capture", "inspect", "--spool", dir, "--format", "json")), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Pending.Total+rep.Deferred.Total != 0 || rep.Quarantine.Total != 0 {
			t.Fatalf("%s: %d pending, %d attempted and unacknowledged, %d quarantined", dir, rep.Pending.Total, rep.Deferred.Total, rep.Quarantine.Total)
		}
		for _, r := range c.inspect().Sessions[0].Events {
			switch {
			case r.Deferred:
				t.Fatalf("%s: deferred record %+v", dir, r)
			case r.Kind == event.KindGap || r.Kind == event.KindUsage:
			case r.Kind == event.ActionStart || r.Kind == event.ActionFinish:
				if r.Sequenced || r.WorkID == "" || r.ToolName != "Bash" || dir != st.Spool {
					t.Fatalf("%s: action record %+v", dir, r)
				}
				if r.Kind == event.ActionStart {
					actions++
				}
			case r.Sequenced && r.SharedSeq != 0:
				delivered++
			default:
				t.Fatalf("%s: record %d (%s) is neither a Hub event nor an action: %+v", dir, r.Seq, r.Kind, r)
			}
		}
	}
	c.spool = st.Spool
	if st.Refused != nil {
		t.Fatalf("refusals %+v", st.Refused)
	}
	rec := c.record(work)
	if len(rec.Sessions) != 1 {
		t.Fatalf("sessions %+v", rec.Sessions)
	}
	s := rec.Sessions[0]
	if len(s.Streams) != 2 || s.MissingSeqs != 0 || s.Streams[0].FirstSeq != 1 || s.Streams[1].FirstSeq != 1 || s.Events != int64(delivered) || len(rec.Events) != delivered {
		t.Fatalf("session %+v, %d events on the Hub, %d delivered by the spools", s, len(rec.Events), delivered)
	}
	// The first spool was configured without execution rules; the
	// re-enabled one has the default Bash rule: its one Bash call is one
	// complete action on the Hub.
	complete := 0
	for _, a := range rec.Actions {
		if a.Status == "complete" && a.Start != nil && a.Start.Tool == "Bash" {
			complete++
		}
	}
	if actions != 1 || complete != 1 || len(rec.Actions) != 1 {
		t.Fatalf("%d actions started in the spools, on the Hub %+v", actions, rec.Actions)
	}
	var boundary, late int
	for _, g := range rec.Gaps {
		switch {
		case g.Derived && g.Reason == api.GapReasonStreamBoundary && g.PreviousStream == s.Streams[0].Stream && g.Stream == s.Streams[1].Stream:
			boundary++
		case g.Kind == "adapter_started_late" && g.Stream == s.Streams[1].Stream:
			late++
		case g.Kind == "identity_uncertain" && g.FromSeq >= 1 && g.FromSeq == g.ToSeq:
		default:
			t.Fatalf("unexpected gap %+v", g)
		}
	}
	if boundary != 1 || late != 1 || rec.Coverage.State != "partial" {
		t.Fatalf("boundary %d, late %d, coverage %+v", boundary, late, rec.Coverage)
	}
	t.Logf("re-enable: %d events on the Hub in streams %s (%d) and %s (%d)", len(rec.Events), s.Streams[0].Stream, s.Streams[0].Events, s.Streams[1].Stream, s.Streams[1].Events)
}

// TestUnconfigureEnableMidSessionNamesTheWindow: capture is turned off
// (unconfigure) and on again (enable, the same spool) while a Claude
// session goes on. The resumed session's first event is preceded by a
// capture_interrupted gap with reason capture_disabled under the session's
// target, which reaches the Hub; every number the Hub is missing is covered
// by it, and coverage is partial. On main the record read as one
// contiguous account and never mentioned the window.
func TestUnconfigureEnableMidSessionNamesTheWindow(t *testing.T) {
	c := newCheckout(t)
	c.configure(event.ModeMetadataOnly)
	work := c.startWork("disabled window")
	api1, err := scriptedapi.Start(firstTurn(c.root), resumeTurn())
	if err != nil {
		t.Fatal(err)
	}
	defer api1.Close()
	res := c.runClaude(api1, "-p", "Please run SCENARIO-FIRST now. "+promptSecret)
	c.agentscm("change-capture", "unconfigure", "--root", c.root)
	c.agentscm("change-capture", "enable", "--root", c.root)
	c.runClaude(api1, "-p", "--resume", res.SessionID, "Continue with SCENARIO-RESUME.")
	var rep spool.Report
	if err := json.Unmarshal([]byte(c.agentscm("change-capture", "inspect", "--spool", c.spool, "--format", "json")), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Pending.Total+rep.Deferred.Total != 0 {
		t.Fatalf("%d pending, %d attempted and unacknowledged", rep.Pending.Total, rep.Deferred.Total)
	}
	rec := c.record(work)
	if len(rec.Sessions) != 1 || len(rec.Sessions[0].Streams) != 1 {
		t.Fatalf("sessions %+v", rec.Sessions)
	}
	st := rec.Sessions[0].Streams[0]
	held := map[int64]bool{}
	for _, e := range rec.Events {
		held[e.Seq] = true
	}
	disabled := 0
	for _, g := range rec.Gaps {
		if g.Kind == "capture_interrupted" && g.Reason == event.GapReasonCaptureDisabled && g.Stream == st.Stream && g.FromSeq >= 1 && g.ToSeq == g.FromSeq {
			disabled++
		}
	}
	for seq := int64(1); seq <= st.LastSeq; seq++ {
		covered := false
		for _, g := range rec.Gaps {
			if g.Kind == "capture_interrupted" && g.Stream == st.Stream && g.FromSeq <= seq && seq <= g.ToSeq {
				covered = true
			}
		}
		if !held[seq] && !covered {
			t.Fatalf("sequence %d never reached the Hub and no gap covers it: %+v", seq, rec.Gaps)
		}
	}
	if disabled != 1 || st.MissingSeqs != 1 || rec.Coverage.State != "partial" {
		t.Fatalf("%d capture_disabled gaps, %d missing, coverage %+v; gaps %+v", disabled, st.MissingSeqs, rec.Coverage, rec.Gaps)
	}
}
