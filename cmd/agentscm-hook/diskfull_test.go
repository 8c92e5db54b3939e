package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

// lostGapCheck runs one good PreToolUse, then lost ones (fail makes each
// hook's append fail), then a good one, and checks that the later hook
// recorded a capture_interrupted gap with the reason naming exactly the
// reserved sequence range of the lost events, which the Hub then holds
// over every number it misses.
func lostGapCheck(t *testing.T, f *burstFixture, reason string, fail func(i int) []string, after func()) {
	t.Helper()
	session := "diskfull-" + reason
	run := func(id string, env []string) string {
		cmd := f.hookCmd(f.pre(session, id))
		cmd.Env = append(cmd.Env, env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("hook %s: %v %s", id, err, out)
		}
		if f.detached {
			// Its event waits in the intake for the deliverer it started:
			// let that admit it before the next hook (whose failpoints a
			// holder admitting it would share).
			f.waitDeliverer(t)
		}
		return string(out)
	}
	run("toolu_before", nil)
	for i := range 3 {
		out := run(fmt.Sprintf("toolu_lost_%d", i), fail(i))
		if !strings.Contains(out, "capture_interrupted") || strings.Count(out, "\n") != 1 {
			t.Fatalf("a failed append warned %q, want one line naming the capture_interrupted gap to come", out)
		}
	}
	after()
	run("toolu_after", nil)
	if f.detached {
		f.waitDelivered(t)
	}
	sp, err := spool.OpenReadOnly(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := sp.Events()
	if err != nil {
		t.Fatal(err)
	}
	seqOf := map[string]uint64{}
	var gaps []event.Record
	for _, e := range evs {
		if e.Kind == event.ToolStart && e.SessionID == session {
			seqOf[e.ToolUseID] = e.SharedSeq
		}
		if e.Kind == event.KindGap && e.Gap.Kind == event.GapCaptureInterrupted && e.Gap.Reason == reason {
			gaps = append(gaps, e)
		}
	}
	for i := range 3 {
		if _, ok := seqOf[fmt.Sprintf("toolu_lost_%d", i)]; ok {
			t.Fatalf("lost event %d is retained after all", i)
		}
	}
	b, a := seqOf["toolu_before"], seqOf["toolu_after"]
	if b == 0 || a == 0 {
		t.Fatalf("good events not retained: %v", seqOf)
	}
	if len(gaps) != 1 {
		t.Fatalf("%d %s capture_interrupted gaps, want 1: %+v", len(gaps), reason, gaps)
	}
	g := gaps[0]
	if g.Gap.FromSeq != b+1 || g.Gap.ToSeq != a-1 || g.WorkID == "" || !g.Sequenced {
		t.Fatalf("gap covers %d..%d on %q, want the lost range %d..%d between %d and %d: %+v", g.Gap.FromSeq, g.Gap.ToSeq, g.WorkID, b+1, a-1, b, a, g.Gap)
	}
	// The Hub: the gap reached it under the session's target, and every
	// number it misses is covered.
	f.settle(t)
	coveredHoles(t, f.hubRecord(t), session, reason, 3)
}

// ENOSPC and EIO injected at the envelope and gap writes (the spool's
// failpoints): the next successful hook names the lost range.
func TestFailedAppendRecordsGapWithRange(t *testing.T) {
	for _, tc := range []struct{ reason, inject string }{{event.GapReasonNoSpace, "enospc"}, {event.GapReasonIOError, "eio"}} {
		t.Run(tc.reason, func(t *testing.T) {
			f := newBurstFixture(t)
			fp := spool.FailpointEnv + "=append.envelope=" + tc.inject + ",append.gap=" + tc.inject
			lostGapCheck(t, f, tc.reason, func(int) []string { return []string{fp} }, func() {})
		})
	}
}

// The same with the installed hook's detached deliverer, whose hooks put
// every PreToolUse into the intake (intake-first): an intake write that
// fails takes the locked path, which reserves the event's sequence and
// notes its loss; the deliverer (the next lock holder) publishes the gap.
func TestFailedAppendRecordsGapWithRangeDetached(t *testing.T) {
	for _, tc := range []struct{ reason, inject string }{{event.GapReasonNoSpace, "enospc"}, {event.GapReasonIOError, "eio"}} {
		t.Run(tc.reason, func(t *testing.T) {
			f := newBurstFixture(t)
			f.detached = true
			fp := spool.FailpointEnv + "=intake=" + tc.inject + ",append.envelope=" + tc.inject + ",append.gap=" + tc.inject
			lostGapCheck(t, f, tc.reason, func(int) []string { return []string{fp} }, func() {})
		})
	}
}

// A real full disk: the spool on a small tmpfs this test mounts (root
// only), filled to the last byte.
func TestDiskFullOnTmpfsRecordsGap(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root (CI runs as root); the ENOSPC failpoints cover the rest")
	}
	mnt := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=512k,mode=0700", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v: %s); the ENOSPC failpoints cover the disk-full path", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	f := newBurstFixture(t)
	// Move the spool onto the tmpfs: configure a second checkout there.
	f2 := &burstFixture{dir: f.dir, root: filepath.Join(f.dir, "repo2"), spool: filepath.Join(mnt, "spool"), vars: f.vars}
	if err := os.MkdirAll(f2.root, 0o755); err != nil {
		t.Fatal(err)
	}
	f2.agentscm(t, "client", "setup", "--root", f2.root, "--local")
	f2.agentscm(t, "change-capture", "configure", "--root", f2.root, "--spool", f2.spool)
	f2.agentscm(t, "work", "start", "--root", f2.root, "--title", "disk full")
	filler := filepath.Join(mnt, "filler")
	fill := func(int) []string {
		fh, err := os.OpenFile(filler, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		buf := make([]byte, 4096)
		for {
			if _, err := fh.Write(buf); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				break
			}
		}
		// The last partial page too.
		for {
			if _, err := fh.Write(buf[:1]); err != nil {
				break
			}
		}
		return nil
	}
	lostGapCheck(t, f2, event.GapReasonNoSpace, fill, func() {
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
	})
}
