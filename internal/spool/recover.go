package spool

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// ErrDamaged reports a committed spool whose fixed layout is incomplete or
// unreadable; agentscm does not repair it.
var ErrDamaged = errors.New("spool layout damaged")

// state is what a guarded acquisition found, from names and sizes alone.
type state struct {
	limits     Limits
	outbox     []outboxEntry // ascending seq once sortOutbox ran
	sorted     bool
	acks       map[uint64]string
	artifacts  map[string]int64 // digest -> file size
	quarantine []QuarantineEntry
	index      indexEntry
	usage      Usage
	maxSeq     uint64

	lastOrdinary   uint64 // highest seq of classes e and s
	lastPause      uint64 // highest seq of class g
	lastStart      uint64
	lastOrderPause uint64
	activeStarts   int64

	// The hook summary (summary.go). fast: built from a trusted summary,
	// so outbox, acks and artifacts hold only what this acquisition
	// touched; pend is the pending envelope list (pendKnown), kept in
	// sequence order by its users.
	fast         bool
	pend         []outboxEntry
	pendKnown    bool
	malformedAck string
	verifyNext   uint64
	// intake maps the intake files counted in usage to their sizes.
	intake    map[string]int64
	intakeUse Usage
	boot      string
	// suspect: a write failed half-way; the summary is not written clean.
	suspect bool
	// live: usage is final (the scan finished, or it came from the
	// summary); later moves keep it exact.
	live bool

	report RecoveryReport
}

func cmpSeq(a, b outboxEntry) int {
	if c := cmp.Compare(a.seq, b.seq); c != 0 {
		return c
	}
	return strings.Compare(a.name, b.name)
}

// countIntake adds an intake file to the usage unless it is counted.
func (st *state) countIntake(name string, size int64) {
	if st.intake == nil {
		st.intake = map[string]int64{}
	}
	if _, ok := st.intake[name]; ok {
		return
	}
	st.intake[name] = size
	st.intakeUse.Records++
	st.intakeUse.Bytes += size
	st.usage.Records++
	st.usage.Bytes += size
}

// uncountIntake removes a counted intake file from the intake usage; when
// removed is true it leaves the spool (admitted), otherwise it moved into
// the quarantine and stays in the usage.
func (st *state) uncountIntake(name string, removed bool) int64 {
	size, ok := st.intake[name]
	if !ok {
		return -1
	}
	delete(st.intake, name)
	st.intakeUse.Records--
	st.intakeUse.Bytes -= size
	if removed {
		st.usage.Records--
		st.usage.Bytes -= size
	}
	return size
}

// dropPending removes seq from the pending list.
func (st *state) dropPending(seq uint64) {
	st.pend = slices.DeleteFunc(st.pend, func(e outboxEntry) bool { return e.seq == seq })
}

// sortOutbox orders the outbox by sequence (the listing is in directory
// order; only delivery and compaction need sequence order).
func (st *state) sortOutbox() []outboxEntry {
	if !st.sorted {
		slices.SortFunc(st.outbox, func(a, b outboxEntry) int {
			if c := cmp.Compare(a.seq, b.seq); c != 0 {
				return c
			}
			return strings.Compare(a.name, b.name)
		})
		st.sorted = true
	}
	return st.outbox
}

// hasDupSeq reports whether two outbox entries may share a sequence number.
// It uses a bitmap over the (normally dense) sequence range and answers
// true, conservatively, when the range is too sparse for one.
func hasDupSeq(es []outboxEntry) bool {
	if len(es) < 2 {
		return false
	}
	lo, hi := es[0].seq, es[0].seq
	for _, e := range es {
		lo, hi = min(lo, e.seq), max(hi, e.seq)
	}
	if hi-lo > uint64(8*len(es)+1024) {
		return true
	}
	bits := make([]uint64, (hi-lo)/64+1)
	for _, e := range es {
		i := e.seq - lo
		if bits[i/64]&(1<<(i%64)) != 0 {
			return true
		}
		bits[i/64] |= 1 << (i % 64)
	}
	return false
}

// RecoveryReport counts what recovery did.
type RecoveryReport struct {
	Completed   int      `json:"completed"`
	Duplicates  int      `json:"duplicates"`
	Quarantined []string `json:"quarantined,omitempty"`
	Compactions int      `json:"compactions_completed"`
}

// QuarantineEntry is one quarantined file.
type QuarantineEntry struct {
	Name    string    `json:"name"`
	Bytes   int64     `json:"bytes"`
	Mode    string    `json:"mode"`
	ModTime time.Time `json:"mod_time"`
}

// scanBound is the fixed physical-entry bound of one recovery scan.
func scanBound(l Limits) int { return int(min(2*l.Records+256, 1<<22)) }

func (s *Spool) readLimits() (Limits, error) {
	var l Limits
	b, err := fsutil.ReadFileNoFollow(filepath.Join(s.dir, limitsFile), maxSmallFile)
	if err != nil {
		return l, fmt.Errorf("%w: read limits: %v", ErrDamaged, err)
	}
	f, err := decodeFrame(b)
	if err != nil || f.typ != typeLimits {
		return l, fmt.Errorf("%w: limits file does not decode", ErrDamaged)
	}
	if err := strictJSON(f.body, &l); err != nil {
		return l, fmt.Errorf("%w: limits: %v", ErrDamaged, err)
	}
	return l, nil
}

// listBounded reads the names of dir, failing with ErrScanBound when the
// running budget of scanned entries goes negative. It reads directory
// entries in large batches (one or two getdents calls for a spool at its
// default record limit instead of dozens).
func listBounded(dir string, budget *int) ([]string, error) {
	return listInto(dir, budget, make([]byte, 64<<10))
}

// listInto is listBounded with a caller-provided getdents buffer, so one
// recovery scan allocates a single buffer.
func listInto(dir string, budget *int, buf []byte) ([]string, error) {
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDamaged, &os.PathError{Op: "open", Path: dir, Err: err})
	}
	defer syscall.Close(fd)
	var out []string
	for {
		n, err := fsutil.Getdents(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", dir, err)
		}
		if n <= 0 {
			return out, nil
		}
		before := len(out)
		_, _, out = syscall.ParseDirent(buf[:n], -1, out)
		*budget -= len(out) - before
		if *budget < 0 {
			return nil, fmt.Errorf("%w (%s)", ErrScanBound, dir)
		}
	}
}

// recoverLocked runs recovery under the spool lock: it completes fully
// written temporary files, removes exact duplicates, moves malformed or
// ambiguous files into the quarantine, completes an interrupted compaction,
// and computes the complete physical usage. It reads only names and sizes
// except for temporary files and interrupted compactions. What each name
// is comes from classifyNames, the classification Inspect reports.
func (s *Spool) recoverLocked() (*state, error) {
	lim, err := s.readLimits()
	if err != nil {
		return nil, err
	}
	st := &state{limits: lim, acks: map[uint64]string{}, artifacts: map[string]int64{}}
	budget := scanBound(lim)
	buf := make([]byte, 256<<10)

	if err := s.recoverDir(st, "", &budget, buf); err != nil {
		return nil, err
	}
	for _, n := range rootFiles {
		fi, err := os.Lstat(filepath.Join(s.dir, n))
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrDamaged, n, err)
		}
		st.usage.Records++
		st.usage.Bytes += fi.Size()
	}
	// Compaction index, before the outbox and the acknowledgements are
	// listed: completing an interrupted compaction removes envelopes and
	// markers, and a listing taken before that would name files that are
	// gone (a marker read later as malformed stopped delivery).
	if err := s.recoverIndex(st, &budget); err != nil {
		return nil, err
	}
	for _, dir := range [...]string{outboxDir, acksDir, artifactsDir} {
		if err := s.recoverDir(st, dir, &budget, buf); err != nil {
			return nil, err
		}
		if dir == outboxDir {
			if err := s.resolveDupSeqs(st); err != nil {
				return nil, err
			}
		}
	}
	// Quarantine (counted against the limits, never deleted here).
	names, err := listInto(filepath.Join(s.dir, quarantineDir), &budget, buf)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		fi, err := os.Lstat(filepath.Join(s.dir, quarantineDir, n))
		if err != nil {
			continue
		}
		st.quarantine = append(st.quarantine, QuarantineEntry{Name: n, Bytes: fi.Size(), Mode: fi.Mode().String(), ModTime: fi.ModTime().UTC()})
	}
	sort.Slice(st.quarantine, func(i, j int) bool { return st.quarantine[i].Name < st.quarantine[j].Name })

	// Intake files waiting for admission count from the moment they exist.
	if err := s.countIntakeDir(st, &budget); err != nil {
		return nil, err
	}
	s.countRecovered(st)
	return st, nil
}

// recoverDir lists dir ("" is the root) and acts on each classified name:
// a well-formed record joins st, a temporary file is recovered, anything
// else is quarantined.
func (s *Spool) recoverDir(st *state, dir string, budget *int, buf []byte) error {
	names, err := listInto(filepath.Join(s.dir, dir), budget, buf)
	if err != nil {
		return err
	}
	for _, n := range classifyNames(dir, names) {
		switch n.class {
		case nameTemp:
			err = s.recoverTemp(st, dir, n.name)
		case nameUnexpected:
			err = s.quarantine(st, dir, n.name)
		default:
			switch dir {
			case outboxDir:
				st.outbox = append(st.outbox, n.outbox)
			case acksDir:
				st.acks[n.ackSeq] = n.name
			case artifactsDir:
				st.artifacts[n.digest] = n.artBytes
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// resolveDupSeqs handles two outbox files with one sequence number: it
// keeps the one file whose content is a valid envelope matching its name;
// if there is not exactly one, all are ambiguous and quarantined.
func (s *Spool) resolveDupSeqs(st *state) error {
	if !hasDupSeq(st.outbox) {
		return nil
	}
	var kept []outboxEntry
	for _, g := range seqGroups(st.sortOutbox()) {
		if len(g) == 1 {
			kept = append(kept, g[0])
			continue
		}
		valid := -1
		for k, e := range g {
			if _, err := s.readEnvelopeFile(e); err == nil {
				if valid >= 0 {
					valid = -2
					break
				}
				if valid == -1 {
					valid = k
				}
			}
		}
		for k, e := range g {
			if k == valid {
				kept = append(kept, e)
				continue
			}
			if err := s.quarantine(st, outboxDir, e.name); err != nil {
				return err
			}
		}
	}
	st.outbox = kept
	return nil
}

// countRecovered computes the usage and the derived ledger state of a
// recovered spool from what recovery kept, and marks the state live.
func (s *Spool) countRecovered(st *state) {
	for _, e := range st.outbox {
		st.usage.Records++
		st.usage.Bytes += e.size
		st.maxSeq = max(st.maxSeq, e.seq)
		switch e.class { // the listing is unordered: keep maxima
		case classEvent:
			st.lastOrdinary = max(st.lastOrdinary, e.seq)
		case classStart:
			st.lastOrdinary = max(st.lastOrdinary, e.seq)
			st.lastStart = max(st.lastStart, e.seq)
			st.activeStarts++
		case classPause:
			st.lastPause = max(st.lastPause, e.seq)
		case classOrder:
			st.lastOrderPause = max(st.lastOrderPause, e.seq)
		}
	}
	st.usage.Records += int64(len(st.acks))
	st.usage.Bytes += int64(len(st.acks)) * ackFileSize
	for _, size := range st.artifacts {
		st.usage.Records++
		st.usage.Bytes += size
	}
	st.usage.Records++ // the index
	if fi, err := os.Lstat(filepath.Join(s.dir, compactDir, st.index.name)); err == nil {
		st.usage.Bytes += fi.Size()
	}
	for _, q := range st.quarantine {
		st.usage.Records++
		st.usage.Bytes += q.Bytes
	}
	st.maxSeq = max(st.maxSeq, st.index.high)
	st.live = true
}

// ackFileSize is the size of every well-formed acknowledgement marker.
var ackFileSize = int64(len(encodeFrame(typeAck, fmt.Sprintf("%0*d", recordDigits, 1), []byte(envelopeDigest(strings.Repeat("0", 64))))))

// recoverTemp handles one temporary file left by a writer that died while
// holding the lock: a fully written, valid file is completed (installed
// under the name its content determines), an exact duplicate of its target
// is removed, anything else is quarantined.
func (s *Spool) recoverTemp(st *state, dir, name string) error {
	path := filepath.Join(s.dir, dir, name)
	limit := int64(maxSmallFile)
	switch dir {
	case outboxDir:
		limit = maxEnvelopeBytes + maxHeaderBytes
	case artifactsDir:
		limit = st.limits.ArtifactBytes + maxHeaderBytes
	case compactDir:
		limit = maxIndexBytes
	}
	b, err := fsutil.ReadFileNoFollow(path, limit)
	if err != nil {
		return s.quarantine(st, dir, name)
	}
	f, err := decodeFrame(b)
	if err != nil {
		return s.quarantine(st, dir, name)
	}
	target, replace, ok := tempTarget(dir, f, int64(len(b)))
	if !ok {
		return s.quarantine(st, dir, name)
	}
	dpath := filepath.Join(s.dir, dir)
	tpath := filepath.Join(dpath, target)
	if dir == outboxDir {
		e, _ := parseOutboxName(target)
		for _, o := range st.outbox {
			if o.seq == e.seq && o.name != target {
				return s.quarantine(st, dir, name) // ambiguous
			}
		}
	}
	if old, err := os.ReadFile(tpath); err == nil && !replace {
		if bytes.Equal(old, b) {
			st.report.Duplicates++
			if err := os.Remove(path); err != nil {
				return err
			}
			return s.syncDir(dpath)
		}
		return s.quarantine(st, dir, name)
	}
	if err := os.Rename(path, tpath); err != nil {
		return fmt.Errorf("complete %s: %w", name, err)
	}
	st.report.Completed++
	if err := s.syncDir(dpath); err != nil {
		return err
	}
	switch dir {
	case outboxDir:
		e, _ := parseOutboxName(target)
		st.outbox = append(st.outbox, e)
		st.sorted = false
	case acksDir:
		seq, _ := parseAckName(target)
		st.acks[seq] = target
	case artifactsDir:
		d, size, _ := parseArtifactName(target)
		st.artifacts[d] = size
	case "":
		if target == limitsFile {
			// A limits change (SetLimits) that a crash cut off before its
			// rename: it was validated under the lock; it now applies.
			lim, err := s.readLimits()
			if err != nil {
				return err
			}
			st.limits = lim
		}
	}
	return nil
}

// tempTarget derives the final name of a decoded temporary file from its
// content; replace is true for files that are replaced in place.
func tempTarget(dir string, f frame, size int64) (string, bool, bool) {
	switch dir {
	case "":
		switch f.typ {
		case typeCommit:
			return commitFile, false, f.key == "v4"
		case typeCursor:
			// The cursor and the limits (SetLimits) are replaced after the
			// commit; scope temporaries cannot come from a cooperating
			// writer.
			if f.key != f.typ {
				return "", false, false
			}
			return cursorFile, true, true
		case typeLimits:
			if f.key != f.typ {
				return "", false, false
			}
			return limitsFile, true, true
		}
	case outboxDir:
		seqs, cls, ok := strings.Cut(f.key, "-")
		seq, ok2 := parseDecimal(seqs)
		if f.typ != typeEnvelope || !ok || !ok2 || seq == 0 || len(cls) != 1 || !validClass(cls[0]) {
			return "", false, false
		}
		return outboxName(seq, cls[0], size), false, true
	case acksDir:
		seq, ok := parseDecimal(f.key)
		if f.typ != typeAck || !ok || seq == 0 || len(f.key) != recordDigits {
			return "", false, false
		}
		return ackName(seq), false, true
	case artifactsDir:
		if f.typ != typeArtifact || f.key != f.sum {
			return "", false, false
		}
		return artifactName(f.sum, size), false, true
	case compactDir:
		g, h, ok := strings.Cut(f.key, "-")
		gen, ok1 := parseDecimal(g)
		high, ok2 := parseDecimal(h)
		if f.typ != typeIndex || !ok || !ok1 || !ok2 {
			return "", false, false
		}
		return indexName(gen, high, true), false, true
	}
	return "", false, false
}

// quarantine moves dir/name into the private quarantine under a fresh
// opaque name. Nothing is deleted.
func (s *Spool) quarantine(st *state, dir, name string) error {
	label := dir
	if label == "" {
		label = "root"
	}
	// A live state (after the scan, or from the summary) keeps its usage
	// exact: the file stays counted, at its real size from now on.
	counted, actual := int64(-1), int64(0)
	if st != nil && st.live {
		if dir == intakeDir {
			counted = st.uncountIntake(name, false)
		} else if e, ok := parseOutboxName(name); ok && dir == outboxDir {
			counted = e.size
		}
		if fi, err := os.Lstat(filepath.Join(s.dir, dir, name)); err == nil {
			actual = fi.Size()
		} else {
			counted = -1
		}
	}
	if st != nil && dir == outboxDir && st.pendKnown {
		if e, ok := parseOutboxName(name); ok {
			st.dropPending(e.seq)
		}
	}
	qname := fmt.Sprintf("%d-%s-%s-%s", time.Now().UnixNano(), randomHex(4), label, sanitize(name))
	qdir := filepath.Join(s.dir, quarantineDir)
	if err := os.Rename(filepath.Join(s.dir, dir, name), filepath.Join(qdir, qname)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("quarantine %s/%s: %w", label, name, err)
	}
	if counted >= 0 {
		st.usage.Bytes += actual - counted
	}
	s.fail("recover.quarantined")
	if err := s.syncDir(qdir); err != nil {
		return err
	}
	if err := s.syncDir(filepath.Join(s.dir, dir)); err != nil {
		return err
	}
	if st != nil {
		st.report.Quarantined = append(st.report.Quarantined, qname)
	}
	return nil
}

func sanitize(n string) string {
	var b strings.Builder
	for _, c := range n {
		if b.Len() >= quarantineNameMax {
			break
		}
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_' {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "_"
	}
	return b.String()
}

// recoverIndex finds the current compaction index, completes an interrupted
// compaction (a .pending index is its durable commit point) and removes
// superseded indexes.
func (s *Spool) recoverIndex(st *state, budget *int) error {
	dir := filepath.Join(s.dir, compactDir)
	names, err := listBounded(dir, budget)
	if err != nil {
		return err
	}
	var idx []indexEntry
	for _, n := range names {
		switch sn := classifyName(compactDir, n); sn.class {
		case nameWellFormed:
			idx = append(idx, sn.index)
		case nameTemp:
			if err := s.recoverTemp(st, compactDir, n); err != nil {
				return err
			}
			// A completed index temp is now a .pending index; list again.
			return s.recoverIndex(st, budget)
		default:
			if err := s.quarantine(st, compactDir, n); err != nil {
				return err
			}
		}
	}
	if len(idx) == 0 {
		return fmt.Errorf("%w: no compaction index", ErrDamaged)
	}
	sort.Slice(idx, func(i, j int) bool {
		if idx[i].gen != idx[j].gen {
			return idx[i].gen < idx[j].gen
		}
		return !idx[i].pending && idx[j].pending
	})
	cur := idx[len(idx)-1]
	if cur.pending {
		// A committed .json of the same generation wins; the pending copy
		// is then an exact leftover.
		if len(idx) > 1 && idx[len(idx)-2].gen == cur.gen {
			if err := os.Remove(filepath.Join(dir, cur.name)); err != nil {
				return err
			}
			cur = idx[len(idx)-2]
			idx = idx[:len(idx)-1]
		} else {
			ix, err := s.readIndex(cur.name)
			if err != nil {
				return err
			}
			if err := s.finishCompaction(ix, cur); err != nil {
				return err
			}
			st.report.Compactions++
			cur.pending = false
			cur.name = indexName(cur.gen, cur.high, false)
		}
	}
	for _, e := range idx {
		if e.gen < cur.gen {
			if err := os.Remove(filepath.Join(dir, e.name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	if len(idx) > 1 {
		if err := s.syncDir(dir); err != nil {
			return err
		}
	}
	st.index = cur
	return nil
}

func (s *Spool) readIndex(name string) (*compactIndex, error) {
	b, err := fsutil.ReadFileNoFollow(filepath.Join(s.dir, compactDir, name), maxIndexBytes)
	if err != nil {
		return nil, fmt.Errorf("%w: read compaction index: %v", ErrDamaged, err)
	}
	return decodeIndex(b)
}

func decodeIndex(b []byte) (*compactIndex, error) {
	f, err := decodeFrame(b)
	if err != nil || f.typ != typeIndex {
		return nil, fmt.Errorf("%w: compaction index does not decode", ErrDamaged)
	}
	var ix compactIndex
	if err := strictJSON(f.body, &ix); err != nil {
		return nil, fmt.Errorf("%w: compaction index: %v", ErrDamaged, err)
	}
	return &ix, nil
}

// checkEvidence rejects retained evidence files (envelopes, markers,
// artifacts) with unsafe ownership or modes. Delivery, compaction and full
// recovery call it; the per-process hook path relies on the private
// operational directories, which nobody else can traverse.
func (s *Spool) checkEvidence(st *state) error {
	// One lstat per file into a reused Stat_t and the effective user read
	// once: this runs over every evidence file on every hook.
	euid := os.Geteuid()
	var sys syscall.Stat_t
	check := func(dir, name string) error {
		p := filepath.Join(s.dir, dir, name)
		var err error
		for {
			if err = syscall.Lstat(p, &sys); err != syscall.EINTR {
				break
			}
		}
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return &fs.PathError{Op: "lstat", Path: p, Err: err}
		}
		return checkPrivateStat(p, &sys, euid)
	}
	for _, e := range st.outbox {
		if err := check(outboxDir, e.name); err != nil {
			return err
		}
	}
	for _, n := range st.acks {
		if err := check(acksDir, n); err != nil {
			return err
		}
	}
	for d, size := range st.artifacts {
		if err := check(artifactsDir, artifactName(d, size)); err != nil {
			return err
		}
	}
	return nil
}

// readEnvelopeFile reads and fully validates one outbox file against its
// name.
func (s *Spool) readEnvelopeFile(e outboxEntry) (*Envelope, error) {
	b, err := fsutil.ReadFileNoFollow(filepath.Join(s.dir, outboxDir, e.name), maxEnvelopeBytes+maxHeaderBytes)
	if err != nil {
		return nil, err
	}
	return decodeEnvelope(b, e)
}

func decodeEnvelope(b []byte, e outboxEntry) (*Envelope, error) {
	f, err := decodeFrame(b)
	if err != nil {
		return nil, err
	}
	if f.typ != typeEnvelope || f.key != strconv.FormatUint(e.seq, 10)+"-"+string(e.class) || int64(len(b)) != e.size {
		return nil, fmt.Errorf("%w: envelope does not match its name", errMalformed)
	}
	env, err := decodeEnvelopeBody(f.body)
	if err != nil {
		return nil, err
	}
	if env.Record.Seq != e.seq {
		return nil, fmt.Errorf("%w: envelope sequence %d in file %d", errMalformed, env.Record.Seq, e.seq)
	}
	env.Digest = envelopeDigest(f.sum)
	env.Class = classNames[e.class]
	return env, nil
}
