package changelog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"strings"
	"unsafe"

	"github.com/agentscm/agentscm/internal/scan"
)

// entry is what the capture state remembers about one path under a root.
// Entries are kept in walk order (see comparePaths).
type entry struct {
	Path     string
	Type     scan.Type
	Excluded bool // .git internals or git-ignored: listed, never captured or descended
	Mode     fs.FileMode
	Size     int64
	MTime    int64 // nanoseconds
	CTime    int64 // nanoseconds; 0 when unknown (states of format 1)
	Dev, Ino uint64
	Target   string    // symlink target
	Hash     *[32]byte // content hash of a racily clean file, re-verified next time
	// Tail is the hash of a conversation file's last stored bytes (see
	// tailBytes): an append is stored as a delta only while they match.
	Tail *[32]byte
}

// rootState is the captured state of one capture root.
type rootState struct {
	Name    string
	Path    string
	Exists  bool
	Stamp   string // git ignore inputs (index, info/exclude) at classification time
	Entries []entry

	// The stored form (format 3, see sections.go): the root's own entry,
	// its excluded paths and one section per listed directory. A root
	// loaded lazily has no Entries until materialize.
	rootEnt *entry
	excl    []string
	secs    []section
	lazy    bool
	// sparse, on the state a fast capture advances to: Entries holds only
	// the directories it re-examined (see capturefast.go).
	sparse *sparseInfo
}

// captureState is the incremental state: it advances only once an increment
// is stored.
type captureState struct {
	LastPosition int // -1 before the first stored increment
	Roots        []*rootState
	// token is the watcher's token taken before the listing this state
	// records (format 3; "" when none): the next capture asks the watcher
	// what changed since it.
	token string

	// Bookkeeping of the stored form (not encoded): the base's generation,
	// its size, and the journal records applied on top of it.
	gen            uint64
	baseSize       int64
	journalRecords int
	journalSize    int64
	journalStale   bool     // a journal of another generation was found (and ignored)
	v3             bool     // the base is format 3 (sections): it can be journaled
	src            *baseSrc // the open base of a lazily loaded state (release closes it)
	reset          string   // why a damaged state was set aside (stateForCapture)
}

func (s *captureState) root(name string) *rootState {
	for _, r := range s.Roots {
		if r.Name == name {
			return r
		}
	}
	return nil
}

// comparePaths orders slash-separated relative paths the way scan.Walk
// visits them: component by component, each in byte order, a directory
// before its contents.
func comparePaths(a, b string) int {
	if a == b {
		return 0
	}
	for {
		ia := strings.IndexByte(a, '/')
		ib := strings.IndexByte(b, '/')
		ca, cb := a, b
		if ia >= 0 {
			ca = a[:ia]
		}
		if ib >= 0 {
			cb = b[:ib]
		}
		if c := strings.Compare(ca, cb); c != 0 {
			return c
		}
		switch {
		case ia < 0 && ib < 0:
			return 0
		case ia < 0:
			return -1
		case ib < 0:
			return 1
		}
		a, b = a[ia+1:], b[ib+1:]
	}
}

// State base formats: version 1 had no generation; version 2 records the
// generation its journal must carry.
const (
	stateMagicV1 = "AGSCLST1"
	stateMagic   = "AGSCLST2"
)

// Entry flag bits in the encoded state.
const (
	stExcluded = 1 << 0
	stHash     = 1 << 1
	stTail     = 1 << 2
)

func (s *captureState) encode() []byte {
	n := 64
	for _, r := range s.Roots {
		n += 64 + len(r.Name) + len(r.Path) + len(r.Stamp) + 40*len(r.Entries)
	}
	b := make([]byte, 0, n)
	b = append(b, stateMagic...)
	b = binary.BigEndian.AppendUint64(b, s.gen)
	b = binary.AppendVarint(b, int64(s.LastPosition))
	b = binary.AppendUvarint(b, uint64(len(s.Roots)))
	for _, r := range s.Roots {
		b = appendRootHeader(b, r)
		b = binary.AppendUvarint(b, uint64(len(r.Entries)))
		prev := ""
		for i := range r.Entries {
			b = appendEntry(b, &r.Entries[i], prev)
			prev = r.Entries[i].Path
		}
	}
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
}

func appendString(b []byte, v string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(v))), v...)
}

func appendRootHeader(b []byte, r *rootState) []byte {
	b = appendString(b, r.Name)
	b = appendString(b, r.Path)
	if r.Exists {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	return appendString(b, r.Stamp)
}

// appendEntry encodes e, its path as the length shared with prev and the
// rest.
func appendEntry(b []byte, e *entry, prev string) []byte {
	shared := 0
	for shared < len(prev) && shared < len(e.Path) && prev[shared] == e.Path[shared] {
		shared++
	}
	b = binary.AppendUvarint(b, uint64(shared))
	b = appendString(b, e.Path[shared:])
	var flags uint64
	if e.Excluded {
		flags |= stExcluded
	}
	if e.Hash != nil {
		flags |= stHash
	}
	if e.Tail != nil {
		flags |= stTail
	}
	b = binary.AppendUvarint(b, flags)
	b = binary.AppendUvarint(b, uint64(e.Type))
	b = binary.AppendUvarint(b, uint64(e.Mode))
	b = binary.AppendVarint(b, e.Size)
	b = binary.AppendVarint(b, e.MTime)
	b = binary.AppendVarint(b, e.CTime)
	b = binary.AppendUvarint(b, e.Dev)
	b = binary.AppendUvarint(b, e.Ino)
	b = appendString(b, e.Target)
	if e.Hash != nil {
		b = append(b, e.Hash[:]...)
	}
	if e.Tail != nil {
		b = append(b, e.Tail[:]...)
	}
	return b
}

var errBadState = errors.New("capture state is corrupt")

type stateReader struct {
	b   []byte
	err error
	v1  bool // format 1: entries without CTime
}

func (r *stateReader) u() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errBadState
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *stateReader) i() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errBadState
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *stateReader) raw(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = errBadState
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *stateReader) s() string { return string(r.raw(r.u())) }

// arena materialises decoded paths: one allocation per chunk instead of one
// per entry.
type arena struct{ b []byte }

func (a *arena) path(prev string, shared uint64, suffix []byte) string {
	need := int(shared) + len(suffix)
	if need == 0 {
		return ""
	}
	if cap(a.b)-len(a.b) < need {
		a.b = make([]byte, 0, max(need, 256<<10))
	}
	start := len(a.b)
	a.b = append(a.b, prev[:shared]...)
	a.b = append(a.b, suffix...)
	return unsafe.String(unsafe.SliceData(a.b[start:]), need)
}

func (r *stateReader) rootHeader() *rootState {
	return &rootState{Name: r.s(), Path: r.s(), Exists: r.u() == 1, Stamp: r.s()}
}

// entry decodes one entry written by appendEntry after the path prev.
func (r *stateReader) entry(a *arena, prev string) (entry, error) {
	shared := r.u()
	if shared > uint64(len(prev)) {
		return entry{}, errBadState
	}
	suffix := r.raw(r.u())
	if r.err != nil {
		return entry{}, r.err
	}
	e := entry{Path: a.path(prev, shared, suffix)}
	flags := r.u()
	e.Excluded = flags&stExcluded != 0
	e.Type = scan.Type(r.u())
	e.Mode = fs.FileMode(r.u())
	e.Size = r.i()
	e.MTime = r.i()
	if !r.v1 {
		e.CTime = r.i()
	}
	e.Dev = r.u()
	e.Ino = r.u()
	e.Target = r.s()
	if flags&stHash != 0 {
		var h [32]byte
		copy(h[:], r.raw(32))
		e.Hash = &h
	}
	if flags&stTail != 0 {
		var h [32]byte
		copy(h[:], r.raw(32))
		e.Tail = &h
	}
	if r.err != nil || flags&^(stExcluded|stHash|stTail) != 0 || e.Type > scan.Other {
		return entry{}, errBadState
	}
	return e, nil
}

func decodeState(b []byte) (*captureState, error) {
	if len(b) < len(stateMagic)+4 {
		return nil, fmt.Errorf("%w: bad header", errBadState)
	}
	magic := string(b[:len(stateMagic)])
	if magic != stateMagic && magic != stateMagicV1 {
		return nil, fmt.Errorf("%w: bad header", errBadState)
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", errBadState)
	}
	r := &stateReader{b: body[len(stateMagic):], v1: magic == stateMagicV1}
	s := &captureState{baseSize: int64(len(b))}
	if magic == stateMagic {
		g := r.raw(8)
		if r.err != nil {
			return nil, errBadState
		}
		s.gen = binary.BigEndian.Uint64(g)
	}
	s.LastPosition = int(r.i())
	nroots := r.u()
	if nroots > 1024 {
		return nil, fmt.Errorf("%w: %d roots", errBadState, nroots)
	}
	a := &arena{}
	for range nroots {
		rs := r.rootHeader()
		n := r.u()
		if r.err != nil || n > uint64(len(r.b)) {
			return nil, errBadState
		}
		rs.Entries = make([]entry, 0, n)
		prev := ""
		for range n {
			e, err := r.entry(a, prev)
			if err != nil {
				return nil, err
			}
			prev = e.Path
			rs.Entries = append(rs.Entries, e)
		}
		s.Roots = append(s.Roots, rs)
	}
	if r.err != nil || len(r.b) != 0 {
		return nil, errBadState
	}
	return s, nil
}
