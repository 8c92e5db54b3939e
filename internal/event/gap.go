package event

// KindGap is the kind of a record that marks an explicit hole in coverage
// instead of silently losing evidence. Its Gap field says which hole.
const KindGap Kind = "gap"

// KindUsage is the kind of a usage record (token or cost accounting), which
// compaction keeps whole in the replay index.
const KindUsage Kind = "usage"

// Gap kinds.
const (
	// GapCaptureInterrupted marks that ordinary capture paused (a bound was
	// reached); a later retained event at a higher sequence shows it resumed,
	// and coverage never returns to complete.
	GapCaptureInterrupted = "capture_interrupted"
	// GapContentNotRetained marks that a record's content (its body artifact)
	// could not be retained; the record itself was kept with availability
	// "missing".
	GapContentNotRetained = "content_not_retained"
	// GapAdapterStartedLate marks a session whose original start was not
	// observed: earlier history is not covered.
	GapAdapterStartedLate = "adapter_started_late"
	// GapIdentityUncertain marks an event without a provider identity: it
	// got a durable local occurrence number, and a retried hook cannot be
	// told apart from a legitimate repeat, so the event may be overcounted.
	GapIdentityUncertain = "identity_uncertain"
	// GapRedacted marks that a retained body needed redaction before it
	// was kept (shared-conversation mode): the record's body was altered.
	// AffectedSeq names the record.
	GapRedacted = "redacted"
)

// Gap reasons name the bound that caused the gap.
const (
	GapReasonRecordLimit   = "record_limit"
	GapReasonByteLimit     = "byte_limit"
	GapReasonArtifactLimit = "artifact_limit"
	GapReasonOrderLedger   = "order_ledger_limit"
	GapReasonNoSpace       = "no_space"
	GapReasonWriteFailed   = "write_failed"
	// GapReasonIOError: a record could not be written because of an I/O
	// error (EIO).
	GapReasonIOError = "io_error"
	// GapReasonCaptureDisabled: capture was turned off (unconfigure) while
	// the session was open and turned on again; what it did in between was
	// not observed.
	GapReasonCaptureDisabled = "capture_disabled"
)

// GapInfo describes one coverage gap.
type GapInfo struct {
	// Kind is GapCaptureInterrupted or GapContentNotRetained.
	Kind string `json:"kind"`
	// Reason names the bound or failure, e.g. GapReasonRecordLimit.
	Reason string `json:"reason"`
	// Detail is a human-readable explanation (no conversation content).
	Detail string `json:"detail,omitempty"`
	// RefusedKind is the kind of the event that could not be admitted, if any.
	RefusedKind Kind `json:"refused_kind,omitempty"`
	// AffectedSeq names the retained record whose content is missing.
	AffectedSeq uint64 `json:"affected_seq,omitempty"`
	// FromSeq and ToSeq are the shared-sequence range a gap covers (an
	// outage of deferred occurrences), when it covers more than its own
	// record's SharedSeq.
	FromSeq uint64 `json:"from_seq,omitempty"`
	ToSeq   uint64 `json:"to_seq,omitempty"`
}

// Availability values of an ArtifactRef.
const (
	AvailabilityRetained = "retained"
	AvailabilityMissing  = "missing"
)

// ArtifactRef is the opaque, shareable identity of a retained artifact: its
// digest, byte count, media type, retention class and availability.
type ArtifactRef struct {
	Digest       string `json:"digest"`
	Bytes        int64  `json:"bytes"`
	MediaType    string `json:"media_type"`
	Retention    string `json:"retention"`
	Availability string `json:"availability"`
}
