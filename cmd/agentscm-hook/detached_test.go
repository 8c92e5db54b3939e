package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/spool"
)

// waitDelivered waits until no deliverer of f's spool runs and, when the
// intake or undelivered envelopes remain, runs one more hook (which starts
// a deliverer) and waits again; it fails the test when they never drain.
// It also keeps a deliverer from outliving the test's temporary directory.
func (f *burstFixture) waitDelivered(t *testing.T) {
	t.Helper()
	store := capture.StateDir{Dir: filepath.Join(f.vars["XDG_CONFIG_HOME"], "agentscm")}
	for i := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err := store.WaitDeliverer(ctx, f.spool)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		rep, err := spool.Inspect(f.spool, 1)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Intake == 0 && rep.Pending.Total+rep.Deferred.Total == 0 {
			return
		}
		t.Logf("after deliverer %d: %d intake files, %d undelivered; one more hook", i, rep.Intake, rep.Pending.Total+rep.Deferred.Total)
		if out, err := f.hookCmd(`{"session_id":"drain","cwd":"` + f.root + `","hook_event_name":"Stop"}`).CombinedOutput(); err != nil {
			t.Fatalf("hook: %v %s", err, out)
		}
	}
	t.Fatal("the spool never drained: intake or undelivered envelopes remain")
}

// waitDeliverer waits until no deliverer of f's spool runs.
func (f *burstFixture) waitDeliverer(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := (capture.StateDir{Dir: filepath.Join(f.vars["XDG_CONFIG_HOME"], "agentscm")}).WaitDeliverer(ctx, f.spool); err != nil {
		t.Fatal(err)
	}
}

// A burst of concurrent real hook processes whose delivery runs in the
// detached deliverer (the installed agentscm-hook's path), some hooks
// killed with SIGKILL: every hook that exited 0 has its event in the spool
// exactly once, and after the deliverers are done nothing is left in the
// intake and every envelope is acknowledged by the Hub. No deliverer
// outlives the test.
func TestDetachedBurstWithKillsDeliversEverything(t *testing.T) {
	n := 120
	if testing.Short() {
		n = 40
	}
	f := newBurstFixture(t)
	f.detached = true
	t.Cleanup(func() { f.waitDelivered(t) })
	f.waitDelivered(t)
	burstOn(t, f, n, true, "d")
	f.waitDelivered(t)
	for id, c := range f.toolStarts(t) {
		if c > 1 {
			t.Errorf("event %s retained %d times", id, c)
		}
	}
	st, err := capture.StateDir{Dir: filepath.Join(f.vars["XDG_CONFIG_HOME"], "agentscm")}.DeliverStatus(f.spool)
	if err != nil || st == nil {
		t.Fatalf("no deliver status: %v", err)
	}
	if st.Outcome != "idle" && st.Outcome != "bound" { // bound: its 20 s, on a loaded machine
		t.Fatalf("the last deliverer ended %q: %s", st.Outcome, st.Detail)
	}
}

// Without kills a detached burst leaves nothing waiting once the
// deliverer is done, without any further hook: the deliverer admitted the
// intake and delivered it, and looked again after it let its lock go.
func TestDetachedBurstNeedsNoLaterHook(t *testing.T) {
	f := newBurstFixture(t)
	f.detached = true
	t.Cleanup(func() { f.waitDelivered(t) })
	f.waitDelivered(t)
	for round := range 3 {
		burstOn(t, f, 16, false, string(rune('a'+round))) // waits for the deliverer
		rep, err := spool.Inspect(f.spool, 1)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Intake != 0 || rep.Pending.Total+rep.Deferred.Total != 0 {
			t.Fatalf("round %d: %d intake files and %d undelivered envelopes left with no deliverer running", round, rep.Intake, rep.Pending.Total+rep.Deferred.Total)
		}
	}
}
