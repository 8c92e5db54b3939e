package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/spool"
)

// hubProc is a real `agentscm hub serve` on a loopback port, which the
// test can stop and start again on the same address.
type hubProc struct {
	bin, data, token, addr string
	env                    []string
	cmd                    *exec.Cmd
}

// startHub creates a Hub (one human, the repository "proj", a token) in a
// temporary directory and serves it on 127.0.0.1.
func startHub(t *testing.T, bin string) *hubProc {
	t.Helper()
	dir := t.TempDir()
	h := &hubProc{bin: bin, data: filepath.Join(dir, "hubdata"), token: filepath.Join(dir, "alice.token"), addr: "127.0.0.1:0",
		env: append(os.Environ(), "XDG_CONFIG_HOME="+filepath.Join(dir, "config"), "HOME="+dir)}
	for _, args := range [][]string{
		{"hub", "admin", "human", "create", "--data", h.data, "--name", "alice"},
		{"hub", "admin", "repository", "create", "--data", h.data, "--name", "proj"},
		{"hub", "admin", "token", "create", "--data", h.data, "--human", "alice", "--repository", "proj", "--output", h.token},
	} {
		cmd := exec.Command(filepath.Join(bin, "agentscm"), args...)
		cmd.Env = h.env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("agentscm %v: %v\n%s", args, err, out)
		}
	}
	h.start(t)
	t.Cleanup(h.stop)
	return h
}

func (h *hubProc) url() string { return "http://" + h.addr }

// start serves the Hub (again) on its address.
func (h *hubProc) start(t *testing.T) {
	t.Helper()
	cmd := exec.Command(filepath.Join(h.bin, "agentscm"), "hub", "serve", "--listen", h.addr, "--data", h.data)
	cmd.Env = h.env
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h.cmd = cmd
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		for sc.Scan() {
		}
	}()
	select {
	case l := <-line:
		addr, ok := strings.CutPrefix(l, "listening on http://")
		if !ok {
			t.Fatalf("hub serve: %q", l)
		}
		h.addr = addr
	case <-time.After(30 * time.Second):
		t.Fatal("hub serve did not start")
	}
}

// stop ends the Hub process (SIGTERM) and waits for it.
func (h *hubProc) stop() {
	if h.cmd == nil {
		return
	}
	h.cmd.Process.Signal(syscall.SIGTERM)
	h.cmd.Wait()
	h.cmd = nil
}

// hubFixture is a checkout connected to h, with capture enabled (the
// installed intake hook) and, when work, a current Work.
func hubFixture(t *testing.T, bin string, h *hubProc, enable bool) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{bin: bin, root: filepath.Join(dir, "repo"), config: filepath.Join(dir, "config")}
	if err := os.MkdirAll(f.root, 0o755); err != nil {
		t.Fatal(err)
	}
	f.agentscm(t, "client", "setup", "--root", f.root, "--hub", h.url(), "--repository", "proj", "--token-file", h.token)
	if !enable {
		return f
	}
	out := f.agentscm(t, "change-capture", "enable", "--root", f.root, "--format", "json")
	var res struct {
		Spool string `json:"spool"`
	}
	if i := strings.IndexByte(out, '{'); i < 0 || json.Unmarshal([]byte(out[i:]), &res) != nil || res.Spool == "" {
		t.Fatalf("enable output: %s", out)
	}
	f.spool = res.Spool
	t.Cleanup(func() { f.waitDeliverer(t) })
	return f
}

// send runs the installed intake hook on one payload of session, failing
// the test unless it exits 0 silently.
func (f *fixture) send(t *testing.T, session, payload string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(f.bin, "agentscm-hook-intake"), "change-capture", "hook-claude")
	cmd.Env = f.env()
	cmd.Stdin = strings.NewReader(`{"session_id":"` + session + `","cwd":"` + f.root + `",` + payload + `}`)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil || out.Len() > 0 || errb.Len() > 0 {
		t.Fatalf("hook %s: %v, stdout %q, stderr %q", payload, err, out.String(), errb.String())
	}
}

// toolCallsWarned is toolCalls for hooks that may warn (delivery pending
// while the Hub is down).
func (f *fixture) toolCallsWarned(t *testing.T, session, prefix string, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		id := fmt.Sprintf("toolu_%s%02d", prefix, i)
		in := `"tool_name":"Read","tool_use_id":"` + id + `","tool_input":{"file_path":"/etc/hostname"}`
		for _, p := range []string{`"hook_event_name":"PreToolUse",` + in, `"hook_event_name":"PostToolUse",` + in + `,"tool_response":{"ok":true}`} {
			cmd := exec.Command(filepath.Join(f.bin, "agentscm-hook-intake"), "change-capture", "hook-claude")
			cmd.Env = f.env()
			cmd.Stdin = strings.NewReader(`{"session_id":"` + session + `","cwd":"` + f.root + `",` + p + `}`)
			if out, err := cmd.Output(); err != nil || len(out) > 0 {
				t.Fatalf("hook %s: %v, stdout %q", p, err, out)
			}
		}
		f.waitDeliverer(t)
		ids = append(ids, id)
	}
	return ids
}

// toolCalls runs n tool calls (PreToolUse, PostToolUse) of session and
// returns their tool_use_ids.
func (f *fixture) toolCalls(t *testing.T, session, prefix string, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		id := fmt.Sprintf("toolu_%s%02d", prefix, i)
		in := `"tool_name":"Read","tool_use_id":"` + id + `","tool_input":{"file_path":"/etc/hostname"}`
		f.send(t, session, `"hook_event_name":"PreToolUse",`+in)
		f.send(t, session, `"hook_event_name":"PostToolUse",`+in+`,"tool_response":{"ok":true}`)
		ids = append(ids, id)
	}
	return ids
}

// holdDeliverLock takes the spool's deliver lock as a running deliverer
// holds it, so that the hooks leave their events in the intake (a
// deliverer that has not got to them yet); release lets it go.
func (f *fixture) holdDeliverLock(t *testing.T) (release func()) {
	t.Helper()
	sum := sha256.Sum256([]byte(f.spool))
	p := filepath.Join(f.config, "agentscm", "capture-ledger", hex.EncodeToString(sum[:8]), "deliver.lock")
	l, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(l.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		l.Close()
		t.Fatal(err)
	}
	return func() { l.Close() }
}

// deliver runs `change-capture deliver` once and returns its error (the
// Hub may be down).
func (f *fixture) deliver(t *testing.T) error {
	t.Helper()
	cmd := exec.Command(filepath.Join(f.bin, "agentscm"), "change-capture", "deliver", "--spool", f.spool)
	cmd.Env = f.env()
	out, err := cmd.CombinedOutput()
	t.Logf("deliver: %s", bytes.TrimSpace(out))
	return err
}

func (f *fixture) intakeFiles(t *testing.T) int {
	t.Helper()
	rep, err := spool.Inspect(f.spool, 1)
	if err != nil {
		t.Fatal(err)
	}
	return rep.Intake
}

// drain delivers until nothing waits in the intake and nothing
// deliverable is pending.
func (f *fixture) drain(t *testing.T) {
	t.Helper()
	f.waitDeliverer(t)
	if err := f.deliver(t); err != nil {
		t.Fatal(err)
	}
	if _, left, pending := f.delivered(t); left != 0 || pending != 0 {
		st, _ := exec.Command(filepath.Join(f.bin, "agentscm"), "change-capture", "status", "--spool", f.spool).CombinedOutput()
		t.Fatalf("%d intake files and %d undelivered envelopes left; change-capture status:\n%s", left, pending, st)
	}
}

func (f *fixture) startWork(t *testing.T) api.Work {
	t.Helper()
	var w api.Work
	if err := json.Unmarshal([]byte(f.agentscm(t, "work", "start", "--root", f.root, "--title", "receipt", "--format", "json")), &w); err != nil {
		t.Fatal(err)
	}
	return w
}

func (f *fixture) record(t *testing.T, work string) api.ChangeRecord {
	t.Helper()
	var rec api.ChangeRecord
	if err := json.Unmarshal([]byte(f.agentscm(t, "change-capture", "show", "--root", f.root, "--work-id", work, "--record")), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.EventsOmitted != 0 {
		t.Fatalf("the record omits %d events", rec.EventsOmitted)
	}
	return rec
}

// accounted checks the Hub's record of work against the spool: every
// record of a tool call in ids is on the Hub under generation gen (its own
// event), or is a deferred fact carrying its session's target at
// generation gen whose sequence lies inside a capture_interrupted gap of
// that target on the Hub; no event of ids is under another generation;
// and no sequence number of a session at gen below its last is missing
// without a gap. It returns how many of ids' records reached the Hub as
// events and how many as gaps.
func accounted(t *testing.T, f *fixture, rec api.ChangeRecord, gen int64, ids []string) (events, gapped int) {
	t.Helper()
	type key struct {
		session, stream string
	}
	type hubEvent struct {
		key
		gen int64
		seq int64
	}
	byID := map[string][]hubEvent{} // tool_use_id/kind -> Hub events
	held := map[key]map[int64]bool{}
	for _, e := range rec.Events {
		k := key{e.Session, e.Stream}
		byID[e.ToolUseID+"/"+e.Kind] = append(byID[e.ToolUseID+"/"+e.Kind], hubEvent{k, e.Generation, e.Seq})
		if e.Generation == gen {
			if held[k] == nil {
				held[k] = map[int64]bool{}
			}
			held[k][e.Seq] = true
		}
	}
	inGap := func(k key, seq int64) bool {
		for _, g := range rec.Gaps {
			if g.Generation == gen && g.Session == k.session && g.Stream == k.stream && g.Kind == event.GapCaptureInterrupted &&
				g.FromSeq <= seq && seq <= g.ToSeq {
				return true
			}
		}
		return false
	}
	sp, err := spool.OpenReadOnly(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := sp.Events()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	seen := 0
	for _, r := range recs {
		if !want[r.ToolUseID] || (r.Kind != event.ToolStart && r.Kind != event.ToolFinish) {
			continue
		}
		seen++
		on := byID[r.ToolUseID+"/"+string(r.Kind)]
		for _, e := range on {
			if e.gen != gen {
				t.Errorf("%s %s is on the Hub under generation %d, not %d", r.Kind, r.ToolUseID, e.gen, gen)
			}
		}
		switch {
		case len(on) == 1 && on[0].gen == gen:
			events++
		case len(on) > 1:
			t.Errorf("%s %s is on the Hub %d times", r.Kind, r.ToolUseID, len(on))
		case r.WorkID == "" || r.Association == "unassociated":
			t.Errorf("%s %s is not on the Hub and stayed unassociated (deferred %v, reason %q)", r.Kind, r.ToolUseID, r.Deferred, r.DeferredReason)
		case r.Generation != gen:
			t.Errorf("%s %s is not on the Hub and carries generation %d, not %d", r.Kind, r.ToolUseID, r.Generation, gen)
		case !inGap(key{r.CanonicalSession, r.Stream}, int64(r.SharedSeq)):
			t.Errorf("%s %s (%s, seq %d) is neither on the Hub nor inside a capture_interrupted gap of generation %d", r.Kind, r.ToolUseID, r.Association, r.SharedSeq, gen)
		default:
			gapped++
		}
	}
	if seen != 2*len(ids) {
		t.Errorf("the spool holds %d records of the %d tool calls, want %d", seen, len(ids), 2*len(ids))
	}
	for _, s := range rec.Sessions {
		if s.Generation != gen {
			continue
		}
		for _, st := range s.Streams {
			k := key{s.Session, st.Stream}
			for seq := int64(1); seq <= st.LastSeq; seq++ {
				if !held[k][seq] && !inGap(k, seq) {
					t.Errorf("session %s (stream %s) at generation %d misses number %d without a gap", s.Session, st.Stream, gen, seq)
				}
			}
		}
	}
	return events, gapped
}

// Events received while the Hub was up and still waiting in the intake
// when it goes down (their deliverer had not got to them) keep the target
// they were received under: admitted while the Hub is down, they reach
// the Hub under that target once it is back; none becomes a local-only
// fact, and no number is missing without a gap.
func TestIntakeOutageKeepsTargetAtReceipt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and runs a Hub")
	}
	bin := build(t)
	h := startHub(t, bin)
	f := hubFixture(t, bin, h, true)
	w := f.startWork(t)
	const s = "outage-session"
	f.send(t, s, `"hook_event_name":"SessionStart","source":"startup"`)
	f.send(t, s, `"hook_event_name":"UserPromptSubmit","prompt":"read it"`)
	f.drain(t)

	release := f.holdDeliverLock(t)
	ids := f.toolCalls(t, s, "o", 6)
	// A session none of whose events resolved yet has no target at
	// receipt: with the Hub down its file waits in the intake (admitted
	// then, it would stay unassociated for good) and is delivered under
	// the Work once the Hub is back.
	const fresh = "fresh-session"
	f.send(t, fresh, `"hook_event_name":"UserPromptSubmit","prompt":"hello"`)
	if n := f.intakeFiles(t); n != 2*len(ids)+1 {
		t.Fatalf("%d intake files wait, want %d", n, 2*len(ids)+1)
	}
	h.stop()
	release()
	// Each run admits within its budget, then fails on the Hub: run it
	// until only the fresh session's file waits.
	for i := 0; f.intakeFiles(t) != 1; i++ {
		if i == 10 {
			t.Fatalf("%d intake files left after admission with the Hub down, want the fresh session's 1", f.intakeFiles(t))
		}
		if err := f.deliver(t); err == nil {
			t.Log("deliver with the Hub down exited 0")
		}
	}
	// Received while the Hub is known to be down (the last deliverer
	// failed): no exact target at receipt, a deferred fact copying the
	// session's target, made visible by the next hook that reaches the
	// Hub (the seed's outage).
	down := f.toolCallsWarned(t, s, "down", 1)
	h.start(t)
	after := f.toolCallsWarned(t, s, "after", 1)
	f.waitDeliverer(t)
	if err := f.deliver(t); err != nil {
		t.Fatal(err)
	}

	events, gapped := accounted(t, f, f.record(t, w.ID), 1, append(append(append([]string(nil), ids...), down...), after...))
	t.Logf("%d records delivered as events, %d inside gaps", events, gapped)
	if events != 2*len(ids)+2*len(after) || gapped != 2*len(down) {
		t.Errorf("%d records reached the Hub as events, %d inside gaps; want the %d received before the outage and the %d after it as events, the %d received during it in a gap",
			events, gapped, 2*len(ids), 2*len(after), 2*len(down))
	}
	dep, err := capture.ListDeferred(f.spool, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, fact := range dep.Facts {
		if !strings.HasPrefix(fact.ToolUseID, "toolu_down") {
			t.Errorf("deferred fact of session %s: %+v", fact.Session, fact)
		}
	}
	sp, err := spool.OpenReadOnly(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := sp.Events()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.SessionID == fresh && r.Kind == event.PromptSubmit && (r.Deferred || r.Association != capture.AssocExact || r.WorkID != w.ID) {
			t.Errorf("the fresh session's prompt: deferred %v, association %q, work %q; want it under the Work %s",
				r.Deferred, r.Association, r.WorkID, w.ID)
		}
	}
}

// Checkout A makes three tool calls at generation 1 and checkout B takes
// the Work over 0.3 s later, before A's deliverer admitted them (and so
// does a brand-new session of A, none of whose events resolved before the
// takeover: it is held to the checkout's generation at receipt): they are
// accounted for under generation 1 (a capture_interrupted gap carrying
// A's exact target there, since the Hub keeps no events of an older
// generation), never under a later generation and never unassociated; so
// is an event A receives after the takeover, before it learns of it. With
// A taking the Work back (generation 3) before its deliverer runs, the
// later generation, which now resolves for A's session, absorbs none of
// them either.
func TestIntakeTakeoverKeepsGenerationAtReceipt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and runs a Hub")
	}
	bin := build(t)
	for _, back := range []bool{false, true} {
		t.Run(fmt.Sprintf("back=%v", back), func(t *testing.T) {
			h := startHub(t, bin)
			a := hubFixture(t, bin, h, true)
			b := hubFixture(t, bin, h, false)
			w := a.startWork(t)
			const s = "takeover-session"
			a.send(t, s, `"hook_event_name":"SessionStart","source":"startup"`)
			a.send(t, s, `"hook_event_name":"UserPromptSubmit","prompt":"read it"`)
			a.drain(t)

			release := a.holdDeliverLock(t)
			ids := a.toolCalls(t, s, "t", 3)
			// A brand-new session's first events, received at generation
			// 1 before any of them resolved: the checkout's target at
			// receipt holds them to generation 1 too.
			const fresh = "takeover-fresh"
			a.send(t, fresh, `"hook_event_name":"SessionStart","source":"startup"`)
			a.send(t, fresh, `"hook_event_name":"UserPromptSubmit","prompt":"go"`)
			freshIDs := a.toolCalls(t, fresh, "f", 2)
			time.Sleep(300 * time.Millisecond)
			takeover(t, b, w.ID, 2)
			ids = append(ids, a.toolCalls(t, s, "late", 1)...)
			if back {
				takeover(t, a, w.ID, 3)
			}
			release()
			if err := a.deliver(t); err != nil {
				t.Fatal(err)
			}
			a.waitDeliverer(t)
			if n := a.intakeFiles(t); n != 0 {
				t.Fatalf("%d intake files left", n)
			}
			rec := a.record(t, w.ID)
			events, gapped := accounted(t, a, rec, 1, ids)
			t.Logf("%d records delivered as events, %d inside gaps under generation 1", events, gapped)
			if gapped != 2*len(ids) {
				t.Errorf("%d of %d records are inside a gap under generation 1", gapped, 2*len(ids))
			}
			if events, gapped := accounted(t, a, rec, 1, freshIDs); gapped != 2*len(freshIDs) {
				t.Errorf("the brand-new session: %d of %d records inside a gap under generation 1 (%d events)", gapped, 2*len(freshIDs), events)
			}
			if back {
				// Generation 3 resolves for the fresh session now: it holds
				// nothing the session did before the takeover.
				for _, se := range rec.Sessions {
					if se.Generation != 1 && se.Events > 0 {
						t.Errorf("session %s at generation %d holds %d events", se.Session, se.Generation, se.Events)
					}
				}
			}
			for _, e := range rec.Events {
				if e.Generation != 1 {
					t.Errorf("event %s %s under generation %d", e.Kind, e.ToolUseID, e.Generation)
				}
			}
			dep, err := capture.ListDeferred(a.spool, 1000)
			if err != nil {
				t.Fatal(err)
			}
			for _, fact := range dep.Facts {
				if fact.Association != "copied" || fact.Target == nil || fact.Target.Generation != 1 {
					t.Errorf("deferred fact %+v does not carry generation 1", fact)
				}
			}
		})
	}
}

// takeover runs `work takeover` of work from c's checkout and checks the
// generation it won.
func takeover(t *testing.T, c *fixture, work string, gen int64) {
	t.Helper()
	var tw api.Work
	if err := json.Unmarshal([]byte(c.agentscm(t, "work", "takeover", "--root", c.root, "--work-id", work, "--format", "json")), &tw); err != nil || tw.Generation != gen {
		t.Fatalf("takeover: %+v %v, want generation %d", tw, err, gen)
	}
}

// A checkout starts a new Work while one of its sessions runs, with the
// session's earlier events still in the intake: each event goes to the
// Work that was current when the hook received it (the first Work is
// still active and takes its own), not to the one current at admission;
// an event received after the start goes to the new Work.
func TestIntakeWorkStartSplitsAtReceipt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and runs a Hub")
	}
	bin := build(t)
	h := startHub(t, bin)
	f := hubFixture(t, bin, h, true)
	w1 := f.startWork(t)
	const s = "switch-session"
	f.send(t, s, `"hook_event_name":"SessionStart","source":"startup"`)
	f.drain(t)

	release := f.holdDeliverLock(t)
	before := f.toolCalls(t, s, "w1_", 2)
	w2 := f.startWork(t)
	after := f.toolCalls(t, s, "w2_", 1)
	release()
	if err := f.deliver(t); err != nil {
		t.Fatal(err)
	}
	f.waitDeliverer(t)
	if _, left, pending := f.delivered(t); left != 0 || pending != 0 {
		st, _ := exec.Command(filepath.Join(f.bin, "agentscm"), "change-capture", "status", "--spool", f.spool).CombinedOutput()
		t.Fatalf("%d intake files and %d undelivered envelopes left; change-capture status:\n%s", left, pending, st)
	}
	for _, c := range []struct {
		work api.Work
		ids  []string
	}{{w1, before}, {w2, after}} {
		rec := f.record(t, c.work.ID)
		if events, gapped := accounted(t, f, rec, 1, c.ids); events != 2*len(c.ids) {
			t.Errorf("work %s: %d of %d records delivered as events (%d in gaps)", c.work.ID, events, 2*len(c.ids), gapped)
		}
		want := map[string]bool{}
		for _, id := range c.ids {
			want[id] = true
		}
		for _, e := range rec.Events {
			if e.ToolUseID != "" && !want[e.ToolUseID] {
				t.Errorf("work %s holds %s %s, received under the other Work", c.work.ID, e.Kind, e.ToolUseID)
			}
		}
	}
}

// hookWarned runs the binary exe of bin (agentscm-hook or
// agentscm-hook-intake) with args on one payload of session, failing the
// test unless it exits 0 with nothing on stdout and at most one warning
// line on stderr (delivery may be pending while the Hub is down), which it
// returns.
func (f *fixture) hookWarned(t *testing.T, exe string, args []string, session, payload string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(f.bin, exe), args...)
	cmd.Env = f.env()
	cmd.Stdin = strings.NewReader(`{"session_id":"` + session + `","cwd":"` + f.root + `",` + payload + `}`)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil || out.Len() > 0 || strings.Count(errb.String(), "\n") > 1 {
		t.Fatalf("%s %v %s: %v, stdout %q, stderr %q", exe, args, payload, err, out.String(), errb.String())
	}
	return errb.String()
}

// hooks runs n intake hooks at once (eight at a time), the i-th on
// payload(i), failing the test unless each exits 0 silently.
func (f *fixture) hooks(t *testing.T, n int, payload func(i int) string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 8)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			cmd := exec.Command(filepath.Join(f.bin, "agentscm-hook-intake"), "change-capture", "hook-claude")
			cmd.Env = f.env()
			cmd.Stdin = strings.NewReader(payload(i))
			if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
				errs <- fmt.Errorf("hook %d: %v %s", i, err, out)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// A hook that admits itself (the locked path: Codex and Gemini hooks, and
// the intake hook past its backpressure bound, which hands the event to
// agentscm-hook) keeps a brand-new session's events during a Hub outage as
// the deliverer's admission does: they wait in the intake instead of
// becoming unassociated deferred facts for good, and once the Hub is back
// they are delivered under the Work, nothing of the session deferred.
func TestLockedPathNewSessionDuringOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and runs a Hub")
	}
	bin := build(t)
	newSessionEvents := func(tool string) []string {
		in := `"tool_name":"Bash","tool_use_id":"` + tool + `","tool_input":{"command":"true"}`
		return []string{
			`"hook_event_name":"SessionStart","source":"startup"`,
			`"hook_event_name":"PreToolUse",` + in,
			`"hook_event_name":"PostToolUse",` + in + `,"tool_response":{"exit_code":0}`,
		}
	}
	for _, c := range []struct {
		name string
		exe  string
		args []string
		// backpressure: the new session's events arrive with more than
		// capture.BackgroundPendingBackpressure envelopes pending (the
		// outage's backlog), so the intake hook takes the locked path.
		backpressure bool
	}{
		{"codex", "agentscm-hook", []string{"change-capture", "hook-codex"}, false},
		{"backpressure", "agentscm-hook-intake", []string{"change-capture", "hook-claude"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := startHub(t, bin)
			f := hubFixture(t, bin, h, true)
			w := f.startWork(t)
			const old, fresh = "locked-old", "locked-new"
			f.send(t, old, `"hook_event_name":"SessionStart","source":"startup"`)
			f.drain(t)
			if c.backpressure {
				// A session with a target runs Bash calls (two envelopes
				// each, the event and its action start) while the Hub is
				// up; they are admitted while it is down, in batches that
				// stay under the intake's own backpressure bound.
				const batch = capture.BackgroundIntakeBackpressure - 16
				for b := 0; ; b++ {
					rep, err := spool.Inspect(f.spool, 1)
					if err != nil {
						t.Fatal(err)
					}
					if rep.Pending.Total > capture.BackgroundPendingBackpressure {
						t.Logf("%d envelopes pending after %d batches", rep.Pending.Total, b)
						break
					}
					if h.cmd == nil {
						h.start(t)
					}
					release := f.holdDeliverLock(t)
					f.hooks(t, batch, func(i int) string {
						return fmt.Sprintf(`{"session_id":"%s","cwd":"%s","hook_event_name":"PreToolUse","tool_name":"Bash","tool_use_id":"toolu_fill%d_%03d","tool_input":{"command":"true"}}`, old, f.root, b, i)
					})
					h.stop()
					release()
					for i := 0; f.intakeFiles(t) > 0; i++ {
						if i == 100 {
							t.Fatalf("%d intake files left", f.intakeFiles(t))
						}
						f.waitDeliverer(t)
						_ = f.deliver(t)
					}
				}
			}
			h.stop()
			for _, p := range newSessionEvents("toolu_locked") {
				// Past the backpressure bound the hook says its event waits
				// for the Hub: only the locked path's hold says so (an
				// intake-first hook would name the last delivery attempt).
				// Codex hooks took the locked path until the one hook
				// pipeline moved them to the intake: either way nothing of
				// the session may become a deferred fact.
				if warn := f.hookWarned(t, c.exe, c.args, fresh, p); c.backpressure && !strings.Contains(warn, "could not resolve the new session") {
					t.Errorf("%s: the hook's warning %q", p, warn)
				}
			}
			if dep, err := capture.ListDeferred(f.spool, 1000); err != nil {
				t.Fatal(err)
			} else {
				for _, fact := range dep.Facts {
					if fact.Session == fresh {
						t.Errorf("during the outage the new session's %s became a deferred fact (%s)", fact.Kind, fact.Association)
					}
				}
			}
			h.start(t)
			// The Hub is back: the next hook (here another session's; a
			// Codex hook admits what waits) and the deliverer admit the
			// held events under the Work.
			f.hookWarned(t, c.exe, c.args, old, `"hook_event_name":"Stop"`)
			// Each deliver run is bounded: run it while it makes progress.
			for last, stuck := -1, 0; ; {
				f.waitDeliverer(t)
				err := f.deliver(t)
				rep, ierr := spool.Inspect(f.spool, 1)
				if ierr != nil {
					t.Fatal(ierr)
				}
				// The filler session's events received during the known
				// outage stay deferred facts (named by an outage gap): not
				// pending.
				left, pending := rep.Intake, rep.Pending.Total
				if left == 0 && pending == 0 && err == nil {
					break
				}
				if left+pending == last {
					stuck++
				}
				if stuck == 3 {
					t.Fatalf("%d intake files and %d undelivered envelopes left (%v)", left, pending, err)
				}
				last = left + pending
			}
			sp, err := spool.OpenReadOnly(f.spool)
			if err != nil {
				t.Fatal(err)
			}
			recs, err := sp.Events()
			if err != nil {
				t.Fatal(err)
			}
			kinds := map[event.Kind]bool{}
			for _, r := range recs {
				if r.SessionID != fresh || (r.Kind != event.SessionStart && r.Kind != event.ToolStart && r.Kind != event.ToolFinish) {
					continue
				}
				kinds[r.Kind] = true
				if r.Deferred || r.Association != capture.AssocExact || r.WorkID != w.ID {
					t.Errorf("the new session's %s: deferred %v (%s), association %q, work %q; want it under the Work %s",
						r.Kind, r.Deferred, r.DeferredReason, r.Association, r.WorkID, w.ID)
				}
			}
			if !kinds[event.SessionStart] || !kinds[event.ToolStart] || !kinds[event.ToolFinish] {
				t.Errorf("the new session's records in the spool: %v", kinds)
			}
			onHub := 0
			for _, e := range f.record(t, w.ID).Events {
				if e.ToolUseID == "toolu_locked" {
					onHub++
				}
			}
			if onHub != 2 {
				t.Errorf("%d of the new session's tool events on the Hub, want 2", onHub)
			}
		})
	}
}
