// Package scan is the project's one no-follow filesystem walker. It walks a
// tree through directory file descriptors (openat with O_NOFOLLOW|O_DIRECTORY,
// getdents, fstatat with AT_SYMLINK_NOFOLLOW, readlinkat), so a symlink is
// reported and never traversed and a replaced ancestor cannot redirect it.
package scan

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// Type is the kind of a filesystem object.
type Type uint8

// Object kinds reported by Walk. Other covers FIFOs, sockets and devices.
const (
	File Type = iota
	Dir
	Symlink
	Other
)

// String returns the lowercase name used in manifests.
func (t Type) String() string {
	switch t {
	case File:
		return "file"
	case Dir:
		return "dir"
	case Symlink:
		return "symlink"
	default:
		return "other"
	}
}

// ParseType is the inverse of Type.String.
func ParseType(s string) (Type, error) {
	switch s {
	case "file":
		return File, nil
	case "dir":
		return Dir, nil
	case "symlink":
		return Symlink, nil
	case "other":
		return Other, nil
	}
	return 0, fmt.Errorf("unknown object type %q", s)
}

// Entry describes one object under a root, found without following symlinks.
type Entry struct {
	Path            string      // slash-separated, relative to the root; never "" or absolute
	Type            Type        // kind of object
	Mode            fs.FileMode // permission bits (plus setuid/setgid/sticky)
	Size            int64       // st_size
	ModTime         time.Time   // nanosecond precision
	Dev, Ino, Nlink uint64      // identity and link count
	Target          string      // symlink target, read with readlinkat and never followed
	ChangeTime      time.Time   // st_ctime (inode change), which unprivileged callers cannot set

	dirfd int    // parent directory fd, valid only during the callback; -1 after
	name  string // base name inside dirfd
}

// Errors callers can branch on (wrapped in *PathError).
var (
	// ErrNotUTF8 reports a name that is not valid UTF-8 (Options.AllowNonUTF8 unset).
	ErrNotUTF8 = errors.New("name is not valid UTF-8")
	// ErrChanged reports an object replaced between its stat and its open.
	ErrChanged = errors.New("object changed during the walk")
	// ErrTooDeep reports a tree deeper than Options.MaxDepth.
	ErrTooDeep = errors.New("directory tree too deep")
	// ErrNotRegular reports that OpenFile or Entry.Open met something other than a regular file.
	ErrNotRegular = errors.New("not a regular file")
	// ErrSymlink reports a symbolic link where a directory or regular file was required.
	ErrSymlink = errors.New("symbolic link refused")
	// ErrBadPath reports a relative path that is empty, absolute, or has ".", ".." or empty components.
	ErrBadPath = errors.New("invalid relative path")
)

// PathError is an error about one path below the root. Path is quoted with %q
// in the message, so a non-UTF-8 name is shown unambiguously.
type PathError struct {
	Op   string
	Path string
	Err  error
}

func (e *PathError) Error() string { return fmt.Sprintf("scan: %s %q: %v", e.Op, e.Path, e.Err) }
func (e *PathError) Unwrap() error { return e.Err }

// DefaultMaxDepth bounds directory nesting (one fd is held per level).
const DefaultMaxDepth = 512

// Options tune Walk.
type Options struct {
	// Skip prunes a path (a directory's subtree is skipped); nil skips nothing.
	// A skipped path is not passed to fn.
	Skip func(rel string, isDir bool) bool
	// AllowNonUTF8 delivers names that are not valid UTF-8 as raw bytes in
	// Entry.Path instead of failing with ErrNotUTF8.
	AllowNonUTF8 bool
	// MaxDepth bounds nesting; 0 means DefaultMaxDepth.
	MaxDepth int
}

// Walk visits every entry below root depth-first in lexical order of names within each directory,
// holding directory fds (openat with O_NOFOLLOW|O_DIRECTORY) so a replaced ancestor can't redirect it.
// A directory is passed to fn before its contents. The root itself is not
// reported; its own path is resolved normally (it is the caller's choice),
// everything below it without following symlinks. fn may return fs.SkipDir for a directory to skip its subtree; any
// other error stops the walk and is returned. Objects that vanish during the
// walk are omitted; an object replaced between stat and open fails with ErrChanged.
func Walk(ctx context.Context, root string, opts Options, fn func(*Entry) error) error {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("scan: open root %s: %w", root, err)
	}
	w := &walker{ctx: ctx, opts: opts, fn: fn, buf: make([]byte, 64<<10)}
	if w.opts.MaxDepth <= 0 {
		w.opts.MaxDepth = DefaultMaxDepth
	}
	err = w.dir(fd, "", 1)
	unix.Close(fd)
	return err
}

type walker struct {
	ctx   context.Context
	opts  Options
	fn    func(*Entry) error
	buf   []byte
	count int
}

// readNames returns the sorted names of the open directory fd.
func (w *walker) readNames(fd int, rel string) ([]string, error) {
	var names []string
	for {
		n, err := fsutil.Getdents(fd, w.buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &PathError{Op: "read directory", Path: rel, Err: err}
		}
		if n <= 0 {
			break
		}
		_, _, names = unix.ParseDirent(w.buf[:n], -1, names)
	}
	slices.Sort(names)
	return names, nil
}

func (w *walker) dir(fd int, rel string, depth int) error {
	if depth > w.opts.MaxDepth {
		return &PathError{Op: "walk", Path: rel, Err: ErrTooDeep}
	}
	names, err := w.readNames(fd, rel)
	if err != nil {
		return err
	}
	for _, name := range names {
		w.count++
		if w.count&255 == 0 {
			if err := w.ctx.Err(); err != nil {
				return err
			}
		}
		p := name
		if rel != "" {
			p = rel + "/" + name
		}
		if !w.opts.AllowNonUTF8 && !utf8.ValidString(name) {
			return &PathError{Op: "walk", Path: p, Err: ErrNotUTF8}
		}
		var st unix.Stat_t
		if err := fstatat(fd, name, &st); err != nil {
			if err == unix.ENOENT {
				continue
			}
			return &PathError{Op: "stat", Path: p, Err: err}
		}
		e := fromStat(p, &st)
		if w.opts.Skip != nil && w.opts.Skip(p, e.Type == Dir) {
			continue
		}
		if e.Type == Symlink {
			t, err := readlinkat(fd, name)
			if err != nil {
				if err == unix.ENOENT {
					continue
				}
				return &PathError{Op: "readlink", Path: p, Err: err}
			}
			e.Target = t
		}
		e.dirfd, e.name = fd, name
		err := w.fn(e)
		e.dirfd = -1
		if e.Type != Dir {
			if err != nil {
				return err
			}
			continue
		}
		if err == fs.SkipDir {
			continue
		}
		if err != nil {
			return err
		}
		sub, err := openSubdir(fd, name, p, e.Dev, e.Ino)
		if err == errVanished {
			continue
		}
		if err != nil {
			return err
		}
		err = w.dir(sub, p, depth+1)
		unix.Close(sub)
		if err != nil {
			return err
		}
	}
	return nil
}

func fstatat(dirfd int, name string, st *unix.Stat_t) error {
	for {
		err := unix.Fstatat(dirfd, name, st, unix.AT_SYMLINK_NOFOLLOW)
		if err != unix.EINTR {
			return err
		}
	}
}

func openat(dirfd int, name string, flags int) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

func readlinkat(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
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
		if size > 1<<20 {
			return "", fmt.Errorf("symlink target longer than %d bytes", size)
		}
	}
}

// fromStat builds an Entry from a stat result.
func fromStat(p string, st *unix.Stat_t) *Entry {
	e := &Entry{
		Path:       p,
		Size:       st.Size,
		ModTime:    time.Unix(int64(st.Mtim.Sec), int64(st.Mtim.Nsec)),
		ChangeTime: time.Unix(int64(st.Ctim.Sec), int64(st.Ctim.Nsec)),
		Dev:        uint64(st.Dev),
		Ino:        st.Ino,
		Nlink:      uint64(st.Nlink),
		Mode:       ModeFromUnix(uint32(st.Mode)),
		dirfd:      -1,
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		e.Type = File
	case unix.S_IFDIR:
		e.Type = Dir
	case unix.S_IFLNK:
		e.Type = Symlink
	default:
		e.Type = Other
	}
	return e
}

// ModeFromUnix converts st_mode permission, setuid, setgid and sticky bits to an fs.FileMode.
func ModeFromUnix(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	if m&unix.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// UnixMode is the inverse of ModeFromUnix (permission and special bits only).
func UnixMode(mode fs.FileMode) uint32 {
	m := uint32(mode.Perm())
	if mode&fs.ModeSetuid != 0 {
		m |= unix.S_ISUID
	}
	if mode&fs.ModeSetgid != 0 {
		m |= unix.S_ISGID
	}
	if mode&fs.ModeSticky != 0 {
		m |= unix.S_ISVTX
	}
	return m
}

// Open opens the regular file e while fn runs, through the parent directory fd
// the walk holds (no path re-resolution, O_NOFOLLOW), and checks that it is
// still the object that was stat'ed. It fails after the callback has returned.
func (e *Entry) Open() (*os.File, error) {
	if e.dirfd < 0 {
		return nil, &PathError{Op: "open", Path: e.Path, Err: errors.New("entry is only openable during its Walk callback")}
	}
	return openRegular(e.dirfd, e.name, e.Path, e)
}

// Copy writes the content of the regular file e to w while fn runs, reading
// through the walk's held directory fd with plain read(2) calls (no *os.File,
// no poller registration). It fails with ErrChanged when the file is not the
// object that was stat'ed or its size differs from e.Size.
func (e *Entry) Copy(w io.Writer, buf []byte) (int64, error) {
	if e.dirfd < 0 {
		return 0, &PathError{Op: "read", Path: e.Path, Err: errors.New("entry is only readable during its Walk callback")}
	}
	fd, err := openat(e.dirfd, e.name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY)
	if err != nil {
		return 0, &PathError{Op: "open", Path: e.Path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, &PathError{Op: "open", Path: e.Path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, &PathError{Op: "open", Path: e.Path, Err: ErrNotRegular}
	}
	if uint64(st.Dev) != e.Dev || st.Ino != e.Ino {
		return 0, &PathError{Op: "open", Path: e.Path, Err: ErrChanged}
	}
	if len(buf) == 0 {
		buf = make([]byte, 32<<10)
	}
	var total int64
	for {
		// Ask for one byte more than remains so growth is noticed.
		want := e.Size - total + 1
		if want > int64(len(buf)) {
			want = int64(len(buf))
		}
		n, err := unix.Read(fd, buf[:want])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return total, &PathError{Op: "read", Path: e.Path, Err: err}
		}
		if n > 0 {
			total += int64(n)
			if total > e.Size {
				return total, &PathError{Op: "read", Path: e.Path, Err: ErrChanged}
			}
			if _, err := w.Write(buf[:n]); err != nil {
				return total, err
			}
		}
		if total == e.Size && int64(n) < want {
			return total, nil // a short read at the expected size: end of file
		}
		if n == 0 {
			return total, &PathError{Op: "read", Path: e.Path, Err: fmt.Errorf("%w: %d bytes, stat said %d", ErrChanged, total, e.Size)}
		}
	}
}

func openRegular(dirfd int, name, rel string, want *Entry) (*os.File, error) {
	fd, err := openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY)
	if err != nil {
		if err == unix.ELOOP {
			err = fmt.Errorf("%w: %w", ErrNotRegular, ErrSymlink)
		}
		return nil, &PathError{Op: "open", Path: rel, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &PathError{Op: "open", Path: rel, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, &PathError{Op: "open", Path: rel, Err: ErrNotRegular}
	}
	if want != nil && (uint64(st.Dev) != want.Dev || st.Ino != want.Ino) {
		unix.Close(fd)
		return nil, &PathError{Op: "open", Path: rel, Err: ErrChanged}
	}
	// Reads of regular files never block; drop O_NONBLOCK for ordinary semantics.
	_ = unix.SetNonblock(fd, false)
	return os.NewFile(uintptr(fd), rel), nil
}

// SplitRel validates a slash-separated relative path and returns its components.
func SplitRel(rel string) ([]string, error) {
	if rel == "" || strings.HasPrefix(rel, "/") || strings.ContainsRune(rel, 0) {
		return nil, &PathError{Op: "resolve", Path: rel, Err: ErrBadPath}
	}
	parts := strings.Split(rel, "/")
	for _, p := range parts {
		if p == "" || p == "." || p == ".." {
			return nil, &PathError{Op: "resolve", Path: rel, Err: ErrBadPath}
		}
	}
	return parts, nil
}

// OpenDir opens the directory rel beneath root (rel "" or "." is the root
// itself) through an openat chain that refuses every symlink component.
func OpenDir(root, rel string) (*os.File, error) {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("scan: open root %s: %w", root, err)
	}
	if rel == "" || rel == "." {
		return os.NewFile(uintptr(fd), root), nil
	}
	parts, err := SplitRel(rel)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	fd, err = descend(fd, parts, rel)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// descend walks parts from the directory fd (which it consumes), refusing symlinks.
func descend(fd int, parts []string, rel string) (int, error) {
	for _, p := range parts {
		sub, err := openat(fd, p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
		if err == unix.ELOOP || err == unix.ENOTDIR {
			var st unix.Stat_t
			if fstatat(fd, p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				err = fmt.Errorf("component %q: %w", p, ErrSymlink)
			}
		}
		unix.Close(fd)
		if err != nil {
			return -1, &PathError{Op: "open", Path: rel, Err: err}
		}
		fd = sub
	}
	return fd, nil
}

// OpenFile opens the regular file rel beneath root refusing any symlink component (openat chain, O_NOFOLLOW).
func OpenFile(root, rel string) (*os.File, error) {
	parts, err := SplitRel(rel)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("scan: open root %s: %w", root, err)
	}
	fd, err = descend(fd, parts[:len(parts)-1], rel)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return openRegular(fd, parts[len(parts)-1], rel, nil)
}

// Lstat stats rel beneath root without following any symlink component; the
// final component may itself be a symlink (reported with its target).
func Lstat(root, rel string) (*Entry, error) {
	parts, err := SplitRel(rel)
	if err != nil {
		return nil, err
	}
	d, err := OpenDir(root, strings.Join(parts[:len(parts)-1], "/"))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return LstatAt(d, parts[len(parts)-1], rel)
}

// LstatAt stats name inside the open directory dir without following it; rel
// names it in errors and in Entry.Path.
func LstatAt(dir *os.File, name, rel string) (*Entry, error) {
	var st unix.Stat_t
	if err := fstatat(int(dir.Fd()), name, &st); err != nil {
		return nil, &PathError{Op: "stat", Path: rel, Err: err}
	}
	e := fromStat(rel, &st)
	if e.Type == Symlink {
		t, err := readlinkat(int(dir.Fd()), name)
		if err != nil {
			return nil, &PathError{Op: "readlink", Path: rel, Err: err}
		}
		e.Target = t
	}
	return e, nil
}

// errVanished reports a subdirectory removed between its listing and its
// open: the walk skips it.
var errVanished = errors.New("directory vanished")

// openSubdir opens the subdirectory name of the directory fd without
// following a symlink and checks it is the dev/ino its parent listed (path p
// names it in errors): a replaced entry is ErrChanged, a removed one
// errVanished.
func openSubdir(fd int, name, p string, dev, ino uint64) (int, error) {
	sub, err := openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
	if err != nil {
		if err == unix.ENOENT {
			return -1, errVanished
		}
		if err == unix.ELOOP || err == unix.ENOTDIR {
			err = ErrChanged
		}
		return -1, &PathError{Op: "open directory", Path: p, Err: err}
	}
	var sst unix.Stat_t
	if err := unix.Fstat(sub, &sst); err != nil || uint64(sst.Dev) != dev || sst.Ino != ino {
		unix.Close(sub)
		if err == nil {
			err = ErrChanged
		}
		return -1, &PathError{Op: "open directory", Path: p, Err: err}
	}
	return sub, nil
}
