package capture

import (
	"time"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

// PendingOutcome is one retained, unacknowledged envelope of a spool with
// the outcome of its newest delivery attempt that the spool's bounded
// attempt history still holds, and the Hub's permanent refusal of it when
// the capture ledger recorded one.
type PendingOutcome struct {
	Seq    uint64     `json:"seq"`
	Digest string     `json:"digest"`
	Kind   event.Kind `json:"kind"`
	// State is "pending" (not attempted since the cursor passed it) or
	// "attempted" (attempted, not acknowledged).
	State string `json:"state"`
	// Attempts counts this envelope's attempts in the bounded history.
	Attempts int `json:"attempts"`
	// LastOutcome is the newest such attempt's outcome (failed, refused,
	// local_only, ...), or "" when the history keeps none of its attempts
	// (never attempted, or only attempts older than the history holds).
	LastOutcome string     `json:"last_outcome"`
	LastAt      *time.Time `json:"last_at,omitempty"`
	LastDetail  string     `json:"last_detail,omitempty"`
	// Refused is the Hub's refusal reason the ledger recorded for exactly
	// this envelope (sequence and digest), "" if none.
	Refused string `json:"refused,omitempty"`
}

// InspectView is change-capture inspect's report: the spool's own bounded
// classification plus what the capture ledger knows about delivery: the
// envelopes the Hub refused and, per pending or attempted envelope, the
// last attempt's outcome.
type InspectView struct {
	*spool.Report
	Refused binding.RefusalReport `json:"refused"`
	// PendingOutcomes covers the envelopes listed in the report's pending
	// and deferred projections (bounded the same way).
	PendingOutcomes []PendingOutcome `json:"pending_outcomes"`
	// LedgerError says why the capture ledger was not read (no config
	// directory, an unreadable ledger): refusals are then unknown, not
	// absent. Empty when it was read or the spool has none.
	LedgerError string `json:"ledger_error,omitempty"`
}

// Inspect builds the InspectView of the spool at dir from rep (a
// spool.Inspect of it) and the spool's capture ledger under s, without
// locking either. A spool with no ledger (never hooked, or another config
// directory's) lists no refusals; an unreadable one sets LedgerError.
func (s StateDir) Inspect(dir string, rep *spool.Report) *InspectView {
	s.CheckSpool(dir, rep)
	v := &InspectView{Report: rep, Refused: binding.RefusalReport{Refusals: []binding.Refusal{}}, PendingOutcomes: []PendingOutcome{}}
	if s.Dir == "" {
		v.LedgerError = "no config directory"
	} else if refused, err := s.Refusals(dir); err != nil {
		v.LedgerError = err.Error()
	} else {
		v.Refused = refused
	}
	type key struct {
		seq    uint64
		digest string
	}
	reasons := map[key]string{}
	for _, r := range v.Refused.Refusals {
		reasons[key{r.SpoolSeq, r.Digest}] = r.Reason
	}
	add := func(state string, items []spool.PendingItem) {
		for _, it := range items {
			o := PendingOutcome{Seq: it.Seq, Digest: it.Digest, Kind: it.Kind, State: state, Attempts: it.Attempts, Refused: reasons[key{it.Seq, it.Digest}]}
			// Attempts are listed newest first.
			for _, a := range rep.Attempts.Items {
				if a.Seq == it.Seq && a.Digest == it.Digest {
					at := a.At
					o.LastOutcome, o.LastAt, o.LastDetail = a.Outcome, &at, a.Detail
					break
				}
			}
			v.PendingOutcomes = append(v.PendingOutcomes, o)
		}
	}
	add("pending", rep.Pending.Items)
	add("attempted", rep.Deferred.Items)
	return v
}
