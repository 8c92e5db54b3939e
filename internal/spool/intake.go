package spool

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// The intake is how a hook that cannot take the spool lock promptly still
// keeps its event: it durably writes one framed file of its own into
// intake/ (temporary file under an exclusive flock, fsync, hard link to a
// unique name, directory fsync) without the spool lock, and exits. The next
// lock holder admits intake files in receipt order (their names sort by
// receipt time) before its own event, under the same limits, claims,
// sequence and recovery rules as a record it made itself, and removes each
// file after its records are durable. Intake files count against the spool's
// record and byte limits from the moment they exist (recovery counts them).
//
// Names: intake/<receipt ns:019d>-<pid>-<rand 8 hex>-<file size>.in. A
// temporary intake file is held under an exclusive flock by its writer, so
// a lock holder can tell an active writer (skip it) from a dead one (its
// fully written frame is completed, anything else is quarantined).
const (
	intakeDir  = "intake"
	typeIntake = "intake"
	// MaxIntakeFiles bounds the intake backlog; a hook that finds it full
	// waits for the spool lock instead.
	MaxIntakeFiles = 1024
	// intakeTempGrace is how old an unlocked intake temporary must be
	// before a lock holder treats its writer as dead.
	intakeTempGrace = 10 * time.Second
	// MaxIntakeBytes bounds one intake file.
	MaxIntakeBytes = maxEnvelopeBytes
)

var (
	// ErrBusy: the spool lock is held by another process (TryBegin).
	ErrBusy = errors.New("spool lock is busy")
	// ErrIntakeFull: the intake backlog or the spool's limits leave no
	// room for another intake file.
	ErrIntakeFull = errors.New("spool intake is full")
)

// IntakeFile is one admitted-to-be intake file.
type IntakeFile struct {
	Name       string
	ReceivedAt time.Time
	Data       []byte
	// Malformed is true for a file whose frame does not verify (torn,
	// tampered): Data is then its raw bytes as read (nil when unreadable)
	// and the caller quarantines it (QuarantineIntake), naming its loss.
	Malformed bool
}

type intakeEntry struct {
	name string
	ns   int64
	size int64
}

func intakeName(ns int64, pid int, rnd string, size int64) string {
	return fmt.Sprintf("%019d-%d-%s-%d.in", ns, pid, rnd, size)
}

func parseIntakeName(n string) (intakeEntry, bool) {
	base, ok := strings.CutSuffix(n, ".in")
	if !ok {
		return intakeEntry{}, false
	}
	parts := strings.Split(base, "-")
	if len(parts) != 4 || len(parts[0]) != 19 || len(parts[2]) != 8 || !isHex(parts[2]) {
		return intakeEntry{}, false
	}
	ns, ok1 := parseDecimal(parts[0])
	_, ok2 := parseDecimal(parts[1])
	size, ok3 := parseDecimal(parts[3])
	if !ok1 || !ok2 || !ok3 || size == 0 || size > MaxIntakeBytes+maxHeaderBytes || ns > 1<<62 {
		return intakeEntry{}, false
	}
	return intakeEntry{name: n, ns: int64(ns), size: int64(size)}, true
}

// intakeKey is the frame key of an intake file: its name without the size
// and suffix, so the content names its own destination.
func intakeKey(ns int64, pid int, rnd string) string {
	return fmt.Sprintf("%019d-%d-%s", ns, pid, rnd)
}

// ensureIntakeDir creates the private intake directory on first use (a spool
// created before the intake existed has none) and checks its authority.
func (s *Spool) ensureIntakeDir() (string, error) {
	dir := filepath.Join(s.dir, intakeDir)
	if err := fsutil.CheckPrivateDir(dir); err == nil {
		return dir, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w: %v", ErrUnsafeAuthority, err)
	}
	if err := os.Mkdir(dir, fsutil.DirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("create intake: %w", err)
	} else if err == nil {
		// Mkdir applies the umask; a fresh private directory must be 0700.
		if err := os.Chmod(dir, fsutil.DirMode); err != nil {
			return "", err
		}
		if err := s.syncDir(s.dir); err != nil {
			return "", err
		}
	}
	if err := fsutil.CheckPrivateDir(dir); err != nil {
		return "", fmt.Errorf("%w: %v", ErrUnsafeAuthority, err)
	}
	return dir, nil
}

// WriteIntake durably writes data (a caller-encoded record of one hook
// invocation) as a new intake file without taking the spool lock, and
// returns its name. It refuses with ErrIntakeFull when the backlog holds
// MaxIntakeFiles files or when the spool's last recorded usage plus the
// backlog leaves no room under the ordinary (non-headroom) limits.
func (s *Spool) WriteIntake(data []byte, receivedAt time.Time) (string, error) {
	return s.WriteIntakeAfter(data, receivedAt, nil)
}

// WriteIntakeAfter is WriteIntake that runs before (when set) concurrently
// with writing and syncing the intake file and installs the file only
// after before succeeded: e.g. the staging directory's sync
// (Staging.Sync), so that the record never becomes durable before the
// blobs it names while the two syncs overlap. An error from before fails
// the write and leaves no intake file.
func (s *Spool) WriteIntakeAfter(data []byte, receivedAt time.Time, before func() error) (string, error) {
	if s.readOnly {
		return "", ErrReadOnly
	}
	if len(data) == 0 || len(data) > MaxIntakeBytes {
		return "", fmt.Errorf("intake record of %d bytes is outside 1..%d", len(data), MaxIntakeBytes)
	}
	dir, err := s.ensureIntakeDir()
	if err != nil {
		return "", err
	}
	// Writers count and claim their place one at a time (a short flock on
	// the intake directory, held until the temporary file exists and is
	// counted by the next writer's listing), so concurrent hooks cannot
	// each find the same last free record and together run the spool past
	// its limit.
	dh, err := os.Open(dir)
	if err != nil {
		return "", fmt.Errorf("open intake: %w", err)
	}
	defer dh.Close()
	if err := syscall.Flock(int(dh.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock intake: %w", err)
	}
	claimed := false
	defer func() {
		if !claimed {
			syscall.Flock(int(dh.Fd()), syscall.LOCK_UN)
		}
	}()
	budget := MaxIntakeFiles + 64
	names, err := listBounded(dir, &budget)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrIntakeFull, err)
	}
	var backlog Usage
	for _, n := range names {
		if e, ok := parseIntakeName(n); ok {
			backlog.Records++
			backlog.Bytes += e.size
		} else {
			backlog.Records++ // a temporary or foreign file: one record at least
		}
	}
	if backlog.Records >= MaxIntakeFiles {
		return "", fmt.Errorf("%w: %d files waiting for admission", ErrIntakeFull, backlog.Records)
	}
	ns := receivedAt.UnixNano()
	rnd := randomHex(4)
	pid := os.Getpid()
	// The frame header's length field makes the size depend on itself only
	// through the key; compute it once.
	frame := encodeFrame(typeIntake, intakeKey(ns, pid, rnd), data)
	size := int64(len(frame))
	if ix, ok := s.readSummaryUnlocked(); ok {
		use := Usage{ix.Usage.Records + backlog.Records, ix.Usage.Bytes + backlog.Bytes}
		if err := admit(ix.Limits, use, Usage{1, size}, false); err != nil {
			return "", fmt.Errorf("%w: %w", ErrIntakeFull, err)
		}
	} else if s.summaryPath != "" {
		// A summary is kept, but none of this boot says what the spool
		// holds (no lock holder wrote one yet): nothing would bound this
		// write, so the hook takes the lock, whose holder counts the spool
		// and writes the summary.
		return "", fmt.Errorf("%w: no spool usage recorded in this boot yet", ErrIntakeFull)
	}
	if err := s.injected("intake"); err != nil {
		return "", err
	}
	var beforeErr chan error
	if before != nil {
		beforeErr = make(chan error, 1)
		go func() { beforeErr <- before() }()
	}
	wait := func() error {
		if beforeErr == nil {
			return nil
		}
		err := <-beforeErr
		beforeErr = nil
		return err
	}
	defer wait() // every return waits for it
	tmp := filepath.Join(dir, fsutil.TempPrefix+randomHex(8))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, fsutil.FileMode)
	if err != nil {
		return "", fmt.Errorf("create intake file: %w", err)
	}
	// The temporary file is this write's place in the count: let the next
	// writer list it.
	claimed = true
	syscall.Flock(int(dh.Fd()), syscall.LOCK_UN)
	defer f.Close() // releases the writer's flock last
	// Blocking: a lock holder that looks at a young temporary only holds
	// its flock for a moment (see recoverIntakeTemp).
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("lock intake file: %w", err)
	}
	if _, err := f.Write(frame); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("write intake file: %w", err)
	}
	s.fail("intake.temp-written")
	if !s.noSync {
		if err := f.Sync(); err != nil {
			os.Remove(tmp)
			return "", fmt.Errorf("sync intake file: %w", err)
		}
	}
	s.fail("intake.temp-synced")
	if err := wait(); err != nil {
		os.Remove(tmp)
		return "", err
	}
	name := intakeName(ns, pid, rnd, size)
	if err := os.Link(tmp, filepath.Join(dir, name)); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("install intake file: %w", err)
	}
	s.fail("intake.linked")
	if err := os.Remove(tmp); err != nil {
		return "", fmt.Errorf("remove temporary intake file: %w", err)
	}
	if err := s.syncDir(dir); err != nil {
		return "", err
	}
	return name, nil
}

// countIntakeDir lists the intake directory under the lock and counts
// every file in it in st's usage.
func (s *Spool) countIntakeDir(st *state, budget *int) error {
	es, other, sizes, err := s.listIntake(budget)
	if err != nil {
		return err
	}
	for _, e := range es {
		st.countIntake(e.name, e.size)
	}
	for i, n := range other {
		st.countIntake(n, sizes[i])
	}
	return s.countStagedDir(st, budget)
}

// listIntake lists the intake directory: parsed entries in receipt order,
// and the other names (temporaries, foreign files) with their sizes.
func (s *Spool) listIntake(budget *int) ([]intakeEntry, []string, []int64, error) {
	dir := filepath.Join(s.dir, intakeDir)
	names, err := listBounded(dir, budget)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, nil, nil
		}
		return nil, nil, nil, err
	}
	var es []intakeEntry
	var other []string
	var sizes []int64
	for _, n := range names {
		if e, ok := parseIntakeName(n); ok {
			es = append(es, e)
			continue
		}
		var size int64
		if fi, err := os.Lstat(filepath.Join(dir, n)); err == nil {
			size = fi.Size()
		}
		other = append(other, n)
		sizes = append(sizes, size)
	}
	slices.SortFunc(es, func(a, b intakeEntry) int { return strings.Compare(a.name, b.name) })
	return es, other, sizes, nil
}

// Intake returns up to max intake files in receipt order, under the held
// lock. A temporary file whose writer is gone is completed when its frame
// decodes (its writer wrote and synced it) and quarantined otherwise; a
// temporary file still locked by its writer is left alone (a later holder
// admits it). A file whose frame does not decode or does not match its name
// is quarantined. Nothing is removed: DoneIntake does that after the caller
// made the records durable.
func (ss *Tx) Intake(max int) ([]IntakeFile, error) {
	if err := ss.held(); err != nil {
		return nil, err
	}
	s, st := ss.s, ss.g.st
	dir := filepath.Join(s.dir, intakeDir)
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, s.reclaimStaged(st) // no record waits that could name a staged blob
	}
	if err := fsutil.CheckPrivateDir(dir); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsafeAuthority, err)
	}
	budget := MaxIntakeFiles*2 + 256
	es, other, sizes, err := s.listIntake(&budget)
	if err != nil {
		return nil, err
	}
	// Files written since the acquisition count from now on.
	for _, e := range es {
		st.countIntake(e.name, e.size)
	}
	for i, n := range other {
		st.countIntake(n, sizes[i])
	}
	if len(es) == 0 && len(other) == 0 {
		// No record waits that could name a staged blob.
		if err := s.reclaimStaged(st); err != nil {
			return nil, err
		}
	}
	completed := false
	for _, n := range other {
		if !strings.HasPrefix(n, fsutil.TempPrefix) {
			if err := s.quarantineIntake(st, n); err != nil {
				return nil, err
			}
			continue
		}
		done, err := s.recoverIntakeTemp(st, n)
		if err != nil {
			return nil, err
		}
		completed = completed || done
	}
	if completed {
		if es, _, _, err = s.listIntake(&budget); err != nil {
			return nil, err
		}
	}
	var out []IntakeFile
	for _, e := range es {
		if len(out) >= max {
			break
		}
		b, err := fsutil.ReadFileNoFollow(filepath.Join(dir, e.name), MaxIntakeBytes+maxHeaderBytes)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil {
			var f frame
			if f, err = decodeFrame(b); err == nil {
				if f.typ != typeIntake || int64(len(b)) != e.size || !strings.HasPrefix(e.name, f.key+"-") {
					err = errMalformed
				} else {
					out = append(out, IntakeFile{Name: e.name, ReceivedAt: time.Unix(0, e.ns).UTC(), Data: f.body})
					continue
				}
			}
		}
		// Returned for the caller to quarantine: it names the loss with
		// what can still be read of it.
		out = append(out, IntakeFile{Name: e.name, ReceivedAt: time.Unix(0, e.ns).UTC(), Data: b, Malformed: true})
	}
	return out, nil
}

// PeekIntake returns the bodies of the installed intake files of the spool
// in dir, read without the lock (a reader that only looks: a file admitted
// meanwhile is skipped, one whose frame does not decode is left out).
func PeekIntake(dir string) ([][]byte, error) {
	s := &Spool{dir: dir}
	budget := MaxIntakeFiles*2 + 256
	es, _, _, err := s.listIntake(&budget)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for _, e := range es {
		b, err := fsutil.ReadFileNoFollow(filepath.Join(dir, intakeDir, e.name), MaxIntakeBytes+maxHeaderBytes)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if f, err := decodeFrame(b); err == nil && f.typ == typeIntake {
			out = append(out, f.body)
		}
	}
	return out, nil
}

// WaitingIntake counts the installed intake files, without the lock (a
// hint: the lock holder decides).
func (s *Spool) WaitingIntake() (int, error) {
	budget := MaxIntakeFiles*2 + 256
	es, _, _, err := s.listIntake(&budget)
	return len(es), err
}

// IntakeBacklog returns how many intake files wait for admission.
func (ss *Tx) IntakeBacklog() (int, error) {
	if err := ss.held(); err != nil {
		return 0, err
	}
	budget := MaxIntakeFiles*2 + 256
	es, other, _, err := ss.s.listIntake(&budget)
	return len(es) + len(other), err
}

// recoverIntakeTemp handles a temporary intake file under the spool lock: a
// file still flocked by its writer is active and left alone; a dead
// writer's fully written frame is installed under its name, anything else
// is quarantined. It reports whether it installed a file.
func (s *Spool) recoverIntakeTemp(st *state, name string) (bool, error) {
	dir := filepath.Join(s.dir, intakeDir)
	path := filepath.Join(dir, name)
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false, nil // gone (its writer finished) or not a file we can read: next holder
	}
	if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		syscall.Close(fd)
		return false, nil // an active writer
	}
	defer syscall.Close(fd)
	// A writer takes its flock just after creating the file: a young
	// unlocked temporary may be one in between, so only one older than the
	// grace period is a dead writer's.
	var fst syscall.Stat_t
	if err := syscall.Fstat(fd, &fst); err != nil || time.Since(time.Unix(0, fsutil.SysMtimeNS(&fst))) < s.intakeGrace {
		return false, nil
	}
	b, err := fsutil.ReadFileNoFollow(path, MaxIntakeBytes+maxHeaderBytes)
	if err != nil {
		return false, s.quarantineIntake(st, name)
	}
	f, err := decodeFrame(b)
	parts := strings.Split(f.key, "-")
	if err != nil || f.typ != typeIntake || len(parts) != 3 {
		return false, s.quarantineIntake(st, name)
	}
	ns, ok1 := parseDecimal(parts[0])
	pid, ok2 := parseDecimal(parts[1])
	if !ok1 || !ok2 || len(parts[0]) != 19 || len(parts[2]) != 8 || !isHex(parts[2]) {
		return false, s.quarantineIntake(st, name)
	}
	target := intakeName(int64(ns), int(pid), parts[2], int64(len(b)))
	if err := os.Link(path, filepath.Join(dir, target)); err != nil && !errors.Is(err, fs.ErrExist) {
		return false, fmt.Errorf("complete intake %s: %w", name, err)
	}
	if err := os.Remove(path); err != nil {
		return false, err
	}
	st.report.Completed++
	st.uncountIntake(name, true)
	st.countIntake(target, int64(len(b)))
	return true, s.syncDir(dir)
}

func (s *Spool) quarantineIntake(st *state, name string) error {
	return s.quarantine(st, intakeDir, name)
}

// DoneIntake removes an admitted intake file (its records are durable in
// the outbox now) and syncs the directory.
func (ss *Tx) DoneIntake(name string) error {
	if err := ss.held(); err != nil {
		return err
	}
	e, ok := parseIntakeName(name)
	if !ok {
		return fmt.Errorf("intake %q: %w", name, ErrNotFound)
	}
	dir := filepath.Join(ss.s.dir, intakeDir)
	if err := os.Remove(filepath.Join(dir, e.name)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("remove admitted intake %s: %w", name, err)
	}
	ss.g.st.uncountIntake(e.name, true)
	ss.s.fail("intake.admitted")
	return ss.s.syncDir(dir)
}

// QuarantineIntake moves an intake file the caller could not decode into
// the quarantine (never deleted automatically).
func (ss *Tx) QuarantineIntake(name string) error {
	if err := ss.held(); err != nil {
		return err
	}
	if _, ok := parseIntakeName(name); !ok {
		return fmt.Errorf("intake %q: %w", name, ErrNotFound)
	}
	return ss.s.quarantineIntake(ss.g.st, name)
}

// TryBegin is Begin that waits at most wait for the spool lock and fails
// with an error wrapping ErrBusy when another process holds it longer.
func (s *Spool) TryBegin(ctx context.Context, wait time.Duration) (*Tx, error) {
	g, err := s.acquireFast(ctx, wait)
	if err != nil {
		if errors.Is(err, ErrLockTimeout) {
			return nil, fmt.Errorf("%w: %w", ErrBusy, err)
		}
		return nil, err
	}
	return &Tx{s: s, g: g}, nil
}
