package capture

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/spool"
	"github.com/agentscm/agentscm/internal/transcript"
)

// RefusedError is a permanent refusal of one envelope by the Hub (a
// conflict such as identity_reused or sequence_taken, a target refusal
// such as stale_generation, an envelope it cannot accept): retrying the
// same bytes cannot succeed. The envelope stays retained and
// unacknowledged (only a 200 acknowledges), but the refusal is recorded
// and made visible, never left as a silent "pending forever".
type RefusedError struct {
	// Reason is the Hub's refusal reason, or its error code when it gave
	// no reason.
	Reason  string
	Message string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("the Hub refused the envelope (%s): %s", e.Reason, e.Message)
}

// maxRefusals bounds the refusals a ledger lists; beyond it the oldest
// are counted in RefusalsOmitted (their gaps were appended when first seen).
const maxRefusals = 256

// GapReasonHubRefused prefixes the reason of the gap that marks a refused
// record's place on the Hub.
const GapReasonHubRefused = "hub_refused"

// refused reports whether the envelope was already recorded as refused.
func (l *Ledger) refused(seq uint64, digest string) bool {
	for _, r := range l.st.Refusals {
		if r.SpoolSeq == seq && r.Digest == digest {
			return true
		}
	}
	return false
}

// recordRefusal keeps r in the bounded refusal list.
func (l *Ledger) recordRefusal(r binding.Refusal) {
	if len(l.st.Refusals) >= maxRefusals {
		l.st.Refusals = l.st.Refusals[1:]
		l.st.RefusalsOmitted++
	}
	l.st.Refusals = append(l.st.Refusals, r)
	l.dirty, l.durable = true, true
}

// handleRefusal records a permanent refusal of env once and, the first
// time, appends a deterministic capture_interrupted gap (reason
// hub_refused:<reason>) covering the refused record's shared sequence in
// its target and stream, so the Hub record shows the hole even when it is
// the session's last number. A refused gap of that kind gets no further
// gap (it would be refused the same way); it stays listed locally.
func handleRefusal(ss *spool.Tx, led *Ledger, env *spool.Envelope, re *RefusedError, now time.Time) error {
	if led == nil || led.refused(env.Record.Seq, env.Digest) {
		return nil
	}
	r := env.Record
	ref := binding.Refusal{SpoolSeq: r.Seq, Digest: env.Digest, Kind: r.Kind, Session: r.SessionID, Reason: re.Reason, Detail: re.Message, At: now.UTC()}
	if len(ref.Detail) > 300 {
		ref.Detail = ref.Detail[:300]
	}
	isRefusalGap := r.Kind == event.KindGap && r.HookEvent == GapReasonHubRefused
	// The refused record's number on the Hub: its shared sequence, or for
	// a record written before shared sequences its spool sequence. A
	// legacy record (no stream) gets its gap in the legacy stream "",
	// where that number is (appendInStream).
	// Usage, actions and transcript gaps have no place in the sequence.
	var hubSeq uint64
	switch {
	case r.Kind == event.KindUsage || r.Kind == event.ActionStart || r.Kind == event.ActionFinish || r.HookEvent == transcript.HookEvent:
	case r.Sequenced:
		hubSeq = r.SharedSeq
	case r.Stream == "":
		hubSeq = r.Seq
	}
	if hubSeq != 0 && !r.Deferred && r.WorkID != "" && !isRefusalGap {
		gap := &event.Record{
			Agent: r.Agent, SessionID: r.SessionID, Kind: event.KindGap, HookEvent: GapReasonHubRefused,
			ObservedAt: now, CaptureMode: r.CaptureMode,
			WorkID: r.WorkID, Generation: r.Generation, CanonicalSession: r.CanonicalSession,
			Association: r.Association, Sequenced: true, SharedSeq: hubSeq, Stream: r.Stream,
			Gap: &event.GapInfo{Kind: event.GapCaptureInterrupted, Reason: GapReasonHubRefused + ":" + re.Reason,
				FromSeq: hubSeq, ToSeq: hubSeq, AffectedSeq: r.Seq,
				Detail: "the Hub permanently refused this record; it stays retained locally (change-capture status lists it)"},
		}
		if _, err := appendInStream(ss, led, gap); err != nil {
			return fmt.Errorf("record the hub_refused gap of record %d: %w", r.Seq, err)
		}
		ref.Gap = true
	}
	led.recordRefusal(ref)
	return led.Flush()
}

// Refusals reads, without taking the ledger lock, the refused envelopes
// recorded for spoolDir (the newest same-boot copy, else the durable one).
// A spool without a ledger has none.
func (s StateDir) Refusals(spoolDir string) (binding.RefusalReport, error) {
	rep := binding.RefusalReport{Refusals: []binding.Refusal{}}
	dir := s.ledgerDir(spoolDir)
	var st ledgerState
	found := false
	for _, name := range []string{ledgerFastFile, ledgerFile} {
		b, err := fsutil.ReadFileNoFollow(filepath.Join(dir, name), maxLedgerBytes)
		if err != nil {
			continue
		}
		var cand ledgerState
		if decodeLedger(b, &cand) != nil {
			continue
		}
		if !found || cand.Gen > st.Gen {
			st, found = cand, true
		}
	}
	if !found {
		return rep, nil
	}
	rep.Refusals = append(rep.Refusals, st.Refusals...)
	rep.Total, rep.Omitted = len(st.Refusals)+int(st.RefusalsOmitted), st.RefusalsOmitted
	return rep, nil
}
