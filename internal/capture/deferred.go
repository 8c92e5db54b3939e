package capture

import (
	"time"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

// DeferredFact is one sanitized local fact kept while no exact authorized
// target resolved, as `change-capture deferred` lists it.
type DeferredFact struct {
	// SpoolSeq is the record's spool-local order.
	SpoolSeq uint64 `json:"spool_seq"`
	// Session is the observed native session.
	Session   string     `json:"session"`
	Kind      event.Kind `json:"kind"`
	HookEvent string     `json:"hook_event"`
	ToolName  string     `json:"tool_name,omitempty"`
	ToolUseID string     `json:"tool_use_id,omitempty"`
	GapKind   string     `json:"gap_kind,omitempty"`
	// Association is "copied" (the session's last exact target, shown in
	// Target), "unassociated" (no target existed yet) or "legacy" (written
	// before shared sequences: no target and no sequence, never attributed).
	Association string  `json:"association"`
	Target      *Target `json:"target"`
	// Sequence is the reserved shared sequence: in Target's stream when
	// copied, in the session's unassociated stream otherwise; null for a
	// legacy record.
	Sequence   *uint64   `json:"sequence"`
	ObservedAt time.Time `json:"observed_at"`
	// Source is the checkout's source an unresolved PreToolUse of a ruled
	// tool observed, when it could be read.
	Source *event.SourceBinding `json:"source,omitempty"`
}

// DeferredReport lists a spool's deferred facts, bounded.
type DeferredReport struct {
	Spool   string         `json:"spool"`
	Total   int            `json:"total"`
	Omitted int            `json:"omitted"`
	Facts   []DeferredFact `json:"facts"`
}

// ListDeferred reads the deferred facts of the spool at dir without
// locking or changing it, at most limit of them (the rest counted as
// omitted).
func ListDeferred(dir string, limit int) (*DeferredReport, error) {
	sp, err := spool.OpenReadOnly(dir)
	if err != nil {
		return nil, err
	}
	recs, err := sp.Events()
	if err != nil {
		return nil, err
	}
	rep := &DeferredReport{Spool: sp.Dir(), Facts: []DeferredFact{}}
	for _, r := range recs {
		if !r.Deferred {
			continue
		}
		rep.Total++
		if len(rep.Facts) >= limit {
			rep.Omitted++
			continue
		}
		f := DeferredFact{SpoolSeq: r.Seq, Session: r.SessionID, Kind: r.Kind, HookEvent: r.HookEvent,
			ToolName: r.ToolName, ToolUseID: r.ToolUseID, ObservedAt: r.ObservedAt, Association: "legacy", Source: r.DeferredSource}
		if r.Gap != nil {
			f.GapKind = r.Gap.Kind
		}
		if r.Sequenced {
			f.Association = r.Association
			if r.SharedSeq != 0 {
				seq := r.SharedSeq
				f.Sequence = &seq
			}
			if r.Association == AssocCopied {
				f.Target = &Target{WorkID: r.WorkID, Generation: r.Generation, Session: r.CanonicalSession}
			}
		}
		rep.Facts = append(rep.Facts, f)
	}
	return rep, nil
}
