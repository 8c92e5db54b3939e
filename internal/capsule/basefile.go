package capsule

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"unsafe"

	"github.com/agentscm/agentscm/internal/fsutil"
	"golang.org/x/sys/unix"
)

// A base manifest is a complete manifest in a line format, stored once in
// <root>/.agentdiff/manifests/<sha256> (content-addressed, mode 0400) and
// hard-linked into every capsule whose before.json is expressed as changes
// to it (FileBase). It also records each entry's stat identity, so the stat
// cache is "a base plus the changes since".
//
//	agentdiff-manifest-v2
//	T MODE SIZE MTIME_NS CTIME_NS DEV INO NLINK BACKUP SHA256|- "PATH" ["TARGET"]
//
// T is f, d, l or o (file, dir, symlink, other); PATH and TARGET are Go
// quoted strings; lines are in walk order.
const (
	baseHeader  = "agentdiff-manifest-v2\n"
	dirBases    = "manifests"
	maxBaseSize = 1 << 30
	// maxLine bounds one line of a base or stat cache file.
	maxLine = 64 << 10
)

var typeChar = map[string]byte{"file": 'f', "dir": 'd', "symlink": 'l', "other": 'o'}

func charType(c byte) (string, bool) {
	switch c {
	case 'f':
		return "file", true
	case 'd':
		return "dir", true
	case 'l':
		return "symlink", true
	case 'o':
		return "other", true
	}
	return "", false
}

// appendQuoted appends strconv.Quote(s), fast for plain names.
func appendQuoted(b []byte, s string) []byte {
	plain := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			plain = false
			break
		}
	}
	if !plain {
		return strconv.AppendQuote(b, s)
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendEntryLine appends e's base line (with its newline).
func appendEntryLine(b []byte, e *ManifestEntry) []byte {
	b = append(b, typeChar[e.Type], ' ')
	b = append(b, e.Mode...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, e.Size, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, e.MtimeNS, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, e.ctimeNS, 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, e.dev, 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, e.ino, 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, e.Nlink, 10)
	if e.Backup {
		b = append(b, " 1 "...)
	} else {
		b = append(b, " 0 "...)
	}
	if e.SHA256 == "" {
		b = append(b, '-')
	} else {
		b = append(b, e.SHA256...)
	}
	b = append(b, ' ')
	b = appendQuoted(b, e.Path)
	if e.Type == "symlink" {
		b = append(b, ' ')
		b = appendQuoted(b, e.Target)
	}
	return append(b, '\n')
}

var errBadLine = errors.New("malformed manifest line")

// cutField returns the text before the next space and the rest.
func cutField(b []byte) ([]byte, []byte, bool) {
	i := bytes.IndexByte(b, ' ')
	if i <= 0 {
		return nil, nil, false
	}
	return b[:i], b[i+1:], true
}

// cutQuoted parses a quoted string at the start of b.
func cutQuoted(b []byte) (string, []byte, error) { return cutQuotedIn(b, nil) }

// cutQuotedIn is cutQuoted taking a plain string from arena.
func cutQuotedIn(b []byte, arena *strArena) (string, []byte, error) {
	if len(b) < 2 || b[0] != '"' {
		return "", nil, errBadLine
	}
	// Fast path: no escapes up to the closing quote.
	if i := bytes.IndexByte(b[1:], '"'); i >= 0 && bytes.IndexByte(b[1:1+i], '\\') < 0 {
		return arena.str(b[1 : 1+i]), b[2+i:], nil
	}
	q, err := strconv.QuotedPrefix(string(b))
	if err != nil {
		return "", nil, errBadLine
	}
	s, err := strconv.Unquote(q)
	if err != nil {
		return "", nil, errBadLine
	}
	return s, b[len(q):], nil
}

func parseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	v, ok := parseUint(b)
	if !ok || v > 1<<63 || (!neg && v == 1<<63) {
		return 0, false
	}
	if neg {
		return -int64(v), true
	}
	return int64(v), true
}

// parseUint parses a decimal without sign, leading zeros or overflow.
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 || (len(b) > 1 && b[0] == '0') {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// internedMode is a mode string parsed once per manifest.
type internedMode struct {
	s    string
	bits fs.FileMode
}

// strArena hands out strings carved from large byte blocks: one allocation
// per block instead of one per string (a base line holds two), in memory the
// collector does not scan. A block's bytes are never written again once a
// string refers to them. The zero value is ready; nil allocates normally.
type strArena struct{ buf []byte }

const arenaBlock = 256 << 10

func (a *strArena) str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if a == nil || len(b) > arenaBlock/16 {
		return string(b)
	}
	if cap(a.buf)-len(a.buf) < len(b) {
		a.buf = make([]byte, 0, arenaBlock)
	}
	n := len(a.buf)
	a.buf = append(a.buf, b...)
	return unsafe.String(&a.buf[n], len(b))
}

// parseEntryLine parses one base line (without its newline). modes interns
// the mode strings.
func parseEntryLine(line []byte, modes map[string]internedMode) (ManifestEntry, error) {
	return parseEntryLineIn(line, modes, nil)
}

// parseEntryLineIn is parseEntryLine with the path and hash strings taken
// from arena.
func parseEntryLineIn(line []byte, modes map[string]internedMode, arena *strArena) (ManifestEntry, error) {
	var e ManifestEntry
	if len(line) < 2 || line[1] != ' ' {
		return e, errBadLine
	}
	t, ok := charType(line[0])
	if !ok {
		return e, errBadLine
	}
	e.Type = t
	rest := line[2:]
	var f []byte
	if f, rest, ok = cutField(rest); !ok {
		return e, errBadLine
	}
	m, ok := modes[string(f)]
	if !ok {
		mb, err := parseMode(string(f))
		if err != nil || modeString(mb) != string(f) {
			return e, errBadLine
		}
		m = internedMode{s: string(f), bits: mb}
		modes[m.s] = m
	}
	e.Mode, e.modeBits = m.s, m.bits
	var nums [3]int64
	for i := range nums {
		if f, rest, ok = cutField(rest); !ok {
			return e, errBadLine
		}
		if nums[i], ok = parseInt(f); !ok {
			return e, errBadLine
		}
	}
	e.Size, e.MtimeNS, e.ctimeNS = nums[0], nums[1], nums[2]
	var u [3]uint64
	for i := range u {
		if f, rest, ok = cutField(rest); !ok {
			return e, errBadLine
		}
		if u[i], ok = parseUint(f); !ok {
			return e, errBadLine
		}
	}
	e.dev, e.ino, e.Nlink = u[0], u[1], u[2]
	if f, rest, ok = cutField(rest); !ok || len(f) != 1 || (f[0] != '0' && f[0] != '1') {
		return e, errBadLine
	}
	e.Backup = f[0] == '1'
	if f, rest, ok = cutField(rest); !ok {
		return e, errBadLine
	}
	if !(len(f) == 1 && f[0] == '-') {
		if !validSumBytes(f) {
			return e, errBadLine
		}
		e.SHA256 = arena.str(f)
	}
	p, rest, err := cutQuotedIn(rest, arena)
	if err != nil {
		return e, err
	}
	e.Path = p
	if e.Type == "symlink" {
		if len(rest) < 1 || rest[0] != ' ' {
			return e, errBadLine
		}
		if e.Target, rest, err = cutQuoted(rest[1:]); err != nil {
			return e, err
		}
	}
	if len(rest) != 0 {
		return e, errBadLine
	}
	if (e.Type == "file") != (e.SHA256 != "") || (e.Backup && e.Type != "file") {
		return e, errBadLine
	}
	e.hasStatID = true
	return e, nil
}

// readBase parses a base manifest from r. When wantSum is set the content
// must hash to it.
func readBase(r io.Reader, wantSum string) ([]ManifestEntry, error) { return readBaseN(r, wantSum, 0) }

// countLines counts the newlines of the first size bytes of f (a base file
// before it is parsed, so the entries are allocated once: growing a slice of
// 100,000 entries copies about 30 MB and leaves as much garbage).
func countLines(f io.ReaderAt, size int64) (int, error) {
	buf := make([]byte, 256<<10)
	n := 0
	for off := int64(0); off < size; {
		k, err := f.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		n += bytes.Count(buf[:k], []byte{'\n'})
		off += int64(k)
		if err != nil {
			if err == io.EOF {
				break
			}
			return 0, err
		}
	}
	return n, nil
}

// readBaseN is readBase with room for lines entries (a hint: more are
// accepted) and the strings of the entries carved from a few large blocks.
func readBaseN(r io.Reader, wantSum string, lines int) ([]ManifestEntry, error) {
	h := sha256.New()
	src := io.LimitReader(r, maxBaseSize+1)
	if wantSum != "" {
		src = io.TeeReader(src, h)
	}
	br := bufio.NewReaderSize(src, 256<<10)
	head, err := br.ReadString('\n')
	if err != nil || head != baseHeader {
		return nil, errors.New("base manifest: bad header")
	}
	modes := map[string]internedMode{}
	out := make([]ManifestEntry, 0, min(max(lines-1, 0), maxBaseSize/32))
	arena := &strArena{}
	var total int64 = int64(len(head))
	for {
		line, err := br.ReadSlice('\n')
		if err == io.EOF && len(line) == 0 {
			break
		}
		if err != nil {
			if err == bufio.ErrBufferFull {
				return nil, errors.New("base manifest: line too long")
			}
			return nil, fmt.Errorf("base manifest: %w", err)
		}
		total += int64(len(line))
		if total > maxBaseSize {
			return nil, errors.New("base manifest too large")
		}
		e, err := parseEntryLineIn(line[:len(line)-1], modes, arena)
		if err != nil {
			return nil, fmt.Errorf("base manifest line %d: %w", len(out)+2, err)
		}
		if n := len(out); n > 0 && walkCompare(out[n-1].Path, e.Path) >= 0 {
			return nil, fmt.Errorf("base manifest line %d: %q is out of walk order", n+2, e.Path)
		}
		out = append(out, e)
	}
	if wantSum != "" && hex.EncodeToString(h.Sum(nil)) != wantSum {
		return nil, errors.New("base manifest does not match its digest")
	}
	return out, nil
}

// writeBase stores entries as a new base manifest in <state>/manifests and
// returns its digest and size. An existing base of that digest is kept.
func writeBase(state string, entries []*ManifestEntry) (string, int64, error) {
	dir := filepath.Join(state, dirBases)
	if err := fsutil.MkdirPrivate(dir); err != nil {
		return "", 0, err
	}
	f, err := os.CreateTemp(dir, fsutil.TempPrefix+"base-")
	if err != nil {
		return "", 0, err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	h := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(f, h), 256<<10)
	bw.WriteString(baseHeader)
	line := make([]byte, 0, 512)
	var size int64 = int64(len(baseHeader))
	for _, e := range entries {
		line = appendEntryLine(line[:0], e)
		size += int64(len(line))
		bw.Write(line)
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return "", 0, err
	}
	if err := f.Chmod(0o400); err != nil {
		f.Close()
		return "", 0, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", 0, err
	}
	if err := f.Close(); err != nil {
		return "", 0, err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	final := filepath.Join(dir, sum)
	if err := fsutil.RenameNoReplace(unix.AT_FDCWD, tmp, unix.AT_FDCWD, final); err != nil && err != unix.EEXIST {
		return "", 0, fmt.Errorf("install base manifest: %w", err)
	}
	if err := fsutil.SyncDir(dir); err != nil {
		return "", 0, err
	}
	return sum, size, nil
}

// pruneBases removes the base manifests no capsule links any more (link
// count 1), except keep.
func pruneBases(state, keep string) {
	dir := filepath.Join(state, dirBases)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if e.Name() == keep || !validSum(e.Name()) {
			continue
		}
		var st unix.Stat_t
		if unix.Lstat(filepath.Join(dir, e.Name()), &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink == 1 {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// walkCompare orders slash-separated relative paths as scan.List lists them
// (depth first, names in byte order, a directory before its contents): a
// byte comparison in which '/' sorts before every other byte.
func walkCompare(a, b string) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		ca, cb := a[i], b[i]
		if ca == cb {
			continue
		}
		if ca == '/' {
			return -1
		}
		if cb == '/' {
			return 1
		}
		if ca < cb {
			return -1
		}
		return 1
	}
	return len(a) - len(b)
}

// validSumBytes is validSum without a string conversion.
func validSumBytes(b []byte) bool {
	if len(b) != 64 {
		return false
	}
	var bad byte
	for _, c := range b {
		bad |= notLowerHex[c]
	}
	return bad == 0
}

// notLowerHex is 1 for every byte that is not 0-9 or a-f.
var notLowerHex = func() (t [256]byte) {
	for i := range t {
		if !(i >= '0' && i <= '9' || i >= 'a' && i <= 'f') {
			t[i] = 1
		}
	}
	return t
}()
