// Package fsutil holds the durable file primitives every store uses: atomic
// replacement (temp file, fsync, rename, directory fsync), private
// directories and advisory locks.
package fsutil

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Private modes used for everything agentscm keeps on disk.
const (
	DirMode  fs.FileMode = 0o700
	FileMode fs.FileMode = 0o600
)

// TempPrefix starts the name of every temporary file written by WriteAtomic,
// so recovery can recognise them.
const TempPrefix = ".tmp-"

// SyncDir fsyncs a directory so that a rename or create inside it is durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory for sync: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// WriteAtomic replaces path with data: it writes a temporary file in the same
// directory with mode perm, fsyncs it, renames it over path and fsyncs the
// directory. A crash leaves either the old or the new content, plus at most a
// temporary file named TempPrefix*.
func WriteAtomic(path string, data []byte, perm fs.FileMode) error {
	dir := filepath.Dir(path)
	tmp, err := createTemp(dir, perm)
	if err != nil {
		return err
	}
	name := tmp.Name()
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(name)
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", name, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", name, err)
	}
	if err := os.Rename(name, path); err != nil {
		return fmt.Errorf("rename into place: %w", err)
	}
	ok = true
	return SyncDir(dir)
}

// WriteReplace replaces path with data like WriteAtomic but without any
// fsync: a killed process leaves the old or the new content, while an
// operating system crash may leave either, or an empty file. For state that
// a reader can tell is from before a crash and rebuild from durable records.
func WriteReplace(path string, data []byte, perm fs.FileMode) error {
	tmp, err := createTemp(filepath.Dir(path), perm)
	if err != nil {
		return err
	}
	name := tmp.Name()
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(name, path)
	}
	if err != nil {
		os.Remove(name)
		return fmt.Errorf("replace %s: %w", path, err)
	}
	return nil
}

// WriteNew writes data to path only if path does not exist yet, durably: the
// temporary file is hard-linked to path (which fails if path exists) and the
// directory is fsynced. It returns an error wrapping fs.ErrExist when path is
// already there.
func WriteNew(path string, data []byte, perm fs.FileMode) error {
	dir := filepath.Dir(path)
	tmp, err := createTemp(dir, perm)
	if err != nil {
		return err
	}
	name := tmp.Name()
	defer os.Remove(name)
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync %s: %w", name, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", name, err)
	}
	if err := os.Link(name, path); err != nil {
		return fmt.Errorf("install %s: %w", filepath.Base(path), err)
	}
	if err := os.Remove(name); err != nil {
		return fmt.Errorf("remove temporary file: %w", err)
	}
	return SyncDir(dir)
}

func createTemp(dir string, perm fs.FileMode) (*os.File, error) {
	var b [8]byte
	for range 10 {
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("random temp name: %w", err)
		}
		name := filepath.Join(dir, TempPrefix+hex.EncodeToString(b[:]))
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, perm)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("create temporary file in %s: %w", dir, err)
		}
		return f, nil
	}
	return nil, fmt.Errorf("create temporary file in %s: too many collisions", dir)
}

// MkdirPrivate creates dir and any missing parents that it creates with mode
// 0700, fsyncing each parent whose entry list changed. An existing directory
// is accepted as it is.
func MkdirPrivate(dir string) error {
	fi, err := os.Lstat(dir)
	if err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s exists and is not a directory", dir)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("stat %s: %w", dir, err)
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := MkdirPrivate(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, DirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create directory %s: %w", dir, err)
	}
	// Mkdir applies the umask; private directories must be exactly 0700.
	if err := os.Chmod(dir, DirMode); err != nil {
		return fmt.Errorf("set mode of %s: %w", dir, err)
	}
	return SyncDir(parent)
}

// Lock is an exclusive advisory lock on a lock file (flock).
type Lock struct{ f *os.File }

// LockFile takes an exclusive flock on path, creating it with mode 0600 when
// missing. It waits until the lock is free.
func LockFile(path string) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, FileMode)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return &Lock{f: f}, nil
}

// File returns the open lock file, for identity checks.
func (l *Lock) File() *os.File { return l.f }

// Unlock releases the lock and closes the file.
func (l *Lock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing releases the flock
	l.f = nil
	return err
}
