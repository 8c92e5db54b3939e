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
// refusing files larger than limit bytes. It reads through a raw descriptor
// into one exact allocation: short-lived processes (the hook) pay a page
// fault for every fresh heap page, and an *os.File costs a poller
// registration and a finalizer per file.
func ReadFileNoFollow(path string, limit int64) ([]byte, error) {
	fd, err := openRaw(path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC|syscall.O_NONBLOCK)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	owned := true // false once an *os.File owns fd
	defer func() {
		if owned {
			syscall.Close(fd)
		}
	}()
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if st.Size > limit {
		return nil, fmt.Errorf("%w (%d bytes)", ErrTooLarge, limit)
	}
	// One byte more than the size seen, to notice a file that grew.
	b := make([]byte, st.Size+1)
	n := 0
	for n < len(b) {
		m, err := syscall.Read(fd, b[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			break
		}
		n += m
	}
	if int64(n) > st.Size {
		// It grew while being read: fall back to the bounded reader.
		if int64(n) > limit {
			return nil, fmt.Errorf("%w (%d bytes)", ErrTooLarge, limit)
		}
		f := os.NewFile(uintptr(fd), path)
		owned = false
		defer f.Close()
		rest, err := ReadBounded(f, limit-int64(n))
		if err != nil {
			return nil, err
		}
		return append(b[:n], rest...), nil
	}
	return b[:n], nil
}

// openRaw opens path as a raw descriptor, retrying EINTR.
func openRaw(path string, flags int) (int, error) {
	for {
		fd, err := syscall.Open(path, flags, 0)
		if err != syscall.EINTR {
			return fd, err
		}
	}
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
