// Package objects is the Hub's content-addressed object storage: objects
// named by the SHA-256 of their bytes. A Store moves bytes under a name
// (Dir keeps them in a local directory, objects/s3 in a bucket); Verified is
// the one place that checks that bytes hash to their name, on the way in
// and on the way out. objectstest is the suite every Store runs.
package objects

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// ErrNotFound reports a missing object; ErrDigest a body whose bytes do not
// hash to the digest it was stored under (a *DigestError is one).
var (
	ErrNotFound = errors.New("object not found")
	ErrDigest   = errors.New("object bytes do not match their digest")
	ErrBadName  = errors.New("object name must be 64 lowercase hex characters")
)

// DigestError refuses bytes that do not hash to the digest that names
// them: Got is their SHA-256. errors.Is(err, ErrDigest) holds.
type DigestError struct {
	Digest, Got string
}

func (e *DigestError) Error() string {
	return fmt.Sprintf("object %s: %v (they hash to %s)", e.Digest, ErrDigest, e.Got)
}

// Is makes a DigestError match ErrDigest.
func (e *DigestError) Is(target error) bool { return target == ErrDigest }

// Store is object storage: it moves at most limit bytes under a name that
// ValidDigest accepts (any other is ErrBadName) and answers ErrNotFound for
// a missing object. Put keeps an object already present as it is. A Store
// need not check that bytes hash to their name: wrap it in Verified.
type Store interface {
	Put(ctx context.Context, digest string, r io.Reader, limit int64) error
	Get(ctx context.Context, digest string, limit int64) ([]byte, error)
	Has(ctx context.Context, digest string) (bool, error)
	Delete(ctx context.Context, digest string) error
}

// ValidDigest reports whether s is an object name: 64 lowercase hex
// characters (a SHA-256).
func ValidDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// verified is Verified's Store.
type verified struct{ s Store }

// Verified returns s with every object's bytes checked against its digest:
// Put reads at most limit bytes, refuses them with a *DigestError unless
// they hash to digest, and only then hands them to s; Get refuses bytes of
// s that do not hash to the digest asked for. Verified of a verified store
// is that store.
func Verified(s Store) Store {
	if v, ok := s.(*verified); ok {
		return v
	}
	return &verified{s: s}
}

func check(digest string, b []byte) error {
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != digest {
		return &DigestError{Digest: digest, Got: got}
	}
	return nil
}

func (v *verified) Put(ctx context.Context, digest string, r io.Reader, limit int64) error {
	if !ValidDigest(digest) {
		return ErrBadName
	}
	b, err := fsutil.ReadBounded(r, limit)
	if err != nil {
		return fmt.Errorf("read object: %w", err)
	}
	if err := check(digest, b); err != nil {
		return err
	}
	return v.s.Put(ctx, digest, bytes.NewReader(b), int64(len(b)))
}

func (v *verified) Get(ctx context.Context, digest string, limit int64) ([]byte, error) {
	if !ValidDigest(digest) {
		return nil, ErrBadName
	}
	b, err := v.s.Get(ctx, digest, limit)
	if err != nil {
		return nil, err
	}
	if err := check(digest, b); err != nil {
		return nil, err
	}
	return b, nil
}

func (v *verified) Has(ctx context.Context, digest string) (bool, error) { return v.s.Has(ctx, digest) }

func (v *verified) Delete(ctx context.Context, digest string) error { return v.s.Delete(ctx, digest) }

// Dir stores objects as files <dir>/<first two hex>/<digest>, 0600 in 0700
// directories, written durably and never replaced in place.
type Dir struct{ root string }

// OpenDir opens (creating, mode 0700) the object directory root.
func OpenDir(root string) (*Dir, error) {
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("object directory %q is not absolute", root)
	}
	if err := fsutil.MkdirPrivate(root); err != nil {
		return nil, err
	}
	if err := fsutil.CheckPrivateDir(root); err != nil {
		return nil, fmt.Errorf("object directory: %w", err)
	}
	return &Dir{root: root}, nil
}

func (d *Dir) path(digest string) (string, error) {
	if !ValidDigest(digest) {
		return "", ErrBadName
	}
	return filepath.Join(d.root, digest[:2], digest), nil
}

// Put stores at most limit bytes from r under digest. An object already
// present is kept as it is.
func (d *Dir) Put(ctx context.Context, digest string, r io.Reader, limit int64) error {
	p, err := d.path(digest)
	if err != nil {
		return err
	}
	b, err := fsutil.ReadBounded(r, limit)
	if err != nil {
		return fmt.Errorf("read object: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := fsutil.MkdirPrivate(filepath.Dir(p)); err != nil {
		return err
	}
	if err := fsutil.WriteNew(p, b, fsutil.FileMode); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
		return fmt.Errorf("store object: %w", err)
	}
	return nil
}

// Get returns an object's bytes (at most limit).
func (d *Dir) Get(ctx context.Context, digest string, limit int64) ([]byte, error) {
	p, err := d.path(digest)
	if err != nil {
		return nil, err
	}
	b, err := fsutil.ReadFileNoFollow(p, limit)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read object: %w", err)
	}
	return b, nil
}

// Has reports whether an object is present.
func (d *Dir) Has(ctx context.Context, digest string) (bool, error) {
	p, err := d.path(digest)
	if err != nil {
		return false, err
	}
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return fi.Mode().IsRegular(), nil
}

// Delete removes an object durably; a missing object is not an error.
func (d *Dir) Delete(ctx context.Context, digest string) error {
	p, err := d.path(digest)
	if err != nil {
		return err
	}
	if err := syscall.Unlink(p); err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return nil
		}
		return fmt.Errorf("delete object: %w", err)
	}
	return fsutil.SyncDir(filepath.Dir(p))
}
