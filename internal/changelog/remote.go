package changelog

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
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
		body, err := fsutil.ReadFileNoFollow(inc.Path, MaxRemoteBytes)
		if err != nil {
			return fmt.Errorf("read increment %d for upload: %w", inc.Position, err)
		}
		if err := res.Check(1, int64(len(body)), now(), ReservationTTL); err != nil {
			return fmt.Errorf("the Hub's grant (as last read) refuses it: %w", err)
		}
		upload := func(pos int, session string, b []byte) (RemoteResult, error) {
			sum := sha256.Sum256(b)
			return r.Upload(ctx, RemoteIncrement{Position: pos, Session: session, Digest: hex.EncodeToString(sum[:]), Body: b})
		}
		rr, err := upload(inc.Position, inc.Meta.SessionID, body)
		var miss *MissingError
		backfilled := 0
		if errors.As(err, &miss) && miss.Next >= 0 && miss.Next < inc.Position {
			for p := miss.Next; p < inc.Position; p++ {
				b, err := fsutil.ReadFileNoFollow(filepath.Join(dir, incrementsDir, IncrementName(p)), MaxRemoteBytes)
				if err != nil {
					return fmt.Errorf("back-fill the Hub from position %d: increment %d: %w", miss.Next, p, err)
				}
				m, err := ReadMetaFrom(bytes.NewReader(b))
				if err != nil {
					return fmt.Errorf("back-fill the Hub from position %d: increment %d: %w", miss.Next, p, err)
				}
				if _, err := upload(p, m.SessionID, b); err != nil {
					return fmt.Errorf("back-fill the Hub from position %d: increment %d: %w", miss.Next, p, err)
				}
				backfilled++
			}
			rr, err = upload(inc.Position, inc.Meta.SessionID, body)
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
