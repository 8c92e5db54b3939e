package delivery

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/spool"
)

type fixture struct {
	cfg   string
	root  string
	store capture.Store
	conn  client.Connection
	spool string
}

// newFixture connects a checkout to the embedded Hub and enables capture,
// all through the real code paths.
func newFixture(t testing.TB) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{cfg: filepath.Join(dir, "cfg", "agentscm"), root: filepath.Join(dir, "repo")}
	os.MkdirAll(f.root, 0o755)
	f.root, _ = filepath.EvalSymlinks(f.root)
	f.store = capture.Store{Dir: f.cfg}
	ctx := context.Background()
	c, _, err := client.SetupLocal(ctx, f.cfg, f.root, "demo", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	f.conn = c
	res, err := capture.EnableCapture(ctx, f.store, Connections{f.cfg}, capture.EnableOptions{Root: f.root, ConfigDir: f.cfg, Executable: "/usr/local/bin/agentscm", Now: time.Now()})
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
	// No Work yet: a sanitized deferred fact, never delivered.
	// The session's first observed event is not a startup SessionStart:
	// one adapter_started_late gap (seq 1) precedes it, both deferred.
	r := f.hook(t, f.payload("UserPromptSubmit", `,"prompt":"secret"`))
	if !r.Deferred || r.Seq != 2 || r.Delivered != 0 {
		t.Fatalf("before any Work: %+v", r)
	}
	work := f.startWork(t)
	// One-step setup's default rule makes Bash an action: the tool event
	// and the action start (seq 4) are both delivered.
	r = f.hook(t, f.payload("PreToolUse", `,"tool_name":"Bash","tool_use_id":"toolu_9"`))
	if r.Deferred || r.Delivered != 2 || r.Failed != 0 || r.Action != capture.ActionStarted {
		t.Fatalf("with a Work: %+v", r)
	}
	r = f.hook(t, f.payload("PostToolUseFailure", `,"tool_name":"Bash","tool_use_id":"toolu_9","error":"Exit code 3"`))
	if r.Delivered != 2 || r.Action != capture.ActionFinished {
		t.Fatalf("finish: %+v", r)
	}
	rec := f.record(t, work)
	if len(rec.Events) != 2 || rec.Events[0].Seq != 3 || rec.Events[1].Outcome != event.OutcomeFailed {
		t.Fatalf("record events %+v", rec.Events)
	}
	if len(rec.Actions) != 1 || rec.Actions[0].Status != "complete" || rec.Actions[0].Finish.Result != "failed" {
		t.Fatalf("record actions %+v", rec.Actions)
	}
	// The deferred facts stay local: their sequences are a visible hole.
	// (Under the shared spool sequence the action records' numbers 4 and 6
	// are holes in the event sequence too, until per-session sequences.)
	if rec.Sessions[0].MissingSeqs != 3 || rec.Coverage.State == "complete" || len(rec.Gaps) != 0 {
		t.Fatalf("hole not visible: %+v %+v %+v", rec.Sessions, rec.Coverage, rec.Gaps)
	}
	sp, err := spool.Open(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := sp.Events()
	if len(recs) != 6 || !recs[0].Deferred || recs[0].Kind != event.KindGap || !recs[1].Deferred || recs[1].Body != nil {
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
	if len(rec.Gaps) != 1 || rec.Gaps[0].Kind != event.GapAdapterStartedLate || rec.Gaps[0].Reason != "first_event_PreToolUse" {
		t.Fatalf("gaps %+v", rec.Gaps)
	}
}

func TestNoConnectionCapturesNothing(t *testing.T) {
	f := newFixture(t)
	if _, err := client.Remove(f.cfg, f.root); err != nil {
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
