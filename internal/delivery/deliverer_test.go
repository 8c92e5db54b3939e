package delivery

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/spool"
)

// bgOpener is the real Opener plus a Backgrounder whose "detached" deliverer
// is a goroutine running the real capture.DeliverSpool on a duplicate of
// the handed-over lock (flock locks belong to the open file description, so
// the duplicate keeps it held after the hook closes its copy), or, with
// fail set, refuses to start one.
type bgOpener struct {
	Opener
	store   capture.StateDir
	fail    bool
	wg      *sync.WaitGroup
	mu      *sync.Mutex
	started *int
	reports *[]*capture.DeliverReport
}

func (o bgOpener) StartDeliverer(lock *os.File, spoolDir string) error {
	if o.fail {
		return errors.New("no process for you")
	}
	fd, err := syscall.Dup(int(lock.Fd()))
	if err != nil {
		return err
	}
	dup := os.NewFile(uintptr(fd), "deliver.lock")
	o.mu.Lock()
	*o.started++
	o.mu.Unlock()
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		rep, _ := capture.DeliverSpool(context.Background(), o.store, o.Opener, spoolDir, dup, capture.DeliverBounds{})
		o.mu.Lock()
		*o.reports = append(*o.reports, rep)
		o.mu.Unlock()
	}()
	return nil
}

func newBG(f *fixture) bgOpener {
	return bgOpener{Opener: Opener{f.cfg}, store: f.store, wg: &sync.WaitGroup{}, mu: &sync.Mutex{}, started: new(int), reports: &[]*capture.DeliverReport{}}
}

func pendingCount(t *testing.T, dir string) int {
	t.Helper()
	rep, err := spool.Inspect(dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Not yet attempted, or attempted and not acknowledged.
	return rep.Pending.Total + rep.Deferred.Total
}

// With a Backgrounder a hook delivers nothing itself: it appends, lets the
// spool lock go and starts one deliverer, which delivers everything pending
// and records its report as the spool's deliver status.
func TestBackgroundDelivererDeliversOffTheHookPath(t *testing.T) {
	f := newFixture(t)
	work := f.startWork(t)
	bg := newBG(f)
	for i := range 5 {
		res, err := capture.HandleClaudeHook(context.Background(), f.store, bg, strings.NewReader(f.payload("PreToolUse",
			fmt.Sprintf(`,"tool_name":"Read","tool_use_id":"toolu_bg_%d","tool_input":{"file_path":"/etc/hostname"}`, i))), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		// Intake-first: with a Backgrounder a PreToolUse goes to the intake
		// even though the lock is free; the deliverer admits it.
		if res.Seq != 0 || res.Intake == "" || res.Delivered != 0 || res.Failed != 0 || res.DeliveryErr != nil {
			t.Fatalf("hook %d: %+v", i, res)
		}
		bg.wg.Wait() // one at a time: each hook finds the deliver lock free
	}
	if *bg.started != 5 {
		t.Fatalf("%d deliverers started, want one per hook here", *bg.started)
	}
	if n := pendingCount(t, f.spool); n != 0 {
		t.Fatalf("%d envelopes still pending after the deliverers", n)
	}
	rec := f.record(t, work)
	if len(rec.Events) != 5 {
		t.Fatalf("the Hub has %d events, want 5: %+v", len(rec.Events), rec.Events)
	}
	st, err := f.store.DeliverStatus(f.spool)
	if err != nil || st == nil || st.Outcome != "idle" {
		t.Fatalf("deliver status %+v, %v", st, err)
	}
}

// Concurrent hooks with one background deliverer per spool: at most one
// runs at a time (the deliver lock), none is left running once the hooks
// are done and it has finished, and every event reaches the Hub: a hook
// that finds the deliver lock held leaves its event to the running
// deliverer, which looks again after it lets the lock go.
func TestBackgroundDelivererConcurrentHooksAllDelivered(t *testing.T) {
	f := newFixture(t)
	work := f.startWork(t)
	bg := newBG(f)
	const n = 24
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pl := fmt.Sprintf(`{"session_id":"native-%d","cwd":"%s","hook_event_name":"PreToolUse","tool_name":"Read","tool_use_id":"toolu_c_%d","tool_input":{"file_path":"/etc/hostname"}}`, i%3, f.root, i)
			if _, err := capture.HandleClaudeHook(context.Background(), f.store, bg, strings.NewReader(pl), time.Now()); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bg.wg.Wait()
	if err := f.store.WaitDeliverer(ctx, f.spool); err != nil {
		t.Fatal(err)
	}
	if n := pendingCount(t, f.spool); n != 0 {
		t.Fatalf("%d envelopes still pending", n)
	}
	rep, err := spool.Inspect(f.spool, 1)
	if err != nil || rep.Intake != 0 {
		t.Fatalf("intake left: %+v %v", rep.Intake, err)
	}
	rec := f.record(t, work)
	if got := len(rec.Events); got != n {
		t.Fatalf("the Hub has %d events, want %d", len(rec.Events), n)
	}
	if *bg.started < 1 {
		t.Fatal("no deliverer started")
	}
	t.Logf("%d deliverers started for %d hooks", *bg.started, n)
}

// When no deliverer can be started the hook delivers in-process, within
// its own bound, and says why on its warning line.
func TestBackgroundDelivererSpawnFailureDeliversInProcess(t *testing.T) {
	f := newFixture(t)
	work := f.startWork(t)
	bg := newBG(f)
	bg.fail = true
	res, err := capture.HandleClaudeHook(context.Background(), f.store, bg, strings.NewReader(f.payload("PreToolUse",
		`,"tool_name":"Read","tool_use_id":"toolu_fb","tool_input":{"file_path":"/etc/hostname"}`)), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if res.Delivered == 0 || res.DeliveryErr == nil || !strings.Contains(res.DeliveryErr.Error(), "delivering in-process") {
		t.Fatalf("fallback: %+v", res)
	}
	if n := pendingCount(t, f.spool); n != 0 {
		t.Fatalf("%d pending after the in-process delivery", n)
	}
	if rec := f.record(t, work); len(rec.Events) != 1 {
		t.Fatalf("Hub events %+v", rec.Events)
	}
}

// A deliverer that finds the Hub down stops at once with outcome "failed"
// (pending envelopes stay pending), and the next hook says so on its
// warning line; once the Hub is back, the next deliverer delivers them.
func TestBackgroundDelivererHubDownStaysPending(t *testing.T) {
	f := newFixture(t)
	work := f.startWork(t)
	bg := newBG(f)
	down := &atomic32{}
	bg.Opener = Opener{f.cfg}
	dbg := downBG{bgOpener: bg, down: down}
	hook := func(id string) *capture.HookResult {
		res, err := capture.HandleClaudeHook(context.Background(), f.store, dbg, strings.NewReader(f.payload("PreToolUse",
			`,"tool_name":"Read","tool_use_id":"`+id+`","tool_input":{"file_path":"/etc/hostname"}`)), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		dbg.wg.Wait()
		return res
	}
	hook("toolu_up")
	down.set(true)
	hook("toolu_down1")
	st, err := f.store.DeliverStatus(f.spool)
	if err != nil || st == nil || st.Outcome != "failed" {
		t.Fatalf("deliver status with the Hub down: %+v %v", st, err)
	}
	res := hook("toolu_down2")
	if res.DeliveryErr == nil || !strings.Contains(res.DeliveryErr.Error(), "last delivery attempt failed") {
		t.Fatalf("the hook after a failed run: %+v", res)
	}
	if n := pendingCount(t, f.spool); n != 2 {
		t.Fatalf("%d pending with the Hub down, want 2", n)
	}
	down.set(false)
	hook("toolu_back")
	if n := pendingCount(t, f.spool); n != 0 {
		t.Fatalf("%d pending after the Hub is back", n)
	}
	if rec := f.record(t, work); len(rec.Events) != 4 {
		t.Fatalf("Hub events %d, want 4", len(rec.Events))
	}
}

type atomic32 struct {
	mu sync.Mutex
	v  bool
}

func (a *atomic32) set(v bool) { a.mu.Lock(); a.v = v; a.mu.Unlock() }
func (a *atomic32) get() bool  { a.mu.Lock(); defer a.mu.Unlock(); return a.v }

// downBG is bgOpener whose deliverers see a Hub that refuses every
// delivery transiently while down is set (the hooks resolve normally).
type downBG struct {
	bgOpener
	down *atomic32
}

func (o downBG) StartDeliverer(lock *os.File, spoolDir string) error {
	fd, err := syscall.Dup(int(lock.Fd()))
	if err != nil {
		return err
	}
	dup := os.NewFile(uintptr(fd), "deliver.lock")
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		capture.DeliverSpool(context.Background(), o.store, flakyOpener{o.Opener, o.down}, spoolDir, dup, capture.DeliverBounds{})
	}()
	return nil
}

type flakyOpener struct {
	Opener
	down *atomic32
}

func (o flakyOpener) Open(ctx context.Context, root string) (capture.Hub, error) {
	h, err := o.Opener.Open(ctx, root)
	if err != nil {
		return nil, err
	}
	return flakyHub{h, o.down}, nil
}

type flakyHub struct {
	capture.Hub
	down *atomic32
}

func (h flakyHub) Deliver(ctx context.Context, env *spool.Envelope) (string, error) {
	if h.down.get() {
		return "", errors.New("hub unavailable (test)")
	}
	return h.Hub.Deliver(ctx, env)
}

// noopBG accepts the deliver lock and starts nothing (a deliverer that
// died at once): what the hooks append stays where it is.
type noopBG struct{ Opener }

func (noopBG) StartDeliverer(*os.File, string) error { return nil }

// More local-only records after the cursor than one page holds do not hide
// a later deliverable envelope from the deliverer: a full page that ends in
// local-only records moves the cursor past them and the next round goes on.
func TestBackgroundDelivererSkipsLocalOnlyPages(t *testing.T) {
	f := newFixture(t)
	for i := range 60 { // no Work yet: deferred facts, local-only
		if _, err := capture.HandleClaudeHook(context.Background(), f.store, noopBG{Opener{f.cfg}}, strings.NewReader(f.payload("PreToolUse",
			fmt.Sprintf(`,"tool_name":"Read","tool_use_id":"toolu_lo_%d","tool_input":{"file_path":"/etc/hostname"}`, i))), time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	work := f.startWork(t)
	bg := newBG(f)
	res, err := capture.HandleClaudeHook(context.Background(), f.store, bg, strings.NewReader(f.payload("PreToolUse",
		`,"tool_name":"Read","tool_use_id":"toolu_after","tool_input":{"file_path":"/etc/hostname"}`)), time.Now())
	if err != nil || res.Deferred {
		t.Fatalf("%+v %v", res, err)
	}
	bg.wg.Wait()
	rec := f.record(t, work)
	found := false
	for _, e := range rec.Events {
		found = found || e.ToolUseID == "toolu_after"
	}
	if !found {
		t.Fatalf("the event after 60 deferred facts was not delivered: %+v, reports %+v", rec.Events, (*bg.reports)[0])
	}
}

// stallOpener's Hub holds every delivery until the caller's context ends.
type stallOpener struct{ Opener }

func (o stallOpener) Open(ctx context.Context, root string) (capture.Hub, error) {
	h, err := o.Opener.Open(ctx, root)
	if err != nil {
		return nil, err
	}
	return stallHub{h}, nil
}

type stallHub struct{ capture.Hub }

func (stallHub) Deliver(ctx context.Context, _ *spool.Envelope) (string, error) {
	<-ctx.Done()
	return "", ctx.Err()
}

// A deliverer whose own run bound ends a delivery in flight reports
// "bound", not "failed": the Hub did not fail, so the next hook's line
// stays quiet, and the envelope stays pending for the next run.
func TestBackgroundDelivererBoundMidDeliveryIsNotAFailure(t *testing.T) {
	f := newFixture(t)
	f.startWork(t)
	if _, err := capture.HandleClaudeHook(context.Background(), f.store, noopBG{Opener{f.cfg}}, strings.NewReader(f.payload("PreToolUse",
		`,"tool_name":"Read","tool_use_id":"toolu_stall","tool_input":{"file_path":"/etc/hostname"}`)), time.Now()); err != nil {
		t.Fatal(err)
	}
	rep, err := capture.DeliverSpool(context.Background(), f.store, stallOpener{Opener{f.cfg}}, f.spool, nil, capture.DeliverBounds{MaxRun: 300 * time.Millisecond})
	if err != nil || rep.Outcome != "bound" {
		t.Fatalf("deliverer: %+v, %v", rep, err)
	}
	if st, err := f.store.DeliverStatus(f.spool); err != nil || st == nil || st.Outcome != "bound" {
		t.Fatalf("deliver status: %+v, %v", st, err)
	}
	res, err := capture.HandleClaudeHook(context.Background(), f.store, noopBG{Opener{f.cfg}}, strings.NewReader(f.payload("PreToolUse",
		`,"tool_name":"Read","tool_use_id":"toolu_next","tool_input":{"file_path":"/etc/hostname"}`)), time.Now())
	if err != nil || res.DeliveryErr != nil {
		t.Fatalf("the next hook: %+v, %v", res, err)
	}
	if n := pendingCount(t, f.spool); n != 2 {
		t.Fatalf("%d pending, want 2", n)
	}
}

// slowOpener's Hub takes d for every delivery.
type slowOpener struct {
	Opener
	d time.Duration
}

func (o slowOpener) Open(ctx context.Context, root string) (capture.Hub, error) {
	h, err := o.Opener.Open(ctx, root)
	if err != nil {
		return nil, err
	}
	return slowHub{h, o.d}, nil
}

type slowHub struct {
	capture.Hub
	d time.Duration
}

func (h slowHub) Deliver(ctx context.Context, env *spool.Envelope) (string, error) {
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case <-time.After(h.d):
	}
	return h.Hub.Deliver(ctx, env)
}

// A Hub slow enough that a round's time runs out during a delivery, after
// others of the round went through, makes shorter rounds, not a failed
// run: every envelope is delivered and the run ends idle. A Hub that
// cannot take even one envelope within a round is a failure.
func TestBackgroundDelivererSlowHubMakesShorterRounds(t *testing.T) {
	f := newFixture(t)
	f.startWork(t)
	for i := range 8 {
		if _, err := capture.HandleClaudeHook(context.Background(), f.store, noopBG{Opener{f.cfg}}, strings.NewReader(f.payload("PreToolUse",
			fmt.Sprintf(`,"tool_name":"Read","tool_use_id":"toolu_slow_%d","tool_input":{"file_path":"/etc/hostname"}`, i))), time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := capture.DeliverSpool(context.Background(), f.store, slowOpener{Opener{f.cfg}, 400 * time.Millisecond}, f.spool, nil,
		capture.DeliverBounds{MaxRun: time.Minute, RoundTimeout: 200 * time.Millisecond})
	if err != nil || rep.Outcome != "failed" || rep.Delivered != 0 {
		t.Fatalf("a Hub slower than a round: %+v, %v", rep, err)
	}
	rep, err = capture.DeliverSpool(context.Background(), f.store, slowOpener{Opener{f.cfg}, 120 * time.Millisecond}, f.spool, nil,
		capture.DeliverBounds{MaxRun: time.Minute, RoundTimeout: 300 * time.Millisecond})
	if err != nil || rep.Outcome != "idle" || rep.Failed != 0 {
		t.Fatalf("a slow Hub: %+v, %v", rep, err)
	}
	if n := pendingCount(t, f.spool); n != 0 {
		t.Fatalf("%d pending after the slow Hub's run, want 0 (%+v)", n, rep)
	}
}
