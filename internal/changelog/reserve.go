package changelog

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"

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

// Reservation keeps a grant's usage in a file shared by every hook process:
// each Reserve reads, checks and rewrites it under an exclusive flock, so the
// limits hold across processes.
type Reservation struct {
	Path  string
	Grant Grant
}

// Usage is the reservation file's content.
type Usage struct {
	Objects int64 `json:"objects"`
	Bytes   int64 `json:"bytes"`
}

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
		if g := r.Grant.MaxObjects; g > 0 && u.Objects+objects > g {
			return &LimitError{Bound: "objects", Used: u.Objects, Max: g, Want: objects}
		}
		if g := r.Grant.MaxBytes; g > 0 && u.Bytes+bytes > g {
			return &LimitError{Bound: "bytes", Used: u.Bytes, Max: g, Want: bytes}
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
	return r.update(func(*Usage) error { return nil })
}
