package changelog

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Remote is where stored increments go beyond the changelog directory: the
// Hub, under the checkout's current Work and within its grant.
type Remote interface {
	// Upload stores one increment and reports the grant and usage after
	// it. It returns ErrNoDestination when there is nowhere to store it
	// (no current Work), a *LimitError when the grant refuses it, a
	// *MissingError when earlier positions must be uploaded first and
	// ErrMergedOnRemote when the remote merged the position into a later
	// one.
	Upload(ctx context.Context, inc RemoteIncrement) (RemoteResult, error)
}

// Holding is what a remote holds of a checkout's sequence under its current
// Work, as its list says.
type Holding struct {
	WorkID string
	// Next is the first position the remote lacks: every position below
	// it is held there, or merged into a later held position.
	Next  int
	Grant Grant
	Used  Usage
}

// Lister is a Remote that can list what it holds; an upload with
// UploadOptions.Reconcile compares the queue with it first.
type Lister interface {
	Holding(ctx context.Context) (Holding, error)
}

// RemoteIncrement is one increment to upload.
type RemoteIncrement struct {
	Position int
	Session  string
	// Merged counts the positions before Position whose writes Body also
	// carries (its metadata's merged ranges): the upload fills the Hub's
	// sequence from Position-Merged.
	Merged int
	// Digest is the SHA-256 of Body, lowercase hex.
	Digest string
	Body   []byte
	// Conversation and Redactions are the form's (see UploadForm):
	// ConvWithheld, ConvRedacted or "" (no conversation root).
	Conversation string
	Redactions   int
}

// RemoteResult is what the remote holds after an upload.
type RemoteResult struct {
	WorkID string
	Grant  Grant
	Used   Usage
	// Status is the remote's word for the upload ("stored", "duplicate",
	// "replaced").
	Status string
}

// ErrNoDestination reports a remote with nowhere to store increments (the
// checkout has no current Work that accepts capture): the increment is
// stored locally only and the state advances.
var ErrNoDestination = errors.New("no destination for increments")

// ErrMergedOnRemote reports a position the remote holds no increment for
// although it holds later ones: an earlier upload merged it into a later
// position.
var ErrMergedOnRemote = errors.New("the remote merged this position into a later one")

// ErrSessionRefused reports a position whose session id the remote refuses
// (a host's id such as a/b): the position cannot be uploaded on its own,
// so it is merged into the next upload, whose session is the carrier's.
var ErrSessionRefused = errors.New("the remote refuses this position's session id")

// MissingError reports a remote that lacks the positions from Next on.
type MissingError struct{ Next int }

func (e *MissingError) Error() string {
	return fmt.Sprintf("the remote lacks increments from position %d on", e.Next)
}

// RemoteDeadline bounds the uploads one hook makes (the queue of pending
// positions, oldest first): the hook's delivery deadline.
const RemoteDeadline = 5 * time.Second

// ReservationTTL is how long a grant read from the Hub refuses increments
// locally, without asking the Hub again.
const ReservationTTL = time.Minute

// MaxRemoteBytes bounds one uploaded increment (the Hub's own bound).
const MaxRemoteBytes = 256 << 20
