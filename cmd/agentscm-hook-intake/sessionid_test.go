package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/hub/api"
)

// The installed intake hook (real processes, a real `hub serve`) takes the
// events of sessions whose ids the Hub refuses (a/b, ../../x); the
// deliverer that admits them checks the id with the Hub's rule before it
// asks, so they stay local as deferred facts under bad_session_id, each
// named by inspect and counted by status, none left pending; a valid
// session's events around them reach the Hub.
func TestIntakeSessionIDsTheHubRefuses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and runs a Hub")
	}
	bin := build(t)
	h := startHub(t, bin)
	f := hubFixture(t, bin, h, true)
	w := f.startWork(t)
	f.send(t, "good-1", `"hook_event_name":"SessionStart","source":"startup"`)
	f.drain(t)
	// The deliverer admits them while the Hub is down: the reason is the
	// hook's own check, not the Hub's answer (which would be
	// hub_unreachable now).
	release := f.holdDeliverLock(t)
	for _, s := range []string{"a/b", "../../x"} {
		f.send(t, s, `"hook_event_name":"SessionStart","source":"startup"`)
		f.send(t, s, `"hook_event_name":"UserPromptSubmit","prompt":"hi"`)
	}
	f.send(t, "good-1", `"hook_event_name":"UserPromptSubmit","prompt":"after them"`)
	f.send(t, "a/b", `"hook_event_name":"Stop"`) // the spool ends in facts that stay local
	h.stop()
	release()
	for i := 0; f.intakeFiles(t) != 0; i++ {
		if i == 10 {
			t.Fatal("the intake was not admitted")
		}
		f.deliver(t) // fails on the Hub
	}
	h.start(t)
	f.waitDeliverer(t)
	if err := f.deliver(t); err != nil {
		t.Fatal(err)
	}
	var view capture.InspectView
	if err := json.Unmarshal([]byte(f.agentscm(t, "change-capture", "inspect", "--spool", f.spool, "--format", "json")), &view); err != nil {
		t.Fatal(err)
	}
	if view.Intake != 0 || view.Pending.Total != 0 {
		t.Errorf("inspect: %d intake files, %d pending after the deliverer: %+v", view.Intake, view.Pending.Total, view.Pending.Items)
	}
	if len(view.PendingOutcomes) < 5 {
		t.Errorf("%d facts kept local, want at least the 5 events of the refused sessions", len(view.PendingOutcomes))
	}
	for _, o := range view.PendingOutcomes {
		if o.DeferredReason != api.ReasonBadSessionID {
			t.Errorf("envelope %d (%s): deferred reason %q, want %s", o.Seq, o.State, o.DeferredReason, api.ReasonBadSessionID)
		}
	}
	if st := f.agentscm(t, "change-capture", "status", "--root", f.root); !strings.Contains(st, "in 2 sessions: the agent's session id is not one the Hub accepts") {
		t.Errorf("status:\n%s", st)
	}
	rec := f.record(t, w.ID)
	prompts := 0
	for _, e := range rec.Events {
		if e.Kind == "prompt_submit" {
			prompts++
		}
	}
	if prompts != 1 {
		t.Errorf("the Hub holds %d prompts, want the valid session's one: %+v", prompts, rec.Events)
	}
}
