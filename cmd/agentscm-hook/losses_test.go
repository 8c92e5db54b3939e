package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/spool"
)

// newLossFixture is newBurstFixture with extra configure arguments (a
// capture mode, limits, rules).
func newLossFixture(t *testing.T, detached bool, configure ...string) *burstFixture {
	dir := t.TempDir()
	f := &burstFixture{dir: dir, root: filepath.Join(dir, "repo"), spool: filepath.Join(dir, "spool"),
		vars: map[string]string{"XDG_CONFIG_HOME": filepath.Join(dir, "config")}, detached: detached}
	if err := os.MkdirAll(f.root, 0o755); err != nil {
		t.Fatal(err)
	}
	f.agentscm(t, "client", "setup", "--root", f.root, "--local")
	f.agentscm(t, append([]string{"change-capture", "configure", "--root", f.root, "--spool", f.spool}, configure...)...)
	f.agentscm(t, "work", "start", "--root", f.root, "--title", "losses")
	return f
}

// runHook runs one real hook process with payload and extra environment
// and returns its combined output; a hook always exits 0.
func (f *burstFixture) runHook(t *testing.T, payload string, env ...string) string {
	t.Helper()
	cmd := f.hookCmd(payload)
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hook: %v %s", err, out)
	}
	return string(out)
}

// settle delivers everything: the detached deliverer (and one more hook if
// needed) or, in-process, `change-capture deliver`.
func (f *burstFixture) settle(t *testing.T) {
	t.Helper()
	if f.detached {
		f.waitDelivered(t)
		return
	}
	f.agentscm(t, "change-capture", "deliver", "--spool", f.spool)
}

// holdSpoolLock takes the spool lock the way another holder would (an
// exclusive flock on spool.lock through its own open file description)
// and returns its release.
func holdSpoolLock(t *testing.T, dir string) func() {
	t.Helper()
	fh, err := os.OpenFile(filepath.Join(dir, "spool.lock"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(fh.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	return func() { fh.Close() }
}

// hubRecord is the Hub's change record of the checkout's current Work.
func (f *burstFixture) hubRecord(t *testing.T) api.ChangeRecord {
	t.Helper()
	var rec api.ChangeRecord
	if err := json.Unmarshal([]byte(f.agentscm(t, "change-capture", "show", "--root", f.root, "--record")), &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// coveredHoles checks the Hub's account of one session: every sequence
// number of each of its streams that the Hub does not hold is covered by a
// capture_interrupted gap of that stream, and reason's gaps cover at least
// lost numbers. It returns the numbers reason's gaps cover.
func coveredHoles(t *testing.T, rec api.ChangeRecord, session string, reason string, lost int) int64 {
	t.Helper()
	var sr *api.SessionRecord
	for i := range rec.Sessions {
		for _, n := range rec.Sessions[i].NativeSessionIDs {
			if n == session {
				sr = &rec.Sessions[i]
			}
		}
	}
	if sr == nil {
		t.Fatalf("session %s is not on the Hub: %+v", session, rec.Sessions)
	}
	held := map[string]map[int64]bool{}
	for _, e := range rec.Events {
		if e.Session == sr.Session && e.Generation == sr.Generation {
			if held[e.Stream] == nil {
				held[e.Stream] = map[int64]bool{}
			}
			held[e.Stream][e.Seq] = true
		}
	}
	covers := func(stream string, seq int64) bool {
		for _, g := range rec.Gaps {
			if g.Session == sr.Session && g.Generation == sr.Generation && g.Stream == stream && g.Kind == "capture_interrupted" &&
				g.FromSeq <= seq && seq <= g.ToSeq {
				return true
			}
		}
		return false
	}
	for _, st := range sr.Streams {
		for seq := int64(1); seq <= st.LastSeq; seq++ {
			if !held[st.Stream][seq] && !covers(st.Stream, seq) {
				t.Fatalf("session %s stream %s: sequence %d never reached the Hub and no gap covers it (missing %d; gaps %+v)", session, st.Stream, seq, st.MissingSeqs, rec.Gaps)
			}
		}
	}
	var named int64
	for _, g := range rec.Gaps {
		if g.Session == sr.Session && g.Generation == sr.Generation && g.Kind == "capture_interrupted" && g.Reason == reason {
			if g.FromSeq < 1 || g.ToSeq < g.FromSeq {
				t.Fatalf("the %s gap names no sequence range: %+v", reason, g)
			}
			named += g.ToSeq - g.FromSeq + 1
		}
	}
	if named < int64(lost) {
		t.Fatalf("session %s: %d events lost, the Hub's %s gaps cover %d numbers: %+v", session, lost, reason, named, rec.Gaps)
	}
	return named
}

// The spool lock stays busy (another holder) while the intake cannot take
// an event: a prompt over the intake's 256 KiB bound, or an intake write
// that fails with ENOSPC. The hook waits for the lock, gives up and notes
// the loss under the session's target at receipt; the next holder
// publishes a capture_interrupted gap over sequences it reserves for the
// lost events, under that target, and the Hub shows it: every number it is
// missing is covered. On main the note had no target (a local-only gap the
// Hub never saw) and no sequence (the Hub showed missing 0).
func TestBusyLockLossesReachTheHub(t *testing.T) {
	big := strings.Repeat("x", 300<<10)
	for _, tc := range []struct {
		name, reason string
		detached     bool
		payload      func(f *burstFixture, session string, i int) string
		env          []string
	}{
		{"large prompt, agentscm-hook", "lock_timeout", true, func(f *burstFixture, s string, i int) string {
			return `{"session_id":"` + s + `","cwd":"` + f.root + `","hook_event_name":"UserPromptSubmit","prompt":"` + big + fmt.Sprint(i) + `"}`
		}, nil},
		{"large prompt, change-capture hook-claude", "lock_timeout", false, func(f *burstFixture, s string, i int) string {
			return `{"session_id":"` + s + `","cwd":"` + f.root + `","hook_event_name":"UserPromptSubmit","prompt":"` + big + fmt.Sprint(i) + `"}`
		}, nil},
		{"enospc, agentscm-hook", "no_space", true, func(f *burstFixture, s string, i int) string {
			return f.pre(s, fmt.Sprintf("toolu_lost_%d", i))
		}, []string{spool.FailpointEnv + "=intake=enospc"}},
		{"enospc, change-capture hook-claude", "no_space", false, func(f *burstFixture, s string, i int) string {
			return f.pre(s, fmt.Sprintf("toolu_lost_%d", i))
		}, []string{spool.FailpointEnv + "=intake=enospc"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newLossFixture(t, tc.detached, "--capture-mode", "local-conversation")
			session := "busy-lost"
			f.runHook(t, `{"session_id":"`+session+`","cwd":"`+f.root+`","hook_event_name":"SessionStart","source":"startup"}`)
			f.runHook(t, f.pre(session, "toolu_before"))
			f.settle(t)
			release := holdSpoolLock(t, f.spool)
			const lost = 3
			var wg sync.WaitGroup
			outs := make([]string, lost)
			for i := range lost {
				wg.Add(1)
				go func() {
					defer wg.Done()
					outs[i] = f.runHook(t, tc.payload(f, session, i), tc.env...)
				}()
			}
			wg.Wait()
			release()
			for _, out := range outs {
				if strings.Count(out, "\n") != 1 || !strings.Contains(out, "capture_interrupted") {
					t.Fatalf("a lost event warned %q, want one line naming the capture_interrupted gap to come", out)
				}
			}
			f.runHook(t, f.pre(session, "toolu_after"))
			f.settle(t)
			coveredHoles(t, f.hubRecord(t), session, tc.reason, lost)
		})
	}
}

// A PostToolUse whose PreToolUse was lost (here: ENOSPC on every write of
// its hook) under a Bash execution rule: the finish is recorded alone and
// the Hub lists the action as finish_without_start, beside the no_space gap
// of the lost Pre; on main the action vanished (the Hub's
// finish_without_start could never appear).
func TestFinishWithoutStartReachesTheHub(t *testing.T) {
	for _, detached := range []bool{true, false} {
		t.Run(fmt.Sprintf("detached=%v", detached), func(t *testing.T) {
			t.Parallel()
			f := newLossFixture(t, detached, "--action-rule", "Bash=execution:partial:process_exit_code")
			session := "orphan-finish"
			bash := func(event, id string) string {
				return `{"session_id":"` + session + `","cwd":"` + f.root + `","hook_event_name":"` + event + `","tool_name":"Bash","tool_use_id":"` + id +
					`","tool_input":{"command":"true"},"tool_response":{"stdout":"","stderr":"","interrupted":false}}`
			}
			f.runHook(t, `{"session_id":"`+session+`","cwd":"`+f.root+`","hook_event_name":"SessionStart","source":"startup"}`)
			if out := f.runHook(t, bash("PreToolUse", "toolu_lost"), spool.FailpointEnv+"=intake=enospc,append.envelope=enospc,append.gap=enospc"); !strings.Contains(out, "capture_interrupted") {
				t.Fatalf("the lost Pre warned %q", out)
			}
			if f.detached {
				f.waitDeliverer(t)
			}
			if out := f.runHook(t, bash("PostToolUse", "toolu_lost")); out != "" {
				t.Fatalf("the Post warned %q", out)
			}
			f.settle(t)
			rec := f.hubRecord(t)
			if len(rec.Actions) != 1 || rec.Actions[0].Status != "finish_without_start" || rec.Actions[0].Finish == nil || rec.Actions[0].Finish.Result != "unknown" {
				t.Fatalf("hub actions %+v", rec.Actions)
			}
			coveredHoles(t, rec, session, "no_space", 1)
		})
	}
}

// Record quotas: a spool at 60 records fills up with one session's events,
// then a second session starts. Every admission (the intake's included)
// keeps the spool within its limit, and every event the quota refused is
// named: after the limit is raised, the next hooks publish a
// capture_interrupted gap (record_limit) under each session's own target
// over the numbers it lost, so the Hub's holes are all covered. On main the
// second session's first events vanished with no gap anywhere (the one
// pause gap named the first session) and the intake let the spool run past
// its limit.
func TestQuotaLossesNamedPerSession(t *testing.T) {
	for _, detached := range []bool{true, false} {
		t.Run(fmt.Sprintf("detached=%v", detached), func(t *testing.T) {
			t.Parallel()
			f := newLossFixture(t, detached, "--max-records", "60")
			usage := func() int64 {
				t.Helper()
				rep, err := spool.Inspect(f.spool, 1)
				if err != nil {
					t.Fatal(err)
				}
				if rep.Usage.Records > 60 {
					t.Fatalf("the spool holds %d records, over its 60-record limit (%d in the intake)", rep.Usage.Records, rep.Intake)
				}
				return rep.Usage.Records
			}
			hook := func(payload string) {
				t.Helper()
				f.runHook(t, payload)
				if f.detached {
					f.waitDeliverer(t)
				}
				usage()
			}
			sent := map[string]int{}
			start := func(s string) {
				hook(`{"session_id":"` + s + `","cwd":"` + f.root + `","hook_event_name":"SessionStart","source":"startup"}`)
				sent[s]++
			}
			pre := func(s, id string) {
				hook(f.pre(s, id))
				sent[s]++
			}
			start("quota-a")
			for i := range 40 {
				pre("quota-a", fmt.Sprintf("toolu_a%d", i))
			}
			start("quota-b")
			for i := range 3 {
				pre("quota-b", fmt.Sprintf("toolu_b%d", i))
			}
			f.agentscm(t, "change-capture", "enable", "--root", f.root, "--max-records", "400")
			pre("quota-a", "toolu_a_after")
			pre("quota-b", "toolu_b_after")
			f.settle(t)
			rec := f.hubRecord(t)
			for _, s := range []string{"quota-a", "quota-b"} {
				var canonical string
				for _, sr := range rec.Sessions {
					for _, n := range sr.NativeSessionIDs {
						if n == s {
							canonical = sr.Session
						}
					}
				}
				held := 0
				for _, e := range rec.Events {
					if e.Session == canonical {
						held++
					}
				}
				if held == sent[s] {
					t.Fatalf("session %s: all %d events reached the Hub; the quota lost none", s, held)
				}
				coveredHoles(t, rec, s, "record_limit", sent[s]-held)
			}
		})
	}
}

// Capture turned off and on again in the middle of a session
// (unconfigure, then enable): the session's next event is preceded by a
// capture_interrupted gap with reason capture_disabled under its target,
// which the Hub receives; on main the record read as contiguous and never
// mentioned the window.
func TestCaptureDisabledWindowReachesTheHub(t *testing.T) {
	for _, detached := range []bool{true, false} {
		t.Run(fmt.Sprintf("detached=%v", detached), func(t *testing.T) {
			t.Parallel()
			f := newLossFixture(t, detached)
			session := "disabled-window"
			f.runHook(t, `{"session_id":"`+session+`","cwd":"`+f.root+`","hook_event_name":"SessionStart","source":"startup"}`)
			f.runHook(t, f.pre(session, "toolu_before"))
			f.settle(t)
			f.agentscm(t, "change-capture", "unconfigure", "--root", f.root)
			f.runHook(t, f.pre(session, "toolu_unobserved"))
			f.agentscm(t, "change-capture", "enable", "--root", f.root)
			f.runHook(t, f.pre(session, "toolu_after"))
			f.settle(t)
			rec := f.hubRecord(t)
			coveredHoles(t, rec, session, event.GapReasonCaptureDisabled, 1)
			for _, g := range rec.Gaps {
				if g.Reason == event.GapReasonCaptureDisabled && rec.Coverage.State == "complete" {
					t.Fatalf("coverage %+v with a capture_disabled gap", rec.Coverage)
				}
			}
		})
	}
}

// A spool at the 48-record floor, with the Hub reachable, on both paths of
// the agentscm-hook binary (inline delivery, detached deliverer): hooks fill it
// until capture pauses (record_limit), more events are lost while paused;
// the advice the quota gap gives, change-capture compact, works when
// followed, capture resumes, and the Hub's holes are all covered by the
// gaps naming the losses. On main gaps could spend the whole headroom, so
// acknowledgement and compaction were refused at the limit.
func TestFloorAdviceWorks(t *testing.T) {
	for _, detached := range []bool{false, true} {
		t.Run(fmt.Sprintf("detached=%v", detached), func(t *testing.T) {
			t.Parallel()
			floorAdviceWorks(t, detached)
		})
	}
}

func floorAdviceWorks(t *testing.T, detached bool) {
	f := newLossFixture(t, detached, "--max-records", "48", "--action-rule", "Bash=execution:partial:process_exit_code")
	hook := func(payload string) {
		t.Helper()
		f.runHook(t, payload)
		if f.detached {
			f.waitDeliverer(t)
		}
	}
	session := "floor"
	prompt := func(i int) string {
		return `{"session_id":"` + session + `","cwd":"` + f.root + `","hook_event_name":"UserPromptSubmit","prompt":"p` + fmt.Sprint(i) + `"}`
	}
	hook(`{"session_id":"` + session + `","cwd":"` + f.root + `","hook_event_name":"SessionStart","source":"startup"}`)
	paused := false
	for i := range 40 {
		hook(prompt(i))
		rep, err := spool.Inspect(f.spool, 1)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Usage.Records > 48 {
			t.Fatalf("%d records in a 48-record spool", rep.Usage.Records)
		}
		paused = paused || rep.Paused
	}
	if !paused {
		t.Fatal("capture never paused at the floor")
	}
	f.agentscm(t, "change-capture", "deliver", "--spool", f.spool)
	f.agentscm(t, "change-capture", "compact", "--spool", f.spool)
	for i := 40; i < 43; i++ {
		hook(prompt(i))
	}
	f.agentscm(t, "change-capture", "deliver", "--spool", f.spool)
	rec := f.hubRecord(t)
	held := 0
	for _, e := range rec.Events {
		if e.Kind == "prompt_submit" && e.Generation == rec.Sessions[0].Generation {
			held++
		}
	}
	if held == 43 || held < 3 {
		t.Fatalf("%d of 43 prompts on the Hub", held)
	}
	t.Logf("%d of 43 prompts on the Hub; session %+v; gaps %d", held, rec.Sessions[0], len(rec.Gaps))
	coveredHoles(t, rec, session, "record_limit", 1)
	// The last prompts came after the compaction: capture resumed.
	last := int64(0)
	for _, e := range rec.Events {
		last = max(last, e.Seq)
	}
	if last != rec.Sessions[0].LastSeq {
		t.Fatalf("last event seq %d, session last %d", last, rec.Sessions[0].LastSeq)
	}
}
