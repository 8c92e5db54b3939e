package api

import "net/http"

// Retention classes of a declared conversation body. A body retained in
// shared-conversation mode and at most MaxBodyBytes long is shared-approved:
// the Hub accepts its upload. One above the cap stays in the spool as
// work-local and is never uploaded. Every other body is local-private and is
// never declared at all.
const (
	RetentionSharedApproved = "shared-approved"
	RetentionWorkLocal      = "work-local"
	RetentionLocalPrivate   = "local-private"
)

// MaxBodyBytes is the per-body cap of shared conversation bodies (1 MiB).
const MaxBodyBytes = 1 << 20

// BodyMediaType is the media type of a conversation body: the JSON of the
// spool's redacted body record.
const BodyMediaType = "application/json"

// Client availabilities of a declared body (the spool's).
const (
	BodyRetained = "retained"
	BodyMissing  = "missing"
)

// States of a body declaration on the Hub.
const (
	// BodyLocal: declared, kept only on the author's machine, never to be
	// uploaded (work-local, missing locally, or refused).
	BodyLocal = "local"
	// BodyAwaitingUpload: declared shared-approved, no object yet (or its
	// object was found missing); the checkout uploads it after the event.
	BodyAwaitingUpload = "awaiting_upload"
	// BodyAvailable: uploaded; readable until ExpiresAt.
	BodyAvailable = "available"
	// BodyExpired and BodyDeleted are tombstones: the body answers 410.
	BodyExpired = "expired"
	BodyDeleted = "deleted"
)

// BodyDeclaration is the opaque identity of one conversation body, declared
// with the envelope of the event that carries it: digest (64 lowercase hex
// of the body's bytes), byte count, media type, retention class and the
// client's availability. CaptureMode is the mode the event was captured
// under; the Hub refuses a shared-approved body whose session was not in
// shared-conversation mode (it is kept as a local declaration).
type BodyDeclaration struct {
	Digest       string `json:"digest"`
	Bytes        int64  `json:"bytes"`
	MediaType    string `json:"media_type"`
	Retention    string `json:"retention"`
	Availability string `json:"availability"`
	CaptureMode  string `json:"capture_mode"`
}

func (d *BodyDeclaration) validate() *Error {
	if !IsDigest(d.Digest) {
		return bad("body: digest must be 64 lowercase hex characters")
	}
	if d.Bytes <= 0 || d.MediaType != BodyMediaType {
		return bad("body: bytes must be positive and media_type %s", BodyMediaType)
	}
	switch d.Retention {
	case RetentionSharedApproved:
		if d.Bytes > MaxBodyBytes {
			return bad("body: a shared-approved body is at most %d bytes; a larger one is work-local", MaxBodyBytes)
		}
	case RetentionWorkLocal, RetentionLocalPrivate:
	default:
		return bad("body: unknown retention class %q", d.Retention)
	}
	if d.Availability != BodyRetained && d.Availability != BodyMissing {
		return bad("body: availability must be retained or missing")
	}
	switch d.CaptureMode {
	case "metadata-only", "local-conversation", "shared-conversation":
	default:
		return bad("body: unknown capture_mode %q", d.CaptureMode)
	}
	return nil
}

// BodyEntry is one declaration in a body listing: each human's declaration
// of a body in a Work is its own entry.
type BodyEntry struct {
	Digest     string `json:"digest"`
	Bytes      int64  `json:"bytes"`
	MediaType  string `json:"media_type"`
	Retention  string `json:"retention"`
	State      string `json:"state"`
	Author     string `json:"author"`
	Generation int64  `json:"generation"`
	Session    string `json:"session"`
	DeclaredAt int64  `json:"declared_at"`
	UploadedAt int64  `json:"uploaded_at,omitempty"`
	// ExpiresAt is the end of retention: of the upload once uploaded, else
	// of the declaration (a declaration not uploaded by then expires).
	ExpiresAt int64 `json:"expires_at"`
	EndedAt   int64 `json:"ended_at,omitempty"`
}

// BodyList is a Work's body listing: the caller's own entries (a Hub
// admin's: everyone's), at most MaxListedBodies, the rest counted.
type BodyList struct {
	WorkID                          string      `json:"work_id"`
	Bodies                          []BodyEntry `json:"bodies"`
	Omitted                         int         `json:"omitted,omitempty"`
	SharedConversationRetentionDays int         `json:"shared_conversation_retention_days"`
}

// MaxListedBodies bounds a body listing.
const MaxListedBodies = 1000

// MaxMissingQuery bounds the digests of one missing-bodies question.
const MaxMissingQuery = 100

// MissingBodiesRequest asks which of these declared bodies the Hub lacks.
type MissingBodiesRequest struct {
	Digests []string `json:"digests"`
}

// MissingBody is a body the Hub lacks from the caller.
type MissingBody struct {
	Digest string `json:"digest"`
	Bytes  int64  `json:"bytes"`
}

// MissingBodiesResult lists the caller's shared-approved declarations in
// the Work that await an upload: those asked about, and up to
// MaxReuploadHints others whose object was found missing.
type MissingBodiesResult struct {
	Missing []MissingBody `json:"missing"`
}

// MaxReuploadHints bounds the unasked entries of a missing-bodies answer.
const MaxReuploadHints = 10

// Validate checks a missing-bodies question.
func (r *MissingBodiesRequest) Validate() error {
	if len(r.Digests) > MaxMissingQuery {
		return Errorf(http.StatusBadRequest, CodeBadRequest, "at most %d digests per question", MaxMissingQuery)
	}
	for _, d := range r.Digests {
		if !IsDigest(d) {
			return Errorf(http.StatusBadRequest, CodeBadRequest, "digest must be 64 lowercase hex characters")
		}
	}
	return nil
}

// BodyUploadResult answers a body upload.
type BodyUploadResult struct {
	Digest    string `json:"digest"`
	Status    string `json:"status"` // stored, or already_available
	ExpiresAt int64  `json:"expires_at"`
}

// Body upload statuses.
const (
	BodyStored           = "stored"
	BodyAlreadyAvailable = "already_available"
)

// BodyDeleteResult answers a body deletion: how many declarations (one, or
// for a Hub admin every author's) were tombstoned.
type BodyDeleteResult struct {
	Digest  string `json:"digest"`
	Deleted int    `json:"deleted"`
}

// Reasons of body refusals.
const (
	ReasonBodyNotUploaded = "body_not_uploaded"
	ReasonBodyGone        = "body_gone"
	ReasonBodyNotShared   = "body_not_shared"
)

// BodyContentType is the Content-Type of a body download.
const BodyContentType = BodyMediaType

// UntrustedHeader marks a body download as untrusted agent output.
const UntrustedHeader = "X-Agentscm-Untrusted"
