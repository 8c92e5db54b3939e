package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/agentscm/agentscm/internal/event"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/spool"
)

// The installed intake hook while another process holds the spool lock and
// the intake cannot take the event (a prompt over the intake's 256 KiB
// bound, an intake write failing with ENOSPC): it hands the event to
// agentscm-hook (exec), which waits for the lock, gives up and notes the
// loss under the session's target at receipt; the deliverer publishes a
// capture_interrupted gap over sequences reserved for it, and every number
// the Hub is missing is covered by a gap. On main the loss had no target
// and no sequence: the Hub never heard of it.
func TestIntakeHookBusyLockLossesReachTheHub(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and waits out the 10 s lock wait")
	}
	bin := build(t)
	intake := filepath.Join(bin, "agentscm-hook-intake")
	big := strings.Repeat("y", 300<<10)
	for _, tc := range []struct {
		name, reason, payload string
		env                   []string
	}{
		{"large prompt", "lock_timeout", `"hook_event_name":"UserPromptSubmit","prompt":"` + big + `"`, nil},
		{"enospc", "no_space", `"hook_event_name":"PreToolUse","tool_name":"Read","tool_use_id":"toolu_lost","tool_input":{"file_path":"/etc/hostname"}`,
			[]string{spool.FailpointEnv + "=intake=enospc"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, bin)
			f.agentscm(t, "change-capture", "set-mode", "--root", f.root, "--mode", "local-conversation")
			f.hook(t, intake, "toolu_before")
			f.waitDeliverer(t)
			lock, err := os.OpenFile(filepath.Join(f.spool, "spool.lock"), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(intake, "change-capture", "hook-claude")
			cmd.Env = append(f.env(), tc.env...)
			cmd.Stdin = strings.NewReader(`{"session_id":"intake-test","cwd":"` + f.root + `",` + tc.payload + `}`)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			err = cmd.Run()
			lock.Close()
			if err != nil || out.Len() > 0 || strings.Count(errb.String(), "\n") != 1 || !strings.Contains(errb.String(), "capture_interrupted") {
				t.Fatalf("lost event's hook: %v, stdout %q, stderr %q; want exit 0 and one line naming the gap to come", err, out.String(), errb.String())
			}
			f.hook(t, intake, "toolu_after")
			f.waitDeliverer(t)
			if _, _, undelivered := f.delivered(t); undelivered != 0 {
				f.hook(t, intake, "toolu_after2")
				f.waitDeliverer(t)
			}
			var rec api.ChangeRecord
			if err := json.Unmarshal([]byte(f.agentscm(t, "change-capture", "show", "--root", f.root, "--record")), &rec); err != nil {
				t.Fatal(err)
			}
			if len(rec.Sessions) != 1 || len(rec.Sessions[0].Streams) != 1 {
				t.Fatalf("sessions %+v", rec.Sessions)
			}
			st := rec.Sessions[0].Streams[0]
			held := map[int64]bool{}
			for _, e := range rec.Events {
				held[e.Seq] = true
			}
			named := 0
			for seq := int64(1); seq <= st.LastSeq; seq++ {
				covered := false
				for _, g := range rec.Gaps {
					if g.Kind == "capture_interrupted" && g.Stream == st.Stream && g.FromSeq <= seq && seq <= g.ToSeq {
						covered = true
						if g.Reason == tc.reason {
							named++
						}
					}
				}
				if !held[seq] && !covered {
					t.Fatalf("sequence %d never reached the Hub and no gap covers it: %+v", seq, rec.Gaps)
				}
			}
			if named != 1 || st.MissingSeqs != 1 {
				t.Fatalf("%d numbers named by a %s gap, %d missing; want the one lost event: %+v", named, tc.reason, st.MissingSeqs, rec.Gaps)
			}
		})
	}
}

// newLossFixture is newFixture with extra enable arguments (limits, no
// automatic compaction).
func newLossFixture(t *testing.T, bin string, enable ...string) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{bin: bin, root: filepath.Join(dir, "repo"), config: filepath.Join(dir, "config")}
	if err := os.MkdirAll(f.root, 0o755); err != nil {
		t.Fatal(err)
	}
	out := f.agentscm(t, append([]string{"change-capture", "enable", "--root", f.root, "--local", "--format", "json"}, enable...)...)
	var res struct {
		Spool string `json:"spool"`
	}
	if i := strings.IndexByte(out, '{'); i < 0 || json.Unmarshal([]byte(out[i:]), &res) != nil || res.Spool == "" {
		t.Fatalf("enable output: %s", out)
	}
	f.spool = res.Spool
	f.agentscm(t, "work", "start", "--root", f.root, "--title", "losses")
	t.Cleanup(func() { f.waitDeliverer(t) })
	return f
}

// run runs the installed intake hook (agentscm-hook-intake change-capture
// hook-claude) on one payload of session with extra environment, then
// waits for the deliverer it started; it fails the test unless the hook
// exited 0 with nothing on stdout, and returns its stderr.
func (f *fixture) run(t *testing.T, session, fields string, env ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(f.bin, "agentscm-hook-intake"), "change-capture", "hook-claude")
	cmd.Env = append(f.env(), env...)
	cmd.Stdin = strings.NewReader(`{"session_id":"` + session + `","cwd":"` + f.root + `",` + fields + `}`)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil || out.Len() > 0 {
		t.Fatalf("intake hook %s: %v, stdout %q, stderr %q", fields, err, out.String(), errb.String())
	}
	f.waitDeliverer(t)
	return errb.String()
}

// settle delivers what the deliverers left: `change-capture deliver`,
// then nothing may wait in the intake or be undelivered.
func (f *fixture) settle(t *testing.T) {
	t.Helper()
	f.waitDeliverer(t)
	f.agentscm(t, "change-capture", "deliver", "--spool", f.spool)
	if _, left, undelivered := f.delivered(t); left != 0 || undelivered != 0 {
		t.Fatalf("after deliver: %d intake files, %d undelivered envelopes", left, undelivered)
	}
}

func (f *fixture) hubRecord(t *testing.T) api.ChangeRecord {
	t.Helper()
	var rec api.ChangeRecord
	if err := json.Unmarshal([]byte(f.agentscm(t, "change-capture", "show", "--root", f.root, "--record")), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.EventsOmitted != 0 {
		t.Fatalf("the record omits %d events", rec.EventsOmitted)
	}
	return rec
}

func startFields() string { return `"hook_event_name":"SessionStart","source":"startup"` }

func readFields(id string) string {
	return `"hook_event_name":"PreToolUse","tool_name":"Read","tool_use_id":"` + id + `","tool_input":{"file_path":"/etc/hostname"}`
}

func promptFields(i int) string {
	return `"hook_event_name":"UserPromptSubmit","prompt":"p` + fmt.Sprint(i) + `"`
}

// namedHoles checks the Hub's account of one native session: every
// sequence number of each of its streams that the Hub does not hold is
// covered by a capture_interrupted gap of that stream under the session's
// own target (canonical session, generation), and the gaps with reason
// cover at least lost numbers. It returns how many numbers they cover.
func namedHoles(t *testing.T, rec api.ChangeRecord, session, reason string, lost int) int64 {
	t.Helper()
	var sr *api.SessionRecord
	for i := range rec.Sessions {
		if slices.Contains(rec.Sessions[i].NativeSessionIDs, session) {
			sr = &rec.Sessions[i]
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
	ours := func(g api.GapRecord) bool {
		return g.Session == sr.Session && g.Generation == sr.Generation && g.Kind == event.GapCaptureInterrupted
	}
	for _, st := range sr.Streams {
		for seq := int64(1); seq <= st.LastSeq; seq++ {
			covered := false
			for _, g := range rec.Gaps {
				covered = covered || ours(g) && g.Stream == st.Stream && g.FromSeq <= seq && seq <= g.ToSeq
			}
			if !held[st.Stream][seq] && !covered {
				t.Fatalf("session %s stream %s: number %d never reached the Hub and no gap covers it (missing %d; gaps %+v)", session, st.Stream, seq, st.MissingSeqs, rec.Gaps)
			}
		}
	}
	var named int64
	for _, g := range rec.Gaps {
		if ours(g) && g.Reason == reason {
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

// The installed intake hook with a PreToolUse whose every write fails
// (ENOSPC on the intake, then on the full binary's envelope and gap): the
// PostToolUse that follows is recorded alone and the Hub lists the action
// as finish_without_start, beside the no_space gap over the lost Pre's
// number.
func TestIntakeHookFinishWithoutStartReachesTheHub(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	f := newLossFixture(t, build(t))
	const s = "orphan-finish"
	bash := func(ev string) string {
		return `"hook_event_name":"` + ev + `","tool_name":"Bash","tool_use_id":"toolu_lost","tool_input":{"command":"true"},"tool_response":{"stdout":"","stderr":"","interrupted":false}`
	}
	f.run(t, s, startFields())
	if w := f.run(t, s, bash("PreToolUse"), spool.FailpointEnv+"=intake=enospc,append.envelope=enospc,append.gap=enospc"); strings.Count(w, "\n") != 1 || !strings.Contains(w, "capture_interrupted") {
		t.Fatalf("the lost Pre warned %q, want one line naming the gap to come", w)
	}
	if w := f.run(t, s, bash("PostToolUse")); w != "" {
		t.Fatalf("the Post warned %q", w)
	}
	f.settle(t)
	rec := f.hubRecord(t)
	if len(rec.Actions) != 1 || rec.Actions[0].Status != "finish_without_start" || rec.Actions[0].Finish == nil {
		t.Fatalf("hub actions %+v, want one finish_without_start", rec.Actions)
	}
	namedHoles(t, rec, s, "no_space", 1)
}

// Record quotas on the installed intake hook: a 60-record spool fills with
// one session's events, then a second session starts. The spool (intake
// included) never holds more than its limit, and after the limit is raised
// the Hub holds a record_limit gap under each session's own target over
// the numbers it lost: every missing number is covered.
func TestIntakeHookQuotaLossesNamedPerSession(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	f := newLossFixture(t, build(t), "--max-records", "60", "--no-auto-compact")
	sent := map[string]int{}
	hook := func(s, fields string) {
		t.Helper()
		f.run(t, s, fields)
		sent[s]++
		rep, err := spool.Inspect(f.spool, 1)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Usage.Records > 60 {
			t.Fatalf("the spool holds %d records, over its 60-record limit (%d in the intake)", rep.Usage.Records, rep.Intake)
		}
	}
	hook("quota-a", startFields())
	for i := range 40 {
		hook("quota-a", readFields(fmt.Sprintf("toolu_a%d", i)))
	}
	hook("quota-b", startFields())
	for i := range 3 {
		hook("quota-b", readFields(fmt.Sprintf("toolu_b%d", i)))
	}
	f.agentscm(t, "change-capture", "enable", "--root", f.root, "--max-records", "400")
	hook("quota-a", readFields("toolu_a_after"))
	hook("quota-b", readFields("toolu_b_after"))
	f.settle(t)
	rec := f.hubRecord(t)
	for _, s := range []string{"quota-a", "quota-b"} {
		held := 0
		for _, sr := range rec.Sessions {
			if !slices.Contains(sr.NativeSessionIDs, s) {
				continue
			}
			for _, e := range rec.Events {
				if e.Session == sr.Session {
					held++
				}
			}
		}
		if held == sent[s] {
			t.Fatalf("session %s: all %d events reached the Hub; the quota lost none", s, held)
		}
		namedHoles(t, rec, s, "record_limit", sent[s]-held)
	}
}

// Capture turned off and on again in the middle of a session (unconfigure,
// an event, enable) with the installed intake hook: the Hub receives a
// capture_interrupted gap with reason capture_disabled under the session's
// target, covering the number of the unobserved event.
func TestIntakeHookCaptureDisabledWindowReachesTheHub(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	f := newLossFixture(t, build(t))
	const s = "disabled-window"
	f.run(t, s, startFields())
	f.run(t, s, readFields("toolu_before"))
	f.settle(t)
	f.agentscm(t, "change-capture", "unconfigure", "--root", f.root)
	f.run(t, s, readFields("toolu_unobserved"))
	f.agentscm(t, "change-capture", "enable", "--root", f.root)
	f.run(t, s, readFields("toolu_after"))
	f.settle(t)
	rec := f.hubRecord(t)
	namedHoles(t, rec, s, event.GapReasonCaptureDisabled, 1)
	if rec.Coverage.State == "complete" {
		t.Fatalf("coverage %+v with a capture_disabled gap", rec.Coverage)
	}
}

// The installed intake hook on a spool at the 48-record floor: prompts
// fill it until capture pauses (record_limit), more are lost while
// paused; the hook's advice (change-capture compact on this spool), after
// delivery, works when followed,
// capture resumes, and every number the Hub misses is covered by a gap.
func TestIntakeHookFloorAdviceWorks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	f := newLossFixture(t, build(t), "--max-records", "48", "--no-auto-compact")
	const s = "floor"
	f.run(t, s, startFields())
	paused, advice := false, ""
	for i := range 40 {
		if w := f.run(t, s, promptFields(i)); advice == "" {
			if _, rest, ok := strings.Cut(w, "run agentscm change-capture compact --spool "); ok {
				advice, _, _ = strings.Cut(rest, ",")
			}
		}
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
	// The advice the hook gave, followed word for word (after delivery,
	// which the deliverer would do by itself).
	if advice != f.spool {
		t.Fatalf("no hook advised change-capture compact on this spool (advice %q)", advice)
	}
	f.agentscm(t, "change-capture", "deliver", "--spool", f.spool)
	f.agentscm(t, "change-capture", "compact", "--spool", advice)
	for i := 40; i < 43; i++ {
		f.run(t, s, promptFields(i))
	}
	f.settle(t)
	rec := f.hubRecord(t)
	held := 0
	for _, e := range rec.Events {
		if e.Kind == "prompt_submit" {
			held++
		}
	}
	if held == 43 || held < 3 {
		t.Fatalf("%d of 43 prompts on the Hub", held)
	}
	namedHoles(t, rec, s, "record_limit", 1)
	last := int64(0)
	for _, e := range rec.Events {
		last = max(last, e.Seq)
	}
	if last != rec.Sessions[0].LastSeq {
		t.Fatalf("last event seq %d, session last %d: capture did not resume after the compaction", last, rec.Sessions[0].LastSeq)
	}
}
