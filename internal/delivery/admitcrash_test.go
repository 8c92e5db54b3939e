package delivery

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/action"
	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

// admissionFailpoints are the failpoints an intake file's admission passes
// (grep fail(" in internal/spool and internal/capture): the capture
// ledger's reservation and claim, every write of the event, its body
// artifact and its gaps, the intake file's removal, and the summary the
// holder writes when it lets the lock go. The failpoints of an action
// start's source bytes (blob.artifact.*, stage.admit.renamed) are killed
// in cmd/agentscm-hook-intake's TestIntakeAdmissionOfSourceBytesKilled,
// on a dirty Git checkout.
var admissionFailpoints = []string{
	"capture.reserved", "capture.claimed",
	"append.envelope.temp-written", "append.envelope.temp-synced", "append.envelope.linked",
	"append.artifact.temp-written", "append.artifact.temp-synced", "append.artifact.linked",
	"append.gap.temp-written", "append.gap.temp-synced", "append.gap.linked",
	"intake.admitted", "summary.temp-written",
}

// TestAdmissionCrashAtEveryFailpoint kills a real deliverer process
// (SIGKILL) at every admission failpoint while it admits an intake file of
// a shared-conversation session (a PreToolUse of a ruled tool whose input
// needs redaction, or a prompt without provider identity), then more
// events arrive through intake-first hooks and a deliverer runs (as
// `change-capture deliver` does): every event reaches the Hub exactly once
// with no missing sequence, the Pre's action start is recorded once, the
// spool holds no record twice and nothing is left in the intake. On main
// the Pre's re-admission failed for good ("the PreToolUse event has no
// spool sequence to order it") and blocked every file behind it.
func TestAdmissionCrashAtEveryFailpoint(t *testing.T) {
	if os.Getenv("AGENTSCM_TEST_DELIVERER_CHILD") != "" {
		return
	}
	input, _ := json.Marshal(map[string]string{"command": callSiteCommand})
	prompt, _ := json.Marshal("run " + callSiteCommand + " please")
	first := map[string]string{
		"pre":    `,"tool_name":"Bash","tool_use_id":"toolu_crash","tool_input":` + string(input),
		"prompt": `,"prompt":` + string(prompt),
	}
	firstEvent := map[string]string{"pre": "PreToolUse", "prompt": "UserPromptSubmit"}
	for _, fp := range admissionFailpoints {
		t.Run(fp, func(t *testing.T) {
			reached := 0
			for _, kind := range []string{"pre", "prompt"} {
				if admissionCrash(t, fp, firstEvent[kind], first[kind]) {
					reached++
				}
			}
			if reached == 0 {
				t.Fatalf("no admission reached %s", fp)
			}
		})
	}
}

// admissionCrash runs one case and reports whether the failpoint killed
// the deliverer.
func admissionCrash(t *testing.T, fp, ev, extra string) bool {
	t.Helper()
	f := newFixture(t)
	work := f.startWork(t)
	if err := f.store.Bindings().Update(func(c *binding.Config) (bool, error) {
		c.Bindings[0].CaptureMode = event.ModeSharedConversation
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	f.hook(t, f.payload("SessionStart", `,"source":"startup"`))
	intake := func(ev, extra string) {
		t.Helper()
		res, err := capture.HandleClaudeHook(context.Background(), f.store, noopBG{Opener{f.cfg}}, strings.NewReader(f.payload(ev, extra)), time.Now())
		if err != nil || res.Intake == "" {
			t.Fatalf("intake-first hook: %+v %v", res, err)
		}
	}
	intake(ev, extra)
	cmd := exec.Command(os.Args[0], "-test.run=^TestDelivererChild$")
	cmd.Env = append(os.Environ(), "AGENTSCM_TEST_DELIVERER_CHILD="+f.cfg+"\n"+f.spool, spool.FailpointEnv+"="+fp)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	killed := errors.As(err, &ee) && ee.ProcessState.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
	if !killed && err != nil {
		t.Fatalf("deliverer child at %s: %v\n%s", fp, err, out)
	}
	// More events, then a deliverer (the `deliver` command's run).
	intake("PreToolUse", `,"tool_name":"Bash","tool_use_id":"toolu_after","tool_input":{"command":"ls"}`)
	intake("Stop", "")
	rep, err := capture.DeliverSpool(context.Background(), f.store, Opener{f.cfg}, f.spool, nil, capture.DeliverBounds{})
	if err != nil || rep.Outcome != "idle" {
		t.Fatalf("%s/%s: deliver after the crash: %+v %v", fp, ev, rep, err)
	}
	if ins, err := spool.Inspect(f.spool, 100); err != nil || ins.Intake != 0 || ins.Pending.Total != 0 {
		t.Fatalf("%s/%s: after deliver: intake %d pending %d %v", fp, ev, ins.Intake, ins.Pending.Total, err)
	}
	// The Hub: every event once, no missing sequence.
	rec := f.record(t, work)
	if len(rec.Sessions) != 1 || rec.Sessions[0].MissingSeqs != 0 || rec.Sessions[0].Events != 4 {
		t.Fatalf("%s/%s: sessions %+v", fp, ev, rec.Sessions)
	}
	count := map[string]int{}
	for _, e := range rec.Events {
		count[e.HookEvent+"/"+e.ToolUseID]++
	}
	want := map[string]int{"SessionStart/": 1, ev + "/" + map[bool]string{true: "toolu_crash"}[ev == "PreToolUse"]: 1, "PreToolUse/toolu_after": 1, "Stop/": 1}
	if fmt.Sprint(count) != fmt.Sprint(want) {
		t.Fatalf("%s/%s: Hub events %v, want %v", fp, ev, count, want)
	}
	starts := 0
	for _, a := range rec.Actions {
		if a.Start != nil {
			starts++
		}
	}
	if wantStarts := map[bool]int{true: 2, false: 1}[ev == "PreToolUse"]; starts != wantStarts {
		t.Fatalf("%s/%s: %d actions on the Hub, want %d: %+v", fp, ev, starts, wantStarts, rec.Actions)
	}
	// The spool: no record retained twice.
	sp, err := spool.Open(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := sp.Events()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]uint64{}
	seqs := map[uint64]bool{}
	shared := map[string]uint64{}
	for _, r := range recs {
		if seqs[r.Seq] {
			// Two envelopes under one sequence (issue 31: a kill at
			// append.envelope.*): the spool's order is no order.
			t.Fatalf("%s/%s: two records with spool sequence %d", fp, ev, r.Seq)
		}
		seqs[r.Seq] = true
		if r.Sequenced && r.Kind != event.KindGap && r.SharedSeq != 0 {
			// Nor two events one shared sequence of their target's
			// stream (a gap shares its event's on purpose).
			k := fmt.Sprintf("%s/%s/%d/%s/%d", r.Stream, r.WorkID, r.Generation, r.CanonicalSession, r.SharedSeq)
			if prev, ok := shared[k]; ok {
				t.Fatalf("%s/%s: records %d and %d share the target sequence %s", fp, ev, prev, r.Seq, k)
			}
			shared[k] = r.Seq
		}
		r2 := r
		r2.Seq, r2.Body, r2.BodyRef = 0, nil, nil
		b, _ := json.Marshal(r2)
		if prev, ok := seen[string(b)]; ok {
			t.Fatalf("%s/%s: records %d and %d are the same record: %s", fp, ev, prev, r.Seq, b)
		}
		seen[string(b)] = r.Seq
	}
	return killed
}

// TestDelivererChild is the deliverer process of
// TestAdmissionCrashAtEveryFailpoint.
func TestDelivererChild(t *testing.T) {
	env := os.Getenv("AGENTSCM_TEST_DELIVERER_CHILD")
	if env == "" {
		t.Skip("runs only as a child process")
	}
	cfg, dir, _ := strings.Cut(env, "\n")
	capture.DeliverSpool(context.Background(), capture.StateDir{Dir: cfg}, Opener{cfg}, dir, nil, capture.DeliverBounds{})
}

// TestAdmissionFailureQuarantinesWithGap: an intake file whose admission
// fails every time (here: its action's retained start receipt is
// malformed) is retried at most three times, then moved into the spool's
// quarantine with an admission_failed gap under its target and sequence;
// the files behind it are admitted and delivered. On main it blocked every
// later file for good.
func TestAdmissionFailureQuarantinesWithGap(t *testing.T) {
	f := newFixture(t)
	work := f.startWork(t)
	f.hook(t, f.payload("SessionStart", `,"source":"startup"`))
	ro, err := spool.OpenReadOnly(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	rs := action.OpenReceipts(f.cfg, ro)
	if err := rs.Ensure(); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(rs.Dir(), action.ID("claude-code", "native-1", "toolu_bad")+".s.pending")
	if err := os.WriteFile(bad, []byte("{not a receipt"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{
		f.payload("PreToolUse", `,"tool_name":"Bash","tool_use_id":"toolu_bad","tool_input":{"command":"ls"}`),
		f.payload("Stop", ""),
		f.payload("PreToolUse", `,"tool_name":"Bash","tool_use_id":"toolu_ok","tool_input":{"command":"ls"}`),
	} {
		if res, err := capture.HandleClaudeHook(context.Background(), f.store, noopBG{Opener{f.cfg}}, strings.NewReader(p), time.Now()); err != nil || res.Intake == "" {
			t.Fatalf("intake-first hook: %+v %v", res, err)
		}
	}
	runs := 0
	for ; runs < 4; runs++ {
		if _, err := capture.DeliverSpool(context.Background(), f.store, Opener{f.cfg}, f.spool, nil, capture.DeliverBounds{}); err != nil {
			t.Fatal(err)
		}
		if ins, err := spool.Inspect(f.spool, 10); err == nil && ins.Intake == 0 && ins.Pending.Total == 0 {
			break
		}
	}
	ins, err := spool.Inspect(f.spool, 10)
	if err != nil || ins.Intake != 0 || ins.Pending.Total != 0 || ins.Quarantine.Total != 1 {
		t.Fatalf("after %d deliverer runs: intake %d pending %d quarantine %d %v", runs+1, ins.Intake, ins.Pending.Total, ins.Quarantine.Total, err)
	}
	rec := f.record(t, work)
	var events []string
	for _, e := range rec.Events {
		events = append(events, e.HookEvent+"/"+e.ToolUseID)
	}
	if strings.Join(events, ",") != "SessionStart/,PreToolUse/toolu_bad,Stop/,PreToolUse/toolu_ok" || rec.Sessions[0].MissingSeqs != 0 {
		t.Fatalf("Hub events %v, sessions %+v", events, rec.Sessions)
	}
	var named int
	for _, g := range rec.Gaps {
		if g.Reason == capture.GapReasonAdmissionFailed && g.FromSeq == 2 && g.ToSeq == 2 {
			named++
		}
	}
	if named != 1 {
		t.Fatalf("gaps %+v, want one admission_failed gap over sequence 2", rec.Gaps)
	}
}

// compactionFailpoints are the failpoints of a compaction (grep
// fail("compact in internal/spool).
var compactionFailpoints = []string{
	"compact.index.temp-written", "compact.index.temp-synced", "compact.index.linked",
	"compact.committed", "compact.mid-cleanup", "compact.cleaned", "compact.renamed",
}

// TestCompactionCrashDeliveryContinues kills a real deliverer process
// (SIGKILL) at every compaction failpoint while its automatic compaction
// runs; then more events arrive through intake-first hooks and a deliverer
// runs: the interrupted compaction is completed by that next holder and
// every event reaches the Hub. On main a kill at compact.mid-cleanup
// stopped delivery ("malformed or unreadable acknowledgement") until a
// manual compact.
func TestCompactionCrashDeliveryContinues(t *testing.T) {
	if os.Getenv("AGENTSCM_TEST_DELIVERER_CHILD") != "" {
		return
	}
	for _, fp := range compactionFailpoints {
		t.Run(fp, func(t *testing.T) {
			f := newFixtureWith(t, func(o *binding.EnableOptions) {
				o.Limits, o.Compaction = spool.Limits{Records: 400}, binding.PolicyChange{Clear: true}
			})
			work := f.startWork(t)
			const before = 70
			for i := range before {
				f.hook(t, f.payload("PreToolUse", fmt.Sprintf(`,"tool_name":"Read","tool_use_id":"toolu_c_%d","tool_input":{"file_path":"/etc/hostname"}`, i)))
			}
			if n := pendingCount(t, f.spool); n != 0 {
				t.Fatalf("%d pending before the crash", n)
			}
			// Now the operator's policy: the next lock holder compacts.
			if err := f.store.Bindings().Update(func(c *binding.Config) (bool, error) {
				c.Bindings[0].Compaction = &binding.CompactionPolicy{ThresholdPercent: 5, ChosenBy: "test", ChosenAt: time.Now()}
				return true, nil
			}); err != nil {
				t.Fatal(err)
			}
			intake := func(id string) {
				t.Helper()
				res, err := capture.HandleClaudeHook(context.Background(), f.store, noopBG{Opener{f.cfg}}, strings.NewReader(f.payload("PreToolUse",
					`,"tool_name":"Read","tool_use_id":"`+id+`","tool_input":{"file_path":"/etc/hostname"}`)), time.Now())
				if err != nil || res.Intake == "" {
					t.Fatalf("intake-first hook: %+v %v", res, err)
				}
			}
			intake("toolu_during")
			cmd := exec.Command(os.Args[0], "-test.run=^TestDelivererChild$")
			cmd.Env = append(os.Environ(), "AGENTSCM_TEST_DELIVERER_CHILD="+f.cfg+"\n"+f.spool, spool.FailpointEnv+"="+fp)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("deliverer child at %s: %v, want killed by SIGKILL\n%s", fp, err, out)
			}
			// Before any holder completes it, inspect reports a committed (linked)
			// compaction's cleanup as pending, and neither it nor the
			// health checks call delivery stopped.
			ins, err := spool.Inspect(f.spool, 10)
			if err != nil {
				t.Fatal(err)
			}
			if committed := fp == "compact.index.linked" || fp == "compact.committed" || fp == "compact.mid-cleanup" || fp == "compact.cleaned"; ins.Compaction.PendingCleanup != committed || ins.DeliveryStopped {
				t.Fatalf("inspect after a kill at %s: cleanup pending %v (want %v), delivery stopped %v; problems %v",
					fp, ins.Compaction.PendingCleanup, committed, ins.DeliveryStopped, ins.Problems)
			}
			if h := spool.CheckHealth(f.spool); !h.Healthy {
				t.Fatalf("health after a kill at %s: %+v", fp, h.Failing)
			}
			intake("toolu_after_1")
			intake("toolu_after_2")
			rep, err := capture.DeliverSpool(context.Background(), f.store, Opener{f.cfg}, f.spool, nil, capture.DeliverBounds{})
			if err != nil || rep.Outcome != "idle" || rep.Detail != "" {
				t.Fatalf("deliver after the crash at %s: %+v %v", fp, rep, err)
			}
			ins, err = spool.Inspect(f.spool, 10)
			if err != nil || ins.Intake != 0 || ins.Pending.Total != 0 || ins.DeliveryStopped || ins.Compaction.PendingCleanup || ins.Compaction.Runs == 0 {
				t.Fatalf("after deliver: intake %d pending %d stopped %v cleanup %v runs %d %v", ins.Intake, ins.Pending.Total,
					ins.DeliveryStopped, ins.Compaction.PendingCleanup, ins.Compaction.Runs, err)
			}
			if rec := f.record(t, work); len(rec.Events) != before+3 {
				t.Fatalf("Hub events %d, want %d", len(rec.Events), before+3)
			}
		})
	}
}

// TestAdmissionQuarantineCrashKeepsGap kills a real deliverer process
// (SIGKILL) at each failpoint of the quarantine of an intake file that
// failed admission maxAdmitAttempts times (its gap's writes, the move):
// the next deliverer completes it, the admission_failed gap names the file
// exactly once, and the Hub shows it over the file's sequence. Before, the
// move came first and its gap after: a kill at recover.quarantined left
// the file quarantined and its loss named nowhere.
func TestAdmissionQuarantineCrashKeepsGap(t *testing.T) {
	if os.Getenv("AGENTSCM_TEST_DELIVERER_CHILD") != "" {
		return
	}
	for _, fp := range []string{"append.gap.temp-written", "append.gap.linked", "recover.quarantined"} {
		t.Run(fp, func(t *testing.T) { admissionQuarantineCrash(t, fp) })
	}
}

func admissionQuarantineCrash(t *testing.T, fp string) {
	f := newFixture(t)
	work := f.startWork(t)
	f.hook(t, f.payload("SessionStart", `,"source":"startup"`))
	ro, err := spool.OpenReadOnly(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	rs := action.OpenReceipts(f.cfg, ro)
	if err := rs.Ensure(); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(rs.Dir(), action.ID("claude-code", "native-1", "toolu_bad")+".s.pending")
	if err := os.WriteFile(bad, []byte("{not a receipt"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{
		f.payload("PreToolUse", `,"tool_name":"Bash","tool_use_id":"toolu_bad","tool_input":{"command":"ls"}`),
		f.payload("PreToolUse", `,"tool_name":"Bash","tool_use_id":"toolu_ok","tool_input":{"command":"ls"}`),
	} {
		if res, err := capture.HandleClaudeHook(context.Background(), f.store, noopBG{Opener{f.cfg}}, strings.NewReader(p), time.Now()); err != nil || res.Intake == "" {
			t.Fatalf("intake-first hook: %+v %v", res, err)
		}
	}
	// Deliverers fail the file's admission until the next one quarantines
	// it: the admission mark in the ledger directory counts the failures.
	sum := sha256.Sum256([]byte(f.spool))
	markPath := filepath.Join(f.cfg, "capture-ledger", hex.EncodeToString(sum[:8]), "admission")
	for run := 0; ; run++ {
		var mark struct {
			Failures int `json:"failures"`
		}
		if b, err := os.ReadFile(markPath); err == nil && json.Unmarshal(b, &mark) == nil && mark.Failures == 2 {
			break
		}
		if run == 5 {
			t.Fatal("the admission mark never counted two failures")
		}
		capture.DeliverSpool(context.Background(), f.store, Opener{f.cfg}, f.spool, nil, capture.DeliverBounds{})
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDelivererChild$")
	cmd.Env = append(os.Environ(), "AGENTSCM_TEST_DELIVERER_CHILD="+f.cfg+"\n"+f.spool, spool.FailpointEnv+"="+fp)
	out, err := cmd.CombinedOutput()
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the quarantining deliverer at %s: %v, want killed by SIGKILL\n%s", fp, err, out)
	}
	for range 2 {
		if _, err := capture.DeliverSpool(context.Background(), f.store, Opener{f.cfg}, f.spool, nil, capture.DeliverBounds{}); err != nil {
			t.Fatal(err)
		}
	}
	ins, err := spool.Inspect(f.spool, 10)
	if err != nil || ins.Intake != 0 || ins.Pending.Total != 0 || ins.Quarantine.Total != 1 {
		t.Fatalf("intake %d pending %d quarantine %d %v", ins.Intake, ins.Pending.Total, ins.Quarantine.Total, err)
	}
	rec := f.record(t, work)
	named := 0
	for _, g := range rec.Gaps {
		if g.Reason == capture.GapReasonAdmissionFailed {
			named++
			if g.FromSeq != 2 || g.ToSeq != 2 {
				t.Errorf("admission_failed gap over %d..%d, want 2..2", g.FromSeq, g.ToSeq)
			}
		}
	}
	if named != 1 || rec.Sessions[0].MissingSeqs != 0 {
		t.Fatalf("%d admission_failed gaps on the Hub, want 1; session %+v; gaps %+v", named, rec.Sessions[0], rec.Gaps)
	}
	// The spool holds the gap once.
	sp, err := spool.Open(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := sp.Events()
	if err != nil {
		t.Fatal(err)
	}
	local := 0
	for _, r := range recs {
		if r.Kind == event.KindGap && r.Gap != nil && r.Gap.Reason == capture.GapReasonAdmissionFailed {
			local++
		}
	}
	if local != 1 {
		t.Fatalf("the spool holds %d admission_failed gaps, want 1", local)
	}
}
