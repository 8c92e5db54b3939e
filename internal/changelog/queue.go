package changelog

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/agentscm/agentscm/internal/fsutil"
)

// The upload queue. Every increment is stored in the changelog directory
// first, which fixes its position; uploads to the Hub follow, oldest
// first, by the hook that stored it and, while the Hub is unreachable or
// has nowhere to store them, by later hooks (and `changelog upload`). The
// queue file records how far the Hub's sequence reaches and which positions
// the Hub refused: a refused position is not retried on its own but merged
// into the next increment that is uploaded, as the seed's "the next archive
// carries those writes" asks, so the Hub's sequence still replays.
const (
	uploadsFile    = "uploads.json"
	uploadLockFile = "upload.lock"
)

// maxMergedRecords bounds the merge history kept in the queue file; older
// ranges are only counted.
const maxMergedRecords = 1000

// MergedRecord is one range of positions merged on the Hub.
type MergedRecord struct {
	From   int    `json:"from"`
	To     int    `json:"to"`
	Into   int    `json:"into"`
	Reason string `json:"reason"`
	WorkID string `json:"work_id,omitempty"`
}

// RefusedRange is the run of positions, from the queue's Next up to To
// (exclusive), the Hub refused and that wait to be merged into the next
// uploaded increment.
type RefusedRange struct {
	To     int    `json:"to"`
	Reason string `json:"reason"`      // the first refusal
	Last   string `json:"last_reason"` // the latest refusal
	// At is when an upload was last refused after being built; for
	// ReservationTTL after it (unless the grant was read again since) the
	// next positions are refused without building a merge.
	At time.Time `json:"at,omitzero"`
}

// uploadState is the queue file's content.
type uploadState struct {
	Version int `json:"version"`
	// WorkID is the Work of the Hub's last answer.
	WorkID string `json:"work_id,omitempty"`
	// Next is the first position not yet on the Hub: every stored position
	// below it has its increment there or is merged into one.
	Next          int            `json:"next"`
	Refused       *RefusedRange  `json:"refused,omitempty"`
	Merged        []MergedRecord `json:"merged,omitempty"`
	MergedOmitted int            `json:"merged_omitted,omitempty"`
	// LastError is why the last attempt stopped (the Hub unreachable...),
	// cleared by the next upload.
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
	// LocalOnly is set while the Hub has nowhere to store increments.
	LocalOnly string `json:"local_only,omitempty"`
}

// UploadOutcome says what one run of the upload queue did.
type UploadOutcome struct {
	WorkID string `json:"work_id,omitempty"`
	// Uploaded lists the positions the Hub now holds, in order.
	Uploaded []int `json:"uploaded"`
	// Status is the Hub's word for the last upload ("stored",
	// "duplicate", "replaced").
	Status string `json:"status,omitempty"`
	// Merged lists the ranges merged into an uploaded increment.
	Merged []MergedRecord `json:"merged,omitempty"`
	// Refused lists the positions the grant refused (they merge into the
	// next uploaded one).
	Refused []int `json:"refused,omitempty"`
	// RefusedReason is the latest refusal's reason.
	RefusedReason string `json:"refused_reason,omitempty"`
	// Pending counts the stored positions still waiting for an upload.
	Pending int `json:"pending"`
	// LocalOnly explains why nothing went to the Hub (no current Work).
	LocalOnly string `json:"local_only,omitempty"`
	// Err is why the run stopped early (the Hub unreachable...).
	Err string `json:"error,omitempty"`
}

func (c *Changelog) loadUploads() (*uploadState, error) {
	b, err := fsutil.ReadFileNoFollow(filepath.Join(c.dir, uploadsFile), 16<<20)
	if errors.Is(err, fs.ErrNotExist) {
		return &uploadState{Version: 1}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read upload queue: %w", err)
	}
	var q uploadState
	if err := json.Unmarshal(b, &q); err != nil || q.Version != 1 || q.Next < 0 {
		// Start over from position 0: the Hub answers duplicates for what
		// it holds, and says where its sequence ends.
		return &uploadState{Version: 1, LastError: "the upload queue file was unreadable and was reset"}, nil
	}
	return &q, nil
}

func (c *Changelog) saveUploads(q *uploadState) error {
	if n := len(q.Merged) - maxMergedRecords; n > 0 {
		q.Merged = append([]MergedRecord(nil), q.Merged[n:]...)
		q.MergedOmitted += n
	}
	b, err := json.Marshal(q)
	if err != nil {
		return err
	}
	return fsutil.WriteAtomic(filepath.Join(c.dir, uploadsFile), b, fsutil.FileMode)
}

// lockWait takes the exclusive flock on path, waiting at most until ctx is
// done.
func lockWait(ctx context.Context, path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, fsutil.FileMode)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if err != syscall.EWOULDBLOCK && err != syscall.EINTR {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("another process is uploading this changelog's increments: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// UploadOptions configure an upload run.
type UploadOptions struct {
	// Through is the last position to upload: one whose capture is known
	// to be complete (the hook's own, or NextPosition()-1).
	Through int
	// Now returns the current time; nil uses the changelog's clock.
	Now func() time.Time
	// Failpoint, when set, is called at the named points of a run
	// ("uploaded": the Hub holds a position, the queue file does not yet
	// say so); a crash test kills the process there.
	Failpoint func(name string)
	// Sharing decides what of the conversation roots an upload may carry
	// (see UploadForm); nil shares no conversation.
	Sharing SharingPolicy
	// Locked says the caller holds the changelog's upload lock
	// (TryUploadLock: the detached deliverer), so Upload does not take it.
	Locked bool
	// Reconcile, for a remote that is a Lister, first compares the queue
	// with what the remote holds (changelog upload does; the hook does
	// not, to spare a request per tool call): the grant is read afresh,
	// positions refused under an older grant are retried each on its own,
	// and positions the remote's sequence lacks (another Work, a lost
	// increment) are uploaded again.
	Reconcile bool
}

// Upload runs the upload queue: the stored positions the Hub does not hold
// yet, up to opts.Through, oldest first, each checked against the grant the
// reservation file holds and uploaded to r, within ctx (the hook bounds it
// by RemoteDeadline). A position the grant refuses is merged into the next
// uploaded one; an unreachable Hub, or one with nowhere to store them,
// leaves the positions pending for a later run. Only a local failure (the
// queue file cannot be written) is an error; the Hub's answers are in the
// outcome.
func (c *Changelog) Upload(ctx context.Context, r Remote, opts UploadOptions) (*UploadOutcome, error) {
	now := opts.Now
	if now == nil {
		now = c.opts.Now
	}
	fp := opts.Failpoint
	if fp == nil {
		fp = func(string) {}
	}
	if !opts.Locked {
		lk, err := lockWait(ctx, filepath.Join(c.dir, uploadLockFile))
		if err != nil {
			return &UploadOutcome{Err: err.Error()}, nil
		}
		defer lk.Close()
	}
	q, err := c.loadUploads()
	if err != nil {
		return nil, err
	}
	out := &UploadOutcome{Uploaded: []int{}}
	res := &Reservation{Path: filepath.Join(c.dir, ReservationFile)}
	if l, ok := r.(Lister); ok && opts.Reconcile {
		h, err := l.Holding(ctx)
		if errors.Is(err, ErrNoDestination) {
			q.LocalOnly = err.Error()
			out.LocalOnly, out.Pending = q.LocalOnly, c.countPending(q, opts.Through)
			return out, c.saveUploads(q)
		}
		if err != nil {
			q.LastError, q.LastErrorAt = fmt.Sprintf("list the Hub's increments: %v", err), now().UTC()
			out.Err, out.Pending = q.LastError, c.countPending(q, opts.Through)
			return out, c.saveUploads(q)
		}
		if err := c.reconcile(q, res, h, now()); err != nil {
			return nil, err
		}
	}
	rebased := false
	for {
		positions, err := c.storedBetween(q.Next, opts.Through)
		if err != nil {
			return nil, err
		}
		var pending []int
		for _, p := range positions {
			if p >= q.Next && p <= opts.Through && (q.Refused == nil || p >= q.Refused.To) {
				pending = append(pending, p)
			}
		}
		restart := false
		stop := false
		for i, p := range pending {
			if ctx.Err() != nil {
				out.Err = fmt.Sprintf("stopped at the hook's deadline: %v", ctx.Err())
				out.Pending = len(pending) - i
				return out, c.saveUploads(q)
			}
			refuse := func(reason string) error { return c.refuseAt(q, out, p, reason, now()) }
			// The objects bound as last read refuses before any body is
			// built (a merge grows with the refused positions), and so does
			// a refusal less than ReservationTTL old when the grant was not
			// read again since: one merge per minute at most while refused.
			if err := res.Check(1, 0, now(), ReservationTTL); err != nil {
				if err := c.refuseAt(q, out, p, fmt.Sprintf("the grant as last read from the Hub: %v", err), time.Time{}); err != nil {
					return nil, err
				}
				continue
			}
			if rf := q.Refused; rf != nil && !rf.At.IsZero() && now().Sub(rf.At) < ReservationTTL && !now().Before(rf.At) {
				if u, err := res.Used(); err == nil && !u.SyncedAt.After(rf.At) {
					if err := c.refuseAt(q, out, p, rf.Last, time.Time{}); err != nil {
						return nil, err
					}
					continue
				}
			}
			body, merged, err := c.buildUpload(q, positions, p, opts.Sharing)
			var tl *tooLargeError
			if errors.As(err, &tl) {
				if err := refuse(tl.Error()); err != nil {
					return nil, err
				}
				continue
			}
			if err != nil {
				q.LastError, q.LastErrorAt = err.Error(), now().UTC()
				out.Err = err.Error()
				out.Pending = len(pending) - i
				return out, c.saveUploads(q)
			}
			if len(body) > MaxRemoteBytes {
				if err := refuse(fmt.Sprintf("%d bytes exceed the %d-byte bound of one uploaded increment", len(body), MaxRemoteBytes)); err != nil {
					return nil, err
				}
				continue
			}
			if err := res.Check(1, int64(len(body)), now(), ReservationTTL); err != nil {
				if err := refuse(fmt.Sprintf("the grant as last read from the Hub: %v", err)); err != nil {
					return nil, err
				}
				continue
			}
			m, err := ReadMetaFrom(bytes.NewReader(body))
			if err != nil {
				return nil, fmt.Errorf("upload of position %d: %w", p, err)
			}
			sum := sha256.Sum256(body)
			from := m.MergedFrom()
			rr, err := r.Upload(ctx, RemoteIncrement{Position: p, Session: m.SessionID, Merged: p - from, Digest: hex.EncodeToString(sum[:]), Body: body})
			var le *LimitError
			var miss *MissingError
			switch {
			case err == nil:
				fp("uploaded")
				for _, mr := range merged {
					rec := MergedRecord{From: mr.From, To: mr.To, Into: p, Reason: mr.Reason, WorkID: rr.WorkID}
					q.Merged = append(q.Merged, rec)
					out.Merged = append(out.Merged, rec)
				}
				q.Next, q.Refused, q.WorkID, q.LastError, q.LastErrorAt, q.LocalOnly = p+1, nil, rr.WorkID, "", time.Time{}, ""
				if err := c.saveUploads(q); err != nil {
					return nil, err
				}
				out.Uploaded = append(out.Uploaded, p)
				out.WorkID, out.Status = rr.WorkID, rr.Status
				// The Hub's numbers are authoritative; a failed write of
				// the cache only costs a request.
				_ = res.Sync(rr.WorkID, rr.Grant, rr.Used, now())
			case errors.As(err, &le):
				if err := refuse(err.Error()); err != nil {
					return nil, err
				}
			case errors.Is(err, ErrMergedOnRemote):
				if err := c.refuseAt(q, out, p, "merged on the Hub by an earlier upload", time.Time{}); err != nil {
					return nil, err
				}
			case errors.As(err, &miss) && miss.Next >= 0 && miss.Next < from && !rebased:
				// Another Work (or a Hub that lost increments): fill its
				// sequence from where it ends.
				rebased = true
				q.Next, q.Refused = miss.Next, nil
				keep := q.Merged[:0]
				for _, mr := range q.Merged {
					if mr.To < miss.Next {
						keep = append(keep, mr)
					}
				}
				q.Merged = keep
				if err := c.saveUploads(q); err != nil {
					return nil, err
				}
				restart = true
			case errors.Is(err, ErrNoDestination):
				q.LocalOnly, q.LastError, q.LastErrorAt = err.Error(), "", time.Time{}
				out.LocalOnly = q.LocalOnly
				stop = true
			default:
				q.LastError, q.LastErrorAt, q.LocalOnly = fmt.Sprintf("upload of position %d: %v", p, err), now().UTC(), ""
				out.Err = q.LastError
				stop = true
			}
			if restart || stop {
				if stop {
					out.Pending = len(pending) - i
					return out, c.saveUploads(q)
				}
				break
			}
		}
		if !restart {
			break
		}
	}
	positions, err := c.storedBetween(q.Next, opts.Through)
	if err != nil {
		return nil, err
	}
	for _, p := range positions {
		if p >= q.Next && p <= opts.Through && (q.Refused == nil || p >= q.Refused.To) {
			out.Pending++
		}
	}
	return out, nil
}

// reconcile brings the queue in line with what the remote holds: its
// grant and usage as the reservation's, no refusal carried over from an
// older grant (the refused positions are retried, each on its own, and
// merge again only if the grant still refuses them), and the sequence
// resumed where the remote's ends when that is before the queue's Next
// or the remote's Work is another.
func (c *Changelog) reconcile(q *uploadState, res *Reservation, h Holding, now time.Time) error {
	if err := res.Sync(h.WorkID, h.Grant, h.Used, now); err != nil {
		return err
	}
	q.Refused = nil
	if h.Next < q.Next || (q.WorkID != "" && h.WorkID != q.WorkID) {
		q.Next = h.Next
		keep := q.Merged[:0]
		for _, mr := range q.Merged {
			if mr.To < h.Next && mr.WorkID == h.WorkID {
				keep = append(keep, mr)
			}
		}
		q.Merged = keep
	}
	q.WorkID, q.LocalOnly = h.WorkID, ""
	return c.saveUploads(q)
}

// countPending counts the stored positions from q.Next to through that
// wait for an upload (not refused).
func (c *Changelog) countPending(q *uploadState, through int) int {
	positions, err := c.storedBetween(q.Next, through)
	if err != nil {
		return 0
	}
	n := 0
	for _, p := range positions {
		if q.Refused == nil || p >= q.Refused.To {
			n++
		}
	}
	return n
}

// refuseAt records that the Hub refused position p; at, when not zero, is
// when a built upload was refused.
func (c *Changelog) refuseAt(q *uploadState, out *UploadOutcome, p int, reason string, at time.Time) error {
	if q.Refused == nil {
		q.Refused = &RefusedRange{Reason: reason}
	}
	q.Refused.To, q.Refused.Last = p+1, reason
	if !at.IsZero() {
		q.Refused.At = at.UTC()
	}
	out.Refused = append(out.Refused, p)
	out.RefusedReason = reason
	return c.saveUploads(q)
}

// storedBetween lists the stored positions from..to: one lstat per
// position when the range is short (the hook's case: the work is the
// pending positions, not the changelog's whole history), else one listing.
func (c *Changelog) storedBetween(from, to int) ([]int, error) {
	if to < from {
		return nil, nil
	}
	if to-from > 256 {
		all, err := c.positions()
		if err != nil {
			return nil, err
		}
		var out []int
		for _, p := range all {
			if p >= from && p <= to {
				out = append(out, p)
			}
		}
		return out, nil
	}
	var out []int
	for p := from; p <= to; p++ {
		fi, err := os.Lstat(c.incrementPath(p))
		switch {
		case err == nil && fi.Mode().IsRegular():
			out = append(out, p)
		case err == nil || errors.Is(err, fs.ErrNotExist):
		default:
			return nil, err
		}
	}
	return out, nil
}

// buildUpload returns the body to upload at position p and the merged
// ranges it carries: the position's own upload body, or, when positions
// from q.Next on were refused (or have no increment), the merge of the
// upload bodies of every stored position from q.Next to p.
func (c *Changelog) buildUpload(q *uploadState, positions []int, p int, policy SharingPolicy) ([]byte, []incmeta.Merged, error) {
	// What no upload can hold is refused from the stored sizes, before
	// anything is read.
	var total int64
	for _, x := range positions {
		if x < q.Next || x > p {
			continue
		}
		fi, err := os.Lstat(c.incrementPath(x))
		if err != nil {
			return nil, nil, err
		}
		if fi.Size() > MaxRemoteBytes {
			return nil, nil, &tooLargeError{fmt.Sprintf("increment %d is %d bytes, over the %d-byte bound of one uploaded increment", x, fi.Size(), MaxRemoteBytes)}
		}
		total += fi.Size()
	}
	if total > MaxRemoteBytes {
		return nil, nil, &tooLargeError{fmt.Sprintf("the increments %d..%d to merge hold %d bytes, over the %d-byte bound of one uploaded increment", q.Next, p, total, MaxRemoteBytes)}
	}
	if q.Next >= p {
		b, err := c.uploadBody(p, policy)
		return b, nil, err
	}
	reason := "no increment was stored at these positions"
	if q.Refused != nil {
		reason = q.Refused.Reason
	}
	merged := []incmeta.Merged{{From: q.Next, To: p - 1, Reason: reason}}
	var bodies [][]byte
	for _, x := range positions {
		if x < q.Next || x > p {
			continue
		}
		// A merge carries no conversation: the parts' transcript
		// copies do not compose (only the last part's metadata is kept),
		// so a merged upload withholds them whatever the policy.
		b, err := c.uploadBody(x, nil)
		if err != nil {
			return nil, nil, err
		}
		bodies = append(bodies, b)
	}
	body, err := mergeIncrements(bodies, c.opts.Roots, merged)
	if err != nil {
		return nil, nil, fmt.Errorf("merge positions %d..%d for upload: %w", q.Next, p, err)
	}
	return body, merged, nil
}

// tooLargeError refuses an upload no Hub could store: it is merged into the
// next one like a grant refusal.
type tooLargeError struct{ msg string }

func (e *tooLargeError) Error() string { return e.msg }

// HubStatus is what the Hub holds of one stored position, as the upload
// queue last heard.
type HubStatus struct {
	// State is "uploaded", "merged" (into Into), "refused" (to be merged
	// into the next uploaded position), "pending" or "local-only".
	State  string `json:"state"`
	Into   int    `json:"into,omitempty"`
	Reason string `json:"reason,omitempty"`
	WorkID string `json:"work_id,omitempty"`
}

// hubStatuses returns each position's HubStatus, or nil when nothing was
// ever uploaded (no queue file).
func (c *Changelog) hubStatuses(positions []int) map[int]*HubStatus {
	if _, err := os.Lstat(filepath.Join(c.dir, uploadsFile)); err != nil {
		return nil
	}
	q, err := c.loadUploads()
	if err != nil {
		return nil
	}
	out := map[int]*HubStatus{}
	for _, p := range positions {
		st := &HubStatus{State: "pending", Reason: q.LastError}
		switch {
		case p < q.Next:
			st = &HubStatus{State: "uploaded", WorkID: q.WorkID}
			for _, mr := range q.Merged {
				if p >= mr.From && p <= mr.To {
					st = &HubStatus{State: "merged", Into: mr.Into, Reason: mr.Reason, WorkID: mr.WorkID}
				}
			}
		case q.Refused != nil && p < q.Refused.To:
			st = &HubStatus{State: "refused", Reason: q.Refused.Reason}
		case q.LocalOnly != "":
			st = &HubStatus{State: "local-only", Reason: q.LocalOnly}
		}
		out[p] = st
	}
	return out
}

// TryUploadLock takes the changelog directory dir's upload lock without
// waiting: nil, nil when another process holds it (a deliverer uploads, or
// `changelog upload` runs). The hook takes it to hand it to the detached
// deliverer it starts (one deliverer per changelog, as per spool), which
// uploads with UploadOptions.Locked and lets it go when done.
func TryUploadLock(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, uploadLockFile), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, fsutil.FileMode)
	if err != nil {
		return nil, fmt.Errorf("open the upload lock: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return f, nil
		case err == syscall.EINTR:
			continue
		case err == syscall.EWOULDBLOCK:
			f.Close()
			return nil, nil
		}
		f.Close()
		return nil, fmt.Errorf("upload lock: %w", err)
	}
}

// CheckUploadLock checks that f is dir's upload lock (the file a detached
// deliverer inherited): same inode as the lock path, and held.
func CheckUploadLock(f *os.File, dir string) error {
	var a, b syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &a); err != nil {
		return fmt.Errorf("upload lock: %w", err)
	}
	if err := syscall.Lstat(filepath.Join(dir, uploadLockFile), &b); err != nil {
		return fmt.Errorf("upload lock: %w", err)
	}
	if a.Dev != b.Dev || a.Ino != b.Ino {
		return errors.New("the inherited file is not this changelog's upload lock")
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fmt.Errorf("the inherited upload lock is not held: %w", err)
	}
	return nil
}

// WaitUploads waits (bounded by ctx) until no process holds dir's upload
// lock: for tests and commands that must not leave a deliverer running,
// while no hook runs (a hook that finds the lock held by the waiter
// leaves its increment to the next kick).
func WaitUploads(ctx context.Context, dir string) error {
	f, err := lockWait(ctx, filepath.Join(dir, uploadLockFile))
	if err != nil {
		return err
	}
	return f.Close()
}

// OpenForUpload opens the changelog directory dir (of a checkout whose
// config directory is configDir) for its upload queue.
func OpenForUpload(configDir, dir string) (*Changelog, string, error) {
	roots, err := LoadRoots(dir)
	if err != nil {
		return nil, "", err
	}
	if len(roots) == 0 {
		return nil, "", fmt.Errorf("changelog %s has no roots", dir)
	}
	c, err := Open(dir, Options{Roots: roots, Exclude: []string{configDir}})
	if err != nil {
		return nil, "", err
	}
	return c, roots[0].Path, nil
}

// PendingUploads counts the stored positions of the changelog directory
// dir that its upload queue has not put on the Hub yet (read-only: the
// queue file and the stored positions).
func PendingUploads(configDir, dir string) (int, error) {
	c, _, err := OpenForUpload(configDir, dir)
	if err != nil {
		return 0, err
	}
	q, err := c.loadUploads()
	if err != nil {
		return 0, err
	}
	next, err := c.NextPosition()
	if err != nil {
		return 0, err
	}
	return c.countPending(q, next-1), nil
}
