// Package objects is the Hub's content-addressed object storage: objects
// named by the SHA-256 of their bytes. Dir keeps them in a local directory.
package objects

import (
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
// hash to the digest it was stored under.
var (
	ErrNotFound = errors.New("object not found")
	ErrDigest   = errors.New("object bytes do not match their digest")
	ErrBadName  = errors.New("object name must be 64 lowercase hex characters")
)

// Store is object storage; the local directory is one implementation.
type Store interface {
	Put(ctx context.Context, digest string, r io.Reader, limit int64) error
	Get(ctx context.Context, digest string, limit int64) ([]byte, error)
	Has(ctx context.Context, digest string) (bool, error)
	Delete(ctx context.Context, digest string) error
}

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
	if !isDigest(digest) {
		return "", ErrBadName
	}
	return filepath.Join(d.root, digest[:2], digest), nil
}

// Put stores at most limit bytes from r under digest, verifying that they
// hash to it. An object already present is kept as it is.
func (d *Dir) Put(ctx context.Context, digest string, r io.Reader, limit int64) error {
	p, err := d.path(digest)
	if err != nil {
		return err
	}
	b, err := fsutil.ReadBounded(r, limit)
	if err != nil {
		return fmt.Errorf("read object: %w", err)
	}
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != digest {
		return ErrDigest
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

// Get returns an object's bytes (at most limit), verified against its digest.
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
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != digest {
		return nil, ErrDigest
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

func isDigest(s string) bool {
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
