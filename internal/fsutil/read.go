package fsutil

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// ErrTooLarge reports input above a caller's bound.
var ErrTooLarge = errors.New("input exceeds its size bound")

// ReadFileNoFollow reads a regular file without following a final symlink,
// refusing files larger than limit bytes.
func ReadFileNoFollow(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if size := fi.Size(); size >= 0 && size <= limit {
		// One exact allocation instead of io.ReadAll's doubling: a
		// short-lived process (the hook) pays a page fault for every fresh
		// heap page. A file that grew meanwhile is still bounded.
		b := make([]byte, size, size+1)
		if _, err := io.ReadFull(f, b); err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		var extra [1]byte
		if n, _ := f.Read(extra[:]); n == 0 {
			return b, nil
		}
		if size == limit {
			return nil, fmt.Errorf("%w (%d bytes)", ErrTooLarge, limit)
		}
		rest, err := ReadBounded(f, limit-size-1)
		if err != nil {
			return nil, err
		}
		return append(append(b, extra[0]), rest...), nil
	}
	return ReadBounded(f, limit)
}

// ReadBounded reads all of r, failing with ErrTooLarge past limit bytes.
func ReadBounded(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w (%d bytes)", ErrTooLarge, limit)
	}
	return b, nil
}

// CheckPrivateDir verifies that dir is a real directory (not a symlink),
// owned by the effective user, with no group or other permissions.
func CheckPrivateDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("%s is a symbolic link", dir)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s is owned by uid %d, not by the effective user %d", dir, st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%s has mode %04o; it must allow no group or other access", dir, fi.Mode().Perm())
	}
	return nil
}
