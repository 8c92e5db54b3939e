package capture

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/hub/api"
)

// The session record keeps the target a lock holder resolved, without
// changing what Observe decides; Observe hands it to the next hook as the
// target at receipt; a record written before it was kept (no target) and a
// session without a record give none, and rememberTarget never creates a
// record.
func TestSessionRecordKeepsTargetAtReceipt(t *testing.T) {
	dir := t.TempDir()
	s := StateDir{Dir: filepath.Join(dir, "config")}
	b := &binding.Binding{Root: filepath.Join(dir, "repo"), Spool: filepath.Join(dir, "spool"), CaptureMode: event.ModeMetadataOnly, Enabled: true}
	if err := s.Bindings().Update(func(c *binding.Config) (bool, error) { c.Bindings = append(c.Bindings, *b); return true, nil }); err != nil {
		t.Fatal(err)
	}
	gen1 := Target{WorkID: "wrk_1", Generation: 1, Session: "default"}
	gen2 := Target{WorkID: "wrk_1", Generation: 2, Session: "s"}

	if err := s.rememberTarget(b, "unseen", gen1); err != nil {
		t.Fatal(err)
	}
	if p, _ := s.sessionPath(b.Spool, "unseen"); fileExists(p) {
		t.Fatal("rememberTarget created a session record")
	}
	first, err := s.Observe(b, "s", "SessionStart", "startup")
	if err != nil || first.target != nil || first.StartedLate {
		t.Fatalf("first observation %+v %v", first, err)
	}
	for _, want := range []Target{gen1, gen1, gen2} {
		if err := s.rememberTarget(b, "s", want); err != nil {
			t.Fatal(err)
		}
		obs, err := s.Observe(b, "s", "PreToolUse", "")
		if err != nil {
			t.Fatal(err)
		}
		got, ok := obs.target.target()
		if !ok || got != want || obs.StartedLate || obs.Mode != event.ModeMetadataOnly {
			t.Fatalf("observation %+v (target %+v), want target %+v", obs, got, want)
		}
	}
	// This checkout started or took over a Work: the kept target is not
	// the session's any more until a lock holder resolves it again.
	if err := s.NoteWorkChanged(b.Root); err != nil {
		t.Fatal(err)
	}
	if obs, err := s.Observe(b, "s", "PreToolUse", ""); err != nil || obs.target != nil {
		t.Fatalf("after a work change: %+v %v", obs.target, err)
	}
	if err := s.rememberTarget(b, "s", gen2); err != nil {
		t.Fatal(err)
	}
	if obs, err := s.Observe(b, "s", "PreToolUse", ""); err != nil || obs.target == nil {
		t.Fatalf("resolved again after a work change: %+v %v", obs.target, err)
	}
	p, _ := s.sessionPath(b.Spool, "s")
	data, err := fsutil.ReadFileNoFollow(p, 4096)
	if err != nil {
		t.Fatal(err)
	}
	var rec sessionRecord
	if err := json.Unmarshal(data, &rec); err != nil || !rec.OriginalStart || rec.Mode != event.ModeMetadataOnly {
		t.Fatalf("the record lost what it said: %s (%v)", data, err)
	}
	// The intake record carries it as an optional field; the observation
	// itself does not.
	ir := intakeRecord{Version: intakeVersion, Observation: Observation{Mode: event.ModeMetadataOnly, target: toReceiptTarget(gen2)}, AtReceipt: toReceiptTarget(gen2)}
	enc, err := json.Marshal(ir)
	if err != nil {
		t.Fatal(err)
	}
	var back intakeRecord
	if err := json.Unmarshal(enc, &back); err != nil {
		t.Fatal(err)
	}
	if got, ok := back.AtReceipt.target(); !ok || got != gen2 || back.Observation.target != nil {
		t.Fatalf("intake record round trip: %s", enc)
	}
	// An intake record written before the field: no target at receipt.
	var old intakeRecord
	if err := json.Unmarshal([]byte(`{"version":1,"observed":"s","record":{"kind":"tool_start"}}`), &old); err != nil || old.AtReceipt != nil {
		t.Fatalf("old intake record: %+v %v", old.AtReceipt, err)
	}
}

// The checkout target: every resolution a lock holder records keeps the
// checkout's Work and generation (written once per generation, whichever
// session resolved it), which a session without a target of its own gets
// at receipt (a brand-new session's, on every path: Observe, observeStart);
// a local work start or takeover makes it none until a lock holder
// resolves again; a session with its own target gets none.
func TestCheckoutTargetAtReceipt(t *testing.T) {
	dir := t.TempDir()
	s := StateDir{Dir: filepath.Join(dir, "config")}
	b := &binding.Binding{Root: filepath.Join(dir, "repo"), Spool: filepath.Join(dir, "spool"), CaptureMode: event.ModeMetadataOnly, Enabled: true}
	if err := s.Bindings().Update(func(c *binding.Config) (bool, error) { c.Bindings = append(c.Bindings, *b); return true, nil }); err != nil {
		t.Fatal(err)
	}
	gen1 := Target{WorkID: "wrk_1", Generation: 1, Session: "default"}
	gen1b := Target{WorkID: "wrk_1", Generation: 1, Session: "b"}
	gen2 := Target{WorkID: "wrk_1", Generation: 2, Session: "default"}
	checkout := func(session, hook, source string) *receiptTarget {
		t.Helper()
		obs, err := s.Observe(b, session, hook, source)
		if err != nil {
			t.Fatal(err)
		}
		return obs.checkout
	}
	if ck := checkout("new1", "SessionStart", "startup"); ck != nil {
		t.Fatalf("a checkout target before any resolution: %+v", ck)
	}
	if err := s.rememberTarget(b, "unseen", gen1); err != nil { // no session record: the checkout's is kept all the same
		t.Fatal(err)
	}
	p := filepath.Join(s.sessionsDirOf(b.Spool), checkoutTargetName)
	before, err := fsutil.ReadFileNoFollow(p, 4096)
	if err != nil {
		t.Fatal(err)
	}
	// Another session of the same generation: the file is not rewritten.
	if err := s.rememberTarget(b, "other", gen1b); err != nil {
		t.Fatal(err)
	}
	if after, _ := fsutil.ReadFileNoFollow(p, 4096); string(after) != string(before) {
		t.Fatalf("rewritten for the same generation: %s -> %s", before, after)
	}
	for _, c := range []struct{ session, hook, source string }{{"new2", "SessionStart", "startup"}, {"new3", "UserPromptSubmit", ""}, {"new2", "PreToolUse", ""}} {
		if got, ok := checkout(c.session, c.hook, c.source).target(); !ok || got != gen1 {
			t.Fatalf("%s %s: checkout target %+v, want %+v", c.session, c.hook, got, gen1)
		}
	}
	obs, write, err := s.observeStart(b, "new4", "SessionStart", "startup")
	if err != nil || write == nil {
		t.Fatalf("observeStart: %v, write %v", err, write != nil)
	}
	if got, ok := obs.checkout.target(); !ok || got != gen1 {
		t.Fatalf("observeStart: checkout target %+v", obs.checkout)
	}
	// A session with its own target gets that, not the checkout's.
	if err := s.rememberTarget(b, "new2", gen1b); err != nil {
		t.Fatal(err)
	}
	if obs, err := s.Observe(b, "new2", "PreToolUse", ""); err != nil || obs.checkout != nil || obs.target == nil {
		t.Fatalf("a session with a target: %+v %v", obs, err)
	}
	if err := s.NoteWorkChanged(b.Root); err != nil {
		t.Fatal(err)
	}
	if ck := checkout("new5", "UserPromptSubmit", ""); ck != nil {
		t.Fatalf("after a local work change: %+v", ck)
	}
	if err := s.rememberTarget(b, "new5", gen2); err != nil {
		t.Fatal(err)
	}
	if got, ok := checkout("new6", "UserPromptSubmit", "").target(); !ok || got != gen2 {
		t.Fatalf("resolved again: %+v", got)
	}
	// The intake record carries it as an optional field.
	ir := intakeRecord{Version: intakeVersion, CheckoutAtReceipt: toReceiptTarget(gen2)}
	enc, err := json.Marshal(ir)
	if err != nil {
		t.Fatal(err)
	}
	var back intakeRecord
	if err := json.Unmarshal(enc, &back); err != nil {
		t.Fatal(err)
	}
	if got, ok := back.CheckoutAtReceipt.target(); !ok || got != gen2 {
		t.Fatalf("intake record round trip: %s", enc)
	}
}

func fileExists(p string) bool {
	_, err := fsutil.ReadFileNoFollow(p, 4096)
	return err == nil
}

// Admission holds an event to the target it was received under: confirmed,
// kept while the Hub is unreachable, a deferred copy of it (and an outage
// to publish at once) when the Hub refuses it or resolves the session
// elsewhere; without a target at receipt, the Hub's answer with its reason.
func TestReceiptTargetAt(t *testing.T) {
	gen1 := Target{WorkID: "wrk_1", Generation: 1, Session: "default"}
	gen3 := Target{WorkID: "wrk_1", Generation: 3, Session: "s"}
	gen1s := Target{WorkID: "wrk_1", Generation: 1, Session: "s"}
	unreachable := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	stale := api.Refusef(api.ReasonStaleGeneration, "work wrk_1 was taken over")
	unavailable := &api.Error{Status: 503, Code: "unavailable", Message: "busy"}
	cases := []struct {
		name         string
		at           *Target
		checkout     *Target
		t            Target
		err          error
		want         Target
		wantResolved bool
		wantReason   string
		wantRefused  bool
	}{
		{"no target at receipt, resolved", nil, nil, gen3, nil, gen3, true, "", false},
		{"no target at receipt, Hub down", nil, nil, Target{}, unreachable, Target{}, false, DeferHubUnreachable, false},
		{"no target at receipt, refused", nil, nil, Target{}, stale, Target{}, false, api.ReasonStaleGeneration, true},
		{"no target at receipt, handed over", nil, nil, Target{}, api.Refusef(api.ReasonWorkNotAccepting, "handover"), Target{}, false, api.ReasonWorkNotAccepting, false},
		{"confirmed", &gen1, nil, gen1, nil, gen1, true, "", false},
		{"Hub down", &gen1, nil, Target{}, unreachable, gen1, true, "", false},
		{"Hub failing", &gen1, nil, Target{}, unavailable, gen1, true, "", false},
		{"taken over", &gen1, nil, Target{}, stale, gen1, false, api.ReasonStaleGeneration, true},
		{"later generation", &gen1, nil, gen3, nil, gen1, false, DeferTargetChanged, true},
		{"handed over", &gen1, nil, Target{}, api.Refusef(api.ReasonWorkNotAccepting, "handover"), gen1, false, api.ReasonWorkNotAccepting, false},
		{"another Work now", &gen1, nil, Target{WorkID: "wrk_2", Generation: 1, Session: "default"}, nil, gen1, true, "", false},
		// A brand-new session: the checkout's Work and generation at receipt.
		{"checkout confirmed", nil, &gen1, gen1s, nil, gen1s, true, "", false},
		{"checkout taken over", nil, &gen1, Target{}, stale, gen1, false, api.ReasonStaleGeneration, true},
		{"checkout at a later generation", nil, &gen1, gen3, nil, gen1, false, DeferTargetChanged, true},
		{"checkout Hub down", nil, &gen1, Target{}, unreachable, gen1, false, DeferHubUnreachable, false},
		{"checkout handed over", nil, &gen1, Target{}, api.Refusef(api.ReasonWorkNotAccepting, "handover"), gen1, false, api.ReasonWorkNotAccepting, false},
		{"checkout on another Work now", nil, &gen1, Target{WorkID: "wrk_2", Generation: 1, Session: "default"}, nil, gen1, false, DeferWorkChanged, false},
		{"own target wins over the checkout's", &gen1, &gen3, gen1, nil, gen1, true, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ir := &intakeRecord{Record: event.Record{Kind: event.ToolStart}}
			if tc.at != nil {
				ir.AtReceipt = toReceiptTarget(*tc.at)
			}
			if tc.checkout != nil {
				ir.CheckoutAtReceipt = toReceiptTarget(*tc.checkout)
			}
			refused := receiptTargetAt(ir, tc.t, tc.err)
			if ir.Target != tc.want || ir.Resolved != tc.wantResolved || ir.Record.DeferredReason != tc.wantReason || refused != tc.wantRefused {
				t.Fatalf("target %+v resolved %v reason %q refused %v; want %+v %v %q %v",
					ir.Target, ir.Resolved, ir.Record.DeferredReason, refused, tc.want, tc.wantResolved, tc.wantReason, tc.wantRefused)
			}
		})
	}
}

// A deferred route copies the target the caller names (the one at
// receipt) over the session's last exact target.
func TestRouteForCopiesTargetAtReceipt(t *testing.T) {
	s := StateDir{Dir: t.TempDir()}
	led, err := s.OpenLedger(filepath.Join(t.TempDir(), "spool"))
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	gen1 := Target{WorkID: "wrk_1", Generation: 1, Session: "default"}
	gen3 := Target{WorkID: "wrk_1", Generation: 3, Session: "s"}
	led.SetExact("s", gen3)
	for _, c := range []struct {
		t        Target
		resolved bool
		want     Route
	}{
		{gen1, true, Route{Target: gen1, Association: AssocExact}},
		{gen1, false, Route{Target: gen1, Association: AssocCopied, Deferred: true}},
		{Target{}, false, Route{Target: gen3, Association: AssocCopied, Deferred: true}},
	} {
		if got := led.RouteFor("s", c.t, c.resolved); got.Target != c.want.Target || got.Association != c.want.Association || got.Deferred != c.want.Deferred {
			t.Errorf("RouteFor(%+v, %v) = %+v, want %+v", c.t, c.resolved, got, c.want)
		}
	}
}

// work start and work takeover record the checkout target with their new
// epoch (NoteWorkStarted): a brand-new session carries it at receipt
// before any lock holder resolved one; an incomplete target is refused.
func TestNoteWorkStarted(t *testing.T) {
	dir := t.TempDir()
	s := StateDir{Dir: filepath.Join(dir, "config")}
	b := &binding.Binding{Root: filepath.Join(dir, "repo"), Spool: filepath.Join(dir, "spool"), CaptureMode: event.ModeMetadataOnly, Enabled: true}
	other := binding.Binding{Root: filepath.Join(dir, "other"), Spool: filepath.Join(dir, "other-spool"), CaptureMode: event.ModeMetadataOnly, Enabled: true}
	if err := s.Bindings().Update(func(c *binding.Config) (bool, error) {
		c.Bindings = append(c.Bindings, *b, other)
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	gen1 := Target{WorkID: "wrk_1", Generation: 1, Session: "default"}
	gen2 := Target{WorkID: "wrk_1", Generation: 2, Session: "default"}
	for _, c := range []struct {
		name string
		t    Target
		want *Target
	}{
		{"start", gen1, &gen1},
		{"takeover", gen2, &gen2},
		{"no session", Target{WorkID: "wrk_1", Generation: 3}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := s.NoteWorkStarted(b.Root, c.t)
			if (err != nil) != (c.want == nil) {
				t.Fatalf("NoteWorkStarted(%+v): %v", c.t, err)
			}
			if c.want == nil {
				return
			}
			obs, err := s.Observe(b, "new-"+c.name, "UserPromptSubmit", "")
			if err != nil {
				t.Fatal(err)
			}
			if got, ok := obs.checkout.target(); !ok || got != *c.want {
				t.Fatalf("checkout target at receipt %+v, want %+v", obs.checkout, *c.want)
			}
		})
	}
	if ck := s.checkoutAtReceipt(other.Spool); ck != nil {
		t.Fatalf("another checkout's binding got a checkout target: %+v", ck)
	}
	// A later NoteWorkChanged (enable, a tool that knows no target) makes
	// it none again.
	if err := s.NoteWorkChanged(b.Root); err != nil {
		t.Fatal(err)
	}
	if ck := s.checkoutAtReceipt(b.Spool); ck != nil {
		t.Fatalf("after a work change without a target: %+v", ck)
	}
}
