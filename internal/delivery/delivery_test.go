package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/action"
	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/connections"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/spool"
)

type fixture struct {
	cfg   string
	root  string
	store capture.StateDir
	conn  connections.Connection
	spool string
}

// newFixture connects a checkout to the embedded Hub and enables capture,
// all through the real code paths.
func newFixture(t testing.TB) *fixture {
	t.Helper()
	return newFixtureWith(t, func(*binding.EnableOptions) {})
}

// newFixtureWith is newFixture with the enable options changed by mod
// (smaller limits, a compaction policy).
func newFixtureWith(t testing.TB, mod func(*binding.EnableOptions)) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{cfg: filepath.Join(dir, "cfg", "agentscm"), root: filepath.Join(dir, "repo")}
	os.MkdirAll(f.root, 0o755)
	f.root, _ = filepath.EvalSymlinks(f.root)
	f.store = capture.StateDir{Dir: f.cfg}
	ctx := context.Background()
	c, _, err := client.SetupLocal(ctx, f.cfg, f.root, "demo", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	f.conn = c
	opts := binding.EnableOptions{Root: f.root, ConfigDir: f.cfg, Executable: "/usr/local/bin/agentscm", Now: time.Now()}
	mod(&opts)
	res, err := binding.EnableCapture(ctx, f.store, Connections{f.cfg}, opts)
	if err != nil {
		t.Fatal(err)
	}
	f.spool = res.Spool
	return f
}

func (f *fixture) startWork(t testing.TB) string {
	t.Helper()
	conn, err := client.Open(context.Background(), f.conn, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	w, err := conn.StartWork(context.Background(), api.StartWorkRequest{Title: "t", WorktreeID: f.conn.WorktreeID})
	if err != nil {
		t.Fatal(err)
	}
	return w.ID
}

func (f *fixture) hook(t *testing.T, payload string) *capture.HookResult {
	t.Helper()
	res, err := capture.HandleClaudeHook(context.Background(), f.store, Opener{f.cfg}, strings.NewReader(payload), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (f *fixture) payload(event, extra string) string {
	return `{"session_id":"native-1","cwd":"` + f.root + `","hook_event_name":"` + event + `"` + extra + `}`
}

func (f *fixture) record(t *testing.T, work string) api.ChangeRecord {
	t.Helper()
	conn, err := client.Open(context.Background(), f.conn, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r, err := conn.Record(context.Background(), work)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestDeferredThenDelivered(t *testing.T) {
	f := newFixture(t)
	// No Work yet: sanitized deferred facts, unassociated, never delivered.
	// The session's first observed event is not a startup SessionStart:
	// one adapter_started_late gap precedes it, then the prompt's
	// identity_uncertain gap; all deferred.
	r := f.hook(t, f.payload("UserPromptSubmit", `,"prompt":"secret"`))
	if !r.Deferred || r.Seq != 2 || r.Delivered != 0 {
		t.Fatalf("before any Work: %+v", r)
	}
	work := f.startWork(t)
	// One-step setup's default rule makes Bash an action: the late-start
	// gap, the tool event and the action start are delivered.
	r = f.hook(t, f.payload("PreToolUse", `,"tool_name":"Bash","tool_use_id":"toolu_9","tool_input":{"command":"false"}`))
	if r.Deferred || r.Delivered != 3 || r.Failed != 0 || r.Claim != "new" || r.Action != action.Started {
		t.Fatalf("with a Work: %+v", r)
	}
	r = f.hook(t, f.payload("PostToolUseFailure", `,"tool_name":"Bash","tool_use_id":"toolu_9","tool_input":{"command":"false"},"error":"Exit code 3"`))
	if r.Delivered != 2 || r.Action != action.Finished {
		t.Fatalf("finish: %+v", r)
	}
	rec := f.record(t, work)
	// The target's own stream starts at 1: the unassociated facts are not
	// in it, and the late start under this target is an explicit gap.
	if len(rec.Events) != 2 || rec.Events[0].Seq != 1 || rec.Events[1].Seq != 2 || rec.Events[1].Outcome != event.OutcomeFailed {
		t.Fatalf("record events %+v", rec.Events)
	}
	if len(rec.Actions) != 1 || rec.Actions[0].Status != "complete" || rec.Actions[0].Finish.Result != "failed" {
		t.Fatalf("record actions %+v", rec.Actions)
	}
	if rec.Sessions[0].MissingSeqs != 0 || rec.Coverage.State == "complete" || len(rec.Gaps) != 1 ||
		rec.Gaps[0].Kind != event.GapAdapterStartedLate || rec.Gaps[0].Reason != "unassociated_before_target" {
		t.Fatalf("record: %+v %+v %+v", rec.Sessions, rec.Coverage, rec.Gaps)
	}
	sp, err := spool.Open(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := sp.Events()
	if len(recs) != 8 || !recs[0].Deferred || recs[0].Kind != event.KindGap || !recs[1].Deferred || recs[1].Body != nil ||
		recs[1].Association != capture.AssocUnassociated || recs[1].SharedSeq != 1 || recs[1].WorkID != "" {
		t.Fatalf("spool records %+v", recs)
	}
	// A session first seen through a tool call records its late start as a
	// Hub gap, once.
	p2 := `{"session_id":"native-2","cwd":"` + f.root + `","hook_event_name":"PreToolUse","tool_name":"Bash","tool_use_id":"toolu_n2"}`
	r = f.hook(t, p2)
	if r.Delivered != 3 {
		t.Fatalf("late session: %+v", r)
	}
	rec = f.record(t, work)
	if len(rec.Gaps) != 2 || gapFor(rec, "native-2").Kind != event.GapAdapterStartedLate || gapFor(rec, "native-2").Reason != "first_event_PreToolUse" {
		t.Fatalf("gaps %+v", rec.Gaps)
	}
}

func gapFor(rec api.ChangeRecord, session string) api.Gap {
	for _, g := range rec.Gaps {
		if g.Session == session {
			return g.Gap
		}
	}
	return api.Gap{}
}

// session runs one whole native session through the hook.
func (f *fixture) session(t *testing.T, native string) {
	t.Helper()
	p := func(ev, extra string) string {
		return `{"session_id":"` + native + `","cwd":"` + f.root + `","hook_event_name":"` + ev + `"` + extra + `}`
	}
	for _, pl := range []string{
		p("SessionStart", `,"source":"startup"`),
		p("PreToolUse", `,"tool_name":"Bash","tool_use_id":"tu-`+native+`","tool_input":{"command":"true"}`),
		p("PostToolUse", `,"tool_name":"Bash","tool_use_id":"tu-`+native+`","tool_input":{"command":"true"},"tool_response":{"stdout":""}`),
		p("SubagentStart", `,"agent_id":"ag-`+native+`"`),
		p("SubagentStop", `,"agent_id":"ag-`+native+`"`),
		p("Stop", ""),
		p("SessionEnd", `,"reason":"prompt_input_exit"`),
	} {
		if r := f.hook(t, pl); r.Failed != 0 || r.Deferred {
			t.Fatalf("%s: %+v", pl, r)
		}
	}
}

// TestTwoSessionsOneSpoolSequences: each canonical session has its own
// shared sequence starting at 1, so a second native session in the same
// spool shows no missing sequence numbers on the Hub.
func TestTwoSessionsOneSpoolSequences(t *testing.T) {
	f := newFixture(t)
	work := f.startWork(t)
	f.session(t, "native-a")
	f.session(t, "native-b")
	rec := f.record(t, work)
	if len(rec.Sessions) != 2 {
		t.Fatalf("sessions %+v", rec.Sessions)
	}
	for _, s := range rec.Sessions {
		if s.Events != 7 || s.FirstSeq != 1 || s.LastSeq != 7 || s.MissingSeqs != 0 {
			t.Fatalf("session %+v", s)
		}
	}
	// The only coverage reason left is the SessionEnds' identity_uncertain
	// gaps (the host gives SessionEnd no identity); the identified events
	// and the informational markers record none.
	if len(rec.Gaps) != 2 || rec.Gaps[0].Kind != event.GapIdentityUncertain || rec.Gaps[0].FromSeq != 7 || rec.Gaps[0].ToSeq != 7 {
		t.Fatalf("gaps %+v", rec.Gaps)
	}
	if len(rec.Coverage.Reasons) != 1 || rec.Coverage.Reasons[0] != "2 identity_uncertain gaps" {
		t.Fatalf("coverage %+v", rec.Coverage)
	}
}

// TestRetriedHooks: an exact re-run of an identified hook (even after the
// original was acknowledged and compacted) appends nothing and the Hub
// holds one event; a changed fact under the same identity is a conflict
// and appends nothing; a repeated prompt is kept twice, each with an
// identity_uncertain gap.
func TestRetriedHooks(t *testing.T) {
	f := newFixture(t)
	work := f.startWork(t)
	start := f.payload("SessionStart", `,"source":"startup"`)
	pre := f.payload("PreToolUse", `,"tool_name":"Write","tool_use_id":"toolu_1","tool_input":{"file_path":"/x","content":"a"}`)
	f.hook(t, start)
	f.hook(t, pre)
	sp, err := spool.Open(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := sp.Events()
	// Same payload with its keys reordered and a later receipt time.
	again := f.payload("PreToolUse", `,"tool_input":{"content":"a","file_path":"/x"},"tool_name":"Write","tool_use_id":"toolu_1"`)
	res, err := capture.HandleClaudeHook(context.Background(), f.store, Opener{f.cfg}, strings.NewReader(again), time.Now().Add(time.Hour))
	if err != nil || !res.Duplicate || res.Claim != "duplicate" || res.Seq != 0 {
		t.Fatalf("retry: %+v %v", res, err)
	}
	if r := f.hook(t, start); !r.Duplicate {
		t.Fatalf("startup SessionStart retry: %+v", r)
	}
	if _, err := sp.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := f.hook(t, pre); !r.Duplicate {
		t.Fatalf("retry after compaction: %+v", r)
	}
	changed := f.payload("PreToolUse", `,"tool_name":"Write","tool_use_id":"toolu_1","tool_input":{"file_path":"/x","content":"b"}`)
	res, err = capture.HandleClaudeHook(context.Background(), f.store, Opener{f.cfg}, strings.NewReader(changed), time.Now())
	if !errors.Is(err, capture.ErrOccurrenceConflict) || res == nil || res.Claim != "conflict" || res.Seq != 0 {
		t.Fatalf("changed input: %+v %v", res, err)
	}
	sp2, _ := spool.Open(f.spool)
	after, _ := sp2.Events()
	var n int
	for _, r := range after {
		if r.Kind == event.ToolStart {
			n++
		}
	}
	if n > 1 || len(after) > len(before) {
		t.Fatalf("retries appended records: %d before, %d after", len(before), len(after))
	}
	prompt := f.payload("UserPromptSubmit", `,"prompt":"same"`)
	f.hook(t, prompt)
	f.hook(t, prompt)
	rec := f.record(t, work)
	var starts, prompts int
	for _, e := range rec.Events {
		switch e.Kind {
		case "tool_start":
			starts++
		case "prompt_submit":
			prompts++
		}
	}
	if starts != 1 || prompts != 2 || len(rec.Events) != 4 || rec.Sessions[0].MissingSeqs != 0 {
		t.Fatalf("events %+v sessions %+v", rec.Events, rec.Sessions)
	}
	sort.Slice(rec.Gaps, func(i, j int) bool { return rec.Gaps[i].FromSeq < rec.Gaps[j].FromSeq })
	if len(rec.Gaps) != 2 || rec.Gaps[0].Kind != event.GapIdentityUncertain || rec.Gaps[0].FromSeq != 3 || rec.Gaps[1].FromSeq != 4 {
		t.Fatalf("gaps %+v", rec.Gaps)
	}
}

func TestNoConnectionCapturesNothing(t *testing.T) {
	f := newFixture(t)
	if _, err := connections.Remove(f.cfg, f.root); err != nil {
		t.Fatal(err)
	}
	r := f.hook(t, f.payload("SessionStart", `,"source":"startup"`))
	if !r.Ignored || !strings.Contains(r.Reason, "no client connection") {
		t.Fatalf("%+v", r)
	}
	sp, _ := spool.Open(f.spool)
	if recs, _ := sp.Events(); len(recs) != 0 {
		t.Fatalf("captured %d records without a connection", len(recs))
	}
}

func TestReconnectedCheckoutCapturesNothing(t *testing.T) {
	f := newFixture(t)
	if _, _, err := client.SetupLocal(context.Background(), f.cfg, f.root, "elsewhere", time.Now()); err != nil {
		t.Fatal(err)
	}
	_, err := capture.HandleClaudeHook(context.Background(), f.store, Opener{f.cfg}, strings.NewReader(f.payload("Stop", "")), time.Now())
	if err == nil || !strings.Contains(err.Error(), "now connected to elsewhere on local") {
		t.Fatalf("err = %v", err)
	}
}

func TestIdentityIgnoresReceiptTime(t *testing.T) {
	idx := 2
	base := event.Record{Seq: 7, Agent: "claude-code", SessionID: "s", Kind: event.ToolStart, HookEvent: "PreToolUse", ToolUseID: "toolu_1", ObservedAt: time.Unix(100, 0)}
	later := base
	later.ObservedAt = time.Unix(999, 0)
	later.Seq = 8
	if Identity(base) != Identity(later) {
		t.Fatal("a provider-identified tool event changed identity with receipt time or local order")
	}
	noID := base
	noID.ToolUseID, noID.Kind = "", event.TurnEnd
	other := noID
	other.Seq = 8
	if Identity(noID) == Identity(other) {
		t.Fatal("events without provider identity must use the local occurrence number")
	}
	m1 := event.Record{SessionID: "s", Kind: event.MessageDisplay, MessageID: "m", FragmentIndex: &idx, Seq: 1}
	m2 := m1
	m2.Seq = 5
	if Identity(m1) != Identity(m2) {
		t.Fatal("a message fragment's identity must come from the host's correlation fields")
	}
	if len(Identity(base)) != 64 {
		t.Fatal("identity is not 64 hex")
	}
}

// downHub is the real Hub connection with its network switched off: while
// down, resolution and delivery fail the way an unreachable served Hub does.
type downHub struct {
	capture.Hub
	down *atomic.Bool
}

var errUnreachable = errors.New("dial tcp 127.0.0.1:1: connect: connection refused")

func (h downHub) Resolve(ctx context.Context, worktree, native string) (capture.Target, error) {
	if h.down.Load() {
		return capture.Target{}, errUnreachable
	}
	return h.Hub.Resolve(ctx, worktree, native)
}

func (h downHub) Deliver(ctx context.Context, env *spool.Envelope) (string, error) {
	if h.down.Load() {
		return "", errUnreachable
	}
	return h.Hub.Deliver(ctx, env)
}

type downOpener struct {
	Opener
	down *atomic.Bool
}

func (o downOpener) Open(ctx context.Context, root string) (capture.Hub, error) {
	h, err := o.Opener.Open(ctx, root)
	if err != nil {
		return nil, err
	}
	return downHub{h, o.down}, nil
}

// TestOutageCopiesTarget: while the Hub is unreachable, a session that
// already had an exact target keeps sanitized deferred facts that copy it,
// each with a replay-stable reserved sequence; the next reachable hook
// publishes one capture_interrupted gap over the reserved range for an
// aliased session ("default") and lets the hole show directly for a
// session whose canonical id is its own. Retries of a deferred occurrence
// stay duplicates of its original (deferred) route after the Hub is back.
func TestOutageCopiesTarget(t *testing.T) {
	f := newFixture(t)
	work := f.startWork(t)
	down := new(atomic.Bool)
	hubs := downOpener{Opener{f.cfg}, down}
	hook := func(native, ev, extra string) *capture.HookResult {
		t.Helper()
		pl := `{"session_id":"` + native + `","cwd":"` + f.root + `","hook_event_name":"` + ev + `"` + extra + `}`
		res, err := capture.HandleClaudeHook(context.Background(), f.store, hubs, strings.NewReader(pl), time.Now())
		if err != nil {
			t.Fatalf("%s: %v", pl, err)
		}
		return res
	}
	hook("native-1", "SessionStart", `,"source":"startup"`)                  // default #1
	hook("native-2", "SessionStart", `,"source":"startup"`)                  // native-2 #1
	hook("native-1", "PreToolUse", `,"tool_name":"Bash","tool_use_id":"t1"`) // default #2
	down.Store(true)
	pre := `,"tool_name":"Bash","tool_use_id":"t2","tool_input":{"command":"secret-input"}`
	for _, r := range []*capture.HookResult{
		hook("native-1", "UserPromptSubmit", `,"prompt":"secret-prompt"`), // default #3
		hook("native-1", "PreToolUse", pre),                               // default #4
		hook("native-1", "PreToolUse", pre),                               // retry: duplicate
		hook("native-2", "Stop", ""),                                      // native-2 #2
	} {
		if !r.Deferred || r.Delivered != 0 {
			t.Fatalf("during the outage: %+v", r)
		}
	}
	down.Store(false)
	hook("native-2", "Stop", "") // native-2 #3: publishes both outages
	if r := hook("native-1", "PreToolUse", pre); !r.Duplicate {
		t.Fatalf("retry after the outage: %+v", r)
	}
	hook("native-1", "Stop", "") // default #5
	rec := f.record(t, work)
	byName := map[string]api.SessionRecord{}
	for _, s := range rec.Sessions {
		byName[s.Session] = s
	}
	if s := byName["default"]; s.Events != 3 || s.LastSeq != 5 || s.MissingSeqs != 2 {
		t.Fatalf("default: %+v", s)
	}
	if s := byName["native-2"]; s.Events != 2 || s.LastSeq != 3 || s.MissingSeqs != 1 {
		t.Fatalf("native-2: %+v", s)
	}
	// Every outage is a named gap over its reserved range: the aliased
	// session's, and native-2's too, although its own next event shows the
	// hole (the soak found such holes without a name: a missing number
	// says nothing of why).
	if len(rec.Gaps) != 2 || gapFor(rec, "default") != (api.Gap{Kind: event.GapCaptureInterrupted, Reason: "target_unavailable", FromSeq: 3, ToSeq: 4}) ||
		gapFor(rec, "native-2") != (api.Gap{Kind: event.GapCaptureInterrupted, Reason: "target_unavailable", FromSeq: 2, ToSeq: 2}) {
		t.Fatalf("gaps %+v", rec.Gaps)
	}
	if n := unnamedHoles(t, rec); n != 0 {
		t.Fatalf("%d missing numbers on the Hub lie in no named gap: %+v", n, rec.Gaps)
	}
	b, _ := json.Marshal(rec)
	sp, _ := spool.Open(f.spool)
	recs, _ := sp.Events()
	raw, _ := json.Marshal(recs)
	for _, secret := range []string{"secret-input", "secret-prompt"} {
		if strings.Contains(string(b), secret) || strings.Contains(string(raw), secret) {
			t.Fatalf("%q kept or shared from a deferred fact", secret)
		}
	}
	var deferred int
	for _, r := range recs {
		if r.Deferred && r.Kind != event.KindGap {
			deferred++
			if r.Association != capture.AssocCopied || r.WorkID != work || r.SharedSeq == 0 {
				t.Fatalf("deferred fact %+v", r)
			}
		}
	}
	if deferred != 3 {
		t.Fatalf("%d deferred facts, want 3", deferred)
	}
	// A later hook publishes nothing again.
	hook("native-1", "Stop", "")
	if rec := f.record(t, work); len(rec.Gaps) != 2 {
		t.Fatalf("gap published twice: %+v", rec.Gaps)
	}
}

// TestCrashAfterReservationLeavesHole kills real hook processes (SIGKILL)
// at the capture failpoints. Killed after the bare reservation of an event
// without provider identity, the next hook continues after the reserved
// sequence: the Hub shows one missing sequence, no number is reused.
// Killed after the first durable claim of a tool call but before its
// append, the retry appends it once under the original sequence.
func TestCrashAfterReservationLeavesHole(t *testing.T) {
	if os.Getenv("AGENTSCM_TEST_HOOK_CHILD") != "" {
		return
	}
	f := newFixture(t)
	work := f.startWork(t)
	f.hook(t, f.payload("SessionStart", `,"source":"startup"`)) // #1
	kill := func(failpoint, payload string) {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run=^TestHookChild$")
		cmd.Env = append(os.Environ(), "AGENTSCM_TEST_HOOK_CHILD="+f.cfg, spool.FailpointEnv+"="+failpoint)
		cmd.Stdin = strings.NewReader(payload)
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("child at %s: %v, want killed by SIGKILL", failpoint, err)
		}
	}
	kill("capture.reserved", f.payload("UserPromptSubmit", `,"prompt":"p"`)) // #2 reserved, never appended
	pre := f.payload("PreToolUse", `,"tool_name":"Bash","tool_use_id":"t-crash"`)
	kill("capture.claimed", pre)                   // #3 claimed, never appended
	if r := f.hook(t, pre); r.Claim != "resumed" { // appended now as #3
		t.Fatalf("retry after the claim crash: %+v", r)
	}
	if r := f.hook(t, pre); r.Claim != "duplicate" {
		t.Fatalf("second retry: %+v", r)
	}
	f.hook(t, f.payload("Stop", "")) // #4
	rec := f.record(t, work)
	if s := rec.Sessions[0]; s.Events != 3 || s.LastSeq != 4 || s.MissingSeqs != 1 {
		t.Fatalf("session %+v", s)
	}
	var pres []int64
	for _, e := range rec.Events {
		if e.Kind == "tool_start" {
			pres = append(pres, e.Seq)
		}
	}
	if len(pres) != 1 || pres[0] != 3 {
		t.Fatalf("tool starts at %v, want [3]", pres)
	}
}

// TestHookChild is the hook process of TestCrashAfterReservationLeavesHole.
func TestHookChild(t *testing.T) {
	cfg := os.Getenv("AGENTSCM_TEST_HOOK_CHILD")
	if cfg == "" {
		t.Skip("runs only as a child process")
	}
	_, err := capture.HandleClaudeHook(context.Background(), capture.StateDir{Dir: cfg}, Opener{cfg}, os.Stdin, time.Now())
	t.Fatalf("the failpoint did not kill the hook: %v", err)
}

// TestLostLedgerNeverReusesSequences: when the ledger of a spool that
// already holds records is lost, the new ledger starts a new stream (a new
// epoch of the spool's observation scope) at sequence 1: nothing the Hub
// accepted is numbered again under the same key, no hole is invented, and
// the Hub shows the boundary between the two accounts as a gap.
func TestLostLedgerNeverReusesSequences(t *testing.T) {
	f := newFixture(t)
	work := f.startWork(t)
	f.hook(t, f.payload("SessionStart", `,"source":"startup"`))
	// Read has no execution rule: no action record takes a spool number.
	f.hook(t, f.payload("PreToolUse", `,"tool_name":"Read","tool_use_id":"t1"`))
	matches, _ := filepath.Glob(filepath.Join(f.cfg, "capture-ledger", "*", "ledger.json"))
	if len(matches) != 1 {
		t.Fatalf("ledger files %v", matches)
	}
	if err := os.Remove(matches[0]); err != nil {
		t.Fatal(err)
	}
	if r := f.hook(t, f.payload("Stop", "")); r.Failed != 0 || r.Delivered != 1 {
		t.Fatalf("after the ledger loss: %+v", r)
	}
	rec := f.record(t, work)
	s := rec.Sessions[0]
	if s.Events != 3 || s.MissingSeqs != 0 || len(s.Streams) != 2 || s.Streams[0].LastSeq != 2 || s.Streams[1].FirstSeq != 1 || s.Streams[1].LastSeq != 1 {
		t.Fatalf("session %+v", s)
	}
	var boundary int
	for _, g := range rec.Gaps {
		if g.Derived && g.Reason == api.GapReasonStreamBoundary && g.Stream == s.Streams[1].Stream && g.PreviousStream == s.Streams[0].Stream && g.PreviousLastSeq == 2 {
			boundary++
		}
	}
	if boundary != 1 || rec.Coverage.State != "partial" {
		t.Fatalf("gaps %+v coverage %+v", rec.Gaps, rec.Coverage)
	}
}

// TestSessionStartSources: a fork start maps to source other and, as a
// session's first event, to an adapter_started_late gap; a compact start
// of an observed session continues it (no gap). Neither is identified.
func TestSessionStartSources(t *testing.T) {
	f := newFixture(t)
	work := f.startWork(t)
	p := func(native, source string) string {
		return `{"session_id":"` + native + `","cwd":"` + f.root + `","hook_event_name":"SessionStart","source":"` + source + `"}`
	}
	f.hook(t, p("s-start", "startup"))
	f.hook(t, p("s-start", "compact"))
	f.hook(t, p("s-fork", "fork"))
	rec := f.record(t, work)
	var late []api.Gap
	uncertain := 0
	for _, g := range rec.Gaps {
		switch g.Kind {
		case event.GapAdapterStartedLate:
			late = append(late, g.Gap)
			if g.Session != "s-fork" {
				t.Fatalf("late gap for %s", g.Session)
			}
		case event.GapIdentityUncertain:
			uncertain++
		}
	}
	if len(late) != 1 || late[0].Reason != "session_start_other" || uncertain != 2 {
		t.Fatalf("gaps %+v", rec.Gaps)
	}
	var sources []string
	for _, e := range rec.Events {
		sources = append(sources, e.Source)
	}
	if strings.Join(sources, ",") != "startup,compact,other" {
		t.Fatalf("sources %v", sources)
	}
	for _, s := range rec.Sessions {
		if s.MissingSeqs != 0 {
			t.Fatalf("session %+v", s)
		}
	}
}

// unnamedHoles counts the numbers the Hub's sessions miss that lie in no
// named capture_interrupted gap of their session (the numbers such a gap
// covers were never received: they are deferred facts or lost records).
func unnamedHoles(t *testing.T, rec api.ChangeRecord) int64 {
	t.Helper()
	var n int64
	for _, s := range rec.Sessions {
		covered := map[int64]bool{}
		for _, g := range rec.Gaps {
			if g.Session != s.Session || g.Kind != event.GapCaptureInterrupted || g.FromSeq == 0 {
				continue
			}
			for q := g.FromSeq; q <= g.ToSeq && q <= s.LastSeq; q++ {
				covered[q] = true
			}
		}
		if d := s.MissingSeqs - int64(len(covered)); d > 0 {
			n += d
		}
	}
	return n
}
