package changelog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"slices"
	"strings"

	"github.com/agentscm/agentscm/internal/scan"
)

// State format 3 stores each root's entries as sections, one per directory:
// the directory's children (each encoded by appendEntry, prefix-compressed
// from the directory's own path), sorted by directory in walk order. A
// capture compares each directory it lists with the stored bytes of its
// section and decodes only the sections that differ (or that hold a racy
// hash or a transcript tail, which are always re-examined): a one-file
// change on a 100,000-file tree decodes one section of a hundred entries,
// not 100,000 entries. The journal (format 2) records the sections each
// capture replaced or removed.
//
// Layout of the base (see encodeV3): stateMagicV3, generation (uint64),
// the index's length and CRC-32 (uint32 each), the index: LastPosition
// (varint), the watch token (see Options.Watch), the number of roots, per
// root its name, path, exists, stamp, own entry (a flag, then the entry),
// excluded paths (the walk's pruning set) and sections (directory, number
// of entries, flags, offset, length, CRC-32); then the sections' bytes.
const (
	stateMagicV3   = "AGSCLST3"
	journalMagicV2 = "AGSCLJ02"
)

// Section flags.
const (
	// secRecheck marks a section holding an entry with a racy-file hash or a
	// transcript tail: it is decoded on every capture.
	secRecheck = 1 << 0
)

// section is one directory's stored children. A section of a base on disk
// is read (and its CRC checked) only when used: src, off, size and crc say
// where and what; raw holds the bytes once read (or those of a section
// built in memory or read from the journal).
type section struct {
	dir   string
	n     int
	flags uint8
	raw   []byte

	src       *baseSrc
	off, size int64
	crc       uint32
}

// baseSrc is an open format-3 base whose sections are read on demand.
type baseSrc struct {
	f       *os.File
	dataOff int64
	size    int64
	all     []byte // the whole data area, once loadAll read it
}

// loadAll reads the whole data area at once (a capture that compares every
// directory).
func (b *baseSrc) loadAll() error {
	if b.all != nil {
		return nil
	}
	buf := make([]byte, b.size)
	if _, err := b.f.ReadAt(buf, b.dataOff); err != nil {
		return fmt.Errorf("%w: read sections: %v", errBadState, err)
	}
	b.all = buf
	return nil
}

// bytes returns the section's bytes, reading and checking them first when
// they are still on disk.
func (s *section) bytes() ([]byte, error) {
	if s.src == nil {
		return s.raw, nil
	}
	var b []byte
	if s.src.all != nil {
		b = s.src.all[s.off : s.off+s.size]
	} else {
		b = make([]byte, s.size)
		if _, err := s.src.f.ReadAt(b, s.src.dataOff+s.off); err != nil {
			return nil, fmt.Errorf("%w: read section %q: %v", errBadState, s.dir, err)
		}
	}
	if crc32.ChecksumIEEE(b) != s.crc {
		return nil, fmt.Errorf("%w: section %q checksum mismatch", errBadState, s.dir)
	}
	s.raw, s.src = b, nil
	return b, nil
}

// loadSections reads and checks every section of a root.
func (rs *rootState) loadSections() error {
	for i := range rs.secs {
		if src := rs.secs[i].src; src != nil {
			if err := src.loadAll(); err != nil {
				return err
			}
		}
		if _, err := rs.secs[i].bytes(); err != nil {
			return err
		}
	}
	return nil
}

// release closes the base a lazily loaded state reads its sections from.
func (s *captureState) release() {
	if s.src != nil {
		s.src.f.Close()
		s.src = nil
	}
}

// secPrefix is the path every child of dir starts with.
func secPrefix(dir string) string {
	if dir == "" {
		return ""
	}
	return dir + "/"
}

// encodeChildren encodes the children of dir (walk order) into b.
func encodeChildren(b []byte, dir string, kids []entry) ([]byte, uint8) {
	prev := secPrefix(dir)
	var flags uint8
	for i := range kids {
		b = appendEntry(b, &kids[i], prev)
		prev = kids[i].Path
		if kids[i].Hash != nil || kids[i].Tail != nil {
			flags |= secRecheck
		}
	}
	return b, flags
}

// decodeSection decodes the children of one section.
func decodeSection(a *arena, s *section) ([]entry, error) {
	raw, err := s.bytes()
	if err != nil {
		return nil, err
	}
	r := &stateReader{b: raw}
	prefix := secPrefix(s.dir)
	prev := prefix
	out := make([]entry, 0, s.n)
	for range s.n {
		e, err := r.entry(a, prev)
		if err != nil {
			return nil, err
		}
		if !strings.HasPrefix(e.Path, prefix) || strings.IndexByte(e.Path[len(prefix):], '/') >= 0 || e.Path == prefix ||
			(len(out) > 0 && e.Path <= prev) {
			return nil, fmt.Errorf("%w: section %q holds %q", errBadState, s.dir, e.Path)
		}
		prev = e.Path
		out = append(out, e)
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%w: section %q has trailing bytes", errBadState, s.dir)
	}
	return out, nil
}

// findSection returns the index of dir in secs, or where it would go.
func findSection(secs []section, dir string) (int, bool) {
	return slices.BinarySearchFunc(secs, dir, func(s section, d string) int { return comparePaths(s.dir, d) })
}

func (rs *rootState) section(dir string) *section {
	if i, ok := findSection(rs.secs, dir); ok {
		return &rs.secs[i]
	}
	return nil
}

// sectionsOf splits a root's walk-ordered entries into its own entry, its
// excluded paths and one section per directory that is listed.
func sectionsOf(entries []entry) (root *entry, excl []string, secs []section) {
	if len(entries) == 0 {
		return nil, nil, nil
	}
	root = &entries[0]
	kids := map[string][]entry{}
	dirs := []string{""}
	for i := 1; i < len(entries); i++ {
		e := &entries[i]
		par := parentOf(e.Path)
		kids[par] = append(kids[par], *e)
		if e.Excluded {
			excl = append(excl, e.Path)
		} else if e.Type == scan.Dir {
			dirs = append(dirs, e.Path)
		}
	}
	secs = make([]section, 0, len(dirs))
	for _, d := range dirs {
		k := kids[d]
		raw, flags := encodeChildren(nil, d, k)
		secs = append(secs, section{dir: d, n: len(k), flags: flags, raw: raw})
	}
	slices.SortFunc(secs, func(a, b section) int { return comparePaths(a.dir, b.dir) })
	return root, excl, secs
}

// materialize decodes every section of a lazily loaded root into Entries,
// in walk order.
func (rs *rootState) materialize() error {
	if !rs.lazy {
		return nil
	}
	rs.lazy = false
	rs.Entries = nil
	if err := rs.loadSections(); err != nil {
		return err
	}
	if rs.rootEnt == nil {
		return nil
	}
	a := &arena{}
	out := make([]entry, 0, 64)
	out = append(out, *rs.rootEnt)
	var rec func(dir string, depth int) error
	rec = func(dir string, depth int) error {
		if depth > 4096 {
			return fmt.Errorf("%w: sections nest too deep", errBadState)
		}
		s := rs.section(dir)
		if s == nil {
			return fmt.Errorf("%w: no section for directory %q", errBadState, dir)
		}
		kids, err := decodeSection(a, s)
		if err != nil {
			return err
		}
		for i := range kids {
			out = append(out, kids[i])
			if kids[i].Type == scan.Dir && !kids[i].Excluded {
				if err := rec(kids[i].Path, depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := rec("", 0); err != nil {
		return err
	}
	rs.Entries = out
	return nil
}

// encodeV3 encodes a state whose roots carry their sections: a header,
// the index (positions, roots, and per section its directory, count,
// flags, offset, length and CRC) with its own CRC, then the sections'
// bytes. A capture reads the header and the index, and only the sections
// it compares or decodes.
func encodeV3(s *captureState) ([]byte, error) {
	idx := binary.AppendVarint(nil, int64(s.LastPosition))
	idx = appendString(idx, s.token)
	idx = binary.AppendUvarint(idx, uint64(len(s.Roots)))
	var data [][]byte
	total := 0
	for _, r := range s.Roots {
		idx = appendRootV3(idx, r)
		idx = binary.AppendUvarint(idx, uint64(len(r.secs)))
		for i := range r.secs {
			sec := &r.secs[i]
			if sec.src != nil {
				if err := sec.src.loadAll(); err != nil {
					return nil, err
				}
			}
			b, err := sec.bytes()
			if err != nil {
				return nil, err
			}
			idx = appendString(idx, sec.dir)
			idx = binary.AppendUvarint(idx, uint64(sec.n))
			idx = append(idx, sec.flags)
			idx = binary.AppendUvarint(idx, uint64(total))
			idx = binary.AppendUvarint(idx, uint64(len(b)))
			idx = binary.BigEndian.AppendUint32(idx, crc32.ChecksumIEEE(b))
			data = append(data, b)
			total += len(b)
		}
	}
	out := make([]byte, 0, v3HeaderSize+len(idx)+total)
	out = append(out, stateMagicV3...)
	out = binary.BigEndian.AppendUint64(out, s.gen)
	out = binary.BigEndian.AppendUint32(out, uint32(len(idx)))
	out = binary.BigEndian.AppendUint32(out, crc32.ChecksumIEEE(idx))
	out = append(out, idx...)
	for _, b := range data {
		out = append(out, b...)
	}
	return out, nil
}

// v3HeaderSize: magic, generation, index length, index CRC.
const v3HeaderSize = 8 + 8 + 4 + 4

// appendRootV3 encodes a root's header, own entry and excluded paths.
func appendRootV3(b []byte, r *rootState) []byte {
	b = appendRootHeader(b, r)
	if r.rootEnt != nil {
		b = append(b, 1)
		b = appendEntry(b, r.rootEnt, "")
	} else {
		b = append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(r.excl)))
	for _, x := range r.excl {
		b = appendString(b, x)
	}
	return b
}

func appendSection(b []byte, s *section) []byte {
	b = appendString(b, s.dir)
	b = binary.AppendUvarint(b, uint64(s.n))
	b = append(b, s.flags)
	return appendString(b, string(s.raw))
}

// readRootV3 decodes what appendRootV3 wrote.
func (r *stateReader) rootV3(a *arena) (*rootState, error) {
	rs := r.rootHeader()
	has := r.raw(1)
	if r.err != nil {
		return nil, errBadState
	}
	if has[0] == 1 {
		e, err := r.entry(a, "")
		if err != nil || e.Path != "" {
			return nil, fmt.Errorf("%w: bad root entry", errBadState)
		}
		rs.rootEnt = &e
	} else if has[0] != 0 {
		return nil, errBadState
	}
	nx := r.u()
	if r.err != nil || nx > uint64(len(r.b)) {
		return nil, errBadState
	}
	rs.excl = make([]string, 0, nx)
	for range nx {
		rs.excl = append(rs.excl, r.s())
	}
	if r.err != nil {
		return nil, errBadState
	}
	rs.lazy = true
	return rs, nil
}

func (r *stateReader) section() (section, error) {
	s := section{dir: r.s(), n: int(r.u())}
	f := r.raw(1)
	raw := r.raw(r.u())
	if r.err != nil || uint64(s.n) > uint64(len(raw)) || f[0]&^secRecheck != 0 {
		return section{}, errBadState
	}
	s.flags, s.raw = f[0], raw
	return s, nil
}

// openV3 reads a format-3 base's header and index from f (size bytes);
// its sections stay on disk until used.
func openV3(f *os.File, size int64) (*captureState, error) {
	if size < v3HeaderSize {
		return nil, fmt.Errorf("%w: bad header", errBadState)
	}
	hdr := make([]byte, v3HeaderSize)
	if _, err := f.ReadAt(hdr, 0); err != nil {
		return nil, fmt.Errorf("%w: %v", errBadState, err)
	}
	ilen := int64(binary.BigEndian.Uint32(hdr[16:]))
	if v3HeaderSize+ilen > size {
		return nil, fmt.Errorf("%w: bad index length", errBadState)
	}
	idx := make([]byte, ilen)
	if _, err := f.ReadAt(idx, v3HeaderSize); err != nil {
		return nil, fmt.Errorf("%w: %v", errBadState, err)
	}
	if crc32.ChecksumIEEE(idx) != binary.BigEndian.Uint32(hdr[20:]) {
		return nil, fmt.Errorf("%w: index checksum mismatch", errBadState)
	}
	src := &baseSrc{f: f, dataOff: v3HeaderSize + ilen, size: size - v3HeaderSize - ilen}
	s := &captureState{baseSize: size, v3: true, gen: binary.BigEndian.Uint64(hdr[8:]), src: src}
	r := &stateReader{b: idx}
	s.LastPosition = int(r.i())
	s.token = r.s()
	nroots := r.u()
	if r.err != nil || nroots > 1024 {
		return nil, fmt.Errorf("%w: %d roots", errBadState, nroots)
	}
	a := &arena{}
	var next int64
	for range nroots {
		rs, err := r.rootV3(a)
		if err != nil {
			return nil, err
		}
		ns := r.u()
		if r.err != nil || ns > uint64(len(r.b)) {
			return nil, errBadState
		}
		rs.secs = make([]section, 0, ns)
		for range ns {
			sec := section{dir: r.s(), n: int(r.u())}
			fl := r.raw(1)
			off, sz := r.u(), r.u()
			c := r.raw(4)
			if r.err != nil || fl[0]&^secRecheck != 0 || int64(off) != next || sz > uint64(src.size) || uint64(sec.n) > sz {
				return nil, fmt.Errorf("%w: bad section index", errBadState)
			}
			sec.flags, sec.off, sec.size, sec.crc, sec.src = fl[0], int64(off), int64(sz), binary.BigEndian.Uint32(c), src
			next += int64(sz)
			if k := len(rs.secs); k > 0 && comparePaths(rs.secs[k-1].dir, sec.dir) >= 0 {
				return nil, fmt.Errorf("%w: sections out of order", errBadState)
			}
			rs.secs = append(rs.secs, sec)
		}
		if rs.Exists != (rs.rootEnt != nil) || (rs.rootEnt != nil && (len(rs.secs) == 0 || rs.secs[0].dir != "")) {
			return nil, fmt.Errorf("%w: root %s without its section", errBadState, rs.Name)
		}
		s.Roots = append(s.Roots, rs)
	}
	if r.err != nil || len(r.b) != 0 || next != src.size {
		return nil, fmt.Errorf("%w: bad index", errBadState)
	}
	return s, nil
}

// secOp is one journaled section change: a replaced (or new) section, or a
// removed directory (del).
type secOp struct {
	del bool
	sec section
}

// diffSections lists the changes from old to cur (both sorted).
func diffSections(old, cur []section) []secOp {
	var ops []secOp
	i, j := 0, 0
	for i < len(old) || j < len(cur) {
		switch {
		case j >= len(cur):
			ops = append(ops, secOp{del: true, sec: section{dir: old[i].dir}})
			i++
		case i >= len(old):
			ops = append(ops, secOp{sec: cur[j]})
			j++
		default:
			switch c := comparePaths(old[i].dir, cur[j].dir); {
			case c < 0:
				ops = append(ops, secOp{del: true, sec: section{dir: old[i].dir}})
				i++
			case c > 0:
				ops = append(ops, secOp{sec: cur[j]})
				j++
			default:
				ob, oerr := old[i].bytes()
				cb, cerr := cur[j].bytes()
				if oerr != nil || cerr != nil || old[i].n != cur[j].n || old[i].flags != cur[j].flags || !bytes.Equal(ob, cb) {
					ops = append(ops, secOp{sec: cur[j]})
				}
				i++
				j++
			}
		}
	}
	return ops
}

// applySecOps applies sorted ops to sorted secs.
func applySecOps(secs []section, ops []secOp) []section {
	if len(ops) == 0 {
		return secs
	}
	out := make([]section, 0, len(secs)+len(ops))
	i, j := 0, 0
	for i < len(secs) || j < len(ops) {
		switch {
		case j >= len(ops):
			out = append(out, secs[i])
			i++
		case i >= len(secs):
			if !ops[j].del {
				out = append(out, ops[j].sec)
			}
			j++
		default:
			switch c := comparePaths(secs[i].dir, ops[j].sec.dir); {
			case c < 0:
				out = append(out, secs[i])
				i++
			case c > 0:
				if !ops[j].del {
					out = append(out, ops[j].sec)
				}
				j++
			default:
				if !ops[j].del {
					out = append(out, ops[j].sec)
				}
				i++
				j++
			}
		}
	}
	return out
}

// journalRecordV2 encodes, per root of next, its header, own entry,
// excluded paths and the section operations.
func journalRecordV2(next *captureState, ops [][]secOp) []byte {
	b := binary.AppendVarint(nil, int64(next.LastPosition))
	b = appendString(b, next.token)
	b = binary.AppendUvarint(b, uint64(len(next.Roots)))
	for i, r := range next.Roots {
		b = appendRootV3(b, r)
		b = binary.AppendUvarint(b, uint64(len(ops[i])))
		for _, op := range ops[i] {
			if op.del {
				b = append(b, jDelete)
				b = appendString(b, op.sec.dir)
				continue
			}
			b = append(b, jUpsert)
			b = appendSection(b, &op.sec)
		}
	}
	return b
}

// applyJournalV2 applies a format-2 journal (with its header) onto the
// format-3 base s.
func applyJournalV2(s *captureState, j []byte) error {
	rest, ok, err := journalBody(s, j, journalMagicV2)
	if !ok {
		return err
	}
	a := &arena{}
	for len(rest) > 0 {
		var payload []byte
		var err error
		if payload, rest, err = nextJournalRecord(rest); err != nil {
			return err
		}
		r := &stateReader{b: payload}
		pos := r.i()
		token := r.s()
		nroots := r.u()
		if r.err != nil || nroots != uint64(len(s.Roots)) {
			return fmt.Errorf("%w: journal record for other roots", errBadState)
		}
		s.token = token
		for i, cur := range s.Roots {
			h, err := r.rootV3(a)
			if err != nil || h.Name != cur.Name || h.Path != cur.Path {
				return fmt.Errorf("%w: journal record for other roots", errBadState)
			}
			cur.Exists, cur.Stamp, cur.rootEnt, cur.excl = h.Exists, h.Stamp, h.rootEnt, h.excl
			nops := r.u()
			if r.err != nil || nops > uint64(len(r.b)) {
				return errBadState
			}
			ops := make([]secOp, 0, nops)
			for range nops {
				kind := r.raw(1)
				if r.err != nil {
					return errBadState
				}
				var op secOp
				switch kind[0] {
				case jDelete:
					op = secOp{del: true, sec: section{dir: r.s()}}
				case jUpsert:
					sec, err := r.section()
					if err != nil {
						return err
					}
					op = secOp{sec: sec}
				default:
					return fmt.Errorf("%w: journal operation %d", errBadState, kind[0])
				}
				if r.err != nil {
					return errBadState
				}
				if k := len(ops); k > 0 && comparePaths(ops[k-1].sec.dir, op.sec.dir) >= 0 {
					return fmt.Errorf("%w: journal operations out of order", errBadState)
				}
				ops = append(ops, op)
			}
			s.Roots[i].secs = applySecOps(cur.secs, ops)
			if cur.Exists != (cur.rootEnt != nil) || (cur.rootEnt != nil && (len(cur.secs) == 0 || cur.secs[0].dir != "")) {
				return fmt.Errorf("%w: root %s without its section", errBadState, cur.Name)
			}
		}
		if r.err != nil || len(r.b) != 0 || int(pos) <= s.LastPosition {
			return fmt.Errorf("%w: bad journal record", errBadState)
		}
		s.LastPosition = int(pos)
		s.journalRecords++
	}
	return nil
}
