package changelog

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// Grant is the object and byte allowance increments are stored under (the
// Work's grant). A zero field means no limit on that dimension.
type Grant struct {
	MaxObjects int64 `json:"max_objects"`
	MaxBytes   int64 `json:"max_bytes"`
}

// ErrLimit reports an increment refused because it would exceed the grant.
var ErrLimit = errors.New("grant limit reached")

// LimitError says which bound refused an increment.
type LimitError struct {
	Bound     string // "objects" or "bytes"
	Used, Max int64
	Want      int64
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%v: %s: %d used + %d requested > %d granted", ErrLimit, e.Bound, e.Used, e.Want, e.Max)
}

func (e *LimitError) Unwrap() error { return ErrLimit }

// Reservation keeps a grant's limits and usage in a file shared by every
// hook process: each Reserve, Check or Sync reads, checks and rewrites it
// under an exclusive flock, so the limits hold across processes. Grant, when
// zero, is taken from the file (where Sync records the Hub's grant).
type Reservation struct {
	Path  string
	Grant Grant
}

// Usage is the reservation file's content: the usage and, once synced with
// the Hub, the grant of the Work the increments go to and when it was read.
type Usage struct {
	Objects int64 `json:"objects"`
	Bytes   int64 `json:"bytes"`
	// Grant and WorkID are the Hub's, as of SyncedAt.
	Grant    *Grant    `json:"grant,omitempty"`
	WorkID   string    `json:"work_id,omitempty"`
	SyncedAt time.Time `json:"synced_at,omitzero"`
}

// ReservationFile is the reservation file's name in a changelog directory.
const ReservationFile = "reservation.json"

func (r *Reservation) grant(u *Usage) Grant {
	if r.Grant != (Grant{}) || u.Grant == nil {
		return r.Grant
	}
	return *u.Grant
}

func checkGrant(g Grant, u *Usage, objects, bytes int64) error {
	if g.MaxObjects > 0 && u.Objects+objects > g.MaxObjects {
		return &LimitError{Bound: "objects", Used: u.Objects, Max: g.MaxObjects, Want: objects}
	}
	if g.MaxBytes > 0 && u.Bytes+bytes > g.MaxBytes {
		return &LimitError{Bound: "bytes", Used: u.Bytes, Max: g.MaxBytes, Want: bytes}
	}
	return nil
}

// Check refuses with a *LimitError when objects and bytes more would exceed
// the grant recorded by a Sync within ttl before now; it changes nothing. A
// stale or missing record passes: the Hub decides.
func (r *Reservation) Check(objects, bytes int64, now time.Time, ttl time.Duration) error {
	_, err := r.update(func(u *Usage) error {
		if u.Grant == nil || now.Sub(u.SyncedAt) > ttl || now.Before(u.SyncedAt) {
			return errUnchanged
		}
		if err := checkGrant(*u.Grant, u, objects, bytes); err != nil {
			return err
		}
		return errUnchanged
	})
	if errors.Is(err, errUnchanged) {
		return nil
	}
	return err
}

// Sync records the Hub's grant and usage of a Work as of now.
func (r *Reservation) Sync(workID string, g Grant, used Usage, now time.Time) error {
	_, err := r.update(func(u *Usage) error {
		*u = Usage{Objects: used.Objects, Bytes: used.Bytes, Grant: &g, WorkID: workID, SyncedAt: now.UTC()}
		return nil
	})
	return err
}

// Forget drops the recorded grant and usage (the checkout's current Work
// changed): the next increment asks the Hub.
func (r *Reservation) Forget() error {
	_, err := r.update(func(u *Usage) error {
		*u = Usage{}
		return nil
	})
	return err
}

// errUnchanged ends an update without rewriting the file.
var errUnchanged = errors.New("unchanged")

func (r *Reservation) update(fn func(u *Usage) error) (Usage, error) {
	lk, err := fsutil.LockFile(r.Path + ".lock")
	if err != nil {
		return Usage{}, err
	}
	defer lk.Unlock()
	var u Usage
	b, err := fsutil.ReadFileNoFollow(r.Path, 1<<16)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return Usage{}, fmt.Errorf("read reservation: %w", err)
	default:
		if err := json.Unmarshal(b, &u); err != nil {
			return Usage{}, fmt.Errorf("reservation file %s is corrupt: %w", r.Path, err)
		}
	}
	if err := fn(&u); err != nil {
		return u, err
	}
	nb, _ := json.Marshal(u)
	if err := fsutil.WriteAtomic(r.Path, nb, fsutil.FileMode); err != nil {
		return u, fmt.Errorf("write reservation: %w", err)
	}
	return u, nil
}

// Reserve takes objects and bytes from the grant, or refuses with a
// *LimitError (wrapping ErrLimit) leaving the usage unchanged.
func (r *Reservation) Reserve(objects, bytes int64) error {
	_, err := r.update(func(u *Usage) error {
		if err := checkGrant(r.grant(u), u, objects, bytes); err != nil {
			return err
		}
		u.Objects += objects
		u.Bytes += bytes
		return nil
	})
	return err
}

// Release returns a reservation whose increment was not stored.
func (r *Reservation) Release(objects, bytes int64) error {
	_, err := r.update(func(u *Usage) error {
		u.Objects = max(0, u.Objects-objects)
		u.Bytes = max(0, u.Bytes-bytes)
		return nil
	})
	return err
}

// Used reads the current usage.
func (r *Reservation) Used() (Usage, error) {
	u, err := r.update(func(*Usage) error { return errUnchanged })
	if errors.Is(err, errUnchanged) {
		err = nil
	}
	return u, err
}
