package delivery

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

// TestUndecodableIntakeNamedGap: an intake file that cannot be decoded
// (torn after its target at receipt, torn inside its record, or garbage
// in a valid frame) is quarantined and its loss is named: a
// capture_interrupted gap (admission_failed) under the target the file
// recorded at receipt, else the session's last exact target, over a
// reserved sequence, so the Hub's every missing number lies in a named
// gap; garbage that names no session stays a local gap. The files behind
// it are admitted and delivered. On main the file was quarantined with no
// gap anywhere.
func TestUndecodableIntakeNamedGap(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mangle func(t *testing.T, path string)
		onHub  bool
		under  string
	}{
		{"torn after its target at receipt", func(t *testing.T, path string) {
			b := readFile(t, path)
			i := bytes.Index(b, []byte(`"facts"`))
			if i < 0 || !bytes.Contains(b[:i], []byte(`"target_at_receipt"`)) {
				t.Fatalf("no target at receipt before the facts: %s", b)
			}
			writeFile(t, path, b[:i])
		}, true, "the target the file recorded at receipt"},
		{"torn inside its record", func(t *testing.T, path string) {
			b := readFile(t, path)
			i := bytes.Index(b, []byte(`"record"`))
			writeFile(t, path, b[:i+20])
		}, true, "the session's last exact target"},
		{"garbage instead of a frame", func(t *testing.T, path string) {
			writeFile(t, path, []byte("{not an intake record"))
		}, false, "no session"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			work := f.startWork(t)
			f.hook(t, f.payload("SessionStart", `,"source":"startup"`)) // the session's target
			var names []string
			for _, p := range []string{
				f.payload("PreToolUse", `,"tool_name":"Read","tool_use_id":"toolu_bad","tool_input":{"file_path":"/etc/hostname"}`),
				f.payload("PreToolUse", `,"tool_name":"Read","tool_use_id":"toolu_ok","tool_input":{"file_path":"/etc/hostname"}`),
			} {
				res, err := capture.HandleClaudeHook(context.Background(), f.store, noopBG{Opener{f.cfg}}, strings.NewReader(p), time.Now())
				if err != nil || res.Intake == "" {
					t.Fatalf("intake-first hook: %+v %v", res, err)
				}
				names = append(names, res.Intake)
			}
			tc.mangle(t, filepath.Join(f.spool, "intake", names[0]))
			if _, err := capture.DeliverSpool(context.Background(), f.store, Opener{f.cfg}, f.spool, nil, capture.DeliverBounds{}); err != nil {
				t.Fatal(err)
			}
			ins, err := spool.Inspect(f.spool, 10)
			if err != nil || ins.Intake != 0 || ins.Pending.Total != 0 || ins.Quarantine.Total != 1 {
				t.Fatalf("intake %d pending %d quarantine %d %v", ins.Intake, ins.Pending.Total, ins.Quarantine.Total, err)
			}
			// The local record names the loss and says under what.
			sp, _ := spool.Open(f.spool)
			recs, _ := sp.Events()
			var gaps []event.Record
			for _, r := range recs {
				if r.Kind == event.KindGap && r.Gap.Reason == capture.GapReasonAdmissionFailed {
					gaps = append(gaps, r)
				}
			}
			if len(gaps) != 1 || !strings.Contains(gaps[0].Gap.Detail, names[0]) || !strings.Contains(gaps[0].Gap.Detail, "named under "+tc.under) {
				t.Fatalf("admission_failed gaps %+v", gaps)
			}
			rec := f.record(t, work)
			var named int
			for _, g := range rec.Gaps {
				if g.Reason == capture.GapReasonAdmissionFailed && g.FromSeq > 0 {
					named++
				}
			}
			want := map[bool]int{true: 1, false: 0}[tc.onHub]
			if named != want {
				t.Fatalf("Hub gaps %+v: %d admission_failed, want %d", rec.Gaps, named, want)
			}
			if n := unnamedHoles(t, rec); n != 0 {
				t.Fatalf("%d missing numbers in no named gap; sessions %+v gaps %+v", n, rec.Sessions, rec.Gaps)
			}
			var ok bool
			for _, e := range rec.Events {
				ok = ok || e.ToolUseID == "toolu_ok"
			}
			if !ok {
				t.Fatalf("the file behind it was not delivered: %+v", rec.Events)
			}
		})
	}
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestNewSessionDuringOutageDeliveredWhenHubIsBack: a brand-new session's
// first events arrive (intake-first hooks) while the Hub is unreachable:
// the deliverer cannot resolve them and, where main admitted them as
// unassociated deferred facts for good, keeps them in the intake (its run
// ends "failed", saying why); the first deliverer after the Hub is back
// admits and delivers them under the Work, with nothing deferred and no
// missing number. A session that already had a target keeps its
// behaviour (a deferred fact copying it, named by an outage gap).
func TestNewSessionDuringOutageDeliveredWhenHubIsBack(t *testing.T) {
	f := newFixture(t)
	work := f.startWork(t)
	down := new(atomic.Bool)
	hubs := downOpener{Opener{f.cfg}, down}
	f.hook(t, f.payload("SessionStart", `,"source":"startup"`)) // native-1 has a target
	down.Store(true)
	newSession := func(ev, extra string) string {
		return `{"session_id":"native-new","cwd":"` + f.root + `","hook_event_name":"` + ev + `"` + extra + `}`
	}
	for _, p := range []string{
		newSession("SessionStart", `,"source":"startup"`),
		newSession("PreToolUse", `,"tool_name":"Read","tool_use_id":"toolu_new","tool_input":{"file_path":"/etc/hostname"}`),
		newSession("Stop", ""),
	} {
		res, err := capture.HandleClaudeHook(context.Background(), f.store, noopBG{hubs.Opener}, strings.NewReader(p), time.Now())
		if err != nil || res.Intake == "" {
			t.Fatalf("intake-first hook: %+v %v", res, err)
		}
	}
	rep, err := capture.DeliverSpool(context.Background(), f.store, hubs, f.spool, nil, capture.DeliverBounds{})
	if err != nil || rep.Outcome != "failed" || !strings.Contains(rep.Detail, "new sessions wait for the Hub") {
		t.Fatalf("deliverer during the outage: %+v %v", rep, err)
	}
	if ins, err := spool.Inspect(f.spool, 10); err != nil || ins.Intake != 3 {
		t.Fatalf("intake during the outage: %d %v", ins.Intake, err)
	}
	if d, err := capture.ListDeferred(f.spool, 100); err != nil || d.Total != 0 {
		t.Fatalf("deferred facts during the outage: %+v %v", d, err)
	}
	down.Store(false)
	rep, err = capture.DeliverSpool(context.Background(), f.store, hubs, f.spool, nil, capture.DeliverBounds{})
	if err != nil || rep.Outcome != "idle" {
		t.Fatalf("deliverer after the outage: %+v %v", rep, err)
	}
	if ins, err := spool.Inspect(f.spool, 10); err != nil || ins.Intake != 0 || ins.Pending.Total != 0 {
		t.Fatalf("after: intake %d pending %d %v", ins.Intake, ins.Pending.Total, err)
	}
	if d, err := capture.ListDeferred(f.spool, 100); err != nil || d.Total != 0 {
		t.Fatalf("deferred facts after the outage: %+v %v", d, err)
	}
	rec := f.record(t, work)
	var newEvents int
	for _, e := range rec.Events {
		if e.Session == "native-new" {
			newEvents++
		}
	}
	if newEvents != 3 {
		t.Fatalf("the new session's events on the Hub: %d, want 3 (sessions %+v)", newEvents, rec.Sessions)
	}
	if n := unnamedHoles(t, rec); n != 0 {
		t.Fatalf("%d unnamed holes: %+v", n, rec.Sessions)
	}
}
