package changelog

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"
)

// Remote is where stored increments go beyond the changelog directory: the
// Hub, under the checkout's current Work and within its grant.
type Remote interface {
	// Upload stores one increment and reports the grant and usage after
	// it. It returns ErrNoDestination when there is nowhere to store it
	// (no current Work), a *LimitError when the grant refuses it and a
	// *MissingError when earlier positions must be uploaded first.
	Upload(ctx context.Context, inc RemoteIncrement) (RemoteResult, error)
}

// RemoteIncrement is one increment to upload.
type RemoteIncrement struct {
	Position int
	Session  string
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

// MissingError reports a remote that lacks the positions from Next on.
type MissingError struct{ Next int }

func (e *MissingError) Error() string {
	return fmt.Sprintf("the remote lacks increments from position %d on", e.Next)
}

// RemoteDeadline bounds the uploads (back-fill included) of one capture:
// the hook's delivery deadline.
const RemoteDeadline = 5 * time.Second

// ReservationTTL is how long a grant read from the Hub refuses increments
// locally, without asking the Hub again.
const ReservationTTL = time.Minute

// MaxRemoteBytes bounds one uploaded increment (the Hub's own bound).
const MaxRemoteBytes = 256 << 20

// RemoteOutcome says what the last capture's upload did.
type RemoteOutcome struct {
	// Uploaded is set when the increment is on the remote.
	Uploaded bool
	WorkID   string
	Status   string
	// Backfilled counts earlier increments uploaded first.
	Backfilled int
	// LocalOnly explains an increment stored locally only.
	LocalOnly string
}

// RemoteStore returns an Options.Store for the changelog directory dir that
// uploads each increment to r: refused at once when the grant the
// reservation file holds (synced from the Hub less than ReservationTTL ago)
// would be exceeded, preceded by the increments the remote lacks, all within
// RemoteDeadline. Any failure or refusal returns an error, so the increment
// is not stored and its writes go to the next one; only ErrNoDestination
// lets a local-only increment stand. out, when not nil, receives the outcome.
func RemoteStore(dir string, r Remote, out *RemoteOutcome, now func() time.Time) func(ctx context.Context, inc Increment) error {
	return RemoteStoreSharing(dir, r, nil, out, now)
}

// RemoteStoreSharing is RemoteStore uploading each increment's UploadForm
// under policy (nil shares no conversation).
func RemoteStoreSharing(dir string, r Remote, policy SharingPolicy, out *RemoteOutcome, now func() time.Time) func(ctx context.Context, inc Increment) error {
	if now == nil {
		now = time.Now
	}
	res := &Reservation{Path: filepath.Join(dir, ReservationFile)}
	return func(ctx context.Context, inc Increment) error {
		if out != nil {
			*out = RemoteOutcome{}
		}
		ctx, cancel := context.WithTimeout(ctx, RemoteDeadline)
		defer cancel()
		// Only the upload form leaves the machine (upload.go).
		form, err := uploadFormFile(inc.Path, inc.Position, policy)
		if err != nil {
			return err
		}
		if err := res.Check(1, int64(len(form.Body)), now(), ReservationTTL); err != nil {
			return fmt.Errorf("the Hub's grant (as last read) refuses it: %w", err)
		}
		rr, err := r.Upload(ctx, form)
		var miss *MissingError
		backfilled := 0
		if errors.As(err, &miss) && miss.Next >= 0 && miss.Next < inc.Position {
			for p := miss.Next; p < inc.Position; p++ {
				f, err := uploadFormFile(filepath.Join(dir, incrementsDir, IncrementName(p)), p, policy)
				if err == nil {
					_, err = r.Upload(ctx, f)
				}
				if err != nil {
					return fmt.Errorf("back-fill the Hub from position %d: increment %d: %w", miss.Next, p, err)
				}
				backfilled++
			}
			rr, err = r.Upload(ctx, form)
		}
		if errors.Is(err, ErrNoDestination) {
			if out != nil {
				out.LocalOnly = err.Error()
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("upload to the Hub: %w", err)
		}
		if out != nil {
			*out = RemoteOutcome{Uploaded: true, WorkID: rr.WorkID, Status: rr.Status, Backfilled: backfilled}
		}
		// The Hub's numbers are authoritative; a failed write of the
		// cache only costs a request.
		_ = res.Sync(rr.WorkID, rr.Grant, rr.Used, now())
		return nil
	}
}
