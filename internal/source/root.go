package source

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// rootDir is the retained handle of the worktree a capture reads: every
// snapshot read walks from it with openat, one component at a time, never
// following a symlink, so replacing an ancestor directory cannot redirect
// a read outside the opened root. Its identity (device, inode) is checked
// against the root's pathname once the reads are done.
type rootDir struct {
	path     string
	fd       int
	dev, ino uint64
}

func openRoot(path string) (*rootDir, error) {
	fd, err := retryFD(func() (int, error) {
		return unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return nil, fmt.Errorf("open worktree %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("stat worktree %s: %w", path, err)
	}
	return &rootDir{path: path, fd: fd, dev: uint64(st.Dev), ino: st.Ino}, nil
}

func (r *rootDir) close() { unix.Close(r.fd) }

// same reports whether the root's pathname still names the directory
// the handle holds.
func (r *rootDir) same() bool {
	var st unix.Stat_t
	if err := unix.Stat(r.path, &st); err != nil {
		return false
	}
	return uint64(st.Dev) == r.dev && st.Ino == r.ino
}

// stopError stops a capture: the binding keeps its reason and no manifest.
type stopError struct {
	reason string
	path   string
	err    error
}

func (e *stopError) Error() string {
	if e.err != nil {
		return fmt.Sprintf("source capture stopped (%s) at %q: %v", e.reason, e.path, e.err)
	}
	return fmt.Sprintf("source capture stopped (%s) at %q", e.reason, e.path)
}

func (e *stopError) Unwrap() error { return e.err }

func stop(reason, path string, err error) error {
	return &stopError{reason: reason, path: path, err: err}
}

// checkPath validates a path git reported: UTF-8, relative, no empty, "."
// or ".." component, no NUL, no ".git" component. It returns the
// components.
func checkPath(p string) ([]string, error) {
	if !utf8.ValidString(p) {
		return nil, stop(StopNotUTF8, p, nil)
	}
	if p == "" || strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) {
		return nil, stop(StopUnsafePath, p, nil)
	}
	parts := strings.Split(p, "/")
	for _, c := range parts {
		if c == "" || c == "." || c == ".." || strings.EqualFold(c, ".git") {
			return nil, stop(StopUnsafePath, p, nil)
		}
	}
	return parts, nil
}

// object is what a snapshot read found at a path.
type object struct {
	kind   string // file, symlink, deleted, dir, other
	exec   bool
	data   []byte
	target string
}

var errTooLarge = errors.New("file above the bound")

// read reads the object at the relative path parts beneath the root:
// parent components through openat(O_NOFOLLOW|O_DIRECTORY) (a symlink
// component stops the capture), the final one by fstatat without
// following it; a regular file is opened O_NOFOLLOW, checked to be the
// object stat'ed and read to exactly its size (growth or shrinkage during
// the read stops the capture). A file above maxFile bytes fails with
// errTooLarge before any byte is read.
func (r *rootDir) read(rel string, parts []string, maxFile int64) (object, error) {
	fd := r.fd
	closeFD := func() {
		if fd != r.fd {
			unix.Close(fd)
		}
	}
	defer func() { closeFD() }()
	for _, c := range parts[:len(parts)-1] {
		sub, err := retryFD(func() (int, error) {
			return unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		})
		switch {
		case err == unix.ENOENT:
			return object{kind: "deleted"}, nil
		case err == unix.ELOOP || err == unix.ENOTDIR:
			var st unix.Stat_t
			if unix.Fstatat(fd, c, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				return object{}, stop(StopSymlinkComponent, rel, fmt.Errorf("component %q is a symlink", c))
			}
			// A regular file where a directory was: the path is gone.
			return object{kind: "deleted"}, nil
		case err != nil:
			return object{}, stop(StopUnreadable, rel, err)
		}
		closeFD()
		fd = sub
	}
	name := parts[len(parts)-1]
	var st unix.Stat_t
	if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if err == unix.ENOENT {
			return object{kind: "deleted"}, nil
		}
		return object{}, stop(StopUnreadable, rel, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		t, err := readlinkat(fd, name)
		if err != nil {
			return object{}, stop(StopUnreadable, rel, err)
		}
		return object{kind: "symlink", target: t}, nil
	case unix.S_IFDIR:
		return object{kind: "dir"}, nil
	case unix.S_IFREG:
	default:
		return object{kind: "other"}, nil
	}
	if st.Size > maxFile {
		return object{}, errTooLarge
	}
	f, err := retryFD(func() (int, error) {
		return unix.Openat(fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	})
	if err != nil {
		return object{}, stop(StopChanged, rel, err)
	}
	defer unix.Close(f)
	var fst unix.Stat_t
	if err := unix.Fstat(f, &fst); err != nil || fst.Mode&unix.S_IFMT != unix.S_IFREG || fst.Dev != st.Dev || fst.Ino != st.Ino {
		return object{}, stop(StopChanged, rel, errors.New("replaced while it was opened"))
	}
	buf := make([]byte, st.Size+1)
	var n int
	for n < len(buf) {
		m, err := unix.Read(f, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return object{}, stop(StopUnreadable, rel, err)
		}
		if m == 0 {
			break
		}
		n += m
	}
	if int64(n) != st.Size {
		return object{}, stop(StopChanged, rel, fmt.Errorf("read %d bytes, stat said %d", n, st.Size))
	}
	return object{kind: "file", exec: st.Mode&0o111 != 0, data: buf[:n]}, nil
}

func retryFD(f func() (int, error)) (int, error) {
	for {
		fd, err := f()
		if err != unix.EINTR {
			return fd, err
		}
	}
}

func readlinkat(dirfd int, name string) (string, error) {
	for size := 256; size <= 1<<16; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err == unix.EINTR {
			size /= 2
			continue
		}
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
	return "", errors.New("symlink target longer than 64 KiB")
}
