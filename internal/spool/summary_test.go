package spool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/event"
)

func summaryPath(t testing.TB) string {
	d := filepath.Join(t.TempDir(), "private")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(d, "summary")
}

// withSummary opens dir as the hook does: the summary in a private
// directory outside the spool.
func withSummary(t testing.TB, dir, summary string) *Spool {
	t.Helper()
	sp, err := OpenAppender(dir)
	if err != nil {
		t.Fatal(err)
	}
	sp.SetSummaryPath(summary)
	return sp
}

type view struct {
	fast    bool
	usage   Usage
	maxSeq  uint64
	pending []uint64
	err     error
}

// look takes one acquisition and reports what it found.
func look(t testing.TB, sp *Spool) view {
	t.Helper()
	ss, err := sp.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	v := view{fast: ss.g.st.fast, usage: ss.g.st.usage, maxSeq: ss.g.st.maxSeq}
	pend, err := ss.Pending(100000)
	v.err = err
	for _, e := range pend {
		v.pending = append(v.pending, e.Record.Seq)
	}
	slices.Sort(v.pending)
	return v
}

// agree checks the hook's view (summary) against a full scan of the files.
func agree(t *testing.T, hook *Spool) view {
	t.Helper()
	got := look(t, hook)
	full, err := OpenAppender(hook.dir)
	if err != nil {
		t.Fatal(err)
	}
	want := look(t, full)
	if want.fast {
		t.Fatal("a spool without a summary path used a summary")
	}
	if got.usage != want.usage || got.maxSeq != want.maxSeq || !slices.Equal(got.pending, want.pending) ||
		(got.err == nil) != (want.err == nil) {
		t.Fatalf("summary view %+v\nfull scan    %+v", got, want)
	}
	return got
}

func hookStep(t *testing.T, sp *Spool, tag string, ackEvery int) {
	t.Helper()
	ss, err := sp.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	r := tagged(tag, event.ToolFinish)
	r.Body = &event.Body{ToolResponse: []byte(`"out ` + tag + `"`)}
	if _, err := ss.Append(r); err != nil {
		t.Fatal(err)
	}
	pend, err := ss.Pending(10)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range pend {
		if ackEvery > 0 && e.Record.Seq%uint64(ackEvery) == 0 {
			if err := ss.Ack(e.Record.Seq, e.Digest); err != nil {
				t.Fatal(err)
			}
		}
		if err := ss.RecordAttempt(Attempt{Seq: e.Record.Seq, Digest: e.Digest, Outcome: "accepted"}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSummaryTrustedAndEqualToFullScan(t *testing.T) {
	sp := mustInit(t, Limits{})
	summary := summaryPath(t)
	hook := withSummary(t, sp.dir, summary)
	for i := range 40 {
		hookStep(t, hook, fmt.Sprintf("h%d", i), 2)
		v := agree(t, hook)
		if !v.fast {
			t.Fatalf("step %d: the hook rebuilt instead of trusting its clean summary", i)
		}
	}
	// A writer that does not keep the summary (an older binary, a one-shot
	// without the path) appends: the outbox stamp moved, so the hook
	// rebuilds and sees the record.
	other, _ := OpenAppender(sp.dir)
	seq, err := other.Append(tagged("foreign", event.PromptSubmit))
	if err != nil {
		t.Fatal(err)
	}
	v := agree(t, hook)
	if v.fast || !slices.Contains(v.pending, seq) {
		t.Fatalf("after a foreign append: fast=%v pending %v lacks %d", v.fast, v.pending, seq)
	}
	// A full acquisition (compaction, recovery, open) leaves the summary
	// untrusted.
	if _, err := Open(sp.dir); err != nil {
		t.Fatal(err)
	}
	hook2 := withSummary(t, sp.dir, summary)
	if v := look(t, hook2); v.fast {
		t.Fatal("the summary was trusted after a full acquisition")
	}
	if _, err := hook.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	agree(t, hook)
	// A summary from another boot, torn, or of another spool is rebuilt.
	for _, damage := range []func(){
		func() { os.WriteFile(summary, []byte("AGSPOOL1 summary summary 3 x\nabc"), 0o600) },
		func() {
			sr, _, _ := hook.readSummary()
			sr.BootID = "another-boot"
			hook.writeSummary(sr)
		},
		func() {
			other2 := mustInit(t, Limits{})
			o := withSummary(t, other2.dir, summary)
			hookStep(t, o, "x", 0)
		},
	} {
		agree(t, hook) // clean again
		damage()
		if v := agree(t, hook); v.fast {
			t.Fatal("a damaged summary was trusted")
		}
	}
}

// A marker damaged in place after the summary was written moves no
// directory stamp; the rolling check still stops delivery within a bounded
// number of acquisitions, and the stop persists until it is repaired.
func TestSummaryMalformedAckStopsDelivery(t *testing.T) {
	sp := mustInit(t, Limits{})
	hook := withSummary(t, sp.dir, summaryPath(t))
	for i := range 50 {
		hookStep(t, hook, fmt.Sprintf("h%d", i), 1)
	}
	if v := look(t, hook); v.err != nil || !v.fast {
		t.Fatalf("clean spool: %+v", v)
	}
	ack := filepath.Join(sp.dir, acksDir, ackName(7))
	good, err := os.ReadFile(ack)
	if err != nil {
		t.Fatal(err)
	}
	bad := []byte(strings.Replace(string(good), "sha256:", "sha256:f", 1)[:len(good)])
	if err := os.WriteFile(ack, bad, 0o600); err != nil { // in place: same inode, no dir change
		t.Fatal(err)
	}
	stopped := -1
	for i := range 2 + 60/verifyRolling {
		if v := look(t, hook); errors.Is(v.err, ErrMalformedAck) {
			stopped = i
			break
		}
	}
	if stopped < 0 {
		t.Fatal("a marker damaged in place never stopped delivery")
	}
	for range 3 {
		if v := look(t, hook); !errors.Is(v.err, ErrMalformedAck) {
			t.Fatalf("delivery resumed over a malformed marker: %v", v.err)
		}
	}
	if err := os.WriteFile(ack, good, 0o600); err != nil {
		t.Fatal(err)
	}
	if v := look(t, hook); v.err != nil {
		t.Fatalf("repaired marker still stops delivery: %v", v.err)
	}
}

// Killing the hook's session at every write failpoint (the summary's own
// included) never leaves a summary that hides an envelope or miscounts.
func TestCrashSessionSummary(t *testing.T) {
	fps := []string{"summary.temp-written"}
	for _, p := range []string{"append.envelope", "ack"} {
		fps = append(fps, writeFailpoints(p, true)...)
	}
	fps = append(fps, writeFailpoints("cursor", false)...)
	for _, fp := range fps {
		t.Run(fp, func(t *testing.T) {
			t.Parallel()
			sp := mustInit(t, Limits{})
			summary := summaryPath(t)
			hook := withSummary(t, sp.dir, summary)
			for i := range 3 {
				hookStep(t, hook, fmt.Sprintf("r%d", i), 2)
			}
			mustCrash(t, "session", sp.dir, fp, envSummary+"="+summary)
			v := agree(t, withSummary(t, sp.dir, summary))
			if v.fast && fp != "summary.temp-written" {
				t.Fatalf("trusted the summary of a session killed at %s", fp)
			}
		})
	}
}

func TestIntakeWithoutLock(t *testing.T) {
	sp := mustInit(t, Limits{})
	summary := summaryPath(t)
	hook := withSummary(t, sp.dir, summary)
	hookStep(t, hook, "first", 0)
	before := look(t, hook)
	holder, err := hook.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	other := withSummary(t, sp.dir, summary)
	if _, err := other.TryBegin(context.Background(), time.Millisecond); !errors.Is(err, ErrBusy) {
		t.Fatalf("TryBegin while held: %v", err)
	}
	var names []string
	for i := range 5 {
		n, err := other.WriteIntake([]byte(fmt.Sprintf("event-%d", i)), time.Unix(1700000000, int64(i)))
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	holder.Close()
	fi, err := os.Lstat(filepath.Join(sp.dir, intakeDir))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("intake dir: %v %v", fi, err)
	}
	// Intake files count against the limits from the moment they exist.
	v := agree(t, hook)
	if v.usage.Records != before.usage.Records+5 {
		t.Fatalf("usage %d records, want %d + 5 intake files", v.usage.Records, before.usage.Records)
	}
	// A torn intake file and a dead writer's temporary: returned as
	// malformed (the caller quarantines it, naming its loss) and
	// completed; a live writer's temporary (flocked) is left alone.
	idir := filepath.Join(sp.dir, intakeDir)
	torn := intakeName(1700000000000000009, 1, "deadbeef", 77)
	os.WriteFile(filepath.Join(idir, torn), []byte("AGSPOOL1 intake x 9 00\nabc"), 0o600)
	full := encodeFrame(typeIntake, intakeKey(1700000000000000008, 2, "0badcafe"), []byte("event-dead"))
	os.WriteFile(filepath.Join(idir, ".tmp-dead"), full, 0o600)
	live, _ := os.OpenFile(filepath.Join(idir, ".tmp-live"), os.O_CREATE|os.O_WRONLY, 0o600)
	syscall.Flock(int(live.Fd()), syscall.LOCK_EX)
	live.Write([]byte("AGSPOOL1 intake"))
	young := withSummary(t, sp.dir, summary)
	ss, err := young.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	files, err := ss.Intake(100)
	ss.Close()
	var malformed []string
	for _, f := range files {
		if f.Malformed {
			malformed = append(malformed, f.Name)
		}
	}
	if err != nil || len(files) != 6 || !slices.Equal(malformed, []string{torn}) {
		t.Fatalf("with a young dead temporary: %d files, malformed %v (%v), want the 5 installed ones and the torn one", len(files), malformed, err)
	}
	hook.intakeGrace = 0
	ss, err = hook.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	files, err = ss.Intake(100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range files {
		if !f.Malformed {
			got = append(got, string(f.Data))
		}
	}
	want := []string{"event-0", "event-1", "event-2", "event-3", "event-4", "event-dead"}
	if !slices.Equal(got, want) {
		t.Fatalf("intake order %q, want %q", got, want)
	}
	for _, f := range files {
		if f.Malformed {
			if err := ss.QuarantineIntake(f.Name); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, err := ss.Append(tagged(string(f.Data), event.PromptSubmit)); err != nil {
			t.Fatal(err)
		}
		if err := ss.DoneIntake(f.Name); err != nil {
			t.Fatal(err)
		}
	}
	ss.Close()
	if _, err := os.Stat(filepath.Join(idir, ".tmp-live")); err != nil {
		t.Fatal("a live writer's intake temporary was touched")
	}
	live.Close()
	q := quarantined(t, sp)
	if len(q) != 1 || !strings.Contains(q[0], "intake") {
		t.Fatalf("quarantine %v, want the torn intake file", q)
	}
	agree(t, hook)
}

// Intake writers and lock holders in real processes, killed at every
// intake failpoint: every intake whose writer returned is admitted at least
// once; nothing is lost and torn files are quarantined.
func TestCrashIntake(t *testing.T) {
	cases := []struct{ scenario, fp string }{
		{"intake", "intake.temp-written"}, {"intake", "intake.temp-synced"}, {"intake", "intake.linked"},
		{"admit", "intake.admitted"}, {"admit", "append.envelope.linked"}, {"admit", "summary.temp-written"},
	}
	for _, tc := range cases {
		t.Run(tc.scenario+"/"+tc.fp, func(t *testing.T) {
			t.Parallel()
			sp := mustInit(t, Limits{})
			summary := summaryPath(t)
			writeFirstSummary(t, sp.dir, summary)
			want := map[string]bool{}
			for i := range 3 {
				tag := fmt.Sprintf("ok-%d", i)
				if _, err := withSummary(t, sp.dir, summary).WriteIntake([]byte(tag), time.Now()); err != nil {
					t.Fatal(err)
				}
				want[tag] = true
			}
			if tc.scenario == "intake" {
				// The killed writer never returned: its event may or may not
				// be admitted, but never torn into the outbox.
				mustCrash(t, "intake", sp.dir, tc.fp, envSummary+"="+summary, envTag+"=killed")
			} else {
				mustCrash(t, "admit", sp.dir, tc.fp, envSummary+"="+summary)
			}
			out, killed := runChild(t, "admit", sp.dir, "", envSummary+"="+summary)
			if killed || !strings.Contains(out, "done") {
				t.Fatalf("admission after the crash: %s", out)
			}
			evs, err := sp.Events()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int{}
			for _, e := range evs {
				got[e.AgentID]++
			}
			for tag := range want {
				// At least once: a holder killed after the append and before
				// the intake file's removal admits it again (capture's claims
				// make a provider-identified event a duplicate then).
				if got[tag] == 0 || got[tag] > 1 && tc.fp != "append.envelope.linked" {
					t.Fatalf("intake %s retained %d times (have %v)", tag, got[tag], got)
				}
			}
			if left, _ := os.ReadDir(filepath.Join(sp.dir, intakeDir)); len(left) != 0 {
				t.Fatalf("intake not drained: %v", left)
			}
			agree(t, withSummary(t, sp.dir, summary))
		})
	}
}

// writeFirstSummary takes and lets go the lock once, as the first hook of a
// boot does: intake writes are refused until a summary says what the
// spool holds.
func writeFirstSummary(t *testing.T, dir, summary string) {
	t.Helper()
	ss, err := withSummary(t, dir, summary).Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ss.Close()
}

// Concurrent writers against a held lock lose nothing.
func TestIntakeConcurrentWriters(t *testing.T) {
	sp := mustInit(t, Limits{})
	summary := summaryPath(t)
	writeFirstSummary(t, sp.dir, summary)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := withSummary(t, sp.dir, summary)
			for i := range 8 {
				if _, err := s.WriteIntake([]byte(fmt.Sprintf("w%d-%d", w, i)), time.Now()); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	ss, err := withSummary(t, sp.dir, summary).Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	files, err := ss.Intake(1000)
	ss.Close()
	if err != nil || len(files) != 64 {
		t.Fatalf("%d intake files, want 64 (%v)", len(files), err)
	}
}

// A burst of concurrent writer processes against one spool, about one in
// four SIGKILLed at a random moment: every event a process reported kept
// (appended under the lock, or left in the intake) is retained after the
// next holder admits the intake, and the hook summary agrees with a full
// scan of the files.
func TestCrashConcurrentBurst(t *testing.T) {
	n := 48
	if testing.Short() {
		n = 16
	}
	sp := mustInit(t, Limits{})
	summary := summaryPath(t)
	writeFirstSummary(t, sp.dir, summary)
	var mu sync.Mutex
	kept := map[string]bool{}
	var wg sync.WaitGroup
	for i := range n {
		tag := fmt.Sprintf("burst-%03d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), envScenario+"=burst", envDir+"="+sp.dir, envSummary+"="+summary, envTag+"="+tag)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Error(err)
				return
			}
			if rand.IntN(4) == 0 {
				time.AfterFunc(time.Duration(rand.IntN(30))*time.Millisecond, func() { cmd.Process.Signal(syscall.SIGKILL) })
			}
			cmd.Wait()
			if strings.Contains(out.String(), "kept "+tag) {
				mu.Lock()
				kept[tag] = true
				mu.Unlock()
			} else if strings.Contains(out.String(), "error") {
				t.Errorf("%s: %s", tag, out.String())
			}
		}()
	}
	wg.Wait()
	if out, killed := runChild(t, "admit", sp.dir, "", envSummary+"="+summary); killed || !strings.Contains(out, "done") {
		t.Fatalf("final admission: %s", out)
	}
	evs, err := sp.Events()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, e := range evs {
		got[e.AgentID]++
	}
	for tag := range kept {
		if got[tag] == 0 {
			t.Errorf("%s was reported kept and is not retained", tag)
		}
	}
	agree(t, withSummary(t, sp.dir, summary))
	t.Logf("%d processes, %d reported kept, %d distinct events retained", n, len(kept), len(got))
}

// The intake never runs the spool past its limit: with no summary of this
// boot a write is refused (the hook takes the lock instead), and
// concurrent writers each count the others' files, so together they stop
// at the ordinary capacity. On main a fresh spool's intake took writes
// with no bound at all and concurrent writers each took the last free
// place (77 records in a 60-record spool).
func TestIntakeKeepsTheLimit(t *testing.T) {
	sp := mustInit(t, Limits{Records: 60})
	summary := summaryPath(t)
	if _, err := withSummary(t, sp.dir, summary).WriteIntake([]byte("early"), time.Now()); !errors.Is(err, ErrIntakeFull) {
		t.Fatalf("an intake write before any summary: %v, want ErrIntakeFull", err)
	}
	writeFirstSummary(t, sp.dir, summary)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := withSummary(t, sp.dir, summary)
			for i := range 8 {
				s.WriteIntake([]byte(fmt.Sprintf("w%d-%d", w, i)), time.Now())
			}
		}()
	}
	wg.Wait()
	rep, err := Inspect(sp.dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Usage.Records > 60-HeadroomRecords || rep.Intake == 0 {
		t.Fatalf("%d records (%d in the intake), want at most %d and some intake", rep.Usage.Records, rep.Intake, 60-HeadroomRecords)
	}
}
