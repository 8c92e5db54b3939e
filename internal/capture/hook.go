// Package capture turns an agent's hook payload into records in the private
// spool of the checkout's binding (internal/binding): intake and admission,
// the identity ledger, gaps, the transcript step, recipes' hook side and the
// event deliverer.
package capture

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"time"

	"github.com/agentscm/agentscm/internal/agent"
	"github.com/agentscm/agentscm/internal/agent/adapter"
	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/spool"
	"github.com/agentscm/agentscm/internal/transcript"
)

// Target is the exact current Work, generation and canonical session of a
// native session.
type Target struct {
	WorkID     string
	Generation int64
	Session    string
}

// Hub is what the hook needs of a checkout's Hub connection.
type Hub interface {
	// Lineage is the Hub and repository the connection points at.
	Lineage() binding.Lineage
	// Resolve returns the exact current target of a native session or a
	// refusal.
	Resolve(ctx context.Context, worktreeID, nativeSession string) (Target, error)
	// Deliver sends one retained envelope. A nil error means the Hub
	// acknowledged it; status is "accepted" or "duplicate".
	Deliver(ctx context.Context, env *spool.Envelope) (status string, err error)
	Close() error
}

// ConnectionLooker is what a HubOpener may offer besides Open: the lineage
// of a checkout's connection without opening the Hub (ErrNoConnection when
// there is none), so that a hook that leaves its event in the intake never
// opens the Hub.
type ConnectionLooker interface {
	LookupConnection(root string) (binding.Lineage, error)
}

// HubOpener opens the Hub of a checkout, or fails with ErrNoConnection.
type HubOpener interface {
	Open(ctx context.Context, root string) (Hub, error)
}

// Delivery bounds of one hook invocation.
const (
	ResolveTimeout   = 2 * time.Second
	DeliveryTimeout  = 5 * time.Second
	DeliveryPageSize = 10
	// IntakeBackpressure is the intake backlog from which a hook that finds
	// the lock busy waits for it (and does the full work: admission, its
	// own event, delivery) instead of adding to the intake: lock holders
	// then keep up with what the hooks produce, so neither the intake nor
	// the pending envelopes grow without bound under sustained concurrency.
	IntakeBackpressure = 32
	// PendingBackpressure is the same for undelivered envelopes: past it, busy
	// hooks wait so that delivery (at most one page per holder) keeps up.
	PendingBackpressure = 64
	// BackgroundPendingBackpressure is PendingBackpressure when a
	// background deliverer delivers (Backgrounder): hooks then deliver
	// nothing themselves, so the pending backlog may grow larger while the
	// deliverer catches up, but not without bound: past it, busy hooks
	// wait for the lock and every lock holder also delivers a page
	// in-process, as without a deliverer.
	BackgroundPendingBackpressure = 1024
	// BackgroundIntakeBackpressure is IntakeBackpressure with a background
	// deliverer, which admits waiting intake files in every round (its
	// own lock acquisitions): the intake then absorbs a burst of
	// concurrent hooks (each one durable intake file, no lock), bounded
	// by it, by spool.MaxIntakeFiles and by the spool's limits.
	BackgroundIntakeBackpressure = 256
)

// deliveryLimit is how many envelopes a lock holder delivers: the normal
// page, plus twice what it admitted from the intake (each admitted event may
// bring an action or gap record), so delivery keeps pace with admission.
func deliveryLimit(res *HookResult) int {
	return min(DeliveryPageSize+2*res.Admitted, 4*DeliveryPageSize)
}

// HookResult says what one hook invocation retained and delivered.
type HookResult struct {
	// Ignored is true when the event is not captured (unrecognised, no
	// binding covers the payload's cwd, or the binding has no connection).
	Ignored bool
	Reason  string
	Spool   string
	Seq     uint64
	// Deferred is true when no exact target was resolved and only a
	// sanitized local fact was kept.
	Deferred bool
	// Delivered and Failed count this invocation's delivery attempts.
	Delivered, Failed int
	// DeliveryErr is the first delivery error, reported as a warning.
	DeliveryErr error
	// Refused counts this invocation's envelopes the Hub permanently
	// refused (see RefusedError).
	Refused int
	// Claim is the claim status of a provider-identified occurrence
	// ("new", "duplicate", "conflict", "unrecorded"), empty otherwise.
	Claim string
	// Duplicate is true for an exact re-run: nothing was appended.
	Duplicate bool
	// Action says what the tool call's execution rule recorded (action.go:
	// started, finished, their duplicates, conflict, ...); empty when no
	// rule applies.
	Action string
	// Intake names the intake file this event was written to when the
	// spool lock was busy (admitted by a later lock holder).
	Intake string
	// Admitted counts the earlier intake files this invocation admitted.
	Admitted int
	// Quarantined counts the intake files this invocation moved into the
	// spool's quarantine after their admission failed maxAdmitAttempts
	// times (each named by an admission_failed gap; admitmark.go).
	Quarantined int
	// Warning is a capacity warning of this invocation (usage past 80%,
	// automatic compaction refused), given at most once per session and
	// kind (compaction.go).
	Warning string
	// Compacted is the automatic compaction this invocation ran, if any.
	Compacted *spool.CompactReport
	// intakeBase is the intake count just before the last admission's
	// listing (admitIntake).
	intakeBase int
	// lastTransient is the last transient delivery failure.
	lastTransient error
	// held counts the intake files the last admission left waiting for
	// the Hub (holdNewSession), heldErr why.
	held    int
	heldErr error
}

// HandleClaudeHook reads one Claude Code hook payload from in, finds the
// enabled binding whose root contains the payload's cwd, resolves the exact
// current target through the checkout's client connection, durably appends
// the mapped event to the binding's spool (a sanitized deferred fact when no
// target resolves), then replays at most ten pending envelopes within the
// delivery deadline. A binding whose connection is absent, or points at
// another repository or Hub than the binding was saved for, captures
// nothing. The caller turns any error into a warning: hooks fail open.
func HandleClaudeHook(ctx context.Context, store StateDir, hubs HubOpener, in io.Reader, now time.Time) (*HookResult, error) {
	return HandleAgentHook(ctx, store, hubs, adapter.Claude{}, in, now)
}

// HandleAgentHook is HandleClaudeHook for the hook payload of any agent
// adapter (Claude Code, Codex CLI): the adapter decodes and maps, the rest
// is the same capture.
func HandleAgentHook(ctx context.Context, store StateDir, hubs HubOpener, a adapter.Adapter, in io.Reader, now time.Time) (*HookResult, error) {
	b, err := fsutil.ReadBounded(in, agent.MaxPayloadBytes)
	if err != nil {
		return nil, fmt.Errorf("read hook payload: %w", err)
	}
	p, err := a.Decode(b)
	if err != nil {
		return nil, err
	}
	return HandleAgentPayload(ctx, store, hubs, a, b, p, now)
}

// HandleAgentPayload is HandleAgentHook for a payload already read (b, at
// most agent.MaxPayloadBytes) and decoded by a (p), with the dependencies
// hubs offers (DepsOf).
func HandleAgentPayload(ctx context.Context, store StateDir, hubs HubOpener, a adapter.Adapter, b []byte, p *agent.Payload, now time.Time) (*HookResult, error) {
	return RunHook(ctx, store, DepsOf(hubs), a, b, p, now)
}

// HookDeps are what a hook's capture uses besides the config directory.
type HookDeps struct {
	// Hubs opens the checkout's Hub (the locked path resolves and
	// delivers through it).
	Hubs HubOpener
	// Lookup, when not nil, finds the checkout's connection without
	// opening the Hub, so a hook that leaves its event in the intake never
	// opens it; nil: the Hub is opened to learn its lineage.
	Lookup ConnectionLooker
	// Deliverer, when not nil, starts the detached deliverer: the hook
	// then writes its event into the intake (ModeIntakeFirst) and the
	// deliverer admits and delivers it; nil: the locked path, which
	// delivers in-process.
	Deliverer Backgrounder
}

// DepsOf is the HookDeps of an opener that may also offer the cheap
// connection lookup (ConnectionLooker) and the deliverer's start
// (Backgrounder): the form of callers that hand one value.
func DepsOf(hubs HubOpener) HookDeps {
	d := HookDeps{Hubs: hubs}
	d.Lookup, _ = hubs.(ConnectionLooker)
	d.Deliverer, _ = hubs.(Backgrounder)
	return d
}

// HookMode is how a hook's capture writes its event.
type HookMode int

const (
	// ModeLocked: the hook takes the spool lock (without waiting; busy, it
	// writes the intake) and does the full work: resolution, claim,
	// append, admission, and delivery of a page in-process.
	ModeLocked HookMode = iota
	// ModeIntakeFirst: the hook writes one durable intake file without the
	// spool lock and without the Hub, and makes sure the detached
	// deliverer runs, which admits and delivers the event. Past the
	// backlog bounds the hook waits for the lock instead (backpressure).
	ModeIntakeFirst
)

func (m HookMode) String() string {
	if m == ModeIntakeFirst {
		return "intake-first"
	}
	return "locked"
}

// hookPlan is what a hook decides before it writes: its mode and the
// bounds that go with it.
type hookPlan struct {
	Mode HookMode
	// PendingBound and IntakeBound are the backlogs (undelivered
	// envelopes, waiting intake files) from which the hook waits for the
	// spool lock and does the full work (backpressure).
	PendingBound, IntakeBound int
	// AdmitLeft and AdmitBudget bound what the hook admits from the intake
	// under the lock.
	AdmitLeft   int
	AdmitBudget time.Duration
}

// planHook decides a hook's mode: intake-first whenever a detached
// deliverer can be started (every agent's hook alike), else locked.
func planHook(deliverer bool) hookPlan {
	if deliverer {
		return hookPlan{Mode: ModeIntakeFirst, PendingBound: BackgroundPendingBackpressure, IntakeBound: BackgroundIntakeBackpressure,
			AdmitLeft: backgroundAdmitPerHook, AdmitBudget: backgroundAdmitBudget}
	}
	return hookPlan{Mode: ModeLocked, PendingBound: PendingBackpressure, IntakeBound: IntakeBackpressure,
		AdmitLeft: maxAdmitPerHook, AdmitBudget: admitBudget}
}

// writeStep is how a hook that found the spool lock busy (or, intake-first,
// did not try it) writes its event.
type writeStep int

const (
	// stepIntake: one durable intake file, without the lock.
	stepIntake writeStep = iota
	// stepWaitLock: wait for the lock (bounded) and do the full work; a
	// wait that expires still writes the intake.
	stepWaitLock
)

// whenBusy decides how a hook without the spool lock writes its event,
// from the spool's backlog: past the plan's bounds the lock holders are
// behind, and the hook waits for the lock and does the full work, so that
// neither the intake nor the pending envelopes grow without bound.
func (pl hookPlan) whenBusy(waiting, pending int) writeStep {
	if pl.backpressure(waiting, pending) {
		return stepWaitLock
	}
	return stepIntake
}

// backpressure reports whether the spool's backlog (waiting intake files,
// undelivered envelopes) makes a hook of plan wait for the spool lock.
func (pl hookPlan) backpressure(waiting, pending int) bool {
	return waiting >= pl.IntakeBound || pending >= pl.PendingBound
}

// deliverInline reports whether a lock-holding hook of plan delivers a page
// in-process: always on the locked path; intake-first only past the
// deliverer's backlog bound, so that growth stays bounded when the
// deliverer falls behind.
func (pl hookPlan) deliverInline(pending int) bool {
	return pl.Mode == ModeLocked || pending >= BackgroundPendingBackpressure
}

// RunHook is the capture of one hook payload already read (b, at most
// agent.MaxPayloadBytes) and decoded by a (p): the one hook pipeline
// (internal/hookrun) decodes once and hands the same payload to the
// changelog. It decides (planHook, then hookPlan's decisions on what it
// sees of the spool) and executes (hookRun).
func RunHook(ctx context.Context, store StateDir, deps HookDeps, a adapter.Adapter, b []byte, p *agent.Payload, now time.Time) (*HookResult, error) {
	cfg, err := store.Bindings().Load()
	if err != nil {
		return nil, err
	}
	return RunHookAt(ctx, store, deps, a, b, p, now, cfg.Lookup(filepath.Clean(p.Cwd)))
}

// RunHookAt is RunHook for the binding bd the hook pipeline looked up
// (internal/hookrun: one lookup of the checkout for the capture and the
// changelog, binding.Config.LookupFrom); nil: no enabled binding contains
// the payload's cwd, and the event is ignored.
func RunHookAt(ctx context.Context, store StateDir, deps HookDeps, a adapter.Adapter, b []byte, p *agent.Payload, now time.Time, bd *binding.Binding) (*HookResult, error) {
	if bd == nil {
		return &HookResult{Ignored: true, Reason: "no enabled capture binding contains " + filepath.Clean(p.Cwd)}, nil
	}
	rec, ok, err := a.Map(p, bd.CaptureMode, now)
	if err != nil {
		return nil, err
	}
	if !ok {
		return &HookResult{Ignored: true, Reason: "event " + p.HookEventName + " is not captured", Spool: bd.Spool}, nil
	}
	h := &hookRun{ctx: ctx, store: store, deps: deps, a: a, b: b, p: p, now: now, plan: planHook(deps.Deliverer != nil), bd: bd, rec: rec}
	defer func() {
		if h.hub != nil {
			h.hub.Close()
		}
	}()
	if r, err := h.connect(); r != nil || err != nil {
		return r, err
	}
	if err := h.observe(); err != nil {
		return nil, err
	}
	h.res = &HookResult{Spool: bd.Spool}
	// OpenAppender skips the open-time recovery, and one Session does the
	// append and the delivery bookkeeping under a single guarded lock
	// acquisition (one identity revalidation, and the pending summary
	// instead of a scan of the retained history, per hook).
	if h.sp, err = store.openHookSpool(bd.Spool); err != nil {
		return nil, err
	}
	ss, err := h.receive()
	if ss == nil || err != nil {
		if err != nil {
			return nil, err
		}
		return h.res, nil // in the intake
	}
	if h.hub == nil {
		if r, err := h.openHub(); r != nil || err != nil {
			ss.Close()
			return r, err
		}
	}
	defer h.followUp() // after the session and the ledger are closed
	defer ss.Close()
	return h.underLock(ss)
}

// hookRun is the executor of one hook's capture: what RunHook found and
// holds while it follows its plan.
type hookRun struct {
	ctx   context.Context
	store StateDir
	deps  HookDeps
	a     adapter.Adapter
	b     []byte
	p     *agent.Payload
	now   time.Time
	plan  hookPlan
	bd    *binding.Binding
	rec   *event.Record
	obs   Observation
	// writeSession, when not nil, writes a new session's record (an
	// intake-first hook writes it beside its intake write).
	writeSession func() error
	hub          Hub
	sp           *spool.Spool
	res          *HookResult
	// backlog is the pending backlog the hook last saw.
	backlog int
}

// noConnection is the result of a checkout without a client connection.
func (h *hookRun) noConnection() *HookResult {
	return &HookResult{Ignored: true, Reason: "the checkout has no client connection", Spool: h.bd.Spool}
}

// moved is the refusal of a checkout connected elsewhere than its binding
// was saved for.
func (h *hookRun) moved(lin binding.Lineage) error {
	if h.bd.Hub == "" || binding.SameRepo(lin, h.bd.Lineage()) {
		return nil
	}
	return fmt.Errorf("capture binding of %s was saved for %s, but the checkout is now connected to %s; nothing captured", h.bd.Root, binding.DescribeLineage(h.bd.Lineage()), binding.DescribeLineage(lin))
}

// openHub opens the checkout's Hub (a result: the event is ignored).
func (h *hookRun) openHub() (*HookResult, error) {
	hub, err := h.deps.Hubs.Open(h.ctx, h.bd.Root)
	if errors.Is(err, binding.ErrNoConnection) {
		return h.noConnection(), nil
	}
	if err != nil {
		return nil, err
	}
	h.hub = hub
	return nil, h.moved(hub.Lineage())
}

// connect checks the checkout's connection: with a cheap lookup the Hub
// (an embedded store is an SQLite database to open) is opened only by a
// hook that holds the spool lock; a hook that leaves its event in the
// intake never opens it.
func (h *hookRun) connect() (*HookResult, error) {
	if h.deps.Lookup == nil {
		return h.openHub()
	}
	lin, err := h.deps.Lookup.LookupConnection(h.bd.Root)
	if errors.Is(err, binding.ErrNoConnection) {
		return h.noConnection(), nil
	}
	if err != nil {
		return nil, err
	}
	return nil, h.moved(lin)
}

// observe records the session: an intake-first hook writes a new
// session's record beside its event's intake write (observeStart says
// when that is safe); any other hook records the session first. A mode
// the session started in re-maps the event.
func (h *hookRun) observe() error {
	var err error
	if h.plan.Mode == ModeIntakeFirst {
		h.obs, h.writeSession, err = h.store.observeStart(h.bd, h.p.SessionID, h.p.HookEventName, h.rec.Source)
	} else {
		h.obs, err = h.store.Observe(h.bd, h.p.SessionID, h.p.HookEventName, h.rec.Source)
	}
	if err != nil {
		return fmt.Errorf("session record: %w", err)
	}
	if h.obs.Mode != h.bd.CaptureMode {
		if h.rec, _, err = h.a.Map(h.p, h.obs.Mode, h.now); err != nil {
			return err
		}
	}
	return nil
}

// receive writes the event as the plan says: into the intake (nil
// session: done), or under the spool lock it returns held. An
// intake-first hook takes no spool lock and never opens the Hub; the
// deliverer it makes sure of resolves, admits and delivers the event. A
// locked hook that finds the lock busy writes the intake too; past the
// backlog bounds either waits for the lock (backpressure). Only a failed
// intake write makes a hook wait for the lock otherwise.
func (h *hookRun) receive() (*spool.Tx, error) {
	var ss *spool.Tx
	err := spool.ErrBusy
	if h.plan.Mode == ModeLocked {
		ss, err = h.sp.TryBegin(h.ctx, IntakeLockWait)
	}
	if errors.Is(err, spool.ErrBusy) {
		h.backlog = h.sp.PendingBacklog()
		if n, werr := h.sp.WaitingIntake(); werr == nil && h.plan.whenBusy(n, h.backlog) == stepWaitLock {
			// A wait that expires still leaves the event in the intake.
			if ss, err = h.sp.Begin(h.ctx); err != nil && !lockWaitExpired(err) {
				return nil, err
			} else if err != nil {
				err = spool.ErrBusy
			}
		}
	}
	if errors.Is(err, spool.ErrBusy) {
		ierr := h.toIntake()
		if ierr == nil {
			h.followUp()
			return nil, nil
		}
		// The intake is full or could not take this record (too large, no
		// space, an I/O error): take the locked path, which records the
		// event, or its loss with its reserved sequence, as without the
		// intake.
		if ss, err = h.sp.Begin(h.ctx); err != nil {
			return nil, h.lostAtReceipt(ierr, err)
		}
	}
	if err == nil && h.writeSession != nil {
		// Backpressure took the locked path without an intake write: the
		// session is recorded first, as Observe does.
		if werr := h.writeSession(); werr != nil {
			ss.Close()
			return nil, fmt.Errorf("session record: %w", werr)
		}
	}
	return ss, err
}

// toIntake writes the event into the intake, with the session's record
// and setup artifact beside it, each durable before the hook answers: a
// new session's first hook waits for about one round of fsyncs, not three.
// What the locked path does with the raw payload or the held lock the hook
// does here: it writes the setup artifact, and warns once per session from
// the spool summary when usage passes UsageWarnPercent.
func (h *hookRun) toIntake() error {
	var side sync.WaitGroup
	var sessionErr, setupErr error
	if ws := h.writeSession; ws != nil {
		// Only a new session has writes to overlap; every other event
		// stays on one goroutine.
		h.writeSession = nil
		side.Add(2)
		go func() { defer side.Done(); sessionErr = ws() }()
		go func() { defer side.Done(); setupErr = h.store.intakeSetup(h.bd, h.p.SessionID, h.b) }()
	} else {
		setupErr = h.store.intakeSetup(h.bd, h.p.SessionID, h.b)
	}
	name, ierr := writeIntake(h.ctx, h.store, h.sp, h.bd, h.p, h.rec, h.obs, h.now)
	side.Wait()
	res := h.res
	if setupErr != nil {
		res.Warning = setupErr.Error()
	}
	if sessionErr != nil {
		// The event is kept; a later hook of the session that finds no
		// record reports it as started late (a gap, never a hole hidden).
		res.Warning = joinWarning(res.Warning, "session record: "+sessionErr.Error())
	}
	if ierr != nil {
		return ierr
	}
	res.Intake = name
	if u, l, ok := h.sp.SummaryUsage(); ok && res.Warning == "" {
		usageWarning(h.store, h.bd, h.p.SessionID, u, l, res)
	}
	return nil
}

// lostAtReceipt is the error of an event that neither the intake nor the
// lock took: lost, but not silently. The loss is noted under the session's
// target at receipt, and the next lock holder publishes it there as a
// capture_interrupted gap over sequences it reserves for it.
func (h *hookRun) lostAtReceipt(ierr, err error) error {
	reason := lossReason(ierr) // no space, an I/O error, a quota
	if reason == "" && lockWaitExpired(err) {
		reason = "lock_timeout"
	} else if reason == "" {
		reason = event.GapReasonWriteFailed
	}
	detail := "intake: " + ierr.Error() + "; spool lock: " + err.Error()
	if nerr := h.store.noteLostAtReceipt(h.bd.Spool, h.rec, h.p.SessionID, h.obs.target, reason, detail, h.now); nerr == nil {
		return fmt.Errorf("%w; the intake write failed too (%v), so the next hook records a capture_interrupted gap (%s) for this event", err, ierr, reason)
	}
	return fmt.Errorf("%w; the intake write failed too: %v", err, ierr)
}

// followUp closes the intake's race with a holder that is letting go: a
// hook that wrote an intake file, and a holder after it released the
// lock, look once more and admit what waits if the lock is free now (if it
// is not, that holder does the same after its release), so no intake file
// waits for a later session's hook. With a deliverer, which admits what
// waits (every round, and once more after it lets its lock go), it makes
// sure one runs.
func (h *hookRun) followUp() {
	if h.plan.Mode == ModeIntakeFirst {
		ensureDeliverer(h.ctx, h.store, h.bd, h.deps.Deliverer, h.deps.Hubs, h.res, deliveryLimit(h.res))
		return
	}
	for range 3 {
		// Files held for the Hub (holdNewSession) are not for this
		// follow-up: it would only hold them again.
		if n, err := h.sp.WaitingIntake(); err != nil || n <= h.res.held {
			return
		}
		if !h.admitWaiting() {
			return
		}
	}
}

// admitWaiting takes the spool lock if it is free and admits what waits in
// the intake; false when it could not.
func (h *hookRun) admitWaiting() bool {
	fs, err := h.sp.TryBegin(h.ctx, 0)
	if err != nil {
		return false
	}
	defer fs.Close()
	if h.hub == nil {
		if r, err := h.openHub(); r != nil || err != nil {
			return true
		}
	}
	led, err := h.store.OpenLedger(h.bd.Spool)
	if err != nil {
		return true
	}
	defer led.Close()
	stream, err := led.BindStream(h.sp.ObservationScope())
	if err != nil {
		return true
	}
	fs.SetStream(stream)
	adm := &admission{deadline: time.Now().Add(admitBudget), left: maxAdmitPerHook}
	admitIntake(h.ctx, h.store, led, fs, h.sp, h.bd, h.hub, adm, h.res)
	return true
}

// resolve resolves the session's exact target through the Hub (an error:
// deferred, the route copies the session's last exact target) and keeps
// it for later intake-first hooks of the session. An unresolved
// PreToolUse of a ruled tool keeps the source it ran on, when possible
// (seed); a failure leaves it absent.
func (h *hookRun) resolve(ss *spool.Tx) (Target, error) {
	rctx, cancel := context.WithTimeout(h.ctx, ResolveTimeout)
	t, rerr := resolveSession(rctx, h.hub, h.bd.WorktreeID, h.p.SessionID)
	cancel()
	if rerr != nil {
		t = Target{}
	} else if werr := h.store.rememberTarget(h.bd, h.p.SessionID, t); werr != nil {
		// Later intake-first hooks of the session then record an older
		// target (or none) at receipt; the event itself is unaffected.
		h.res.Warning = joinWarning(h.res.Warning, werr.Error())
	}
	if rerr != nil && h.rec.Kind == event.ToolStart {
		if _, ok := ruleFor(h.bd, h.rec.ToolName); ok {
			if sb, err := captureSource(h.ctx, h.bd.Root, sourceOptions{baseRef: h.bd.BaseRef, store: ss}); err == nil {
				h.rec.DeferredSource = sb
			}
		}
	}
	return t, rerr
}

// underLock is the locked part: resolution, the earlier losses and intake
// files, this event's claim and append, its action, the transcript step,
// delivery where the plan says so, and maintenance.
func (h *hookRun) underLock(ss *spool.Tx) (*HookResult, error) {
	res, bd := h.res, h.bd
	t, rerr := h.resolve(ss)
	if h.plan.Mode == ModeIntakeFirst {
		if n, ok := ss.PendingCount(); ok {
			h.backlog = n
		} else if h.backlog == 0 {
			h.backlog = h.sp.PendingBacklog()
		}
	}
	inline := h.plan.deliverInline(h.backlog)
	led, err := h.store.OpenLedger(bd.Spool)
	if err != nil {
		return nil, err
	}
	defer led.Close()
	// The ledger's stream is this spool's identity space on the Hub: a new
	// ledger (new spool, re-enable, second worktree, lost ledger) starts a
	// new one at sequence 1, so nothing already in the spool (legacy or
	// imported local-only records included) raises its floor, and every
	// record appended in this Session carries it.
	stream, err := led.BindStream(h.sp.ObservationScope())
	if err != nil {
		return nil, err
	}
	ss.SetStream(stream)
	// Records an earlier hook could not append (disk full, I/O error)
	// become capture_interrupted gaps naming their reserved sequences.
	if _, err := publishLost(h.store.ledgerDir(bd.Spool), ss, led, h.now); err != nil {
		res.DeliveryErr = err
	}
	// Earlier events waiting in the intake go first (receipt order). When
	// more wait than one hook admits, this event queues behind them.
	adm := &admission{deadline: time.Now().Add(h.plan.AdmitBudget), left: h.plan.AdmitLeft}
	more, ierr := admitIntake(h.ctx, h.store, led, ss, h.sp, bd, h.hub, adm, res)
	if ierr == nil && more {
		name, werr := writeIntake(h.ctx, h.store, h.sp, bd, h.p, h.rec, h.obs, h.now)
		if werr == nil {
			res.Intake = name
			if inline {
				deliver(h.ctx, ss, led, h.hub, h.now, res, deliveryLimit(res))
			}
			maintain(h.store, ss, bd, h.p.SessionID, res) // a backlog must not keep compaction from running
			return res, nil
		}
	}
	if ierr == nil && holdOwnEvent(h.ctx, h.store, led, h.sp, bd, h.p, h.rec, h.obs, rerr, h.now, res) {
		// A new session's event while the Hub cannot answer: it waits in
		// the intake, as the deliverer's admission keeps such events
		// (intake.go), and is admitted under its Work once the Hub answers.
		maintain(h.store, ss, bd, h.p.SessionID, res)
		return res, nil
	}
	if rerr != nil {
		t = h.checkoutAtReceipt()
	}
	cerr := h.record(ss, led, t, rerr)
	// Delivery runs even when this event was not appended (a conflict, a
	// paused spool): earlier retained envelopes still go out. It keeps
	// pace with what this hook admitted (the soak showed a short page
	// during bursts leaving thousands of envelopes pending).
	if inline {
		deliver(h.ctx, ss, led, h.hub, h.now, res, deliveryLimit(res))
	}
	// Events that arrived in the intake while this hook held the lock
	// (its delivery included) are admitted before it lets go.
	if _, aerr := admitIntake(h.ctx, h.store, led, ss, h.sp, bd, h.hub, adm, res); aerr != nil && ierr == nil {
		ierr = aerr
	}
	if cerr == nil && ierr != nil {
		cerr = ierr
	}
	maintain(h.store, ss, bd, h.p.SessionID, res) // compaction policy, capacity warnings
	return res, cerr
}

// checkoutAtReceipt is the locked path's half of receiptTargetAt for an
// event the Hub could not resolve (unreachable or refused) and the intake
// could not hold (holdOwnEvent: full, too large, an I/O error): a session
// without a target of its own whose checkout had a Work and generation at
// receipt (Observation.checkout) copies that target, as an intake file of
// it would, instead of staying unassociated for good. Otherwise the zero
// Target: the route copies the session's last exact target, if any.
func (h *hookRun) checkoutAtReceipt() Target {
	if h.obs.target != nil {
		return Target{}
	}
	ck, _ := h.obs.checkout.target()
	return ck
}

// record claims and appends this hook's event, its action (execution
// rules), a loss note when neither it nor the spool's gap could be
// retained, and the transcript step.
func (h *hookRun) record(ss *spool.Tx, led *Ledger, t Target, rerr error) error {
	res, bd, p, rec := h.res, h.bd, h.p, h.rec
	if rerr != nil {
		rec.DeferredReason = DeferReason(rerr)
	}
	cerr := captureOccurrence(led, ss, bd, p.SessionID, PhaseFingerprint(p, rec), rec, h.obs, t, rerr == nil, res)
	if cerr == nil && superseded(rerr) && rec.Association == AssocCopied {
		// The copied target's generation is superseded: show its hole now.
		cerr = publishRefusedOutages(ss, led, rec, Target{WorkID: rec.WorkID, Generation: rec.Generation, Session: rec.CanonicalSession})
	}
	if cerr == nil {
		// Actions from execution rules (action.go): the action start or
		// finish of this tool call, appended in the same spool Session
		// after the event and before delivery. An exact re-run reaches its
		// retained receipt (a duplicate, or the append a crash cut off).
		res.Action, cerr = recordAction(h.ctx, actionEnv{ss: ss, sp: h.sp, configDir: h.store.Dir, bd: bd, p: p, rec: rec, now: h.now})
	}
	reason := lossReason(cerr)
	if reason == "" && errors.Is(cerr, spool.ErrGapNotRecorded) {
		reason = event.GapReasonWriteFailed
	}
	if reason != "" && res.Seq == 0 && !res.Duplicate &&
		(errors.Is(cerr, spool.ErrGapNotRecorded) || !errors.Is(cerr, spool.ErrCapturePaused)) {
		// Neither the record nor the spool's own gap is retained: keep the
		// loss where no new block is needed, for the next hook to publish.
		if nerr := noteLost(h.store.ledgerDir(bd.Spool), rec, p.SessionID, t, rerr == nil, reason, cerr.Error(), h.now); nerr == nil {
			cerr = fmt.Errorf("%w; the next hook records a capture_interrupted gap (%s) for it", cerr, reason)
		}
	}
	if rerr == nil && cerr == nil {
		// Transcript reader and setup artifact (transcript.go): bounded,
		// appends usage records to this same spool session.
		_, cerr = h.store.TranscriptStep(ss, bd, h.b, p, t, h.obs.Mode, h.now)
	}
	return cerr
}

// lockWaitExpired reports whether a bounded wait for the spool lock ended
// without it: the acquisition's own bound, or the hook's deadline (under
// heavy load a hook can reach its 15 s deadline inside the 10 s wait; its
// event then still goes to the intake, or is noted lost, never dropped).
func lockWaitExpired(err error) bool {
	return errors.Is(err, spool.ErrLockTimeout) || errors.Is(err, context.DeadlineExceeded)
}

// captureOccurrence routes, claims or reserves, and appends one mapped
// event: the first durable claim (or the bare reservation of an event
// without provider identity) is written before anything target-scoped is
// appended; a duplicate appends nothing and a conflict appends nothing and
// fails. With an exact target it first publishes the outages of earlier
// deferred occurrences, and gives a session whose earlier facts stayed
// unassociated one adapter_started_late gap.
func captureOccurrence(led *Ledger, ss *spool.Tx, bd *binding.Binding, observed, fingerprint string, rec *event.Record, obs Observation, t Target, resolved bool, res *HookResult) error {
	var lateGap bool
	lateReason := obs.Reason
	if resolved {
		if attributed, unassoc := led.Attributed(observed); !attributed && unassoc && !obs.StartedLate {
			// Every earlier fact of the session stayed unassociated: this
			// target's stream did not observe the start.
			lateGap, lateReason = true, "unassociated_before_target"
		}
		led.SetExact(observed, t)
	}
	lateGap = lateGap || obs.StartedLate
	route := led.RouteFor(observed, t, resolved)
	for _, r := range bd.ActionRules {
		if (rec.Kind == event.ToolStart || rec.Kind == event.ToolFinish) && r.Tool == rec.ToolName {
			route.Rule = r.String()
		}
	}
	uncertain := ""
	occ, identified := ProviderOccurrence(rec)
	claimed := false
	if identified {
		orig, status, err := led.Claim(occ, fingerprint, route)
		if err != nil {
			return err
		}
		res.Claim = status.String()
		if status == ClaimDuplicate && led.resuming() {
			// The re-admission of an intake file whose admission a crash
			// cut off after this append (admitmark.go): redo the rest under
			// the original route; the Session finds what was appended.
			status = ClaimResumed
		}
		switch status {
		case ClaimDuplicate:
			// An exact re-run (even after compaction): the original is
			// retained or was delivered; append nothing new.
			res.Duplicate, res.Deferred = true, orig.Deferred
			// The original route, for the action path's retained receipt,
			// and the original's spool sequence, which orders an action
			// start that a crash cut off after the append.
			rec.Sequenced, rec.Association, rec.Deferred = true, orig.Association, orig.Deferred
			rec.WorkID, rec.Generation, rec.CanonicalSession = orig.Target.WorkID, orig.Target.Generation, orig.Target.Session
			rec.Seq = led.appendedSeq(occ)
			return led.Flush()
		case ClaimConflict:
			if err := led.Flush(); err != nil {
				return err
			}
			return fmt.Errorf("%w: %s %s of session %s was already captured with different facts; nothing appended",
				ErrOccurrenceConflict, rec.HookEvent, occ.Identity, observed)
		case ClaimUnrecorded:
			uncertain = "claim_limit"
		case ClaimNew, ClaimResumed:
			claimed = true
		}
		route = orig
		if status == ClaimResumed {
			// The original claim was never appended: append it now under
			// its original route and sequence, nothing else.
			lateGap = false
		}
	} else if r := led.reservedRoute(); r != nil {
		// A re-admission after a crash: the sequence the cut-off attempt
		// reserved (admitmark.go), not a new one (which would leave a hole).
		route = *r
		if !Informational(rec.Kind) {
			uncertain = "no_provider_identity"
		}
	} else {
		if err := led.Reserve(observed, &route); err != nil {
			return err
		}
		if err := led.Flush(); err != nil {
			return err
		}
		if err := led.noteReserved(route); err != nil {
			return err
		}
		led.fail("capture.reserved")
		if !Informational(rec.Kind) {
			uncertain = "no_provider_identity"
		}
	}
	// The reservation is durable now: a crash from here on leaves a hole.
	stamp := func(r *event.Record) {
		r.Sequenced, r.Association, r.Deferred = true, route.Association, route.Deferred
		r.WorkID, r.Generation, r.CanonicalSession = route.Target.WorkID, route.Target.Generation, route.Target.Session
		// The stream the sequence was reserved in: a new reservation's is
		// the ledger's; a resumed claim keeps its original one, the legacy
		// stream "" for a claim a version 1 ledger made (appendInStream).
		r.Stream = route.Stream
		if route.Deferred {
			// No exact authorized target: keep only a sanitized local fact.
			r.Body = nil
			res.Deferred = true
			r.DeferredReason = rec.DeferredReason
		} else {
			r.DeferredReason = ""
		}
	}
	stamp(rec)
	rec.SharedSeq = route.SharedSeq
	var published []Outage
	if resolved {
		var err error
		if published, err = publishOutages(ss, led, rec); err != nil {
			return err
		}
		if err := publishDisabled(ss, led, rec, observed, rec.ObservedAt); err != nil { // disabled.go
			return err
		}
	}
	if lateGap {
		gap := &event.Record{
			Agent: rec.Agent, SessionID: rec.SessionID, Kind: event.KindGap, HookEvent: rec.HookEvent,
			ObservedAt: rec.ObservedAt, CaptureMode: rec.CaptureMode,
			Gap: &event.GapInfo{Kind: event.GapAdapterStartedLate, Reason: lateReason,
				Detail: "the session's original start was not observed; earlier history is not covered"},
		}
		stamp(gap)
		if _, err := appendInStream(ss, led, gap); err != nil {
			return fmt.Errorf("record the adapter_started_late gap: %w", err)
		}
	}
	seq, err := appendInStream(ss, led, rec)
	res.Seq = seq
	if err != nil {
		return err
	}
	if claimed {
		if err := led.MarkAppended(occ, seq); err != nil {
			return err
		}
	}
	if gap := redactedGap(rec, seq); gap != nil { // redacted.go
		stamp(gap)
		if _, err := appendInStream(ss, led, gap); err != nil {
			return fmt.Errorf("record %d retained; recording its redacted gap failed: %w", seq, err)
		}
	}
	if uncertain != "" {
		gap := &event.Record{
			Agent: rec.Agent, SessionID: rec.SessionID, Kind: event.KindGap, HookEvent: rec.HookEvent,
			ObservedAt: rec.ObservedAt, CaptureMode: rec.CaptureMode, SharedSeq: rec.SharedSeq,
			Gap: &event.GapInfo{Kind: event.GapIdentityUncertain, Reason: uncertain, AffectedSeq: seq,
				Detail: "the host gave no identity for this event: a retried hook cannot be told apart from a repeat"},
		}
		stamp(gap)
		if _, err := appendInStream(ss, led, gap); err != nil {
			return fmt.Errorf("record %d retained; recording its identity_uncertain gap failed: %w", seq, err)
		}
	}
	led.ClearOutages(published)
	return led.Flush()
}

// publishOutages makes earlier deferred occurrences that copied an exact
// target visible under that exact target: a deterministic
// capture_interrupted gap over the reserved range, for every outage. Where
// the current event would expose the hole by itself (same observed session
// and target, observed id equal to the canonical one) the gap is published
// too: a hole the Hub shows only as missing numbers says nothing of why,
// and whether a later event of that stream ever reaches the Hub is not
// this hook's to know (the soak found such unnamed holes). A later
// generation never absorbs the gap: it names the copied target. Outages
// stay recorded until the caller clears them after the append.
func publishOutages(ss *spool.Tx, led *Ledger, rec *event.Record) ([]Outage, error) {
	var done []Outage
	for _, o := range led.Outages() {
		if err := appendOutageGap(ss, led, rec, o); err != nil {
			return done, err
		}
		done = append(done, o)
	}
	return done, nil
}

// appendOutageGap appends the deterministic capture_interrupted gap of one
// outage under its copied target.
func appendOutageGap(ss *spool.Tx, led *Ledger, rec *event.Record, o Outage) error {
	gap := &event.Record{
		Agent: rec.Agent, SessionID: o.Observed, Kind: event.KindGap, HookEvent: "outage",
		ObservedAt: rec.ObservedAt, CaptureMode: rec.CaptureMode,
		WorkID: o.Target.WorkID, Generation: o.Target.Generation, CanonicalSession: o.Target.Session,
		Association: AssocCopied, Sequenced: true, SharedSeq: o.From, Stream: o.Stream,
		Gap: &event.GapInfo{Kind: event.GapCaptureInterrupted, Reason: "target_unavailable", FromSeq: o.From, ToSeq: o.To,
			Detail: "no exact target resolved for these occurrences; only sanitized local facts were kept"},
	}
	if _, err := appendInStream(ss, led, gap); err != nil {
		return fmt.Errorf("publish the outage gap of session %s: %w", o.Observed, err)
	}
	return nil
}

// publishRefusedOutages makes every outage under t visible at once: a
// takeover moved t's Work to a newer generation, so no later event can
// ever expose the hole under t, and no later resolution may absorb it. The
// gap names t; the Hub keeps a gap of an older generation where the hole
// is. (Outages of a target refused otherwise, a handed-over or finished
// Work, wait as before for the next resolved event: the Hub would refuse
// their gap while the generation is still current.)
func publishRefusedOutages(ss *spool.Tx, led *Ledger, rec *event.Record, t Target) error {
	var done []Outage
	for _, o := range led.Outages() {
		if o.Target != t {
			continue
		}
		if err := appendOutageGap(ss, led, rec, o); err != nil {
			return err
		}
		done = append(done, o)
	}
	led.ClearOutages(done)
	return led.Flush()
}

// targetRefused reports whether a resolution error is the Hub's refusal of
// the target (stale_generation, work_not_accepting, no_current_work, ...),
// as opposed to a Hub that could not answer.
// furthest extends a page's trailing run of local-only records by env and
// returns the run's envelope of the highest sequence: a page wraps around
// after the cursor, and the one attempt that passes the run must move the
// cursor past every record of it, never back to a wrapped lower sequence
// (which would leave the records after it pending for ever).
func furthest(run, env *spool.Envelope) *spool.Envelope {
	if run == nil || env.Record.Seq > run.Record.Seq {
		return env
	}
	return run
}

func targetRefused(err error) bool {
	ae, ok := api.AsError(err)
	return ok && ae.Code == api.CodeTargetRefused
}

// superseded reports whether a resolution error says a takeover moved the
// Work to a newer generation (stale_generation).
func superseded(err error) bool {
	ae, ok := api.AsError(err)
	return ok && ae.Code == api.CodeTargetRefused && ae.Reason == api.ReasonStaleGeneration
}

// deliver replays up to page (at most DeliveryPageSize) pending envelopes in
// sequence order within DeliveryTimeout. Only an acknowledgement writes the
// ack marker; every attempt advances the scheduling cursor. Local-only
// records (deferred facts, transcript conversation records) are never sent
// and take no place in the page: they are skipped without an attempt, and
// when a page held some the next, larger page is read (at most four
// pages), so facts that stay local forever never crowd deliverable
// envelopes out.
//
// A permanent refusal (RefusedError) is recorded as outcome "refused",
// listed in the ledger once and, the first time, marked on the Hub by a
// hub_refused gap (refused.go); the hook warns about it.
func deliver(ctx context.Context, sp *spool.Tx, led *Ledger, hub Hub, now time.Time, res *HookResult, limit int) {
	ctx, cancel := context.WithTimeout(ctx, DeliveryTimeout)
	defer cancel()
	page := limit
	// The one retry policy (retrypolicy.go): no attempt before the next
	// one is due after transient failures; a transient failure stops
	// this hook's delivery and schedules the next attempt.
	var bo backoffState
	if led != nil {
		if bo = readBackoff(led.dir); !bo.due(time.Now()) {
			if res.DeliveryErr == nil {
				res.DeliveryErr = bo.waiting()
			}
			return
		}
	}
	// Refused envelopes are retried with backoff (refusedretry.go).
	var retries RefusalRetries
	if led != nil {
		retries = readRetries(led.dir)
	}
	retried := false
	defer func() {
		if retried {
			if err := writeRetries(led.dir, &retries); err != nil && res.DeliveryErr == nil {
				res.DeliveryErr = err
			}
			if err := led.Flush(); err != nil && res.DeliveryErr == nil {
				res.DeliveryErr = err
			}
		}
	}()
	for round := 0; ; round++ {
		envs, err := sp.Pending(page)
		if err != nil {
			res.DeliveryErr = err
			return
		}
		localOnly := 0
		var trailing *spool.Envelope // the local-only run ending the page
		for i := range envs {
			env := &envs[i]
			if ctx.Err() != nil || res.Delivered+res.Failed >= limit {
				return
			}
			if env.Record.Deferred || env.Record.WorkID == "" || transcript.LocalOnly(&env.Record) {
				localOnly++
				trailing = furthest(trailing, env)
				continue
			}
			if retries.waiting(env.Record.Seq, env.Digest, now) {
				// Refused and not yet due for its retry: passed over (its
				// last attempt stays the refusal); it takes no place in
				// the page.
				localOnly++
				continue
			}
			trailing = nil
			a := spool.Attempt{Seq: env.Record.Seq, Digest: env.Digest, At: now}
			if status, err := hub.Deliver(ctx, env); err != nil {
				a.Outcome, a.Detail = "failed", err.Error()
				res.Failed++
				if res.DeliveryErr == nil {
					res.DeliveryErr = err
				}
				var re *RefusedError
				if errors.As(err, &re) {
					a.Outcome = "refused"
					res.Refused++
					if herr := handleRefusal(sp, led, env, re, now); herr != nil {
						res.DeliveryErr = fmt.Errorf("%w; and: %v", err, herr)
					}
					if led != nil {
						retries.refused(env, re.Reason, now, 0)
						retried = true
					}
				} else {
					// Transient: record the attempt, schedule the next one
					// and stop, as the deliverer does.
					if led != nil {
						if _, berr := noteFailure(led.dir, TransientRetry, time.Now(), err); berr != nil {
							res.DeliveryErr = fmt.Errorf("%w; and: %v", err, berr)
						}
					}
					if len(a.Detail) > 300 {
						a.Detail = a.Detail[:300]
					}
					if rerr := sp.RecordAttempt(a); rerr != nil && res.DeliveryErr == nil {
						res.DeliveryErr = rerr
					}
					return
				}
			} else {
				a.Outcome = status
				if err := sp.Ack(env.Record.Seq, env.Digest); err != nil {
					a.Outcome, a.Detail = "failed", "acknowledged by the Hub but the ack marker failed: "+err.Error()
					if res.DeliveryErr == nil {
						res.DeliveryErr = err
					}
				} else {
					res.Delivered++
					if led != nil && bo.Failures > 0 {
						clearBackoff(led.dir)
						bo = backoffState{}
					}
					if led != nil && retries.accepted(env, status, now) {
						led.clearRefusal(env.Record.Seq, env.Digest)
						a.Detail = "accepted on a retry after the Hub had refused it"
						retried = true
					}
				}
			}
			if len(a.Detail) > 300 {
				a.Detail = a.Detail[:300]
			}
			if err := sp.RecordAttempt(a); err != nil {
				if res.DeliveryErr == nil {
					res.DeliveryErr = err
				}
				return
			}
		}
		if trailing != nil {
			// One attempt for the last of a trailing run of local-only
			// records moves the cursor past the whole run, so however many
			// facts stay local, the next hook's page starts after them.
			a := spool.Attempt{Seq: trailing.Record.Seq, Digest: trailing.Digest, At: now, Outcome: "local_only",
				Detail: "local-only records (deferred facts, transcript conversation records) up to here: never delivered"}
			if err := sp.RecordAttempt(a); err != nil {
				if res.DeliveryErr == nil {
					res.DeliveryErr = err
				}
				return
			}
		}
		if localOnly == 0 || res.Failed > 0 || len(envs) < page || round == 3 {
			return
		}
		page *= 4
	}
}

// joinWarning joins two warnings of one hook into one line's text.
func joinWarning(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
