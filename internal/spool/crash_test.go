package spool

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/event"
)

// The crash tests run scenarios in a child process (this test binary,
// selected by environment) with one failpoint armed; the failpoint kills the
// child with SIGKILL. The parent then reopens the spool and checks that
// nothing acknowledged or pending was lost, nothing is there twice, debris is
// quarantined and the state is inspectable.

const (
	envScenario = "AGENTSCM_SPOOL_TEST_SCENARIO"
	envDir      = "AGENTSCM_SPOOL_TEST_DIR"
	envTag      = "AGENTSCM_SPOOL_TEST_TAG"
	envCount    = "AGENTSCM_SPOOL_TEST_COUNT"
	envSummary  = "AGENTSCM_SPOOL_TEST_SUMMARY"
)

func tagged(tag string, kind event.Kind) *event.Record {
	r := testRec(kind)
	r.AgentID = tag // a unique tag per logical record
	return r
}

// TestHelperProcess is the child side; it does nothing in a normal run.
func TestHelperProcess(t *testing.T) {
	sc := os.Getenv(envScenario)
	if sc == "" {
		t.Skip("helper process only")
	}
	dir := os.Getenv(envDir)
	ctx := context.Background()
	die := func(err error) {
		fmt.Printf("error %v\n", err)
		os.Exit(3)
	}
	switch sc {
	case "init":
		if _, err := InitWith(ctx, dir, Config{}); err != nil {
			die(err)
		}
	case "append":
		sp, err := Open(dir)
		if err != nil {
			die(err)
		}
		for i := range 3 {
			tag := fmt.Sprintf("%s-%d", os.Getenv(envTag), i)
			r := tagged(tag, event.PromptSubmit)
			if i == 1 {
				r.Kind = event.ToolFinish
				r.Body = &event.Body{ToolResponse: []byte(`"output of ` + tag + `"`)}
			}
			seq, err := sp.Append(r)
			if err != nil {
				die(err)
			}
			fmt.Printf("appended %d %s\n", seq, tag)
		}
	case "blobs":
		// Three source artifacts, then the record naming them (the
		// source binding's order: bytes before the action start).
		sp, err := Open(dir)
		if err != nil {
			die(err)
		}
		refs, err := sp.PutBlobs(ctx, []Blob{{Data: []byte("blob one")}, {Data: []byte("blob two")}, {Data: []byte("blob three")}})
		if err != nil {
			die(err)
		}
		fmt.Printf("blobs %d\n", len(refs))
		if _, err := sp.Append(tagged("after-blobs", event.PromptSubmit)); err != nil {
			die(err)
		}
		fmt.Println("appended")
	case "stage":
		// Three blobs staged without the lock, then admitted under it.
		sp, err := Open(dir)
		if err != nil {
			die(err)
		}
		refs, err := sp.StageBlobs(stageTestBlobs())
		if err != nil {
			die(err)
		}
		fmt.Printf("staged %d\n", len(refs))
		ss, err := sp.Begin(ctx)
		if err != nil {
			die(err)
		}
		if err := ss.AdmitStaged(refs); err != nil {
			die(err)
		}
		ss.Close()
		fmt.Println("admitted")
	case "reclaim":
		// An admission with an empty intake reclaims the staged debris
		// (every file older than the grace period, here zero).
		sp, err := Open(dir)
		if err != nil {
			die(err)
		}
		sp.intakeGrace = 0
		ss, err := sp.Begin(ctx)
		if err != nil {
			die(err)
		}
		if _, err := ss.Intake(10); err != nil {
			die(err)
		}
		ss.Close()
		fmt.Println("reclaimed")
	case "pause":
		sp, err := Open(dir)
		if err != nil {
			die(err)
		}
		_, err = sp.Append(tagged("refused", event.PromptSubmit))
		fmt.Printf("refused %v\n", errors.Is(err, ErrCapturePaused))
	case "ack":
		sp, err := Open(dir)
		if err != nil {
			die(err)
		}
		pend, err := sp.Pending(ctx, 100)
		if err != nil {
			die(err)
		}
		for _, e := range pend[:3] {
			if err := sp.Ack(ctx, e.Record.Seq, e.Digest); err != nil {
				die(err)
			}
			fmt.Printf("acked %d\n", e.Record.Seq)
		}
	case "cursor":
		sp, err := Open(dir)
		if err != nil {
			die(err)
		}
		for seq := uint64(1); seq <= 3; seq++ {
			if err := sp.RecordAttempt(ctx, Attempt{Seq: seq, Outcome: "failed"}); err != nil {
				die(err)
			}
			fmt.Printf("attempted %d\n", seq)
		}
	case "session":
		// The hook's sequence under one held acquisition: append, list
		// pending, then acknowledge and record an attempt per envelope.
		sp, err := OpenAppender(dir)
		if err != nil {
			die(err)
		}
		sp.SetSummaryPath(os.Getenv(envSummary))
		ss, err := sp.Begin(ctx)
		if err != nil {
			die(err)
		}
		defer ss.Close()
		seq, err := ss.Append(tagged("session-new", event.PromptSubmit))
		if err != nil {
			die(err)
		}
		fmt.Printf("appended %d\n", seq)
		pend, err := ss.Pending(100)
		if err != nil {
			die(err)
		}
		for _, e := range pend {
			if err := ss.Ack(e.Record.Seq, e.Digest); err != nil {
				die(err)
			}
			fmt.Printf("acked %d\n", e.Record.Seq)
			if err := ss.RecordAttempt(Attempt{Seq: e.Record.Seq, Digest: e.Digest, Outcome: "accepted"}); err != nil {
				die(err)
			}
			fmt.Printf("attempted %d\n", e.Record.Seq)
		}
	case "intake":
		// A hook that finds the lock busy: one intake file, no lock.
		sp, err := OpenAppender(dir)
		if err != nil {
			die(err)
		}
		sp.SetSummaryPath(os.Getenv(envSummary))
		name, err := sp.WriteIntake([]byte(os.Getenv(envTag)), time.Now())
		if err != nil {
			die(err)
		}
		fmt.Printf("intake %s\n", name)
	case "admit":
		// The next lock holder: admit every intake file as a record.
		sp, err := OpenAppender(dir)
		if err != nil {
			die(err)
		}
		sp.intakeGrace = 0 // the killed writers are known dead
		sp.SetSummaryPath(os.Getenv(envSummary))
		ss, err := sp.Begin(ctx)
		if err != nil {
			die(err)
		}
		defer ss.Close()
		files, err := ss.Intake(1000)
		if err != nil {
			die(err)
		}
		for _, f := range files {
			if _, err := ss.Append(tagged(string(f.Data), event.PromptSubmit)); err != nil {
				die(err)
			}
			if err := ss.DoneIntake(f.Name); err != nil {
				die(err)
			}
			fmt.Printf("admitted %s\n", f.Data)
		}
	case "burst":
		// One hook of a concurrent burst: append under the lock when it is
		// free (admitting the intake first, in order), else leave the event
		// in the intake. "kept" is printed once the event is durable.
		sp, err := OpenAppender(dir)
		if err != nil {
			die(err)
		}
		sp.SetSummaryPath(os.Getenv(envSummary))
		tag := os.Getenv(envTag)
		ss, err := sp.TryBegin(ctx, 0)
		if errors.Is(err, ErrBusy) {
			if _, err := sp.WriteIntake([]byte(tag), time.Now()); err != nil {
				die(err)
			}
			fmt.Printf("kept %s\n", tag)
			break
		}
		if err != nil {
			die(err)
		}
		files, err := ss.Intake(1000)
		if err != nil {
			die(err)
		}
		for _, f := range files {
			if _, err := ss.Append(tagged(string(f.Data), event.PromptSubmit)); err != nil {
				die(err)
			}
			if err := ss.DoneIntake(f.Name); err != nil {
				die(err)
			}
		}
		if _, err := ss.Append(tagged(tag, event.PromptSubmit)); err != nil {
			die(err)
		}
		fmt.Printf("kept %s\n", tag)
		pend, err := ss.Pending(10)
		if err != nil {
			die(err)
		}
		for _, e := range pend {
			if err := ss.Ack(e.Record.Seq, e.Digest); err != nil {
				die(err)
			}
		}
		ss.Close()
	case "compact":
		sp, err := Open(dir)
		if err != nil {
			die(err)
		}
		if _, err := sp.Compact(ctx); err != nil {
			die(err)
		}
	case "open":
		if _, err := Open(dir); err != nil {
			die(err)
		}
	case "setlimits":
		sp, err := Open(dir)
		if err != nil {
			die(err)
		}
		if _, err := sp.SetLimits(ctx, Limits{Records: 8192}); err != nil {
			die(err)
		}
	case "concurrent":
		sp, err := Open(dir)
		if err != nil {
			die(err)
		}
		n, _ := strconv.Atoi(os.Getenv(envCount))
		for i := range n {
			tag := fmt.Sprintf("%s-%04d", os.Getenv(envTag), i)
			if _, err := sp.Append(tagged(tag, event.PromptSubmit)); err != nil {
				die(err)
			}
		}
	default:
		die(fmt.Errorf("unknown scenario %q", sc))
	}
	fmt.Println("done")
	os.Exit(0)
}

// runChild runs scenario against dir with failpoint fp armed and reports
// its stdout and whether SIGKILL ended it.
func runChild(t *testing.T, scenario, dir, fp string, extra ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envScenario+"="+scenario, envDir+"="+dir, FailpointEnv+"="+fp)
	cmd.Env = append(cmd.Env, extra...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return out.String(), true
		}
		t.Fatalf("child %s/%s failed: %v\n%s", scenario, fp, err, out.String())
	}
	if err != nil {
		t.Fatal(err)
	}
	return out.String(), false
}

func mustCrash(t *testing.T, scenario, dir, fp string, extra ...string) string {
	t.Helper()
	out, killed := runChild(t, scenario, dir, fp, extra...)
	if !killed {
		t.Fatalf("failpoint %s was never reached in scenario %s:\n%s", fp, scenario, out)
	}
	return out
}

func lines(out, prefix string) []string {
	var res []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), prefix+" "); ok {
			res = append(res, rest)
		}
	}
	return res
}

// noTemps asserts recovery left no temporary file anywhere.
func noTemps(t testing.TB, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if strings.HasPrefix(d.Name(), ".tmp-") {
			t.Errorf("temporary file %s survived recovery", p)
		}
		return nil
	})
}

// tags returns the tag of every retained record and fails on duplicates.
func tags(t *testing.T, sp *Spool) map[string]uint64 {
	t.Helper()
	evs, err := sp.Events()
	if err != nil {
		t.Fatalf("events after crash: %v", err)
	}
	out := map[string]uint64{}
	seen := map[uint64]bool{}
	for _, e := range evs {
		if seen[e.Seq] {
			t.Fatalf("sequence %d twice", e.Seq)
		}
		seen[e.Seq] = true
		if e.AgentID == "" {
			continue
		}
		if _, dup := out[e.AgentID]; dup {
			t.Fatalf("record %s retained twice", e.AgentID)
		}
		out[e.AgentID] = e.Seq
	}
	return out
}

func reopenAndInspect(t *testing.T, dir string) *Spool {
	t.Helper()
	sp, err := Open(dir)
	if err != nil {
		t.Fatalf("reopen after crash: %v", err)
	}
	noTemps(t, dir)
	if _, err := Inspect(dir, 0); err != nil {
		t.Fatalf("inspect after crash: %v", err)
	}
	return sp
}

func writeFailpoints(prefix string, link bool) []string {
	last := ".renamed"
	if link {
		last = ".linked"
	}
	return []string{prefix + ".temp-written", prefix + ".temp-synced", prefix + last}
}

func TestCrashInit(t *testing.T) {
	fps := []string{"init.lock-created", "init.dirs-created"}
	for _, f := range []string{"scope", "limits", "cursor", "index"} {
		fps = append(fps, writeFailpoints("init."+f, true)...)
	}
	fps = append(fps, "init.before-commit", "init.commit.temp-written", "init.commit.temp-synced")
	committed := []string{"init.commit.linked", "init.committed"}
	for _, fp := range append(fps, committed...) {
		t.Run(fp, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "spool")
			mustCrash(t, "init", dir, fp)
			isCommitted := fp == committed[0] || fp == committed[1]
			if !isCommitted {
				// A crash before the commit leaves a spool that is refused
				// without repair: no byte changes, inspection works.
				before := dirFingerprint(t, dir)
				if _, err := Open(dir); !errors.Is(err, ErrNotSpool) {
					t.Fatalf("open: %v", err)
				}
				if _, err := Init(dir); !errors.Is(err, ErrNotSpool) {
					t.Fatalf("init: %v", err)
				}
				if dirFingerprint(t, dir) != before {
					t.Fatal("refusal changed the spool")
				}
				if rep, err := Inspect(dir, 0); err != nil || rep.Committed {
					t.Fatalf("inspect: %+v %v", rep, err)
				}
				return
			}
			sp := reopenAndInspect(t, dir)
			if _, err := sp.Append(tagged("x", event.PromptSubmit)); err != nil {
				t.Fatal(err)
			}
			if q := quarantined(t, sp); len(q) != 0 {
				t.Fatalf("quarantine %v", q)
			}
		})
	}
}

func dirFingerprint(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, _ := d.Info()
		data := []byte{}
		if fi.Mode().IsRegular() {
			data, _ = os.ReadFile(p)
		}
		fmt.Fprintf(&b, "%s %v %x\n", p, fi.Mode(), data)
		return nil
	})
	return b.String()
}

func TestCrashAppend(t *testing.T) {
	var fps []string
	fps = append(fps, writeFailpoints("append.envelope", true)...)
	fps = append(fps, writeFailpoints("append.artifact", true)...)
	for _, fp := range fps {
		t.Run(fp, func(t *testing.T) {
			t.Parallel()
			sp := mustInit(t, Limits{})
			for i := range 2 {
				if _, err := sp.Append(tagged(fmt.Sprintf("pre-%d", i), event.PromptSubmit)); err != nil {
					t.Fatal(err)
				}
			}
			out := mustCrash(t, "append", sp.dir, fp, envTag+"=c")
			sp = reopenAndInspect(t, sp.dir)
			got := tags(t, sp)
			for _, l := range lines(out, "appended") {
				var seq uint64
				var tag string
				fmt.Sscanf(l, "%d %s", &seq, &tag)
				if got[tag] != seq {
					t.Fatalf("acknowledged append %s (seq %d) lost: %v", tag, seq, got)
				}
			}
			for _, tag := range []string{"pre-0", "pre-1"} {
				if _, ok := got[tag]; !ok {
					t.Fatalf("earlier record %s lost", tag)
				}
			}
			// The next append continues after everything retained.
			seq, err := sp.Append(tagged("after", event.PromptSubmit))
			if err != nil {
				t.Fatal(err)
			}
			for tag, s := range got {
				if s >= seq {
					t.Fatalf("%s has seq %d >= next %d", tag, s, seq)
				}
			}
			// A retained finish keeps a readable body or declares it missing.
			evs, _ := sp.Events()
			for _, e := range evs {
				if e.Kind == event.ToolFinish && e.BodyRef.Availability == event.AvailabilityRetained && e.Body == nil {
					t.Fatalf("finish %d claims a retained body that is not readable", e.Seq)
				}
			}
		})
	}
}

func TestCrashPauseGap(t *testing.T) {
	for _, fp := range writeFailpoints("append.gap", true) {
		t.Run(fp, func(t *testing.T) {
			t.Parallel()
			sp := mustInit(t, Limits{Records: FloorRecords, Bytes: FloorBytes})
			for i := range 29 {
				if _, err := sp.Append(tagged(fmt.Sprintf("pre-%d", i), event.PromptSubmit)); err != nil {
					t.Fatal(err)
				}
			}
			mustCrash(t, "pause", sp.dir, fp)
			sp = reopenAndInspect(t, sp.dir)
			if len(tags(t, sp)) != 29 {
				t.Fatal("records lost")
			}
			// The completed gap is the one pause marker; refusing again
			// records no second one.
			if _, err := sp.Append(tagged("again", event.PromptSubmit)); !errors.Is(err, ErrCapturePaused) {
				t.Fatal(err)
			}
			evs, _ := sp.Events()
			n := 0
			for _, e := range evs {
				if e.Kind == event.KindGap {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("%d pause markers", n)
			}
		})
	}
}

func TestCrashAck(t *testing.T) {
	ctx := context.Background()
	for _, fp := range writeFailpoints("ack", true) {
		t.Run(fp, func(t *testing.T) {
			t.Parallel()
			sp := mustInit(t, Limits{})
			for i := range 5 {
				sp.Append(tagged(fmt.Sprintf("r%d", i), event.PromptSubmit))
			}
			out := mustCrash(t, "ack", sp.dir, fp)
			sp = reopenAndInspect(t, sp.dir)
			if len(tags(t, sp)) != 5 {
				t.Fatal("records lost")
			}
			pend, err := sp.Pending(ctx, 100)
			if err != nil {
				t.Fatal(err)
			}
			hidden := map[uint64]bool{1: true, 2: true, 3: true, 4: true, 5: true}
			for _, e := range pend {
				delete(hidden, e.Record.Seq)
			}
			for _, l := range lines(out, "acked") {
				s, _ := strconv.ParseUint(l, 10, 64)
				if !hidden[s] {
					t.Fatalf("acknowledged %d is pending again", s)
				}
			}
			if len(pend) < 2 || len(hidden) > 3 {
				t.Fatalf("pending %v", seqsOf(pend))
			}
		})
	}
}

func seqsOf(envs []Envelope) []uint64 {
	var out []uint64
	for _, e := range envs {
		out = append(out, e.Record.Seq)
	}
	return out
}

func TestCrashCursor(t *testing.T) {
	for _, fp := range writeFailpoints("cursor", false) {
		t.Run(fp, func(t *testing.T) {
			t.Parallel()
			sp := mustInit(t, Limits{})
			for i := range 4 {
				sp.Append(tagged(fmt.Sprintf("r%d", i), event.PromptSubmit))
			}
			out := mustCrash(t, "cursor", sp.dir, fp)
			sp = reopenAndInspect(t, sp.dir)
			c, err := sp.readCursor()
			if err != nil {
				t.Fatal(err)
			}
			done := len(lines(out, "attempted"))
			if c.LastSeq < uint64(done) || c.LastSeq > uint64(done+1) {
				t.Fatalf("cursor %d after %d completed attempts", c.LastSeq, done)
			}
		})
	}
}

// TestCrashSession kills the hook's one-acquisition sequence at every write
// failpoint: an appended record survives, an acknowledged envelope stays
// hidden, and the cursor is never behind a completed attempt nor more than
// one envelope past it.
func TestCrashSession(t *testing.T) {
	ctx := context.Background()
	var fps []string
	for _, p := range []string{"append.envelope", "cursor"} {
		fps = append(fps, writeFailpoints(p, p != "cursor")...)
	}
	fps = append(fps, writeFailpoints("ack", true)...)
	for _, fp := range fps {
		t.Run(fp, func(t *testing.T) {
			t.Parallel()
			sp := mustInit(t, Limits{})
			for i := range 3 {
				sp.Append(tagged(fmt.Sprintf("r%d", i), event.PromptSubmit))
			}
			out := mustCrash(t, "session", sp.dir, fp)
			sp = reopenAndInspect(t, sp.dir)
			appended := len(lines(out, "appended"))
			if got := len(tags(t, sp)); got < 3+appended {
				t.Fatalf("%d records after %d appended", got, 3+appended)
			}
			pend, err := sp.Pending(ctx, 100)
			if err != nil {
				t.Fatal(err)
			}
			pending := map[uint64]bool{}
			for _, e := range pend {
				pending[e.Record.Seq] = true
			}
			for _, l := range lines(out, "acked") {
				s, _ := strconv.ParseUint(l, 10, 64)
				if pending[s] {
					t.Fatalf("acknowledged %d is pending again", s)
				}
			}
			c, err := sp.readCursor()
			if err != nil {
				t.Fatal(err)
			}
			var last uint64
			if at := lines(out, "attempted"); len(at) > 0 {
				last, _ = strconv.ParseUint(at[len(at)-1], 10, 64)
			}
			if c.LastSeq < last || c.LastSeq > last+1 {
				t.Fatalf("cursor %d after attempts up to %d", c.LastSeq, last)
			}
		})
	}
}

// compactFixture builds a spool with acknowledged ordinary records, a
// completed acknowledged pair, an incomplete start, a gap and pending
// records.
func compactFixture(t *testing.T) (*Spool, map[string]string) {
	ctx := context.Background()
	sp := mustInit(t, Limits{})
	add := func(tag string, kind event.Kind, id string) {
		r := tagged(tag, kind)
		r.ToolUseID = id
		if kind == event.KindGap {
			r.Gap = &event.GapInfo{Kind: event.GapCaptureInterrupted, Reason: "test"}
		}
		if _, err := sp.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	add("a0", event.SessionStart, "")
	add("a1", event.PromptSubmit, "")
	add("s1", event.ToolStart, "t1")
	add("f1", event.ToolFinish, "t1")
	add("s2", event.ToolStart, "t2")
	add("g", event.KindGap, "")
	add("p0", event.PromptSubmit, "")
	add("p1", event.PromptSubmit, "")
	pend, _ := sp.Pending(ctx, 100)
	digests := map[string]string{}
	for _, e := range pend {
		digests[e.Record.AgentID] = e.Digest
		if !strings.HasPrefix(e.Record.AgentID, "p") {
			if err := sp.Ack(ctx, e.Record.Seq, e.Digest); err != nil {
				t.Fatal(err)
			}
		}
	}
	return sp, digests
}

func TestCrashCompaction(t *testing.T) {
	ctx := context.Background()
	fps := writeFailpoints("compact.index", true)
	fps = append(fps, "compact.committed", "compact.mid-cleanup", "compact.cleaned", "compact.renamed")
	for _, fp := range fps {
		t.Run(fp, func(t *testing.T) {
			t.Parallel()
			sp, digests := compactFixture(t)
			mustCrash(t, "compact", sp.dir, fp)
			// The next holder of any kind completes the interrupted
			// compaction and delivers in the same acquisition: a hook's or
			// deliverer's Session (no open-time recovery, a summary that
			// the crash left dirty) must not stop on a marker the cleanup
			// removed (ErrMalformedAck).
			hp, err := OpenAppender(sp.dir)
			if err != nil {
				t.Fatal(err)
			}
			hp.SetSummaryPath(filepath.Join(t.TempDir(), "summary"))
			ss, err := hp.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if pend, err := ss.Pending(10); err != nil || len(pend) != 2 {
				t.Fatalf("the next holder's pending after a crash at %s: %d %v", fp, len(pend), err)
			}
			ss.Close()
			sp = reopenAndInspect(t, sp.dir)
			ix, entry, err := sp.currentIndex()
			if err != nil || entry.pending {
				t.Fatalf("index %+v %v", entry, err)
			}
			got := tags(t, sp)
			// Pending records and the incomplete start are retained.
			for _, tag := range []string{"p0", "p1", "s2", "g"} {
				if _, ok := got[tag]; !ok {
					t.Fatalf("%s lost (retained %v)", tag, got)
				}
			}
			// Every other record is either retained or compacted, never
			// both and never neither.
			compacted := map[string]bool{}
			for _, d := range ix.Digests {
				compacted[d.Digest] = true
			}
			for _, r := range ix.Receipts {
				compacted[r.StartDigest], compacted[r.FinishDigest] = true, true
			}
			for tag, d := range digests {
				_, kept := got[tag]
				if tag == "g" || tag == "s2" || strings.HasPrefix(tag, "p") {
					continue
				}
				if kept == compacted[d] {
					t.Fatalf("%s retained=%v compacted=%v", tag, kept, compacted[d])
				}
			}
			// Delivery is not wedged and compaction can run again.
			pend, err := sp.Pending(ctx, 10)
			var ps []string
			for _, e := range pend {
				ps = append(ps, e.Record.AgentID)
			}
			sort.Strings(ps)
			if err != nil || strings.Join(ps, ",") != "p0,p1" {
				t.Fatalf("pending %v %v", ps, err)
			}
			if _, err := sp.Compact(ctx); err != nil {
				t.Fatal(err)
			}
			ix, _, _ = sp.currentIndex()
			if len(ix.Receipts) != 1 || len(ix.Digests) != 2 || len(ix.Replay) != 1 {
				t.Fatalf("final index %+v", ix)
			}
		})
	}
}

func TestCrashQuarantine(t *testing.T) {
	sp := mustInit(t, Limits{})
	sp.Append(tagged("r", event.PromptSubmit))
	os.WriteFile(filepath.Join(sp.dir, outboxDir, "debris"), []byte("x"), 0o600)
	mustCrash(t, "open", sp.dir, "recover.quarantined")
	sp = reopenAndInspect(t, sp.dir)
	if q := quarantined(t, sp); len(q) != 1 || !strings.HasSuffix(q[0], "-outbox-debris") {
		t.Fatalf("quarantine %v", q)
	}
	if len(tags(t, sp)) != 1 {
		t.Fatal("record lost")
	}
}

// TestConcurrentAppenders runs many processes appending to one spool at
// once: every record is retained exactly once, sequence numbers are dense,
// and each process's records keep its order.
func TestConcurrentAppenders(t *testing.T) {
	sp := mustInit(t, Limits{})
	const procs, each = 8, 15
	errs := make(chan error, procs)
	for p := range procs {
		go func() {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), envScenario+"=concurrent", envDir+"="+sp.dir, envTag+"="+fmt.Sprintf("p%d", p), envCount+"="+strconv.Itoa(each))
			out, err := cmd.CombinedOutput()
			if err != nil {
				err = fmt.Errorf("%v: %s", err, out)
			}
			errs <- err
		}()
	}
	for range procs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	evs, err := sp.Events()
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != procs*each {
		t.Fatalf("%d records, want %d", len(evs), procs*each)
	}
	last := map[string]string{}
	for i, e := range evs {
		if e.Seq != uint64(i+1) {
			t.Fatalf("sequence %d at position %d", e.Seq, i)
		}
		proc, n, _ := strings.Cut(e.AgentID, "-")
		if prev, ok := last[proc]; ok && n <= prev {
			t.Fatalf("process %s: %s after %s", proc, n, prev)
		}
		last[proc] = n
	}
	if len(last) != procs {
		t.Fatalf("records from %d processes", len(last))
	}
}
