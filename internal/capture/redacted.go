package capture

import (
	"fmt"

	"github.com/agentscm/agentscm/internal/event"
)

// redactedGap is the separate redacted gap that a retained record whose
// body needed redaction adds to the event stream, so the change record
// shows that a body was altered (seed: "A body that needed redaction
// carries a redactions count and the event stream gains a separate
// redacted gap"). It is nil when the body needed none. seq is the
// record's spool sequence; the gap has the record's shared sequence and
// target (the caller stamps them) and no conversation content.
func redactedGap(rec *event.Record, seq uint64) *event.Record {
	if rec.Body == nil || rec.Body.Redactions == 0 {
		return nil
	}
	return &event.Record{
		Agent: rec.Agent, SessionID: rec.SessionID, Kind: event.KindGap, HookEvent: rec.HookEvent,
		ObservedAt: rec.ObservedAt, CaptureMode: rec.CaptureMode, SharedSeq: rec.SharedSeq,
		WorkID: rec.WorkID, Generation: rec.Generation, CanonicalSession: rec.CanonicalSession,
		Gap: &event.GapInfo{Kind: event.GapRedacted, Reason: "body_redacted", AffectedSeq: seq,
			Detail: fmt.Sprintf("%d secrets in this record's body were replaced with [REDACTED:<kind>] before it was kept (best effort)", rec.Body.Redactions)},
	}
}
