// Package spool is the private, durable, bounded local store where captured
// events live before anything leaves the machine. Directories are 0700,
// files 0600, every record is one file written atomically, every bound ends
// in an explicit refusal or gap, and recovery after a crash loses nothing and
// quarantines what it cannot trust. The on-disk format is described in
// docs/spool.md.
package spool

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// Layout names inside a spool root.
const (
	commitFile      = "format.json"
	spoolLockFile   = "spool.lock"
	captureLockFile = "capture.lock"
	scopeFile       = "scope.json"
	limitsFile      = "limits.json"
	cursorFile      = "cursor.json"
	outboxDir       = "outbox"
	acksDir         = "acks"
	artifactsDir    = "artifacts"
	compactDir      = "compact"
	quarantineDir   = "quarantine"
)

// operationalDirs are the private subdirectories of every spool.
var operationalDirs = [...]string{outboxDir, acksDir, artifactsDir, compactDir, quarantineDir}

// rootFiles are the fixed files of the root, in the order they are counted.
var rootFiles = [...]string{spoolLockFile, captureLockFile, scopeFile, limitsFile, cursorFile, commitFile}

// FormatName and FormatVersion identify the managed occurrence format the
// commit declares.
const (
	FormatName    = "agentscm-managed-occurrence"
	FormatVersion = 4
)

// Sizes bounding what is read back from disk.
const (
	maxSmallFile      = 64 << 10  // commit, scope, limits, cursor, acks
	maxEnvelopeBytes  = 256 << 10 // one envelope frame (bodies live in artifacts)
	maxIndexBytes     = 64 << 20  // one compaction index
	FailpointEnv      = "AGENTSCM_SPOOL_FAILPOINT"
	lockPollInitial   = 200 * time.Microsecond
	lockPollMax       = 10 * time.Millisecond
	defaultLockWait   = 10 * time.Second
	quarantineNameMax = 120
)

// ErrLockTimeout: the spool lock stayed held for the whole wait.
var ErrLockTimeout = errors.New("still held by another process")

// Sentinel errors callers branch on.
var (
	// ErrNotSpool: the directory has no valid managed occurrence format v4
	// commit (never initialised, partially initialised, or another format).
	ErrNotSpool = errors.New("not an agentscm spool (no valid managed occurrence format v4 commit)")
	// ErrIdentityChanged: the root or a permanent lock file is not the one
	// the commit binds (replaced, restored or recreated).
	ErrIdentityChanged = errors.New("spool identity changed")
	// ErrUnsafeAuthority: ownership or modes are not private to the
	// effective user; agentscm never repairs that.
	ErrUnsafeAuthority = errors.New("spool authority is unsafe")
	// ErrBelowFloor: configured limits are below what the spool needs.
	ErrBelowFloor = errors.New("spool limits below the floor")
	// ErrQuota: an admission does not fit the configured limits.
	ErrQuota = errors.New("spool quota exceeded")
	// ErrCapturePaused: ordinary capture is paused under quota pressure; a
	// capture_interrupted gap records it.
	ErrCapturePaused = errors.New("capture paused")
	// ErrGapNotRecorded: a record was refused and the capture_interrupted
	// gap that should record it could not be written either (the disk is
	// full or failing); the caller must keep the loss elsewhere.
	ErrGapNotRecorded = errors.New("the capture_interrupted gap was not recorded")
	// ErrMalformedAck: an acknowledgement marker is malformed or
	// unreadable; delivery and compaction stop for the spool.
	ErrMalformedAck = errors.New("malformed or unreadable acknowledgement")
	// ErrReplayIndexFull: compaction's finite replay index is full.
	ErrReplayIndexFull = errors.New("compaction replay index is full")
	// ErrScanBound: the spool holds more physical entries than recovery scans.
	ErrScanBound = errors.New("spool exceeds the recovery scan bound")
	// ErrDigestMismatch: an acknowledgement names a different envelope.
	ErrDigestMismatch = errors.New("envelope digest mismatch")
	// ErrNotFound: the named envelope or quarantine entry does not exist.
	ErrNotFound = errors.New("not found")
	// ErrReadOnly: the spool was opened for read-only inspection.
	ErrReadOnly = errors.New("spool opened read-only")
)

// FileID is a file's device and inode.
type FileID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

func fileID(fi fs.FileInfo) FileID {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return FileID{}
	}
	return FileID{Dev: uint64(st.Dev), Ino: st.Ino}
}

// commitRecord is the body of the managed occurrence format v4 commit.
type commitRecord struct {
	Format      string    `json:"format"`
	Version     int       `json:"version"`
	SpoolID     string    `json:"spool_id"`
	Root        FileID    `json:"root"`
	SpoolLock   FileID    `json:"spool_lock"`
	CaptureLock FileID    `json:"capture_lock"`
	CreatedAt   time.Time `json:"created_at"`
}

type scopeRecord struct {
	SpoolID       string    `json:"spool_id"`
	ActionCapable bool      `json:"action_capable"`
	CreatedAt     time.Time `json:"created_at"`
	// Lineage binds the spool for life to one Hub, repository and worktree
	// namespace; nil for a spool created without one.
	Lineage *Lineage `json:"lineage,omitempty"`
}

// Lineage is the canonical Hub, repository and worktree namespace a spool
// belongs to.
type Lineage struct {
	Hub        string `json:"hub"`
	Repository string `json:"repository"`
	WorktreeID string `json:"worktree_id"`
}

// ErrLineageMismatch reports reuse of a spool for another Hub, repository or
// worktree than the one it was created for.
var ErrLineageMismatch = errors.New("spool belongs to another Hub, repository or worktree")

// Lineage returns the lineage the spool was created for, or nil.
func (s *Spool) Lineage() (*Lineage, error) {
	b, err := fsutil.ReadFileNoFollow(filepath.Join(s.dir, scopeFile), maxSmallFile)
	if err != nil {
		return nil, fmt.Errorf("%w: read scope: %v", ErrDamaged, err)
	}
	f, err := decodeFrame(b)
	if err != nil || f.typ != typeScope {
		return nil, fmt.Errorf("%w: scope file does not decode", ErrDamaged)
	}
	var sc scopeRecord
	if err := strictJSON(f.body, &sc); err != nil {
		return nil, fmt.Errorf("%w: scope: %v", ErrDamaged, err)
	}
	return sc.Lineage, nil
}

// checkLineage refuses a spool whose recorded lineage is not want.
func (s *Spool) checkLineage(want Lineage) error {
	got, err := s.Lineage()
	if err != nil {
		return err
	}
	if got == nil || *got != want {
		desc := "no lineage"
		if got != nil {
			desc = fmt.Sprintf("%s on %s (worktree %s)", got.Repository, got.Hub, got.WorktreeID)
		}
		return fmt.Errorf("%w: %s was created for %s, not %s on %s (worktree %s)", ErrLineageMismatch, s.dir, desc, want.Repository, want.Hub, want.WorktreeID)
	}
	return nil
}

// Spool is an opened spool. Methods that change it take the spool lock and
// revalidate the committed identities each time.
type Spool struct {
	dir       string
	readOnly  bool
	commit    commitRecord
	commitSum string
	failpoint string
	noSync    bool // tests only: skip fsync while populating large spools
	lockWait  time.Duration
	// summaryPath is where the hook summary lives (summary.go), or "".
	summaryPath string
	// intakeGrace: see intakeTempGrace (tests shorten it).
	intakeGrace time.Duration
	// hints caches the unlocked summary read and the boot id (summary.go).
	hints summaryHints
}

// Dir returns the spool directory.
func (s *Spool) Dir() string { return s.dir }

// ID returns the random identity written into the commit at initialisation.
func (s *Spool) ID() string { return s.commit.SpoolID }

// ObservationScope returns the spool's random persisted observation scope:
// a digest of the random spool id recorded in the commit and scope.json, so
// it lives exactly as long as the spool identity and never reveals the id.
// Action starts carry it with their spool-local observation order; orders
// are comparable only inside one scope.
func (s *Spool) ObservationScope() string {
	sum := sha256.Sum256([]byte("agentscm-observation-scope-v1\x00" + s.commit.SpoolID))
	return "obs_" + hex.EncodeToString(sum[:16])
}

func checkAbs(dir string) error {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return fmt.Errorf("spool path %q is not an absolute clean path", dir)
	}
	return nil
}

// Init creates a spool at dir with the default limits, or opens it when it
// is already committed.
func Init(dir string) (*Spool, error) { return InitWith(context.Background(), dir, Config{}) }

// Config is the operator configuration of a new spool.
type Config struct {
	// Limits are the spool's bounds; zero fields take the defaults.
	Limits Limits
	// MetadataOnly declares a spool that will never hold actions; it may be
	// configured below the action-capable floor.
	MetadataOnly bool
	// Lineage, when set, is recorded in a new spool and required of an
	// existing one.
	Lineage *Lineage
}

// InitWith creates a spool at dir (absolute): it admits the entire fixed
// layout against cfg's limits, writes it, and writes the managed occurrence
// format v4 commit last. A committed spool is opened as it is. A non-empty
// directory without a valid commit is refused without changing a byte.
func InitWith(ctx context.Context, dir string, cfg Config) (*Spool, error) {
	if err := checkAbs(dir); err != nil {
		return nil, err
	}
	lim := cfg.Limits.withDefaults()
	if err := lim.Validate(!cfg.MetadataOnly); err != nil {
		return nil, err
	}
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := fsutil.MkdirPrivate(dir); err != nil {
			return nil, fmt.Errorf("create spool: %w", err)
		}
	}
	if err := fsutil.CheckPrivateDir(dir); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsafeAuthority, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, commitFile)); err == nil {
		return openWithLineage(dir, cfg.Lineage)
	}
	names, err := readNames(dir, 16)
	if err != nil {
		return nil, err
	}
	// Only another initialiser's temporary lock file: give it a moment to
	// install the lock (a crashed one leaves the directory refused).
	for i := 0; i < 50 && len(names) > 0 && allTemporary(names); i++ {
		time.Sleep(2 * time.Millisecond)
		if names, err = readNames(dir, 16); err != nil {
			return nil, err
		}
	}
	fp := os.Getenv(FailpointEnv)
	if len(names) > 0 {
		if slices.Contains(names, spoolLockFile) {
			// Another process may be initialising: wait for its lock,
			// then look for its commit.
			if l, err := lockPath(ctx, filepath.Join(dir, spoolLockFile), defaultLockWait); err == nil {
				l.Close()
				if _, err := os.Lstat(filepath.Join(dir, commitFile)); err == nil {
					return openWithLineage(dir, cfg.Lineage)
				}
			}
		}
		return nil, fmt.Errorf("%s: %w: the directory is not empty and has no commit; it is refused without repair or migration", dir, ErrNotSpool)
	}
	// Admit the entire fixed layout before writing any of it.
	now := time.Now().UTC()
	id := randomHex(16)
	s := &Spool{dir: dir, failpoint: fp, lockWait: defaultLockWait}
	fixed := s.fixedLayout(id, lim, !cfg.MetadataOnly, cfg.Lineage, now)
	var need int64
	for _, f := range fixed {
		need += int64(len(f.data))
	}
	commitEstimate := int64(len(encodeFrame(typeCommit, "v4", mustJSON(commitRecord{Format: FormatName, Version: FormatVersion, SpoolID: id, Root: FileID{1 << 62, 1 << 62}, SpoolLock: FileID{1 << 62, 1 << 62}, CaptureLock: FileID{1 << 62, 1 << 62}, CreatedAt: now}))))
	records := int64(len(fixed)) + 3 // two lock files and the commit
	if records+HeadroomRecords > lim.Records || need+commitEstimate+HeadroomBytes > lim.Bytes {
		return nil, fmt.Errorf("%w: the fixed layout needs %d records and %d bytes plus headroom", ErrBelowFloor, records, need+commitEstimate)
	}

	// The spool lock appears under its name already locked (created and
	// locked as a temporary file, then hard-linked), so a concurrent
	// initialiser that finds it waits for this one to commit or die.
	tmpLock := filepath.Join(dir, fsutil.TempPrefix+randomHex(8))
	lf, err := os.OpenFile(tmpLock, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, fsutil.FileMode)
	if err != nil {
		return nil, fmt.Errorf("create spool lock: %w", err)
	}
	defer lf.Close()
	if err := flockCtx(ctx, lf, defaultLockWait); err != nil {
		os.Remove(tmpLock)
		return nil, err
	}
	err = os.Link(tmpLock, filepath.Join(dir, spoolLockFile))
	os.Remove(tmpLock)
	if err != nil {
		lf.Close()
		if errors.Is(err, fs.ErrExist) {
			return InitWith(ctx, dir, cfg) // lost a race with another initialiser
		}
		return nil, fmt.Errorf("create spool lock: %w", err)
	}
	s.fail("init.lock-created")
	cf, err := os.OpenFile(filepath.Join(dir, captureLockFile), os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, fsutil.FileMode)
	if err != nil {
		return nil, fmt.Errorf("create capture lock: %w", err)
	}
	cf.Close()
	for _, d := range operationalDirs {
		if err := os.Mkdir(filepath.Join(dir, d), fsutil.DirMode); err != nil {
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
		// Mkdir applies the umask; a fresh private directory must be 0700.
		if err := os.Chmod(filepath.Join(dir, d), fsutil.DirMode); err != nil {
			return nil, err
		}
	}
	if err := s.syncDir(dir); err != nil {
		return nil, err
	}
	s.fail("init.dirs-created")
	for _, f := range fixed {
		if err := s.writeNew(filepath.Join(dir, f.dir), f.name, f.data, "init."+f.fp); err != nil {
			return nil, fmt.Errorf("initialise spool: %w", err)
		}
	}
	s.fail("init.before-commit")
	c := commitRecord{Format: FormatName, Version: FormatVersion, SpoolID: id, CreatedAt: now}
	for _, x := range []struct {
		name string
		id   *FileID
	}{{"", &c.Root}, {spoolLockFile, &c.SpoolLock}, {captureLockFile, &c.CaptureLock}} {
		fi, err := os.Lstat(filepath.Join(dir, x.name))
		if err != nil {
			return nil, err
		}
		*x.id = fileID(fi)
	}
	cb := encodeFrame(typeCommit, "v4", mustJSON(c))
	if err := s.writeNew(dir, commitFile, cb, "init.commit"); err != nil {
		return nil, fmt.Errorf("write format commit: %w", err)
	}
	s.fail("init.committed")
	lf.Close() // release the lock before the ordinary open takes it
	return openWithLineage(dir, cfg.Lineage)
}

// openWithLineage opens a committed spool and, when want is set, refuses it
// unless it was created for that lineage.
func openWithLineage(dir string, want *Lineage) (*Spool, error) {
	s, err := Open(dir)
	if err != nil || want == nil {
		return s, err
	}
	if err := s.checkLineage(*want); err != nil {
		return nil, err
	}
	return s, nil
}

func allTemporary(names []string) bool {
	for _, n := range names {
		if !strings.HasPrefix(n, fsutil.TempPrefix) {
			return false
		}
	}
	return true
}

type fixedFile struct {
	dir, name, fp string
	data          []byte
}

func (s *Spool) fixedLayout(id string, lim Limits, actionCapable bool, lin *Lineage, now time.Time) []fixedFile {
	return []fixedFile{
		{"", scopeFile, "scope", encodeFrame(typeScope, "scope", mustJSON(scopeRecord{SpoolID: id, ActionCapable: actionCapable, CreatedAt: now, Lineage: lin}))},
		{"", limitsFile, "limits", encodeFrame(typeLimits, "limits", mustJSON(lim))},
		{"", cursorFile, "cursor", encodeFrame(typeCursor, "cursor", mustJSON(cursorRecord{}))},
		{compactDir, indexName(0, 0, false), "index", encodeFrame(typeIndex, "0-0", mustJSON(compactIndex{}))},
	}
}

// Open opens a committed spool for capture, delivery and maintenance. It
// checks authority (owner and modes of the root, operational directories
// and retained fixed files), revalidates the committed identities under the
// spool lock and runs recovery.
func Open(dir string) (*Spool, error) { return OpenContext(context.Background(), dir) }

// OpenContext is Open bounded by ctx.
func OpenContext(ctx context.Context, dir string) (*Spool, error) {
	s, err := openCommitted(dir, false)
	if err != nil {
		return nil, err
	}
	if err := s.checkRetainedFiles(); err != nil {
		return nil, err
	}
	g, err := s.acquire(ctx)
	if err != nil {
		return nil, err
	}
	g.release()
	return s, nil
}

// OpenAppender opens a committed spool for the hook path without the
// open-time recovery scan: every later operation revalidates identities and
// recovers under its own lock acquisition, so one hook pays one scan per
// operation instead of one more at open.
func OpenAppender(dir string) (*Spool, error) {
	s, err := openCommitted(dir, false)
	if err != nil {
		return nil, err
	}
	if err := s.checkRetainedFiles(); err != nil {
		return nil, err
	}
	return s, nil
}

// OpenReadOnly opens a spool for read-only inspection: it needs a valid
// commit but neither takes the lock nor requires safe authority, and every
// method that would change the spool returns ErrReadOnly.
func OpenReadOnly(dir string) (*Spool, error) { return openCommitted(dir, true) }

func openCommitted(dir string, readOnly bool) (*Spool, error) {
	if err := checkAbs(dir); err != nil {
		return nil, err
	}
	c, sum, err := readCommit(dir)
	if err != nil {
		return nil, err
	}
	if !readOnly {
		if err := fsutil.CheckPrivateDir(dir); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnsafeAuthority, err)
		}
	}
	return &Spool{dir: dir, readOnly: readOnly, commit: c, commitSum: sum, failpoint: os.Getenv(FailpointEnv), lockWait: defaultLockWait, intakeGrace: intakeTempGrace}, nil
}

func readCommit(dir string) (commitRecord, string, error) {
	var c commitRecord
	b, err := fsutil.ReadFileNoFollow(filepath.Join(dir, commitFile), maxSmallFile)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			names, _ := readNames(dir, 1)
			if len(names) > 0 {
				return c, "", fmt.Errorf("%s: %w: the directory is not empty (a partial initialisation or another format); it is refused without repair or migration", dir, ErrNotSpool)
			}
			return c, "", fmt.Errorf("%s: %w: not initialised", dir, ErrNotSpool)
		}
		return c, "", fmt.Errorf("%s: %w: read commit: %v", dir, ErrNotSpool, err)
	}
	f, err := decodeFrame(b)
	if err != nil || f.typ != typeCommit || f.key != "v4" {
		return c, "", fmt.Errorf("%s: %w: the commit does not decode as format v4", dir, ErrNotSpool)
	}
	if err := strictJSON(f.body, &c); err != nil || c.Format != FormatName || c.Version != FormatVersion || c.SpoolID == "" {
		return c, "", fmt.Errorf("%s: %w: the commit is not a managed occurrence format v4 commit", dir, ErrNotSpool)
	}
	return c, f.sum, nil
}

// checkRetainedFiles rejects retained fixed authority/evidence files with
// unsafe ownership or modes (initial open). It never chmods.
func (s *Spool) checkRetainedFiles() error {
	for _, n := range rootFiles {
		if err := checkPrivateFile(filepath.Join(s.dir, n)); err != nil {
			return err
		}
	}
	return nil
}

func checkPrivateFile(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnsafeAuthority, err)
	}
	return checkPrivateInfo(path, fi)
}

func checkPrivateInfo(path string, fi fs.FileInfo) error {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return checkPrivateStat(path, st, os.Geteuid())
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a regular file", ErrUnsafeAuthority, path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%w: %s is owned by uid %d, not the effective user %d", ErrUnsafeAuthority, path, st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%w: %s has mode %04o; it must allow no group or other access", ErrUnsafeAuthority, path, fi.Mode().Perm())
	}
	return nil
}

// checkPrivateStat is checkPrivateInfo on a raw stat result, with the
// effective user id passed in so that a caller checking many files reads it
// once.
func checkPrivateStat(path string, st *syscall.Stat_t, euid int) error {
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return &AuthorityError{Path: path, Problem: "is not a regular file"}
	}
	if int(st.Uid) != euid {
		return &AuthorityError{Path: path, Problem: fmt.Sprintf("is owned by uid %d, not the effective user %d", st.Uid, euid)}
	}
	if perm := fs.FileMode(st.Mode).Perm(); perm&0o077 != 0 {
		return &AuthorityError{Path: path, Problem: fmt.Sprintf("has mode %04o; it must allow no group or other access", perm)}
	}
	if st.Nlink > 1 && !linkedByTemp(path, st) {
		// Another name, possibly outside the spool's private directories,
		// reaches the file: it would outlive compaction and deletion.
		return &AuthorityError{Path: path, Problem: fmt.Sprintf("has %d hard links; a spool file must have exactly one", st.Nlink), Links: true}
	}
	return nil
}

// linkedByTemp reports whether the second link of the file at path (stat
// st) is the temporary name it was installed from (writeNew links the
// temporary file, then removes it): an install in progress, or crash
// debris the next recovery removes, not a foreign link.
func linkedByTemp(path string, st *syscall.Stat_t) bool {
	if st.Nlink != 2 {
		return false
	}
	dir := filepath.Dir(path)
	names, err := readNames(dir, 1<<16)
	if err != nil {
		return false
	}
	for _, n := range names {
		if !strings.HasPrefix(n, fsutil.TempPrefix) {
			continue
		}
		var t syscall.Stat_t
		if syscall.Lstat(filepath.Join(dir, n), &t) == nil && t.Dev == st.Dev && t.Ino == st.Ino {
			return true
		}
	}
	return false
}

// AuthorityError is a spool file or directory whose ownership, mode, type
// or link count the spool refuses; it wraps ErrUnsafeAuthority. Path names
// it, so a health report can say which file and how to fix it.
type AuthorityError struct {
	Path    string
	Problem string
	// Links: the only problem is a link count above one.
	Links bool
}

func (e *AuthorityError) Error() string {
	return fmt.Sprintf("%v: %s %s", ErrUnsafeAuthority, e.Path, e.Problem)
}

// Unwrap makes errors.Is(err, ErrUnsafeAuthority) hold.
func (e *AuthorityError) Unwrap() error { return ErrUnsafeAuthority }

// checkPrivateDirs checks that the spool root, its operational directories
// and its intake and staged-blob directories (optional: created on first
// use) are private
// directories of the effective user. The delivery path (revalidate) and
// the health report call it.
func checkPrivateDirs(dir string) error {
	dirs := []string{dir}
	for _, d := range operationalDirs {
		dirs = append(dirs, filepath.Join(dir, d))
	}
	for i, d := range append(dirs, filepath.Join(dir, intakeDir), filepath.Join(dir, stagedDir)) {
		if err := fsutil.CheckPrivateDir(d); err != nil {
			if i >= len(dirs) && errors.Is(err, fs.ErrNotExist) {
				continue
			}
			msg, ok := strings.CutPrefix(err.Error(), d+" ")
			if !ok {
				msg = "cannot be checked: " + err.Error()
			}
			return &AuthorityError{Path: d, Problem: msg}
		}
	}
	return nil
}

// checkIdentities checks that the root directory and both permanent lock
// files are the ones commit c binds; lock is the spool lock's stat (the held
// lock's own, under the lock).
func checkIdentities(dir string, c commitRecord, lock fs.FileInfo) error {
	if fileID(lock) != c.SpoolLock {
		return fmt.Errorf("%s: %w: the spool lock file was replaced", dir, ErrIdentityChanged)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if fileID(fi) != c.Root {
		return fmt.Errorf("%s: %w: the spool root directory was replaced or recreated", dir, ErrIdentityChanged)
	}
	fi, err = os.Lstat(filepath.Join(dir, captureLockFile))
	if err != nil || fileID(fi) != c.CaptureLock {
		return fmt.Errorf("%s: %w: the managed-capture lock file was replaced", dir, ErrIdentityChanged)
	}
	return nil
}

// guard is a held spool lock with the state recovery found under it.
type guard struct {
	s    *Spool
	lock *os.File
	st   *state
	// tracked: the state keeps the hook summary (acquireFast); release
	// writes it clean.
	tracked bool
}

func (g *guard) release() {
	if g.lock != nil {
		g.finishTracked()
		g.lock.Close()
		g.lock = nil
	}
}

// acquire takes the spool lock (bounded by ctx and the lock wait), then
// revalidates the committed identities and authority and runs recovery.
func (s *Spool) acquire(ctx context.Context) (*guard, error) {
	return s.acquireWait(ctx, s.lockWait)
}

// acquireWait is acquire with an explicit lock wait.
func (s *Spool) acquireWait(ctx context.Context, wait time.Duration) (*guard, error) {
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
	// A full acquisition (compaction, recovery, pruning, open) may change
	// the spool without keeping the hook's summary (it may not know where
	// that is): make every summary untrusted first, so the next hook
	// rebuilds it.
	if err := s.bumpToken(); err != nil {
		g.release()
		return nil, fmt.Errorf("spool summary token: %w", err)
	}
	st, err := s.recoverLocked()
	if err != nil {
		g.release()
		return nil, err
	}
	g.st = st
	return g, nil
}

// lockWith opens the existing spool lock (never creating it) and takes it
// within wait.
func (s *Spool) lockWith(ctx context.Context, wait time.Duration) (*os.File, error) {
	lf, err := os.OpenFile(filepath.Join(s.dir, spoolLockFile), os.O_RDWR|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: open spool lock: %v", ErrIdentityChanged, err)
	}
	if err := flockCtx(ctx, lf, wait); err != nil {
		lf.Close()
		return nil, err
	}
	return lf, nil
}

// revalidate checks, under the lock, that the root directory and both
// permanent lock files are the ones the commit binds, that the commit is the
// one read at open, and that the root and operational directories are
// private to the effective user.
func (s *Spool) revalidate(lf *os.File) error {
	fi, err := lf.Stat()
	if err != nil {
		return err
	}
	if fileID(fi) != s.commit.SpoolLock {
		return fmt.Errorf("%s: %w: the spool lock file was replaced", s.dir, ErrIdentityChanged)
	}
	if err := checkPrivateDirs(s.dir); err != nil {
		return err
	}
	if err := checkIdentities(s.dir, s.commit, fi); err != nil {
		return err
	}
	c, sum, err := readCommit(s.dir)
	if err != nil || sum != s.commitSum || c.SpoolID != s.commit.SpoolID {
		return fmt.Errorf("%s: %w: the format commit changed", s.dir, ErrIdentityChanged)
	}
	return nil
}

// lockPath opens an existing lock file (never creating it) and locks it.
func lockPath(ctx context.Context, path string, wait time.Duration) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := flockCtx(ctx, f, wait); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// flockCtx takes an exclusive flock, polling so that ctx and wait bound it.
func flockCtx(ctx context.Context, f *os.File, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	delay := lockPollInitial
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if err != syscall.EWOULDBLOCK && err != syscall.EINTR {
			return fmt.Errorf("lock spool: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("lock spool: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("lock spool: %w after %s", ErrLockTimeout, wait)
		}
		time.Sleep(delay)
		delay = min(delay*2, lockPollMax)
	}
}

// readNames lists at most max names of dir.
func readNames(dir string, max int) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("read spool: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(max)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read spool: %w", err)
	}
	return names, nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only fixed internal types are encoded
	}
	return b
}

func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b)
}
