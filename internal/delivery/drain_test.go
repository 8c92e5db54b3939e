package delivery

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/client"
	hubsvc "github.com/agentscm/agentscm/internal/hub"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/spool"
)

// A burst whose admission and delivery take longer than one deliverer
// window (MaxRun) is drained by the deliverer that runs, window after
// window while each makes progress: nothing is left in the intake or
// pending for a later hook. On main the run stopped at its bound and the
// tail waited for the next hook (the soak ended with 50 intake files).
func TestDelivererDrainsTailWithoutLaterHook(t *testing.T) {
	f := newFixture(t)
	work := f.startWork(t)
	const n = 150
	for i := range n {
		res, err := capture.HandleClaudeHook(context.Background(), f.store, noopBG{Opener{f.cfg}}, strings.NewReader(f.payload("PreToolUse",
			fmt.Sprintf(`,"tool_name":"Read","tool_use_id":"toolu_tail_%d","tool_input":{"file_path":"/etc/hostname"}`, i))), time.Now())
		if err != nil || res.Intake == "" {
			t.Fatalf("hook %d: %+v %v", i, res, err)
		}
	}
	rep, err := capture.DeliverSpool(context.Background(), f.store, Opener{f.cfg}, f.spool, nil, capture.DeliverBounds{MaxRun: 150 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case rep.Outcome == "idle":
		if rep.Windows < 2 || rep.Admitted != n {
			t.Fatalf("deliverer %+v: want idle after more than one window, %d admitted", rep, n)
		}
	case rep.Outcome == "bound" && rep.Resume:
		// A window that made no progress (on a loaded machine a 150 ms
		// window can go to opening the Hub) ends the run with the
		// durable note instead, and the next process of any kind
		// (ResumeDelivery: status, show, the local page) resumes it.
		t.Logf("the run stopped at a window without progress: %s", rep.Detail)
		bg := newBG(f)
		if ok, err := capture.ResumeDelivery(f.store, bg, f.spool, time.Now()); err != nil || !ok {
			t.Fatalf("the run's note did not resume delivery: %v %v", ok, err)
		}
		bg.wg.Wait()
		if len(*bg.reports) != 1 || (*bg.reports)[0].Outcome != "idle" {
			t.Fatalf("the resumed deliverer: %+v", *bg.reports)
		}
	default:
		t.Fatalf("deliverer %+v: want idle after more than one window, or a bound with the note that resumes it", rep)
	}
	if ins, err := spool.Inspect(f.spool, 1); err != nil || ins.Intake != 0 || ins.Pending.Total != 0 {
		t.Fatalf("left: intake %d pending %d %v", ins.Intake, ins.Pending.Total, err)
	}
	if rec := f.record(t, work); len(rec.Events) != n {
		sp, _ := spool.Open(f.spool)
		recs, _ := sp.Events()
		for _, r := range recs {
			if r.Deferred || r.Kind == "gap" {
				t.Logf("record %d %s %s deferred=%v reason=%q gap=%+v", r.Seq, r.Kind, r.ToolUseID, r.Deferred, r.DeferredReason, r.Gap)
			}
		}
		t.Fatalf("Hub events %d, want %d; gaps %+v", len(rec.Events), n, rec.Gaps)
	}
}

// olderHub is a real Hub on loopback behind a front that, while old is
// set, gives every envelope a field this Hub does not know, as a newer
// client's envelope would reach an older Hub: the real Hub refuses it
// (400, strict decoding). Clearing old is the Hub upgrade.
type olderHub struct {
	h   http.Handler
	old atomic.Bool
	// failing makes the front answer every envelope POST 503 (the Hub
	// failing transiently); posts counts the envelope POSTs it saw.
	failing atomic.Bool
	posts   atomic.Int64
	// preAgent makes the front a Hub before the envelope's agent: whoami
	// lists no features and an envelope with an agent is refused as that
	// Hub's strict decoding refuses it (400 unknown_field).
	preAgent atomic.Bool
}

func (o *olderHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if o.preAgent.Load() && o.servePreAgent(w, r) {
		return
	}
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/envelopes") {
		o.posts.Add(1)
		if o.failing.Load() {
			http.Error(w, `{"error":{"code":"unavailable","message":"restarting (test)"}}`, http.StatusServiceUnavailable)
			return
		}
	}
	if o.old.Load() && r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/envelopes") {
		b, err := io.ReadAll(r.Body)
		if err == nil {
			var m map[string]any
			if json.Unmarshal(b, &m) == nil {
				m["field_from_a_newer_client"] = true
				b, _ = json.Marshal(m)
			}
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
	}
	o.h.ServeHTTP(w, r)
}

// servePreAgent answers what a Hub before the envelope's agent answers
// differently, and reports whether it answered.
func (o *olderHub) servePreAgent(w http.ResponseWriter, r *http.Request) bool {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/hub/whoami":
		rec := httptest.NewRecorder()
		o.h.ServeHTTP(rec, r)
		var m map[string]any
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &m) != nil {
			w.WriteHeader(rec.Code)
			w.Write(rec.Body.Bytes())
			return true
		}
		delete(m, "features")
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(m)
		return true
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/envelopes"):
		b, _ := io.ReadAll(r.Body)
		var m map[string]any
		if json.Unmarshal(b, &m) == nil && m["agent"] != nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"error":{"code":"unknown_field","message":"json: unknown field \"agent\""}}`))
			return true
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
	}
	return false
}

// newHTTPFixture is newFixture with the checkout connected over HTTP to a
// real Hub on loopback (an olderHub front).
func newHTTPFixture(t *testing.T) (*fixture, *olderHub) {
	t.Helper()
	ctx := context.Background()
	svc, err := hubsvc.Open(ctx, filepath.Join(t.TempDir(), "hub"), hubsvc.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	op := hubsvc.Operator()
	if _, err := svc.CreateHuman(ctx, op, api.CreateHumanRequest{Name: "alice"}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreateRepository(ctx, op, api.CreateRepositoryRequest{Name: "demo"}); err != nil {
		t.Fatal(err)
	}
	tok, err := svc.CreateToken(ctx, op, api.CreateTokenRequest{Human: "alice", Repository: "demo", Scope: api.ScopeReadWrite})
	if err != nil {
		t.Fatal(err)
	}
	front := &olderHub{h: hubsvc.NewHandler(svc, nil)}
	srv := httptest.NewServer(front)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	f := &fixture{cfg: filepath.Join(dir, "cfg", "agentscm"), root: filepath.Join(dir, "repo")}
	os.MkdirAll(f.root, 0o755)
	f.root, _ = filepath.EvalSymlinks(f.root)
	f.store = capture.StateDir{Dir: f.cfg}
	c, _, err := client.SetupHub(ctx, f.cfg, f.root, srv.URL, "demo", tok.Secret, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	f.conn = c
	res, err := binding.EnableCapture(ctx, f.store, Connections{f.cfg}, binding.EnableOptions{Root: f.root, ConfigDir: f.cfg, Executable: "/usr/local/bin/agentscm", Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	f.spool = res.Spool
	return f, front
}

// A refused envelope is retried with backoff and delivered once the Hub
// accepts it: a real Hub on loopback refuses it (an older Hub: 400), the
// refusal is recorded with its hub_refused gap and its retry time, a
// deliverer before that time passes over it, and the first deliverer after
// the Hub's upgrade and the retry time delivers it, with no hook in
// between; it then leaves the refusal list, every attempt recorded. On
// main a refused envelope was never given another chance by the deliverer
// schedule's design (retried only when a page wrapped to it) and stayed
// listed as refused.
func TestRefusedEnvelopeDeliveredAfterHubAccepts(t *testing.T) {
	f, front := newHTTPFixture(t)
	work := f.startWork(t)
	f.hook(t, f.payload("SessionStart", `,"source":"startup"`))
	front.old.Store(true)
	res := f.hook(t, f.payload("UserPromptSubmit", `,"prompt":"hello"`))
	if res.Refused == 0 {
		t.Fatalf("the older Hub did not refuse: %+v", res)
	}
	refused, err := f.store.Refusals(f.spool)
	if err != nil || refused.Total == 0 {
		t.Fatalf("refusals %+v %v", refused, err)
	}
	deliver := func(backoff time.Duration) *capture.DeliverReport {
		t.Helper()
		rep, err := capture.DeliverSpool(context.Background(), f.store, Opener{f.cfg}, f.spool, nil, capture.DeliverBounds{RefusedRetry: backoff})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	// Every envelope the older Hub sees is refused once (the refusal's own
	// hub_refused gap too); each refusal is recorded with its retry time,
	// and before it nothing is sent again.
	deliver(0)
	retries := f.store.RefusalRetries(f.spool)
	if len(retries.Pending) == 0 || retries.Pending[0].Attempts != 1 || !retries.Pending[0].Next.After(time.Now()) {
		t.Fatalf("retry schedule %+v", retries)
	}
	if rep := deliver(0); rep.Refused != 0 || rep.RetryAt.IsZero() {
		t.Fatalf("a deliverer before the retry time: %+v", rep)
	}
	// The Hub still refuses at the first retry (a short backoff so the
	// test need not wait a minute): one more attempt counted.
	forceDue(t, f)
	if rep := deliver(time.Millisecond); rep.Refused == 0 {
		t.Fatalf("the retry while the Hub still refuses: %+v", rep)
	}
	if r := f.store.RefusalRetries(f.spool); len(r.Pending) == 0 || r.Pending[0].Attempts < 2 {
		t.Fatalf("retry schedule after the second refusal %+v", r)
	}
	// The Hub is upgraded; the next deliverer after the retry time
	// delivers it.
	front.old.Store(false)
	forceDue(t, f)
	if rep := deliver(time.Millisecond); rep.Delivered == 0 || rep.Refused != 0 {
		t.Fatalf("the retry after the upgrade: %+v", rep)
	}
	if n := pendingCount(t, f.spool); n != 0 {
		t.Fatalf("%d pending after the upgrade", n)
	}
	if refused, err := f.store.Refusals(f.spool); err != nil || refused.Total != 0 {
		t.Fatalf("still listed as refused: %+v %v", refused, err)
	}
	r := f.store.RefusalRetries(f.spool)
	if len(r.Pending) != 0 || len(r.Cleared) == 0 || r.Cleared[len(r.Cleared)-1].Attempts < 2 {
		t.Fatalf("retries after delivery %+v", r)
	}
	var prompts int
	for _, e := range f.record(t, work).Events {
		if e.HookEvent == "UserPromptSubmit" {
			prompts++
		}
	}
	if prompts != 1 {
		t.Fatalf("%d prompts on the Hub, want 1", prompts)
	}
}

// forceDue moves every refused envelope's retry time to now (as time
// passing would).
func forceDue(t *testing.T, f *fixture) {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(f.cfg, "capture-ledger", "*", "refused-retries"))
	if len(dirs) != 1 {
		t.Fatalf("retry files %v", dirs)
	}
	b, err := os.ReadFile(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	var r capture.RefusalRetries
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	for i := range r.Pending {
		r.Pending[i].Next = time.Now().Add(-time.Second)
	}
	b, _ = json.Marshal(r)
	if err := os.WriteFile(dirs[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A deliverer that meets a short Hub outage (a restart) waits with
// backoff and delivers after it, with no later hook (DeliverBounds.RetryFor,
// which the background deliverer sets); without it the run ends "failed"
// and the events wait for the next hook.
func TestDelivererRetriesThroughHubRestart(t *testing.T) {
	f := newFixture(t)
	work := f.startWork(t)
	for i := range 5 {
		if _, err := capture.HandleClaudeHook(context.Background(), f.store, noopBG{Opener{f.cfg}}, strings.NewReader(f.payload("PreToolUse",
			fmt.Sprintf(`,"tool_name":"Read","tool_use_id":"toolu_rs_%d","tool_input":{"file_path":"/etc/hostname"}`, i))), time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	down := &atomic32{}
	down.set(true)
	hubs := flakyOpener{Opener{f.cfg}, down}
	if rep, err := capture.DeliverSpool(context.Background(), f.store, hubs, f.spool, nil, capture.DeliverBounds{}); err != nil || rep.Outcome != "failed" {
		t.Fatalf("without RetryFor: %+v %v", rep, err)
	}
	go func() {
		time.Sleep(700 * time.Millisecond)
		down.set(false) // the Hub is back
	}()
	rep, err := capture.DeliverSpool(context.Background(), f.store, hubs, f.spool, nil, capture.DeliverBounds{RetryFor: capture.DelivererRetryFor})
	if err != nil || rep.Outcome != "idle" || rep.Retries == 0 || rep.Delivered < 5 || rep.Detail != "" {
		t.Fatalf("with RetryFor: %+v %v", rep, err)
	}
	if rec := f.record(t, work); len(rec.Events) != 5 {
		t.Fatalf("Hub events %d, want 5", len(rec.Events))
	}
}

// ResumeDelivery (for status, show, the local page) starts a deliverer
// for intake files a stopped run left, and none when nothing is due.
func TestResumeDeliveryStartsDeliverer(t *testing.T) {
	f := newFixture(t)
	work := f.startWork(t)
	bg := newBG(f)
	if ok, err := capture.ResumeDelivery(f.store, bg, f.spool, time.Now()); err != nil || ok {
		t.Fatalf("nothing due: %v %v", ok, err)
	}
	for i := range 3 {
		if _, err := capture.HandleClaudeHook(context.Background(), f.store, noopBG{Opener{f.cfg}}, strings.NewReader(f.payload("PreToolUse",
			fmt.Sprintf(`,"tool_name":"Read","tool_use_id":"toolu_rd_%d","tool_input":{"file_path":"/etc/hostname"}`, i))), time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := capture.ResumeDelivery(f.store, bg, f.spool, time.Now()); err != nil || !ok {
		t.Fatalf("intake waiting: %v %v", ok, err)
	}
	bg.wg.Wait()
	if rec := f.record(t, work); len(rec.Events) != 3 {
		t.Fatalf("Hub events %d, want 3", len(rec.Events))
	}
}

// TestInlineDeliveryFollowsRetryPolicy: hooks that deliver in-process
// (no background deliverer) follow the one retry policy of the deliverer
// after a transient failure of a real Hub on loopback (503 on every
// envelope): the first hook's attempt fails and schedules the next, the
// hooks right after it make no attempt (the agent's hooks do not each pay
// a failed Hub call), and the first hook after the next attempt is due,
// with the Hub back, delivers everything. On main every hook attempted
// (each envelope of its page) and the schedule did not exist.
func TestInlineDeliveryFollowsRetryPolicy(t *testing.T) {
	f, front := newHTTPFixture(t)
	work := f.startWork(t)
	f.hook(t, f.payload("SessionStart", `,"source":"startup"`))
	front.failing.Store(true)
	before := front.posts.Load()
	if r := f.hook(t, f.payload("Stop", "")); r.Delivered != 0 || r.DeliveryErr == nil {
		t.Fatalf("first hook in the failure: %+v", r)
	}
	if n := front.posts.Load() - before; n != 1 {
		t.Fatalf("the first hook made %d attempts, want 1 (it stops at a transient failure)", n)
	}
	for range 3 {
		if r := f.hook(t, f.payload("Stop", "")); r.Delivered != 0 || r.DeliveryErr == nil || !strings.Contains(r.DeliveryErr.Error(), "next delivery attempt is due") {
			t.Fatalf("hook before the next attempt is due: %+v", r)
		}
	}
	if n := front.posts.Load() - before; n != 1 {
		t.Fatalf("%d delivery attempts before the next one was due, want 1", n)
	}
	front.failing.Store(false)
	time.Sleep(300 * time.Millisecond) // the first wait (capture.TransientRetry.First) has passed
	if r := f.hook(t, f.payload("Stop", "")); r.DeliveryErr != nil || r.Delivered != 5 {
		t.Fatalf("hook after the Hub is back: %+v", r)
	}
	if rec := f.record(t, work); len(rec.Events) != 6 {
		t.Fatalf("Hub events %d, want 6", len(rec.Events))
	}
}
