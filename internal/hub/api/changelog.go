package api

import (
	"net/http"
	"net/url"
	"strconv"
)

// Changelog bounds and defaults. An increment body over MaxIncrementBytes is
// refused with 413; a Work without an explicit grant gets the default one.
const (
	MaxIncrementBytes     = 256 << 20
	MaxIncrementPosition  = 999999
	DefaultGrantObjects   = 10000
	DefaultGrantBytes     = 1 << 30
	MaxGrantObjects       = 1000000
	MaxGrantBytes         = 1 << 40
	IncrementContentType  = "application/gzip"
	IncrementDigestHeader = "X-Agentscm-Digest"
)

// Error codes and reasons of the changelog routes.
const (
	// CodeGrantExceeded (422): storing the increment would exceed the Work's
	// grant; Reason is the bound ("objects" or "bytes") and Detail carries
	// the numbers.
	CodeGrantExceeded = "grant_exceeded"
	// CodeDigestMismatch (400): the body does not hash to the digest given.
	CodeDigestMismatch = "digest_mismatch"
	// CodeBadIncrement (422): the body is not a changelog increment whose
	// metadata names the position and session given.
	CodeBadIncrement = "bad_increment"
	// ReasonIncrementsMissing (409 conflict): earlier positions are not
	// stored yet; Detail.NextPosition is the first one missing.
	ReasonIncrementsMissing = "increments_missing"
	// ReasonPositionTaken (409 conflict): another increment is stored at
	// this position and a later one exists.
	ReasonPositionTaken = "position_taken"
	// ReasonPositionMerged refuses an upload at a position the Work's
	// sequence passed without an increment of its own: a later increment
	// carries its writes (merged).
	ReasonPositionMerged = "position_merged"
	// ReasonMergeOverlaps refuses a merged upload whose merged positions
	// the Work already holds.
	ReasonMergeOverlaps = "merge_overlaps"
	// BoundObjects and BoundBytes name the two bounds of a grant.
	BoundObjects = "objects"
	BoundBytes   = "bytes"
	// BoundUnpackedBytes refuses one increment that unpacks (its gzip
	// stream decompressed) to more than the grant's max_bytes: an apply
	// refuses such an increment too, so the Hub never stores one.
	BoundUnpackedBytes = "unpacked_bytes"
)

// Upload statuses.
const (
	IncrementStored    = "stored"
	IncrementDuplicate = "duplicate"
	// IncrementReplaced: the Work's latest increment was replaced by another
	// body at the same position (the client redid a capture whose state it
	// never advanced).
	IncrementReplaced = "replaced"
)

// ErrorDetail carries the numbers of a changelog refusal.
type ErrorDetail struct {
	WorkID string `json:"work_id,omitempty"`
	// Bound, Used, Max and Want describe a grant refusal.
	Bound string `json:"bound,omitempty"`
	Used  int64  `json:"used,omitempty"`
	Max   int64  `json:"max,omitempty"`
	Want  int64  `json:"want,omitempty"`
	// NextPosition is the first position the Work is missing.
	NextPosition *int `json:"next_position,omitempty"`
	// Field names the request field of an out_of_bounds refusal.
	Field string `json:"field,omitempty"`
	// Generation is the Work's current generation in a generation_changed
	// conflict.
	Generation int64 `json:"generation,omitempty"`
}

// Grant is a Work's changelog allowance: how many increment objects and
// bytes the Hub stores for it.
type Grant struct {
	MaxObjects int64 `json:"max_objects"`
	MaxBytes   int64 `json:"max_bytes"`
}

// DefaultGrant is the grant of a Work that was not given one.
func DefaultGrant() Grant { return Grant{MaxObjects: DefaultGrantObjects, MaxBytes: DefaultGrantBytes} }

// Validate checks a requested grant against the Hub's ceilings.
func (g Grant) Validate() error {
	if err := CheckInt("max_objects", g.MaxObjects, 1, MaxGrantObjects); err != nil {
		return err
	}
	if err := CheckInt("max_bytes", g.MaxBytes, 1, MaxGrantBytes); err != nil {
		return err
	}
	return nil
}

// GrantUsage is what a Work's stored increments take from its grant.
type GrantUsage struct {
	Objects int64 `json:"objects"`
	Bytes   int64 `json:"bytes"`
}

// GrantRequest sets a Work's changelog grant.
type GrantRequest struct {
	MaxObjects int64 `json:"max_objects"`
	MaxBytes   int64 `json:"max_bytes"`
}

// GrantView is the body of the grant route: a Work's grant and usage.
type GrantView struct {
	WorkID string     `json:"work_id"`
	Grant  Grant      `json:"grant"`
	Used   GrantUsage `json:"used"`
}

// IncrementUpload asks to store one increment (the body is the archive).
type IncrementUpload struct {
	Position int
	// Session is the native session id of the tool call ("" for an
	// increment no session made, such as a rewind's).
	Session string
	// Digest is the SHA-256 of the body, 64 lowercase hex.
	Digest string
	// Size is the body's length (the request's Content-Length).
	Size int64
	// Merged counts the positions right before Position whose writes the
	// body also carries, as its metadata's merged ranges say (the client
	// merges positions the grant refused into the next uploaded one): the
	// upload then fills the sequence from Position-Merged, and those
	// positions have no increment of their own.
	Merged int
}

// Query encodes the upload's position-independent fields as URL query
// parameters.
func (u IncrementUpload) Query() string {
	q := "digest=" + u.Digest
	if u.Session != "" {
		q += "&session=" + url.QueryEscape(u.Session)
	}
	if u.Merged != 0 {
		q += "&merged=" + strconv.Itoa(u.Merged)
	}
	return q
}

// IncrementStoreResult answers an upload.
type IncrementStoreResult struct {
	Status     string     `json:"status"`
	WorkID     string     `json:"work_id"`
	Generation int64      `json:"generation"`
	Position   int        `json:"position"`
	Digest     string     `json:"digest"`
	Size       int64      `json:"size"`
	Grant      Grant      `json:"grant"`
	Used       GrantUsage `json:"used"`
}

// IncrementInfo is one stored increment of a Work.
type IncrementInfo struct {
	Position   int    `json:"position"`
	Digest     string `json:"digest"`
	Size       int64  `json:"size"`
	Session    string `json:"session,omitempty"`
	Generation int64  `json:"generation"`
	WorktreeID string `json:"worktree_id"`
	Kind       string `json:"kind,omitempty"`
	Tool       string `json:"tool,omitempty"`
	Failed     bool   `json:"failed,omitempty"`
	StoredAt   int64  `json:"stored_at"`
}

// IncrementList is the body of GET .../works/{work}/changelog.
type IncrementList struct {
	WorkID     string          `json:"work_id"`
	Grant      Grant           `json:"grant"`
	Used       GrantUsage      `json:"used"`
	Increments []IncrementInfo `json:"increments"`
}

// ParsePosition parses an increment position from a path segment.
func ParsePosition(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > MaxIncrementPosition || strconv.Itoa(n) != s {
		return 0, Errorf(http.StatusBadRequest, CodeBadRequest, "position %q must be an integer 0 to %d", s, MaxIncrementPosition)
	}
	return n, nil
}
