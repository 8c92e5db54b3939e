package event

// Retention classes of a retained body (ArtifactRef.Retention).
const (
	// RetentionLocalPrivate: the body never leaves the machine (every
	// body outside shared-conversation mode).
	RetentionLocalPrivate = "local-private"
	// RetentionSharedApproved: a redacted shared-conversation body the
	// Hub may receive after it accepted the event.
	RetentionSharedApproved = "shared-approved"
	// RetentionWorkLocal: a shared-conversation body over MaxSharedBody
	// bytes; it stays in the spool and is never uploaded.
	RetentionWorkLocal = "work-local"
)

// MaxSharedBody is the per-body cap of uploads (1 MiB).
const MaxSharedBody = 1 << 20

// RetentionClass is the retention class of a body of n bytes retained in
// capture mode mode.
func RetentionClass(mode string, n int64) string {
	switch {
	case mode != ModeSharedConversation:
		return RetentionLocalPrivate
	case n > MaxSharedBody:
		return RetentionWorkLocal
	}
	return RetentionSharedApproved
}
