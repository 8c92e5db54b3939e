package transcript

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentscm/agentscm/internal/event"
)

// Bounds of one read. A record longer than MaxLineBytes is skipped with a
// gap; at most MaxReadBytes of new transcript are read per invocation (the
// rest waits for the next hook, the cursor says where).
const (
	MaxLineBytes = 2 << 20
	MaxReadBytes = 4 << 20
	// maxProjectDirs bounds the one-level search of project directories.
	maxProjectDirs = 4096
)

// CursorVersion is the version of the persisted cursor format.
const CursorVersion = 1

// Errors of Locate and Read. The hook reports them as warnings; they record
// no gap because no cursor exists yet to attribute one to.
var (
	// ErrRefused: the history root or a transcript candidate is not what
	// the bounds allow (a symlink, not a directory, not a regular file,
	// ambiguous).
	ErrRefused = errors.New("transcript refused")
	// ErrNotFound: no transcript of the session exists under the root yet.
	ErrNotFound = errors.New("no transcript of this session under the history root")
)

// Target is the exact Work, generation and canonical session the cursor's
// records are attributed to.
type Target struct {
	WorkID     string `json:"work_id"`
	Generation int64  `json:"generation"`
	Session    string `json:"canonical_session"`
}

// Cursor is the bounded per-session read position, persisted privately
// between hook invocations.
type Cursor struct {
	Version int    `json:"version"`
	Session string `json:"session"`
	// Dir is the project directory under the root that holds the
	// transcript ("" for the root itself), fixed once the file is bound.
	Dir string `json:"dir,omitempty"`
	// Bound is true once the file identity (Dev, Ino) is recorded.
	Bound bool   `json:"bound"`
	Dev   uint64 `json:"dev,omitempty"`
	Ino   uint64 `json:"ino,omitempty"`
	// Offset is the byte offset of the next unread record.
	Offset int64 `json:"offset"`
	// Skipping is true while the rest of an oversized record is discarded.
	Skipping bool `json:"skipping,omitempty"`
	// Stopped names why the cursor stopped (replacement, truncation); a
	// stopped cursor never reads again.
	Stopped string `json:"stopped,omitempty"`
	// Target is the Work association of the records read so far.
	Target Target `json:"target"`
	State  State  `json:"state"`
}

// Options of one read.
type Options struct {
	// FromStart starts a session seen for the first time at offset 0 (its
	// original start was observed); otherwise an already-running session
	// starts at the current end of file.
	FromStart bool
	// Flush emits a message still pending at the end of the read (the turn
	// or the session ended).
	Flush  bool
	Select Selection
	Now    time.Time
	// MaxRead and MaxLine override the bounds (tests); zero means default.
	MaxRead int64
	MaxLine int
}

// ValidSession reports whether id can name a transcript file: an exact
// basename with no separator.
func ValidSession(id string) bool {
	return validID(id) && !strings.ContainsAny(id, `/\`) && id != "." && id != ".."
}

// openDir opens dir without following a final symlink.
func openDir(dirfd int, name string) (int, error) {
	for {
		var fd int
		var err error
		if dirfd < 0 {
			fd, err = unix.Open(name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		} else {
			fd, err = unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		}
		if err != unix.EINTR {
			return fd, err
		}
	}
}

func openFile(dirfd int, name string) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// opened is a transcript opened beneath the root.
type opened struct {
	fd       int
	dir      string
	dev, ino uint64
	size     int64
}

// open opens the transcript of session beneath root: root itself must be a
// directory and not a symlink; the file is <root>/<session>.jsonl or, when
// absent, <root>/<project>/<session>.jsonl in exactly one project directory
// (one level, no symlinks). Every component is opened relative to its
// parent's descriptor without following symlinks, so the file's canonical
// path stays beneath root. dir, when set, names the project directory
// already bound.
func open(root, session, dir string, bound bool) (*opened, error) {
	if !ValidSession(session) {
		return nil, fmt.Errorf("%w: session id %q cannot name a transcript file", ErrRefused, session)
	}
	rootfd, err := openDir(-1, root)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return nil, fmt.Errorf("%w: --claude-history-root %s is not a directory or is a symbolic link", ErrRefused, root)
		}
		return nil, fmt.Errorf("open --claude-history-root %s: %w", root, err)
	}
	defer unix.Close(rootfd)
	name := session + ".jsonl"
	if bound {
		return openIn(rootfd, root, dir, name)
	}
	o, err := openIn(rootfd, root, "", name)
	if err == nil || !errors.Is(err, ErrNotFound) {
		return o, err
	}
	// Search one level of project directories.
	f, err := os.Open(root)
	if err != nil {
		return nil, fmt.Errorf("list --claude-history-root: %w", err)
	}
	ents, err := f.ReadDir(maxProjectDirs + 1)
	f.Close()
	if err != nil && len(ents) == 0 {
		return nil, ErrNotFound
	}
	if len(ents) > maxProjectDirs {
		return nil, fmt.Errorf("%w: --claude-history-root has more than %d entries to search", ErrRefused, maxProjectDirs)
	}
	var found []string
	for _, e := range ents {
		if !e.IsDir() || e.Type()&os.ModeSymlink != 0 {
			continue
		}
		var st unix.Stat_t
		if unix.Fstatat(rootfd, e.Name()+"/"+name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			found = append(found, e.Name())
		}
	}
	switch len(found) {
	case 0:
		return nil, ErrNotFound
	case 1:
		return openIn(rootfd, root, found[0], name)
	}
	return nil, fmt.Errorf("%w: %d project directories hold %s", ErrRefused, len(found), name)
}

func openIn(rootfd int, root, dir, name string) (*opened, error) {
	dirfd := rootfd
	if dir != "" {
		if strings.ContainsAny(dir, `/\`) || dir == "." || dir == ".." {
			return nil, fmt.Errorf("%w: project directory %q", ErrRefused, dir)
		}
		fd, err := openDir(rootfd, dir)
		if errors.Is(err, unix.ENOENT) {
			return nil, ErrNotFound
		}
		if err != nil {
			return nil, fmt.Errorf("%w: project directory %s/%s: %v", ErrRefused, root, dir, err)
		}
		defer unix.Close(fd)
		dirfd = fd
	}
	fd, err := openFile(dirfd, name)
	if errors.Is(err, unix.ENOENT) {
		return nil, ErrNotFound
	}
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("%w: transcript %s is a symbolic link", ErrRefused, name)
		}
		return nil, fmt.Errorf("open transcript %s: %w", name, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("stat transcript: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: transcript %s is not a regular file", ErrRefused, name)
	}
	return &opened{fd: fd, dir: dir, dev: uint64(st.Dev), ino: uint64(st.Ino), size: st.Size}, nil
}

// Read reads the session's transcript records appended since cur (nil for a
// session the reader has not seen) for target, and returns the records to
// retain and the cursor to persist after they are retained. Replacement and
// truncation record a gap and stop the cursor; malformed, oversized and
// foreign records record a gap and are skipped; a changed target records a
// gap and rebinds at the opened snapshot's end of file, leaving the records
// in between unattributed. ErrNotFound with a nil cursor from a FromStart
// read returns a cursor that waits for the file.
func Read(root, session string, cur *Cursor, t Target, o Options) ([]event.Record, *Cursor, error) {
	if cur != nil && cur.Stopped != "" {
		return nil, cur, nil
	}
	bound := cur != nil && cur.Bound
	dir := ""
	if bound {
		dir = cur.Dir
	}
	f, err := open(root, session, dir, bound)
	if errors.Is(err, ErrNotFound) && !bound {
		if cur == nil && o.FromStart {
			// The original start was observed before the host wrote its
			// transcript: read it from the beginning once it appears.
			return nil, &Cursor{Version: CursorVersion, Session: session, Target: t}, nil
		}
		return nil, cur, err
	}
	var next Cursor
	if cur != nil {
		next = *cur
	}
	if errors.Is(err, ErrNotFound) && bound {
		next.Stopped = ReasonReplaced
		return []event.Record{gapRecord(session, ReasonReplaced, "the transcript file disappeared; its cursor stopped", o.Now)}, &next, nil
	}
	if err != nil {
		return nil, cur, err
	}
	defer unix.Close(f.fd)

	switch {
	case cur == nil:
		// First sight of a session: an already-running one starts at the
		// current end of file so old usage is not attributed to the
		// current Work.
		next = Cursor{Version: CursorVersion, Session: session, Dir: f.dir, Bound: true, Dev: f.dev, Ino: f.ino, Target: t}
		if !o.FromStart {
			next.Offset = f.size
			return nil, &next, nil
		}
	case !cur.Bound:
		next.Dir, next.Bound, next.Dev, next.Ino = f.dir, true, f.dev, f.ino
	case cur.Dev != f.dev || cur.Ino != f.ino:
		next.Stopped = ReasonReplaced
		return []event.Record{gapRecord(session, ReasonReplaced, "the transcript file was replaced; its cursor stopped", o.Now)}, &next, nil
	}
	if f.size < next.Offset {
		next.Stopped = ReasonTruncated
		return []event.Record{gapRecord(session, ReasonTruncated,
			fmt.Sprintf("the transcript shrank from %d to %d bytes; its cursor stopped", next.Offset, f.size), o.Now)}, &next, nil
	}
	if next.Target != t {
		// A Work or generation change rebinds at the opened snapshot's end
		// of file: the records in between stay unattributed.
		gap := gapRecord(session, ReasonRebound, fmt.Sprintf("the session's Work association changed; %d transcript bytes before the change are not attributed", f.size-next.Offset), o.Now)
		next.Target, next.Offset, next.Skipping, next.State = t, f.size, false, State{}
		return []event.Record{gap}, &next, nil
	}
	recs, err := scan(f, &next, session, o)
	return recs, &next, err
}

// scan reads complete records from cur.Offset up to the snapshot's size
// within the read bound, advancing cur.
func scan(f *opened, cur *Cursor, session string, o Options) ([]event.Record, error) {
	maxRead, maxLine := o.MaxRead, o.MaxLine
	if maxRead <= 0 {
		maxRead = MaxReadBytes
	}
	if maxLine <= 0 {
		maxLine = MaxLineBytes
	}
	if maxRead <= int64(maxLine) {
		maxRead = int64(maxLine) + 1
	}
	n := min(f.size-cur.Offset, maxRead)
	if n <= 0 {
		var out []event.Record
		if o.Flush {
			p := Parser{Session: session, Select: o.Select, State: cur.State, Now: o.Now}
			out = p.Flush(out)
			cur.State = p.State
		}
		return out, nil
	}
	buf := make([]byte, n)
	got := 0
	for got < len(buf) {
		m, err := unix.Pread(f.fd, buf[got:], cur.Offset+int64(got))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read transcript: %w", err)
		}
		if m == 0 {
			break
		}
		got += m
	}
	buf = buf[:got]
	p := Parser{Session: session, Select: o.Select, State: cur.State, Now: o.Now}
	var out []event.Record
	oversized := 0
	pos := 0
	for pos < len(buf) {
		nl := bytes.IndexByte(buf[pos:], '\n')
		if nl < 0 {
			rest := len(buf) - pos
			if cur.Skipping || rest > maxLine {
				// Still inside an oversized record: discard what is here.
				if !cur.Skipping {
					oversized++
				}
				cur.Skipping = true
				pos = len(buf)
			}
			break
		}
		line := buf[pos : pos+nl]
		pos += nl + 1
		switch {
		case cur.Skipping:
			cur.Skipping = false
		case len(line) > maxLine:
			oversized++
		default:
			out = p.Line(line, out)
		}
	}
	cur.Offset += int64(pos)
	if o.Flush && cur.Offset == f.size {
		out = p.Flush(out)
	}
	cur.State = p.State
	out = p.Gaps(out)
	if oversized > 0 {
		out = append(out, gapRecord(session, ReasonOversized, fmt.Sprintf("%d transcript records over %d bytes skipped", oversized, maxLine), o.Now))
	}
	return out, nil
}
