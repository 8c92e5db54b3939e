package capture

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/agentscm/agentscm/internal/agent/claude"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/fsutil"
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
	Lineage() Lineage
	// Resolve returns the exact current target of a native session or a
	// refusal.
	Resolve(ctx context.Context, worktreeID, nativeSession string) (Target, error)
	// Deliver sends one retained envelope. A nil error means the Hub
	// acknowledged it; status is "accepted" or "duplicate".
	Deliver(ctx context.Context, env *spool.Envelope) (status string, err error)
	Close() error
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
)

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
	// Claim is the claim status of a provider-identified occurrence
	// ("new", "duplicate", "conflict", "unrecorded"), empty otherwise.
	Claim string
	// Duplicate is true for an exact re-run: nothing was appended.
	Duplicate bool
	// Action says what the tool call's execution rule recorded (action.go:
	// started, finished, their duplicates, conflict, ...); empty when no
	// rule applies.
	Action string
	// Warning is a capacity warning of this invocation (usage past 80%,
	// automatic compaction refused), given at most once per session and
	// kind (compaction.go).
	Warning string
	// Compacted is the automatic compaction this invocation ran, if any.
	Compacted *spool.CompactReport
}

// HandleClaudeHook reads one Claude Code hook payload from in, finds the
// enabled binding whose root contains the payload's cwd, resolves the exact
// current target through the checkout's client connection, durably appends
// the mapped event to the binding's spool (a sanitized deferred fact when no
// target resolves), then replays at most ten pending envelopes within the
// delivery deadline. A binding whose connection is absent, or points at
// another repository or Hub than the binding was saved for, captures
// nothing. The caller turns any error into a warning: hooks fail open.
func HandleClaudeHook(ctx context.Context, store Store, hubs HubOpener, in io.Reader, now time.Time) (*HookResult, error) {
	b, err := fsutil.ReadBounded(in, claude.MaxPayloadBytes)
	if err != nil {
		return nil, fmt.Errorf("read hook payload: %w", err)
	}
	p, err := claude.DecodePayload(b)
	if err != nil {
		return nil, err
	}
	cfg, err := store.Load()
	if err != nil {
		return nil, err
	}
	cwd := filepath.Clean(p.Cwd)
	bd := cfg.ForPath(cwd)
	if bd == nil {
		if real, err := filepath.EvalSymlinks(cwd); err == nil {
			bd = cfg.ForPath(real)
		}
	}
	if bd == nil {
		return &HookResult{Ignored: true, Reason: "no enabled capture binding contains " + cwd}, nil
	}
	rec, ok, err := claude.Map(p, bd.CaptureMode, now)
	if err != nil {
		return nil, err
	}
	if !ok {
		return &HookResult{Ignored: true, Reason: "event " + p.HookEventName + " is not captured", Spool: bd.Spool}, nil
	}
	hub, err := hubs.Open(ctx, bd.Root)
	if errors.Is(err, ErrNoConnection) {
		return &HookResult{Ignored: true, Reason: "the checkout has no client connection", Spool: bd.Spool}, nil
	}
	if err != nil {
		return nil, err
	}
	defer hub.Close()
	if lin := hub.Lineage(); bd.Hub != "" && !sameRepo(lin, bd.lineage()) {
		return nil, fmt.Errorf("capture binding of %s was saved for %s, but the checkout is now connected to %s; nothing captured", bd.Root, describeLineage(bd.lineage()), describeLineage(lin))
	}
	obs, err := store.Observe(bd, p.SessionID, p.HookEventName, rec.Source)
	if err != nil {
		return nil, fmt.Errorf("session record: %w", err)
	}
	if obs.Mode != bd.CaptureMode {
		if rec, _, err = claude.Map(p, obs.Mode, now); err != nil {
			return nil, err
		}
	}
	res := &HookResult{Spool: bd.Spool}
	rctx, cancel := context.WithTimeout(ctx, ResolveTimeout)
	t, rerr := hub.Resolve(rctx, bd.WorktreeID, p.SessionID)
	cancel()
	// OpenAppender skips the open-time recovery, and one Session does the
	// append and the delivery bookkeeping under a single guarded lock
	// acquisition (one identity revalidation and recovery scan per hook).
	// The lock stays held across the Hub calls: hooks of one spool are
	// serialised, which is what a hook wants anyway.
	sp, err := spool.OpenAppender(bd.Spool)
	if err != nil {
		return nil, err
	}
	ss, err := sp.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer ss.Close()
	led, err := store.OpenLedger(bd.Spool)
	if err != nil {
		return nil, err
	}
	defer led.Close()
	if led.Fresh() {
		// A spool that already holds records may have delivered them
		// under spool-wide sequence numbers: new target streams start
		// above them so no number is ever reused.
		high, err := ss.MaxSeq()
		if err != nil {
			return nil, err
		}
		led.SetFloor(high)
	}
	// Delivery runs even when this event was not appended (a conflict, a
	// paused spool): earlier retained envelopes still go out.
	if rerr != nil && rec.Kind == event.ToolStart {
		if _, ok := ruleFor(bd, rec.ToolName); ok {
			// An unresolved PreToolUse of a ruled tool keeps the source it
			// ran on, when possible (seed); a failure leaves it absent.
			if sb, err := captureSource(ctx, bd.Root, sourceOptions{}); err == nil {
				rec.DeferredSource = sb
			}
		}
	}
	if rerr != nil {
		rec.DeferredReason = DeferReason(rerr)
	}
	cerr := captureOccurrence(led, ss, bd, p, rec, obs, t, rerr == nil, res)
	if cerr == nil {
		// Actions from execution rules (action.go): the action start or
		// finish of this tool call, appended in the same spool Session
		// after the event and before delivery. An exact re-run reaches its
		// retained receipt (a duplicate, or the append a crash cut off).
		var aerr error
		res.Action, aerr = recordAction(ctx, actionEnv{ss: ss, sp: sp, configDir: store.Dir, bd: bd, p: p, rec: rec, now: now})
		cerr = aerr
	}
	if rerr == nil && cerr == nil {
		// Transcript reader and setup artifact (transcript.go): bounded,
		// appends usage records to this same spool session.
		_, cerr = store.TranscriptStep(ss, bd, b, p, t, obs.Mode, now)
	}
	deliver(ctx, ss, hub, now, res)
	maintain(store, ss, bd, p.SessionID, res) // compaction policy, capacity warnings
	return res, cerr
}

// captureOccurrence routes, claims or reserves, and appends one mapped
// event: the first durable claim (or the bare reservation of an event
// without provider identity) is written before anything target-scoped is
// appended; a duplicate appends nothing and a conflict appends nothing and
// fails. With an exact target it first publishes the outages of earlier
// deferred occurrences, and gives a session whose earlier facts stayed
// unassociated one adapter_started_late gap.
func captureOccurrence(led *Ledger, ss *spool.Session, bd *Binding, p *claude.Payload, rec *event.Record, obs Observation, t Target, resolved bool, res *HookResult) error {
	observed := p.SessionID
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
		orig, status, err := led.Claim(occ, PhaseFingerprint(p, rec), route)
		if err != nil {
			return err
		}
		res.Claim = status.String()
		switch status {
		case ClaimDuplicate:
			// An exact re-run (even after compaction): the original is
			// retained or was delivered; append nothing new.
			res.Duplicate, res.Deferred = true, orig.Deferred
			// The original route, for the action path's retained receipt.
			rec.Sequenced, rec.Association, rec.Deferred = true, orig.Association, orig.Deferred
			rec.WorkID, rec.Generation, rec.CanonicalSession = orig.Target.WorkID, orig.Target.Generation, orig.Target.Session
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
	} else {
		if err := led.Reserve(observed, &route); err != nil {
			return err
		}
		if err := led.Flush(); err != nil {
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
		if published, err = publishOutages(ss, led, rec, observed, t); err != nil {
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
		if _, err := ss.Append(gap); err != nil {
			return fmt.Errorf("record the adapter_started_late gap: %w", err)
		}
	}
	seq, err := ss.Append(rec)
	res.Seq = seq
	if err != nil {
		return err
	}
	if claimed {
		if err := led.MarkAppended(occ); err != nil {
			return err
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
		if _, err := ss.Append(gap); err != nil {
			return fmt.Errorf("record %d retained; recording its identity_uncertain gap failed: %w", seq, err)
		}
	}
	led.ClearOutages(published)
	return led.Flush()
}

// publishOutages makes earlier deferred occurrences that copied an exact
// target visible under that exact target: a deterministic
// capture_interrupted gap over the reserved range, except where the
// current event exposes the hole directly (same observed session and
// target, observed id equal to the canonical one). A later generation never
// absorbs the gap: it names the copied target. Outages stay recorded until
// the caller clears them after the append.
func publishOutages(ss *spool.Session, led *Ledger, rec *event.Record, observed string, t Target) ([]Outage, error) {
	var done []Outage
	for _, o := range led.Outages() {
		direct := o.Observed == observed && o.Target == t && observed == t.Session
		if !direct {
			gap := &event.Record{
				Agent: rec.Agent, SessionID: o.Observed, Kind: event.KindGap, HookEvent: "outage",
				ObservedAt: rec.ObservedAt, CaptureMode: rec.CaptureMode,
				WorkID: o.Target.WorkID, Generation: o.Target.Generation, CanonicalSession: o.Target.Session,
				Association: AssocCopied, Sequenced: true, SharedSeq: o.From,
				Gap: &event.GapInfo{Kind: event.GapCaptureInterrupted, Reason: "target_unavailable", FromSeq: o.From, ToSeq: o.To,
					Detail: "no exact target resolved for these occurrences; only sanitized local facts were kept"},
			}
			if _, err := ss.Append(gap); err != nil {
				return done, fmt.Errorf("publish the outage gap of session %s: %w", o.Observed, err)
			}
		}
		done = append(done, o)
	}
	return done, nil
}

// deliver replays up to DeliveryPageSize pending envelopes in sequence
// order within DeliveryTimeout. Only an acknowledgement writes the ack
// marker; every attempt advances the scheduling cursor. Local-only records
// (deferred facts, transcript conversation records) are never sent and take
// no place in the page: they are skipped without an attempt, and when a
// page held some the next, larger page is read (at most four pages), so
// facts that stay local forever never crowd deliverable envelopes out.
func deliver(ctx context.Context, sp *spool.Session, hub Hub, now time.Time, res *HookResult) {
	ctx, cancel := context.WithTimeout(ctx, DeliveryTimeout)
	defer cancel()
	page := DeliveryPageSize
	for round := 0; ; round++ {
		envs, err := sp.Pending(page)
		if err != nil {
			res.DeliveryErr = err
			return
		}
		localOnly := 0
		for i := range envs {
			env := &envs[i]
			if ctx.Err() != nil || res.Delivered+res.Failed >= DeliveryPageSize {
				return
			}
			if env.Record.Deferred || env.Record.WorkID == "" || transcript.LocalOnly(&env.Record) {
				localOnly++
				continue
			}
			a := spool.Attempt{Seq: env.Record.Seq, Digest: env.Digest, At: now}
			if status, err := hub.Deliver(ctx, env); err != nil {
				a.Outcome, a.Detail = "failed", err.Error()
				res.Failed++
				if res.DeliveryErr == nil {
					res.DeliveryErr = err
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
		if localOnly == 0 || res.Failed > 0 || len(envs) < page || round == 3 {
			return
		}
		page *= 4
	}
}
