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
	obs, err := store.Observe(bd, p.SessionID, p.HookEventName, p.Source)
	if err != nil {
		return nil, fmt.Errorf("session record: %w", err)
	}
	if obs.Mode != bd.CaptureMode {
		if rec, _, err = claude.Map(p, obs.Mode, now); err != nil {
			return nil, err
		}
	}
	var gap *event.Record
	if obs.StartedLate {
		gap = &event.Record{
			Agent: rec.Agent, SessionID: rec.SessionID, Kind: event.KindGap, HookEvent: rec.HookEvent,
			ObservedAt: rec.ObservedAt, CaptureMode: rec.CaptureMode,
			Gap: &event.GapInfo{Kind: event.GapAdapterStartedLate, Reason: obs.Reason,
				Detail: "the session's original start was not observed; earlier history is not covered"},
		}
	}
	res := &HookResult{Spool: bd.Spool}
	rctx, cancel := context.WithTimeout(ctx, ResolveTimeout)
	t, rerr := hub.Resolve(rctx, bd.WorktreeID, p.SessionID)
	cancel()
	for _, r := range []*event.Record{gap, rec} {
		if r == nil {
			continue
		}
		if rerr == nil {
			r.WorkID, r.Generation, r.CanonicalSession = t.WorkID, t.Generation, t.Session
		} else {
			// No exact authorized target: keep only a sanitized local fact.
			r.Body = nil
			r.Deferred = true
			res.Deferred = true
		}
	}
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
	if gap != nil {
		if _, err := ss.Append(gap); err != nil {
			return res, fmt.Errorf("record the adapter_started_late gap: %w", err)
		}
	}
	seq, err := ss.Append(rec)
	res.Seq = seq
	if err != nil && seq == 0 {
		return res, err
	}
	appendErr := err
	// Transcript reader and setup artifact (transcript.go): bounded, appends
	// usage records to this same spool session; its error is a warning.
	if rerr == nil && appendErr == nil {
		_, appendErr = store.TranscriptStep(ss, bd, b, p, t, obs.Mode, now)
	}
	deliver(ctx, ss, hub, now, res)
	if appendErr != nil {
		return res, appendErr
	}
	return res, nil
}

// deliver replays up to DeliveryPageSize pending envelopes in sequence
// order within DeliveryTimeout. Only an acknowledgement writes the ack
// marker; every attempt advances the scheduling cursor.
func deliver(ctx context.Context, sp *spool.Session, hub Hub, now time.Time, res *HookResult) {
	ctx, cancel := context.WithTimeout(ctx, DeliveryTimeout)
	defer cancel()
	envs, err := sp.Pending(DeliveryPageSize)
	if err != nil {
		res.DeliveryErr = err
		return
	}
	for i := range envs {
		env := &envs[i]
		if ctx.Err() != nil {
			break
		}
		a := spool.Attempt{Seq: env.Record.Seq, Digest: env.Digest, At: now}
		if env.Record.Deferred || env.Record.WorkID == "" {
			a.Outcome, a.Detail = "local_only", "deferred fact: no exact target; never delivered"
		} else if transcript.LocalOnly(&env.Record) {
			a.Outcome, a.Detail = "local_only", "transcript conversation record: kept locally"
		} else if status, err := hub.Deliver(ctx, env); err != nil {
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
}
