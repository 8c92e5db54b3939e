package capture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/agentscm/agentscm/internal/action"
	"github.com/agentscm/agentscm/internal/agent"
	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/spool"
)

// The hook's intake (spool/intake.go holds the files): a hook that cannot
// take the spool lock within IntakeLockWait writes everything the locked
// part of the pipeline needs into one intake record and returns; the next
// lock holder admits it through the same claim, sequence, append and action
// code as its own event. The record is the mapped event exactly as the
// capture mode left it (no body in metadata-only mode, so nothing the mode
// would not retain is written), the session observation, the resolved
// target, the private phase fingerprint, the payload facts the action path
// derives (input digest, explicit exit code) and, for a ruled tool, the
// source captured at receipt (before the tool runs). The transcript reader
// runs for an admitted record as for the hook's own (from where it
// stopped), without the setup artifact (which needs the raw payload).
const (
	// IntakeLockWait is how long a hook waits for the spool lock before it
	// writes its event into the intake.
	IntakeLockWait = 0
	// maxAdmitPerHook and admitBudget bound what one hook admits (before
	// and after its delivery together), so that the lock holder's own
	// latency stays bounded; a longer backlog drains over later hooks.
	maxAdmitPerHook = 16
	admitBudget     = 150 * time.Millisecond
	// With a background deliverer (which admits in every round) a hook
	// admits less, so that its own latency stays near that of its event.
	backgroundAdmitPerHook = 4
	backgroundAdmitBudget  = 40 * time.Millisecond
	intakeVersion          = 1
	summaryName            = "spool-summary"
)

type intakeRecord struct {
	Version     int          `json:"version"`
	Observed    string       `json:"observed"`
	Fingerprint string       `json:"fingerprint"`
	Record      event.Record `json:"record"`
	Observation Observation  `json:"observation"`
	// AtReceipt is the session's exact target when the hook received the
	// event, as its session record kept it (rememberTarget), read without
	// the Hub or the spool lock; absent before the session's first
	// resolution and in records written before it was kept. Admission
	// holds the event to it (admitIntake).
	AtReceipt *receiptTarget `json:"target_at_receipt,omitempty"`
	// CheckoutAtReceipt is, for an event of a session without a target at
	// receipt (a brand-new session), the checkout's current Work and
	// generation when the hook received it, with a canonical session the
	// Hub has at that generation, as the checkout target file kept it
	// (rememberCheckoutTarget; Observation.checkout). Absent when neither
	// is known and in records written before it was kept (old readers
	// ignore it). Admission admits the event under the Work the Hub
	// resolves only while that is this Work and generation; otherwise the
	// event is a deferred fact copying it, its hole named there
	// (receiptTargetAt), so a later generation never absorbs it.
	CheckoutAtReceipt *receiptTarget `json:"checkout_at_receipt,omitempty"`
	// Target and Resolved are decided at admission from AtReceipt and the
	// Hub's answer.
	Target      Target               `json:"-"`
	Resolved    bool                 `json:"-"`
	Facts       action.Facts         `json:"facts"`
	Source      *event.SourceBinding `json:"source,omitempty"`
	SourceTaken bool                 `json:"source_taken,omitempty"`
	// Blobs are new bytes the source binds (changed working files, the
	// manifest) kept in the record itself, so they are durable with it at
	// no cost of their own; larger ones are staged in the spool beside it.
	// The admitting holder retains them (source.Admit). Optional: a record
	// without it, or a reader that ignores it, keeps the binding's
	// bytes_not_retained.
	Blobs      []intakeBlob `json:"blobs,omitempty"`
	ReceivedAt time.Time    `json:"received_at"`
}

// intakeBlob is one blob kept in an intake record.
type intakeBlob struct {
	MediaType string `json:"media_type"`
	Data      []byte `json:"data"`
}

// openHookSpool opens the binding's spool for the hook with its summary
// kept in the spool's private ledger directory.
func (s StateDir) openHookSpool(dir string) (*spool.Spool, error) {
	sp, err := spool.OpenAppender(dir)
	if err != nil {
		return nil, err
	}
	ld := s.ledgerDir(dir)
	if err := fsutil.MkdirPrivate(ld); err == nil && fsutil.CheckPrivateDir(ld) == nil {
		sp.SetSummaryPath(filepath.Join(ld, summaryName))
		_ = ensureLostSlot(ld) // best effort: without it a loss is only warned
	}
	return sp, nil
}

// writeIntake writes this invocation's event into the spool's intake,
// with the session's exact target at receipt when the session has one
// (obs.target, from its session record): the hook that leaves its event in
// the intake does not open the Hub, and admission holds the event to the
// target it was received under (admitIntake).
func writeIntake(ctx context.Context, store StateDir, sp *spool.Spool, bd *binding.Binding, p *agent.Payload, rec *event.Record, obs Observation, now time.Time) (string, error) {
	ir := intakeRecord{Version: intakeVersion, Observed: p.SessionID, Fingerprint: PhaseFingerprint(p, rec),
		Record: *rec, Observation: obs, AtReceipt: obs.target, Facts: factsOf(p), ReceivedAt: now.UTC()}
	if ir.AtReceipt == nil {
		// A session without a target of its own: the checkout's Work and
		// generation at receipt (kept whether or not the Hub is known to
		// be down: it only bounds what admission may attribute the event
		// to, and names where its hole is).
		ir.CheckoutAtReceipt = obs.checkout
	}
	if ir.AtReceipt != nil && store.hubDownAtReceipt(bd.Spool) {
		// As far as this machine knows the Hub is unreachable now: no
		// exact authorized target at receipt, so admission resolves the
		// event (a deferred fact copying the session's target while the
		// Hub stays down), as a hook resolving at receipt would have.
		ir.AtReceipt = nil
	}
	var stage *intakeStore
	if _, ok := ruleFor(bd, rec.ToolName); ok && (rec.Kind == event.ToolStart || rec.Kind == event.ToolFinish) {
		// The source a start binds (or a deferred start keeps) is the one
		// at receipt, before the tool runs, not the one at admission.
		rs := openActionReceipts(store.Dir, sp)
		ir.SourceTaken = true
		so := sourceOptions{treeCache: filepath.Join(rs.dir, "trees"), noTree: rec.Kind == event.ToolFinish, baseRef: bd.BaseRef}
		if rec.Kind == event.ToolStart {
			// The bytes it binds, staged without the lock; their directory
			// sync overlaps the intake write below.
			stage = newIntakeStore(sp)
			so.stage = stage
		}
		if sb, err := captureSource(ctx, bd.Root, so); err == nil {
			ir.Source = sb
		}
	}
	if stage != nil {
		ir.Blobs = stage.inline
	}
	b, err := json.Marshal(&ir)
	if err != nil {
		return "", err
	}
	if stage != nil && len(ir.Blobs) > 0 && len(b) > spool.MaxIntakeBytes {
		// Too large with its blobs: stage them as files instead (a failure
		// leaves them out: admission then names bytes_not_retained).
		_ = stage.spill()
		ir.Blobs = nil
		if b, err = json.Marshal(&ir); err != nil {
			return "", err
		}
	}
	if stage != nil && stage.stage.Pending() {
		return sp.WriteIntakeAfter(b, now, stage.stage.Sync)
	}
	return sp.WriteIntake(b, now)
}

// hubDownAtReceipt reports whether the spool's last deliverer run could not
// reach or use the Hub (outcome "failed" or "error", or a status that
// cannot be read): the latest this machine knows of the Hub.
func (s StateDir) hubDownAtReceipt(spoolDir string) bool {
	st, err := s.DeliverStatus(spoolDir)
	return err != nil || (st != nil && (st.Outcome == "failed" || st.Outcome == "error"))
}

// admitIntake admits waiting intake records in receipt order under the held
// lock, at most maxAdmitPerHook within admitBudget, and reports whether more
// remain. A record that ends in a conflict or a quota pause is done (the
// same outcome its own hook would have had: nothing appended, or a
// capture_interrupted gap); any other failure keeps the file for a later
// holder and stops admission for this hook.
// admission is one hook's admission budget, shared by its calls.
type admission struct {
	deadline time.Time
	left     int
}

func admitIntake(ctx context.Context, store StateDir, led *Ledger, ss *spool.Tx, sp *spool.Spool, bd *binding.Binding, hub Hub, adm *admission, res *HookResult) (bool, error) {
	type resolution struct {
		t   Target
		err error
	}
	resolved := map[string]resolution{}
	// The count before this admission's listing: a file that arrives after
	// it raises the count, which is how the background deliverer tells,
	// after it let its lock go, that a hook left an event to it (see
	// deliverSpool); counting later would take such a file for one it
	// could not admit and strand it until a later hook.
	if n, err := sp.WaitingIntake(); err == nil {
		res.intakeBase = n
	}
	// Files of new sessions held for the Hub (holdNewSession) take no
	// admission budget: as many as the last admission held (up to
	// maxHeldListed) are listed past it, so the files behind them are
	// admitted during an outage, while an admission that held none reads
	// no more files than its budget.
	listed := max(adm.left, 0) + 1 + min(res.held, maxHeldListed)
	files, err := ss.Intake(listed)
	if err != nil {
		return false, fmt.Errorf("intake: %w", err)
	}
	mark := led.readAdmitMark()
	// Sessions whose files wait for the Hub (holdNewSession): a later file
	// of one waits too, so the session keeps its receipt order.
	held := map[string]bool{}
	res.held, res.heldErr = 0, nil
	for _, f := range files {
		if adm.left <= 0 || time.Now().After(adm.deadline) || ctx.Err() != nil {
			return true, nil
		}
		adm.left--
		ir, derr := decodeIntake(f)
		if derr != nil {
			// Quarantined with a named gap (undecodable.go).
			if qerr := quarantineUndecodable(store.ledgerDir(bd.Spool), led, ss, f.Name, f.Data, derr, time.Now()); qerr != nil {
				return false, qerr
			}
			res.Quarantined++
			continue
		}
		if held[ir.Observed] {
			res.held++
			adm.left++ // a held file takes no admission budget
			continue
		}
		// Resolve the exact current target now, once per session per hook.
		r, ok := resolved[ir.Observed]
		if !ok {
			rctx, cancel := context.WithTimeout(ctx, ResolveTimeout)
			r.t, r.err = resolveSession(rctx, hub, bd.WorktreeID, ir.Observed)
			cancel()
			if r.err != nil && ctx.Err() != nil {
				// The holder's own bound ended the resolution, not the Hub:
				// the file waits for the next holder (admitted now it would
				// become a deferred fact for an outage that never was).
				return true, nil
			}
			if r.err == nil {
				// Best effort: without it the session's next hooks record
				// an older target (or none) at receipt.
				_ = store.rememberTarget(bd, ir.Observed, r.t)
			}
			resolved[ir.Observed] = r
		}
		if holdNewSession(led, &ir, r.err) {
			// The session's first events, received before any target and
			// while the Hub cannot answer: admitted now they would stay
			// unassociated for good; they wait in the intake until the Hub
			// answers (or holdNewSessionFor passes) and are then admitted
			// under the Work it resolves.
			held[ir.Observed] = true
			res.held++
			adm.left++
			if res.heldErr == nil {
				res.heldErr = r.err
			}
			continue
		}
		if ir.SourceTaken && ir.Record.Kind == event.ToolStart {
			ir.Source = admitStagedSource(ss, ir.Source, ir.Blobs)
		}
		if _, ok := led.LastTarget(ir.Observed); ok {
			// The session has an exact target of its own in the ledger
			// (its record's copy was lost or is stale): a deferred fact
			// copies that one (RouteFor), not the checkout's.
			ir.CheckoutAtReceipt = nil
		}
		refused := receiptTargetAt(&ir, r.t, r.err)
		if !ir.Resolved && ir.Record.Kind == event.ToolStart && ir.SourceTaken {
			ir.Record.DeferredSource = ir.Source
		}
		// The admission mark (admitmark.go): a file it names was being
		// admitted when a crash or an error cut that off; its admission is
		// resumed above the recorded floor, or, past maxAdmitAttempts, the
		// file is quarantined with a gap so the files behind it go on.
		if mark.Intake == f.Name {
			// The previous attempt crashed or failed, unless the holder's
			// own bound (its context) cut it off: that one is no failure.
			if !mark.Cancelled {
				mark.Failures++
			}
			mark.Cancelled = false
			if mark.Failures >= maxAdmitAttempts {
				if err := quarantineIntakeFile(led, ss, &ir, f.Name, mark); err != nil {
					return false, err
				}
				res.Quarantined++
				continue
			}
		} else {
			floor, err := ss.MaxSeq()
			if err != nil {
				return false, err
			}
			mark = admitMark{Intake: f.Name, Floor: floor}
		}
		mark.Attempts++
		if err := led.writeAdmitMark(&mark); err != nil {
			return false, err
		}
		if mark.Attempts > 1 {
			ss.ResumeAfter(mark.Floor)
		}
		led.admitting = &mark
		err := admitOne(ctx, store, led, ss, sp, bd, &ir)
		if err == nil && refused {
			// The copied target's generation is superseded: its hole is
			// shown now, under that target, not when some later event of
			// it resolves (none will). Inside the admission window, so a
			// resumed admission matches a gap the cut-off attempt wrote.
			t := ir.Target
			if t.WorkID == "" {
				t, _ = led.LastTarget(ir.Observed) // what RouteFor copied
			}
			err = publishRefusedOutages(ss, led, &ir.Record, t)
		}
		led.admitting = nil
		ss.ResumeAfter(0)
		if err != nil && !errors.Is(err, ErrOccurrenceConflict) && !errors.Is(err, action.ErrConflict) && !errors.Is(err, spool.ErrCapturePaused) &&
			!errors.Is(err, errTranscriptAtAdmission) {
			// Kept for the next holder, which resumes it (at most
			// maxAdmitAttempts times in all).
			mark.LastError, mark.Cancelled = err.Error(), ctx.Err() != nil
			_ = led.writeAdmitMark(&mark)
			return false, fmt.Errorf("admit intake %s (attempt %d, %d failed of at most %d): %w", f.Name, mark.Attempts, mark.Failures+1, maxAdmitAttempts, err)
		}
		if err := ss.DoneIntake(f.Name); err != nil {
			return false, err
		}
		res.Admitted++
	}
	return false, nil
}

// decodeIntake decodes one intake file, or says why it cannot be admitted
// (its frame does not verify, or its record does not decode).
func decodeIntake(f spool.IntakeFile) (intakeRecord, error) {
	var ir intakeRecord
	if f.Malformed {
		return ir, errors.New("its frame does not verify")
	}
	if err := json.Unmarshal(f.Data, &ir); err != nil {
		return ir, err
	}
	if ir.Version != intakeVersion || ir.Record.Kind == "" {
		return ir, fmt.Errorf("intake version %d, kind %q", ir.Version, ir.Record.Kind)
	}
	return ir, nil
}

// holdOwnEvent is the locked path's half of holdNewSession: a lock holder
// whose own event belongs to a session without any exact target (none at
// receipt, none in the ledger) and whose resolution the Hub could not
// answer (rerr) leaves the event in the intake, where every admission
// holds it until the Hub answers, instead of admitting it as an
// unassociated deferred fact for good. It reports whether it did; it does
// not when the intake cannot take the record (full, too large, an I/O
// error), and the caller then admits the event as before. The held file
// is counted in res.held, so that a holder's follow-up admission stops at
// it, and a background deliverer, which the caller makes sure of, retries
// it.
func holdOwnEvent(ctx context.Context, store StateDir, led *Ledger, sp *spool.Spool, bd *binding.Binding, p *agent.Payload, rec *event.Record, obs Observation, rerr error, now time.Time, res *HookResult) bool {
	if rerr == nil || !hubCouldNotAnswer(rerr) || obs.target != nil {
		return false
	}
	if _, ok := led.LastTarget(p.SessionID); ok {
		return false // a copied target: an outage gap names it
	}
	r := *rec
	r.DeferredSource = nil // the intake record keeps the source at receipt itself
	name, err := writeIntake(ctx, store, sp, bd, p, &r, obs, now)
	if err != nil {
		return false
	}
	res.Intake = name
	res.held++
	if res.heldErr == nil {
		res.heldErr = rerr
	}
	if res.DeliveryErr == nil {
		res.DeliveryErr = fmt.Errorf("the Hub could not resolve the new session (%w); its event waits in the intake until it does", rerr)
	}
	return true
}

// holdNewSessionFor bounds how long a new session's intake files wait for
// the Hub (holdNewSession): past it they are admitted as deferred facts
// (copying the checkout's target at receipt when they carry one, else
// unassociated), so the intake never holds them for good.
const holdNewSessionFor = time.Hour

// maxHeldListed bounds the held files one admission lists past its
// budget: past it, what follows them waits (the intake's backpressure
// then sends hooks to the locked path, which records their events).
const maxHeldListed = 64

// holdNewSession reports whether the intake record ir waits in the intake
// instead of being admitted: its session had no exact target at receipt
// nor since (a brand-new session), the Hub could not answer its
// resolution (err: unreachable or a server error, not a refusal), and it
// was received less than holdNewSessionFor ago.
func holdNewSession(led *Ledger, ir *intakeRecord, err error) bool {
	return err != nil && hubCouldNotAnswer(err) && newSessionFile(led, ir)
}

// newSessionFile reports whether ir is a file of a session without any
// exact target (at receipt or since), received less than
// holdNewSessionFor ago.
func newSessionFile(led *Ledger, ir *intakeRecord) bool {
	if _, ok := ir.AtReceipt.target(); ok {
		return false
	}
	if _, ok := led.LastTarget(ir.Observed); ok {
		return false // a copied target: an outage gap names it
	}
	return time.Since(ir.ReceivedAt) < holdNewSessionFor
}

// hubCouldNotAnswer reports whether a Hub call's error says the Hub could
// not answer (unreachable, timed out, a server error), as opposed to an
// answer (a refusal, a bad request).
func hubCouldNotAnswer(err error) bool {
	ae, ok := api.AsError(err)
	return !ok || ae.Status >= 500
}

// receiptTargetAt decides the target an intake record is admitted under,
// from the session's target at receipt (ir.AtReceipt) and the Hub's answer
// now (t, err), and sets ir.Target, ir.Resolved and, when deferred, the
// record's deferral reason. An event belongs to the target it was received
// under, never to what the Hub resolves later:
//
//   - no target at receipt (the session's first events), but the
//     checkout's Work and generation at receipt (ir.CheckoutAtReceipt):
//     the Hub's answer when it resolves the session to that Work and
//     generation; otherwise (refused, unreachable, another Work, a later
//     generation) a deferred fact copying the checkout's target, refused
//     when its generation is superseded;
//   - no target at receipt and no checkout target: the Hub's answer,
//     as the locked path decides (deferred, unassociated or copying the
//     session's last exact target, with the Hub's reason when it fails;
//     refused when that is stale_generation);
//   - the Hub confirms the target at receipt: exact;
//   - the Hub cannot be reached: the target at receipt stands (appended
//     under it, delivered when the Hub is back, which still judges it);
//   - the Hub resolves the session to another Work now (this checkout
//     started one since): the target at receipt stands too; that Work may
//     still accept it, and the Hub judges it on delivery;
//   - the Hub refuses it (a takeover, a finished or handed over Work) or
//     resolves the session to a later generation of its Work: a deferred
//     fact copying the target at receipt (the Hub keeps no events of an
//     older generation); refused is true when the generation is
//     superseded, and the caller then makes the hole visible under that
//     target at once (otherwise the outage waits, as the locked path's,
//     for the next resolved event).
func receiptTargetAt(ir *intakeRecord, t Target, err error) (refused bool) {
	at, ok := ir.AtReceipt.target()
	if ck, known := ir.CheckoutAtReceipt.target(); !ok && known && !(err == nil && t.WorkID == ck.WorkID && t.Generation == ck.Generation) {
		// A brand-new session whose checkout had a Work at receipt, which
		// the Hub does not confirm now: a deferred fact copying it.
		ir.Target, ir.Resolved = ck, false
		switch {
		case err == nil && t.WorkID == ck.WorkID && t.Generation > ck.Generation:
			ir.Record.DeferredReason = DeferTargetChanged
			return true
		case err == nil:
			ir.Record.DeferredReason = DeferWorkChanged
			return false
		}
		ir.Record.DeferredReason = DeferReason(err)
		return superseded(err)
	}
	switch {
	case !ok:
		ir.Target, ir.Resolved = t, err == nil
		if err != nil {
			ir.Target, ir.Record.DeferredReason = Target{}, DeferReason(err)
		}
		return superseded(err)
	case err == nil && t.WorkID == at.WorkID && t.Generation > at.Generation:
		ir.Target, ir.Resolved, ir.Record.DeferredReason = at, false, DeferTargetChanged
		return true
	case err == nil, !targetRefused(err):
		ir.Target, ir.Resolved = at, true
		return false
	}
	ir.Target, ir.Resolved, ir.Record.DeferredReason = at, false, DeferReason(err)
	return superseded(err)
}

func admitOne(ctx context.Context, store StateDir, led *Ledger, ss *spool.Tx, sp *spool.Spool, bd *binding.Binding, ir *intakeRecord) error {
	rec := ir.Record
	sub := &HookResult{}
	if err := captureOccurrence(led, ss, bd, ir.Observed, ir.Fingerprint, &rec, ir.Observation, ir.Target, ir.Resolved, sub); err != nil {
		if errors.Is(err, spool.ErrCapturePaused) && errors.Is(err, spool.ErrGapNotRecorded) && sub.Seq == 0 {
			// The file is done (admitIntake) and no spool gap names the
			// record: keep its loss for a gap under its target (lost.go).
			reason := lossReason(err)
			if reason == "" {
				reason = event.GapReasonWriteFailed
			}
			if nerr := noteLost(store.ledgerDir(bd.Spool), &rec, ir.Observed, ir.Target, ir.Resolved, reason, err.Error(), ir.ReceivedAt); nerr != nil {
				return fmt.Errorf("%w; noting its loss failed too: %v", err, nerr)
			}
		}
		return err
	}
	env := actionEnv{ss: ss, sp: sp, configDir: store.Dir, bd: bd, rec: &rec, now: ir.ReceivedAt, facts: &ir.Facts}
	if ir.SourceTaken {
		src := ir.Source
		env.source = func(context.Context, string) (*event.SourceBinding, error) {
			if src == nil {
				return nil, errors.New("the source could not be bound at receipt")
			}
			return src, nil
		}
	}
	if _, err := recordAction(ctx, env); err != nil {
		return err
	}
	if ir.Resolved && bd.ClaudeHistoryRoot != "" && transcriptEvents[rec.HookEvent] {
		// The transcript reader runs for an admitted event too (from where
		// it stopped), as its own hook would have: without it, the last
		// hook of a session that found the lock held (by another hook or
		// the background deliverer) would leave the session's last
		// requests unread until a later session. The setup artifact of a
		// SessionStart needs the raw payload, which the intake does not
		// keep; the event itself carries the observed setup.
		p := &agent.Payload{SessionID: ir.Observed, HookEventName: rec.HookEvent, Source: rec.Source}
		if _, err := store.TranscriptStep(ss, bd, nil, p, ir.Target, ir.Observation.Mode, ir.ReceivedAt); err != nil {
			return fmt.Errorf("%w: %w", errTranscriptAtAdmission, err)
		}
	}
	return nil
}

// errTranscriptAtAdmission marks a transcript failure of an admitted
// record: the record itself is retained (the intake file is done); the
// transcript cursor stays where it was for the next reader.
var errTranscriptAtAdmission = errors.New("transcript reader at admission")
