package spool

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// The summary is the hook's pending index, kept outside the spool in a
// private directory the caller names (SetSummaryPath; capture uses the
// spool's ledger directory), so it is no spool record and changes no limit: what
// admission and delivery need from a guarded acquisition (complete physical
// usage but the intake, next sequence, ledger maxima, the current compaction
// index, the pending envelope names and a malformed acknowledgement found at
// the last rebuild), so that a hook does O(pending + this event) work under
// the lock instead of listing, stat-ing and reading every retained envelope
// and marker.
//
// It is derived state, never evidence, and trusted only when every one of
// these holds: it decodes; it says clean (a holder writes it dirty before it
// changes anything and clean, with the new state, after its last change); it
// was written in this kernel boot (it is replaced by rename without fsync,
// so a machine crash can lose it, never a process crash); the limits file
// still says what it recorded; and the outbox, acks, artifacts, compact and
// quarantine directories still have the inode, mtime and ctime it recorded
// after that last change. Anything else rebuilds it from the files with the
// full recovery scan (which is what every acquisition did before), so a
// torn, stale or missing summary costs one scan and never hides an envelope
// or miscounts usage.
const (
	typeSummary     = "summary"
	summaryVersion  = 1
	maxSummaryBytes = 8 << 20
)

// stampedDirs are the directories whose stamps a clean summary records.
var stampedDirs = [...]string{outboxDir, acksDir, artifactsDir, compactDir, quarantineDir}

type dirStamp struct {
	Ino   uint64 `json:"ino"`
	Mtime int64  `json:"mtime_ns"`
	Ctime int64  `json:"ctime_ns"`
}

type summaryRecord struct {
	Version int    `json:"version"`
	SpoolID string `json:"spool_id"`
	Root    FileID `json:"root"`
	BootID  string `json:"boot_id"`
	Clean   bool   `json:"clean"`
	Limits  Limits `json:"limits"`
	// Usage is the complete physical usage except intake files and the
	// summary itself (both are counted live at every acquisition).
	Usage          Usage  `json:"usage"`
	MaxSeq         uint64 `json:"max_seq"`
	LastOrdinary   uint64 `json:"last_ordinary"`
	LastPause      uint64 `json:"last_pause"`
	LastStart      uint64 `json:"last_start"`
	LastOrderPause uint64 `json:"last_order_pause"`
	ActiveStarts   int64  `json:"active_starts"`
	Index          string `json:"index"`
	IndexHigh      uint64 `json:"index_high"`
	IndexGen       uint64 `json:"index_gen"`
	MalformedAck   string `json:"malformed_ack,omitempty"`
	// Token is the capture.lock mtime every full acquisition sets to a
	// fresh random value (see bumpToken).
	Token int64 `json:"token"`
	// VerifyNext is where the rolling marker check resumes.
	VerifyNext uint64     `json:"verify_next"`
	Pending    []string   `json:"pending"`
	Dirs       []dirStamp `json:"dirs"`
}

func readBootID() string {
	b, err := fsutil.ReadFileNoFollow("/proc/sys/kernel/random/boot_id", 128)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func (s *Spool) stampDirs() ([]dirStamp, error) {
	out := make([]dirStamp, 0, len(stampedDirs))
	var st syscall.Stat_t
	for _, d := range stampedDirs {
		if err := syscall.Lstat(filepath.Join(s.dir, d), &st); err != nil {
			return nil, err
		}
		out = append(out, dirStamp{Ino: st.Ino, Mtime: fsutil.SysMtimeNS(&st), Ctime: fsutil.SysCtimeNS(&st)})
	}
	return out, nil
}

// SetSummaryPath names where the spool keeps its hook summary: a file in a
// private (0700) directory outside the spool that the caller owns (capture
// uses the spool's ledger directory). Without one every acquisition runs
// the full recovery scan.
func (s *Spool) SetSummaryPath(path string) { s.summaryPath = path }

func (s *Spool) readSummary() (*summaryRecord, int64, error) {
	if s.summaryPath == "" {
		return nil, 0, fs.ErrNotExist
	}
	if err := fsutil.CheckPrivateDir(filepath.Dir(s.summaryPath)); err != nil {
		// Not private: never trusted (and never written).
		return nil, 0, fs.ErrNotExist
	}
	b, err := fsutil.ReadFileNoFollow(s.summaryPath, maxSummaryBytes)
	if err != nil {
		return nil, 0, err
	}
	f, err := decodeFrame(b)
	if err != nil || f.typ != typeSummary || f.key != typeSummary {
		return nil, int64(len(b)), fmt.Errorf("%w: summary", errMalformed)
	}
	var sr summaryRecord
	if err := strictJSON(f.body, &sr); err != nil || sr.Version != summaryVersion {
		return nil, int64(len(b)), fmt.Errorf("%w: summary: %v", errMalformed, err)
	}
	if sr.SpoolID != s.commit.SpoolID || sr.Root != s.commit.Root {
		return nil, int64(len(b)), fmt.Errorf("%w: summary of another spool", errMalformed)
	}
	return &sr, int64(len(b)), nil
}

// readSummaryUnlocked returns the last clean summary of this boot, for the
// intake's lock-free admission estimate.
// PendingBacklog is the number of pending envelopes the hook summary last
// recorded, read without the lock (a hint for backpressure: it may be stale,
// and is 0 when there is no trusted summary).
func (s *Spool) PendingBacklog() int {
	sr, ok := s.readSummaryUnlocked()
	if !ok {
		return 0
	}
	return len(sr.Pending)
}

func (s *Spool) readSummaryUnlocked() (*summaryRecord, bool) {
	h := &s.hints
	h.mu.Lock()
	defer h.mu.Unlock()
	if now := time.Now(); h.read && now.Sub(h.at) >= 0 && now.Sub(h.at) < summaryHintTTL {
		return h.sr, h.sr != nil
	}
	sr, _, err := s.readSummary()
	if err != nil || sr.BootID == "" || sr.BootID != s.bootIDLocked() {
		sr = nil
	}
	h.read, h.at, h.sr = true, time.Now(), sr
	return sr, sr != nil
}

// summaryHintTTL is how long an unlocked summary read answers again: a
// hook asks for it up to three times within a few milliseconds (the
// backpressure hint, the intake's admission estimate, the usage warning),
// and every answer is only a hint that may already be stale when read.
const summaryHintTTL = 100 * time.Millisecond

// summaryHints caches, per Spool value, the last unlocked summary read and
// the boot id (constant for the process's life).
type summaryHints struct {
	mu   sync.Mutex
	read bool
	at   time.Time
	sr   *summaryRecord
	boot string
}

// bootID is the kernel's boot id, read once per Spool.
func (s *Spool) bootID() string {
	s.hints.mu.Lock()
	defer s.hints.mu.Unlock()
	return s.bootIDLocked()
}

func (s *Spool) bootIDLocked() string {
	if s.hints.boot == "" {
		s.hints.boot = readBootID()
	}
	return s.hints.boot
}

// dropHint forgets the cached unlocked summary (after this process wrote
// or removed the summary).
func (s *Spool) dropHint() {
	s.hints.mu.Lock()
	s.hints.read, s.hints.sr = false, nil
	s.hints.mu.Unlock()
}

func (s *Spool) writeSummary(sr *summaryRecord) error {
	defer s.dropHint()
	if s.readOnly {
		return ErrReadOnly
	}
	if s.summaryPath == "" {
		return nil
	}
	if err := fsutil.CheckPrivateDir(filepath.Dir(s.summaryPath)); err != nil {
		return nil // a summary there would never be trusted
	}
	sr.SpoolID, sr.Root = s.commit.SpoolID, s.commit.Root
	data := encodeFrame(typeSummary, typeSummary, mustJSON(sr))
	tmp := s.summaryPath + fsutil.TempPrefix + randomHex(8)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, fsutil.FileMode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	s.fail("summary.temp-written")
	if err := os.Rename(tmp, s.summaryPath); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// markDirty makes the summary untrusted before a holder changes the spool.
func (s *Spool) markDirty(sr *summaryRecord) error {
	defer s.dropHint()
	if sr == nil {
		sr = &summaryRecord{Version: summaryVersion}
	} else if !sr.Clean {
		return nil
	}
	d := *sr
	d.Clean = false
	return s.writeSummary(&d)
}

// dropSummary removes the summary when it cannot be marked dirty (a full
// disk): an unlink needs no space, and no summary means a full scan.
func (s *Spool) dropSummary() error {
	defer s.dropHint()
	if s.summaryPath == "" {
		return nil
	}
	if err := os.Remove(s.summaryPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("spool summary can be neither marked dirty nor removed: %w", err)
	}
	return nil
}

// fastState builds the acquisition state from a trusted summary, or returns
// nil when the summary cannot be trusted. It lists only the intake.
func (s *Spool) fastState(sr *summaryRecord, size int64, boot string, lim Limits) (*state, error) {
	if sr == nil || !sr.Clean || boot == "" || sr.BootID != boot || sr.Limits != lim {
		return nil, nil
	}
	stamps, err := s.stampDirs()
	if err != nil || !slices.Equal(stamps, sr.Dirs) {
		return nil, nil
	}
	if tok, err := s.token(); err != nil || tok != sr.Token {
		return nil, nil
	}
	if sr.MalformedAck != "" {
		// Still malformed? A repaired marker (changed in place, so no
		// directory stamp moved) forces a rebuild.
		seq, ok := parseAckName(sr.MalformedAck)
		if !ok {
			return nil, nil
		}
		if _, err := s.readAck(seq, sr.MalformedAck); err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
	}
	st := &state{limits: lim, fast: true, live: true, usage: sr.Usage, maxSeq: sr.MaxSeq,
		lastOrdinary: sr.LastOrdinary, lastPause: sr.LastPause, lastStart: sr.LastStart,
		lastOrderPause: sr.LastOrderPause, activeStarts: sr.ActiveStarts, malformedAck: sr.MalformedAck,
		acks: map[uint64]string{}, artifacts: map[string]int64{}, pendKnown: true}
	st.index = indexEntry{name: sr.Index, gen: sr.IndexGen, high: sr.IndexHigh}
	if e, ok := parseIndexName(sr.Index); !ok || e.pending || e.gen != sr.IndexGen || e.high != sr.IndexHigh {
		return nil, nil
	}
	for _, n := range sr.Pending {
		e, ok := parseOutboxName(n)
		if !ok {
			return nil, nil
		}
		st.pend = append(st.pend, e)
	}
	s.verifyAcks(st, sr.VerifyNext)
	return st, nil
}

// verifyRolling is how many sequence numbers each trusted acquisition
// re-checks for a marker that was altered in place after it was validated
// (no directory stamp moves then): a bounded, rotating share of the whole
// set, so a damaged marker stops delivery within maxSeq/verifyRolling
// acquisitions even without a rebuild.
const verifyRolling = 32

func (s *Spool) verifyAcks(st *state, from uint64) {
	if st.maxSeq == 0 {
		return
	}
	seq := from
	for range verifyRolling {
		if seq == 0 || seq > st.maxSeq {
			seq = 1
		}
		name := ackName(seq)
		if _, err := os.Lstat(filepath.Join(s.dir, acksDir, name)); err == nil {
			if _, err := s.readAck(seq, name); err != nil && st.malformedAck == "" {
				st.malformedAck = name
			}
		}
		seq++
	}
	st.verifyNext = seq
}

// acquireFast is the hook's acquisition: the lock, the identity
// revalidation, then the trusted summary (O(pending)) or, when it cannot be
// trusted, the full recovery scan and a rebuilt pending list. The summary is
// marked dirty before the guard is returned and written clean again by
// release.
func (s *Spool) acquireFast(ctx context.Context, wait time.Duration) (*guard, error) {
	if s.readOnly {
		return nil, ErrReadOnly
	}
	lf, err := s.lockWith(ctx, wait)
	if err != nil {
		return nil, err
	}
	g := &guard{s: s, lock: lf}
	if err := s.revalidate(lf); err != nil {
		g.release()
		return nil, err
	}
	lim, err := s.readLimits()
	if err != nil {
		g.release()
		return nil, err
	}
	boot := s.bootID()
	sr, size, serr := s.readSummary()
	var st *state
	if serr == nil {
		if st, err = s.fastState(sr, size, boot, lim); err != nil {
			g.release()
			return nil, err
		}
	}
	if st == nil {
		if err := s.markDirty(sr); err != nil {
			if err := s.dropSummary(); err != nil {
				g.release()
				return nil, err
			}
		}
		if st, err = s.recoverLocked(); err != nil {
			g.release()
			return nil, err
		}
		if err := s.rebuildPending(st); err != nil {
			g.release()
			return nil, err
		}
	} else {
		if err := s.markDirty(sr); err != nil {
			// Without a dirty mark the clean summary must not survive this
			// acquisition's changes: remove it (no space needed) and take
			// the full scan instead.
			if err := s.dropSummary(); err != nil {
				g.release()
				return nil, err
			}
			if st, err = s.recoverLocked(); err != nil {
				g.release()
				return nil, err
			}
			if err := s.rebuildPending(st); err != nil {
				g.release()
				return nil, err
			}
			st.boot = ""
			g.st, g.tracked = st, true
			return g, nil
		}
		budget := MaxIntakeFiles*2 + 256
		if err := s.countIntakeDir(st, &budget); err != nil {
			g.release()
			return nil, err
		}
	}
	st.boot = boot
	g.st, g.tracked = st, true
	return g, nil
}

// rebuildPending computes the pending list of a full state: envelopes not
// hidden by a marker carrying their exact digest. A malformed marker is
// remembered (delivery stops with ErrMalformedAck) instead of failing the
// acquisition, so capture goes on.
func (s *Spool) rebuildPending(st *state) error {
	st.pend, st.pendKnown = nil, true
	acked := make(map[uint64]string, len(st.acks))
	for seq, name := range st.acks {
		d, err := s.readAck(seq, name)
		if err != nil {
			if st.malformedAck == "" || name < st.malformedAck {
				st.malformedAck = name
			}
			continue
		}
		acked[seq] = d
	}
	for _, e := range st.sortOutbox() {
		d, ok := acked[e.seq]
		if ok && s.headerDigest(e) == d {
			continue
		}
		if ok {
			env, err := s.readEnvelopeFile(e)
			if err == nil && env.Digest == d {
				continue
			}
		}
		st.pend = append(st.pend, e)
	}
	return nil
}

// summaryOf is the clean summary of a tracked state after its last change.
func (s *Spool) summaryOf(st *state) (*summaryRecord, error) {
	stamps, err := s.stampDirs()
	if err != nil {
		return nil, err
	}
	tok, err := s.token()
	if err != nil {
		return nil, err
	}
	use := st.usage
	use.Records -= st.intakeUse.Records
	use.Bytes -= st.intakeUse.Bytes
	sr := &summaryRecord{Version: summaryVersion, BootID: st.boot, Clean: st.boot != "", Limits: st.limits,
		Usage: use, MaxSeq: st.maxSeq, LastOrdinary: st.lastOrdinary, LastPause: st.lastPause,
		LastStart: st.lastStart, LastOrderPause: st.lastOrderPause, ActiveStarts: st.activeStarts,
		Index: st.index.name, IndexHigh: st.index.high, IndexGen: st.index.gen, MalformedAck: st.malformedAck, VerifyNext: st.verifyNext, Token: tok,
		Pending: make([]string, 0, len(st.pend)), Dirs: stamps}
	slices.SortFunc(st.pend, func(a, b outboxEntry) int { return cmpSeq(a, b) })
	for _, e := range st.pend {
		sr.Pending = append(sr.Pending, e.name)
	}
	return sr, nil
}

// finishTracked writes the clean summary at release, unless something in
// the acquisition made the state untrustworthy (then the summary stays
// dirty and the next acquisition rebuilds it).
func (g *guard) finishTracked() {
	if !g.tracked || g.st == nil || g.st.suspect || !g.st.pendKnown {
		return
	}
	sr, err := g.s.summaryOf(g.st)
	if err != nil {
		return
	}
	_ = g.s.writeSummary(sr)
}

// bumpToken sets the mtime of the permanent capture.lock (never its
// identity or content) to a fresh random value. Every full acquisition
// (compaction, recovery, pruning, open: paths that do not keep a summary
// they may not even know about) calls it before changing anything, so a
// summary recorded before can never match afterwards, whatever the clock
// granularity of directory timestamps.
func (s *Spool) bumpToken() error {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	ns := int64(binary.LittleEndian.Uint64(b[:]) % (1 << 62))
	t := time.Unix(0, ns)
	return os.Chtimes(filepath.Join(s.dir, captureLockFile), t, t)
}

func (s *Spool) token() (int64, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(s.dir, captureLockFile), &st); err != nil {
		return 0, err
	}
	return fsutil.SysMtimeNS(&st), nil
}

// SummaryUsage is the usage and limits recorded by the last lock holder's
// summary, read without the lock (false when there is no summary to
// trust): for a writer that does not take the lock, such as capture's
// intake-first hook, which warns from it when usage nears a limit. The
// usage excludes the intake.
func (s *Spool) SummaryUsage() (Usage, Limits, bool) {
	sr, ok := s.readSummaryUnlocked()
	if !ok {
		return Usage{}, Limits{}, false
	}
	return sr.Usage, sr.Limits, true
}
