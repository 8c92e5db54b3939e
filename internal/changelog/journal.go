package changelog

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// The capture state is stored as a base (stateFile, rewritten in full only
// now and then) plus a journal (journalFile) of the entries each capture
// changed, appended and fsynced once per capture: a one-file change costs a
// record of a few hundred bytes instead of a rewrite of every path's entry.
//
// The journal starts with journalMagic and the generation of the base it
// belongs to; a journal of another generation (left by a crash between
// writing a new base and removing the old journal) is ignored, since the new
// base already holds it. Each record is a uint32 length, a CRC-32 of the
// payload and the payload: the new LastPosition, then per root its header
// and the entries upserted or deleted. A record that does not check out
// makes the whole state corrupt (errBadState): the next capture is then a
// full one, never a silent loss of changes.
const (
	journalFile  = "state.journal"
	journalMagic = "AGSCLJ01"
)

// Compaction thresholds: past these the base is rewritten and the journal
// dropped.
const (
	maxJournalRecords = 64
	minJournalBytes   = 256 << 10 // the journal may always grow this large
)

// Journal operations.
const (
	jUpsert = 1
	jDelete = 2
)

// sameEntry reports whether two entries of the same path record the same
// state (hash included).
func sameEntry(o, n *entry) bool {
	if !sameStat(o, n) {
		return false
	}
	if (o.Hash == nil) != (n.Hash == nil) || (o.Tail == nil) != (n.Tail == nil) {
		return false
	}
	if o.Tail != nil && *o.Tail != *n.Tail {
		return false
	}
	return o.Hash == nil || *o.Hash == *n.Hash
}

// sameRoots reports whether two states have the same roots, by name and
// path, in the same order: the condition for journaling the change.
func sameRoots(a, b *captureState) bool {
	if len(a.Roots) != len(b.Roots) {
		return false
	}
	for i := range a.Roots {
		if a.Roots[i].Name != b.Roots[i].Name || a.Roots[i].Path != b.Roots[i].Path {
			return false
		}
	}
	return true
}

// journalRecord encodes the change from prev to next; ops counts the entries
// it carries.
func journalRecord(prev, next *captureState) (rec []byte, ops int) {
	b := binary.AppendVarint(nil, int64(next.LastPosition))
	b = binary.AppendUvarint(b, uint64(len(next.Roots)))
	for i, nr := range next.Roots {
		b = appendRootHeader(b, nr)
		changed := 0
		var body []byte
		last := ""
		mergeEntries(prev.Roots[i].Entries, nr.Entries, func(o, n *entry) {
			switch {
			case n == nil:
				body = append(body, jDelete)
				body = appendEntry(body, &entry{Path: o.Path}, last)
				last = o.Path
			case o == nil || !sameEntry(o, n):
				body = append(body, jUpsert)
				body = appendEntry(body, n, last)
				last = n.Path
			default:
				return
			}
			changed++
		})
		b = binary.AppendUvarint(b, uint64(changed))
		b = append(b, body...)
		ops += changed
	}
	return b, ops
}

type journalOp struct {
	del bool
	e   entry
}

// journalBody checks the header of journal j (magic, then the base's
// generation) and returns the records after it. ok is false with a nil
// error for a journal of another generation (s.journalStale is set: the
// base is newer) and with an error for a bad header.
func journalBody(s *captureState, j []byte, magic string) (rest []byte, ok bool, err error) {
	if len(j) < len(magic)+8 || string(j[:len(magic)]) != magic {
		return nil, false, fmt.Errorf("%w: bad journal header", errBadState)
	}
	if binary.BigEndian.Uint64(j[len(magic):]) != s.gen || s.gen == 0 {
		s.journalStale = true
		return nil, false, nil
	}
	s.journalSize = int64(len(j))
	return j[len(magic)+8:], true, nil
}

// applyJournal decodes the journal j (with its header) onto base s.
func applyJournal(s *captureState, j []byte) error {
	rest, ok, err := journalBody(s, j, journalMagic)
	if !ok {
		return err
	}
	ops := make([][]journalOp, len(s.Roots))
	a := &arena{}
	for len(rest) > 0 {
		var payload []byte
		var err error
		if payload, rest, err = nextJournalRecord(rest); err != nil {
			return err
		}
		r := &stateReader{b: payload}
		pos := r.i()
		nroots := r.u()
		if r.err != nil || nroots != uint64(len(s.Roots)) {
			return fmt.Errorf("%w: journal record for other roots", errBadState)
		}
		for i := range s.Roots {
			h := r.rootHeader()
			if r.err != nil || h.Name != s.Roots[i].Name || h.Path != s.Roots[i].Path {
				return fmt.Errorf("%w: journal record for other roots", errBadState)
			}
			s.Roots[i].Exists, s.Roots[i].Stamp = h.Exists, h.Stamp
			nops := r.u()
			if r.err != nil || nops > uint64(len(r.b)) {
				return errBadState
			}
			last := ""
			for range nops {
				kind := r.raw(1)
				if r.err != nil {
					return errBadState
				}
				e, err := r.entry(a, last)
				if err != nil {
					return err
				}
				if kind[0] != jUpsert && kind[0] != jDelete {
					return fmt.Errorf("%w: journal operation %d", errBadState, kind[0])
				}
				if last != "" && comparePaths(last, e.Path) >= 0 {
					return fmt.Errorf("%w: journal operations out of order", errBadState)
				}
				last = e.Path
				ops[i] = append(ops[i], journalOp{del: kind[0] == jDelete, e: e})
			}
		}
		if r.err != nil || len(r.b) != 0 || int(pos) <= s.LastPosition {
			return fmt.Errorf("%w: bad journal record", errBadState)
		}
		s.LastPosition = int(pos)
		s.journalRecords++
	}
	for i, rs := range s.Roots {
		if len(ops[i]) == 0 {
			continue
		}
		// Records are in order and each sorted: a stable sort keeps the
		// latest operation of a path last.
		list := ops[i]
		slices.SortStableFunc(list, func(x, y journalOp) int { return comparePaths(x.e.Path, y.e.Path) })
		dedup := list[:0]
		for k := range list {
			if len(dedup) > 0 && dedup[len(dedup)-1].e.Path == list[k].e.Path {
				dedup[len(dedup)-1] = list[k]
				continue
			}
			dedup = append(dedup, list[k])
		}
		out := make([]entry, 0, len(rs.Entries)+len(dedup))
		k := 0
		for _, e := range rs.Entries {
			for k < len(dedup) && comparePaths(dedup[k].e.Path, e.Path) < 0 {
				if !dedup[k].del {
					out = append(out, dedup[k].e)
				}
				k++
			}
			if k < len(dedup) && dedup[k].e.Path == e.Path {
				if !dedup[k].del {
					out = append(out, dedup[k].e)
				}
				k++
				continue
			}
			out = append(out, e)
		}
		for ; k < len(dedup); k++ {
			if !dedup[k].del {
				out = append(out, dedup[k].e)
			}
		}
		rs.Entries = out
	}
	return nil
}

// loadState loads the state with every root's entries decoded.
func (c *Changelog) loadState() (*captureState, error) {
	s, err := c.loadStateLazy()
	if err != nil {
		return nil, err
	}
	defer s.release()
	for _, r := range s.Roots {
		if err := r.materialize(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// loadStateLazy loads the state; the roots of a format-3 base keep their
// sections undecoded (lazy).
func (c *Changelog) loadStateLazy() (*captureState, error) {
	f, err := os.OpenFile(filepath.Join(c.dir, stateFile), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		// No base: a journal alone cannot be trusted.
		if _, jerr := os.Lstat(filepath.Join(c.dir, journalFile)); jerr == nil {
			return nil, fmt.Errorf("%w: a journal without a base", errBadState)
		}
		return &captureState{LastPosition: -1}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read capture state: %w", err)
	}
	s, err := openBase(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	if s.src == nil {
		f.Close()
	}
	ok := false
	defer func() {
		if !ok {
			s.release()
		}
	}()
	j, err := fsutil.ReadFileNoFollow(filepath.Join(c.dir, journalFile), 1<<30)
	if errors.Is(err, fs.ErrNotExist) {
		ok = true
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read capture state journal: %w", err)
	}
	v2 := len(j) >= len(journalMagicV2) && string(j[:len(journalMagicV2)]) == journalMagicV2
	v1 := len(j) >= len(journalMagic) && string(j[:len(journalMagic)]) == journalMagic
	switch {
	case s.v3 && v2:
		err = applyJournalV2(s, j)
	case !s.v3 && v1:
		err = applyJournal(s, j)
	case v1 || v2:
		// A journal of the other format belongs to the base this one
		// replaced (a crash before its removal): the base holds it.
		s.journalStale = true
	default:
		err = fmt.Errorf("%w: bad journal header", errBadState)
	}
	if err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

// openBase reads the base f: a format-3 base keeps f open for its sections
// (state.src); older formats are read whole.
func openBase(f *os.File) (*captureState, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read capture state: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Size() > 1<<30 {
		return nil, fmt.Errorf("%w: not a regular file of at most 1 GiB", errBadState)
	}
	magic := make([]byte, len(stateMagicV3))
	if n, _ := f.ReadAt(magic, 0); n == len(magic) && string(magic) == stateMagicV3 {
		return openV3(f, fi.Size())
	}
	b := make([]byte, fi.Size())
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil, fmt.Errorf("read capture state: %w", err)
	}
	return decodeState(b)
}

// saveState replaces the stored state by s in full (its roots' sections
// built): a new base of a new generation, then the old journal is removed.
func (c *Changelog) saveState(s *captureState) error {
	old := s.gen
	for s.gen == 0 || s.gen == old {
		var g [8]byte
		if _, err := rand.Read(g[:]); err != nil {
			return err
		}
		s.gen = binary.BigEndian.Uint64(g[:])
	}
	b, err := encodeV3(s)
	if err != nil {
		return fmt.Errorf("advance capture state: %w", err)
	}
	if err := fsutil.WriteAtomic(filepath.Join(c.dir, stateFile), b, fsutil.FileMode); err != nil {
		return fmt.Errorf("advance capture state: %w", err)
	}
	s.v3 = true
	s.baseSize, s.journalRecords, s.journalSize, s.journalStale = int64(len(b)), 0, 0, false
	if err := os.Remove(filepath.Join(c.dir, journalFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("advance capture state: %w", err)
	}
	// The stale journal is ignored even if its removal is lost.
	_ = fsutil.SyncDir(c.dir)
	return nil
}

// saveStateOrReset saves next in full; when a section carried over from the
// stored base does not check out, the base is replaced by one that does not
// decode, so the next capture is a full one (never an increment built on a
// damaged state).
func (c *Changelog) saveStateOrReset(next *captureState) error {
	err := c.saveState(next)
	if errors.Is(err, errBadState) {
		if werr := fsutil.WriteAtomic(filepath.Join(c.dir, stateFile), []byte("damaged capture state: the next capture is full\n"), fsutil.FileMode); werr != nil {
			return errors.Join(err, werr)
		}
	}
	return err
}

// advanceState stores next, the state after prev: as one journal record of
// the sections that changed when the roots are unchanged and the journal is
// small, else in full.
//
// The journal record is written without fsync: the increment it follows is
// already durable (fsynced, linked, its directory fsynced), and the state
// is a cache of what the increments hold. A crash that loses the record
// (or tears it: its CRC fails) leaves a state behind the stored increments
// or a damaged one; either makes the next capture a full one after the
// last stored position (stateForCapture), never an increment built on a
// wrong state. The record is written only after the increment is durable,
// so no state ever names a position whose increment a crash could lose.
func (c *Changelog) advanceState(prev, next *captureState) error {
	same := prev.v3 && sameRoots(prev, next)
	ops := make([][]secOp, len(next.Roots))
	for i, nr := range next.Roots {
		var pr *rootState
		if same {
			pr = prev.Roots[i]
		}
		ops[i] = nr.buildSections(pr)
	}
	if !same || prev.gen == 0 || prev.journalStale || prev.journalRecords >= maxJournalRecords ||
		prev.journalSize > max(prev.baseSize/4, minJournalBytes) {
		return c.saveStateOrReset(next)
	}
	rec := journalRecordV2(next, ops)
	if int64(len(rec)) > max(prev.baseSize/4, minJournalBytes) {
		return c.saveStateOrReset(next)
	}
	if err := c.appendJournal(prev, rec); err != nil {
		return fmt.Errorf("advance capture state: %w", err)
	}
	next.v3 = true
	next.gen, next.baseSize = prev.gen, prev.baseSize
	next.journalRecords = prev.journalRecords + 1
	next.journalSize = prev.journalSize + int64(len(rec)) + 8
	return nil
}

// appendJournal appends one record, without fsync (see advanceState); on
// failure the journal is cut back to its previous length so the state
// stays at prev.
func (c *Changelog) appendJournal(prev *captureState, rec []byte) error {
	p := filepath.Join(c.dir, journalFile)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, fsutil.FileMode)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	created := size == 0
	if size != prev.journalSize && !(created && prev.journalSize == 0) {
		return fmt.Errorf("%w: journal is %d bytes, expected %d", errBadState, size, prev.journalSize)
	}
	var b []byte
	if created {
		b = append(b, journalMagicV2...)
		b = binary.BigEndian.AppendUint64(b, prev.gen)
		prev.journalSize = int64(len(b))
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(rec)))
	b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(rec))
	b = append(b, rec...)
	if _, err = f.WriteAt(b, size); err != nil {
		_ = f.Truncate(size)
		return err
	}
	return nil
}

// nextJournalRecord splits the first record (length, CRC-32, payload) off
// a journal's records and checks it.
func nextJournalRecord(rest []byte) (payload, next []byte, err error) {
	if len(rest) < 8 {
		return nil, nil, fmt.Errorf("%w: torn journal record", errBadState)
	}
	n, sum := binary.BigEndian.Uint32(rest), binary.BigEndian.Uint32(rest[4:])
	if uint64(n) > uint64(len(rest)-8) {
		return nil, nil, fmt.Errorf("%w: torn journal record", errBadState)
	}
	payload = rest[8 : 8+n]
	if crc32.ChecksumIEEE(payload) != sum {
		return nil, nil, fmt.Errorf("%w: journal record checksum mismatch", errBadState)
	}
	return payload, rest[8+n:], nil
}
