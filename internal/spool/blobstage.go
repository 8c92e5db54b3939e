package spool

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/fsutil"
)

// Staged blobs are how a hook that does not take the spool lock (the
// intake) still retains the bytes an event binds, e.g. a dirty checkout's
// working files: it writes each blob it does not find retained into
// intake-blobs/ under its content-addressed artifact name (temporary file,
// fsync, rename, one directory fsync per call) before it writes the intake
// record naming them. Concurrent hooks writing the same bytes write the same
// name with the same content, so the rename is idempotent. The lock holder
// that admits the record admits its blobs (AdmitStaged): each is verified,
// counted against the spool's limits as a new artifact (refused past them,
// never silently) and renamed into artifacts/. Staged files count in the
// usage from the moment a lock holder sees them, like intake files; a
// staged blob no waiting intake record can name (its hook died before
// writing the record, or its bytes were already retained) is removed by the
// next admitting holder once no intake file waits and it is older than the
// intake grace period.
const stagedDir = "intake-blobs"

// ErrBlobMissing: a staged blob an admission names is neither staged nor
// retained, or its staged bytes do not verify (then they are quarantined).
var ErrBlobMissing = errors.New("the staged blob is missing or does not verify")

// stagedKey is a staged file's key in the state's intake accounting (intake
// file names never contain a slash).
func stagedKey(name string) string { return stagedDir + "/" + name }

// artifactFileSize is the size of the artifact file holding n body bytes
// (the frame header's length depends on the body length only).
func artifactFileSize(hexsum string, n int64) int64 {
	return int64(len(encodeFrame(typeArtifact, hexsum, nil))) + n - 1 + int64(len(strconv.FormatInt(n, 10)))
}

type stagedItem struct {
	name  string
	frame []byte
}

// Staging is a content-addressed store that writes without the spool lock
// (StageBlobs); its blobs are retained once a lock holder admits them.
type Staging struct {
	s *Spool
	// deferred: PutBlobs leaves the directory sync to Sync; dirty: a
	// rename waits for it.
	deferred, dirty bool
}

// Staging returns the spool's lock-free blob store (StageBlobs per call).
func (s *Spool) Staging() *Staging { return &Staging{s: s} }

// DeferredStaging is Staging whose calls leave the staging directory's
// fsync to Sync, which the caller runs before anything naming the blobs
// becomes durable (WriteIntakeAfter overlaps it with the intake write).
func (s *Spool) DeferredStaging() *Staging { return &Staging{s: s, deferred: true} }

// PutBlobs stages blobs (StageBlobs; deferred: without the directory sync).
func (g *Staging) PutBlobs(blobs []Blob) ([]event.ArtifactRef, error) {
	refs, wrote, err := g.s.stageBlobs(blobs, !g.deferred)
	g.dirty = g.dirty || wrote
	return refs, err
}

// Pending reports whether a staged name waits for Sync.
func (g *Staging) Pending() bool { return g != nil && g.dirty }

// Sync makes the names of every blob this store staged durable (one fsync
// of the staging directory, none when it staged nothing new).
func (g *Staging) Sync() error {
	if g == nil || !g.dirty {
		return nil
	}
	if err := g.s.syncDir(filepath.Join(g.s.dir, stagedDir)); err != nil {
		return fmt.Errorf("sync staged blobs: %w", err)
	}
	g.dirty = false
	g.s.fail("stage.synced")
	return nil
}

// HasBlob reports, without the lock, whether the spool already holds
// data as an artifact or a staged blob (a staged one gets a fresh
// modification time, so the reclamation grace counts from this use).
func (s *Spool) HasBlob(data []byte) bool {
	sum := sha256.Sum256(data)
	hexsum := hex.EncodeToString(sum[:])
	size := artifactFileSize(hexsum, int64(len(data)))
	name := artifactName(hexsum, size)
	if hasSize(filepath.Join(s.dir, artifactsDir, name), size) {
		return true
	}
	p := filepath.Join(s.dir, stagedDir, name)
	if !hasSize(p, size) {
		return false
	}
	now := time.Now()
	_ = os.Chtimes(p, now, now)
	return true
}

// ArtifactLimit is the spool's per-artifact limit as the last lock holder
// recorded it, else as its limits file says.
func (s *Spool) ArtifactLimit() (int64, error) {
	if sr, ok := s.readSummaryUnlocked(); ok {
		return sr.Limits.ArtifactBytes, nil
	}
	l, err := s.readLimits()
	return l.ArtifactBytes, err
}

// StageBlobs durably writes each blob that is neither retained nor staged
// yet into the staging directory, without the spool lock, and returns the
// identities (availability retained: valid once admitted). A blob above
// the per-artifact limit, or new blobs that the last lock holder's recorded
// usage plus what is staged leaves no room for under the ordinary limits,
// are refused with an error wrapping ErrBlobRefused; nothing is written then.
// A blob already staged gets a fresh modification time, so the reclamation
// grace counts from its last use.
func (s *Spool) StageBlobs(blobs []Blob) ([]event.ArtifactRef, error) {
	refs, _, err := s.stageBlobs(blobs, true)
	return refs, err
}

// stageBlobs is StageBlobs, with the directory sync when sync is set; it
// reports whether it renamed a new blob into place.
func (s *Spool) stageBlobs(blobs []Blob, sync bool) ([]event.ArtifactRef, bool, error) {
	if s.readOnly {
		return nil, false, ErrReadOnly
	}
	var lim Limits
	var use Usage
	sr, haveUse := s.readSummaryUnlocked()
	if haveUse {
		lim, use = sr.Limits, sr.Usage
	} else {
		l, err := s.readLimits()
		if err != nil {
			return nil, false, err
		}
		lim = l
	}
	dir, err := s.ensurePrivateSubdir(stagedDir)
	if err != nil {
		return nil, false, err
	}
	refs := make([]event.ArtifactRef, 0, len(blobs))
	var todo []stagedItem
	var need Usage
	seen := map[string]bool{}
	now := time.Now()
	for i, b := range blobs {
		if int64(len(b.Data)) > lim.ArtifactBytes {
			return nil, false, fmt.Errorf("%w: blob %d is %d bytes, above the per-artifact limit of %d bytes (%s)", ErrBlobRefused, i, len(b.Data), lim.ArtifactBytes, event.GapReasonArtifactLimit)
		}
		sum := sha256.Sum256(b.Data)
		hexsum := hex.EncodeToString(sum[:])
		refs = append(refs, event.ArtifactRef{Digest: "sha256:" + hexsum, Bytes: int64(len(b.Data)), MediaType: b.MediaType,
			Retention: "local-private", Availability: event.AvailabilityRetained})
		size := artifactFileSize(hexsum, int64(len(b.Data)))
		name := artifactName(hexsum, size)
		if seen[name] || hasSize(filepath.Join(s.dir, artifactsDir, name), size) {
			continue
		}
		seen[name] = true
		if p := filepath.Join(dir, name); hasSize(p, size) {
			_ = os.Chtimes(p, now, now)
			continue
		}
		todo = append(todo, stagedItem{name: name, frame: encodeFrame(typeArtifact, hexsum, b.Data)})
		need.Records++
		need.Bytes += size
	}
	if len(todo) == 0 {
		return refs, false, nil
	}
	if haveUse {
		budget := MaxIntakeFiles*2 + 256
		names, err := listBounded(dir, &budget)
		if err != nil {
			return nil, false, fmt.Errorf("%w: %v", ErrBlobRefused, err)
		}
		for _, n := range names {
			use.Records++
			if _, size, ok := parseArtifactName(n); ok {
				use.Bytes += size
			}
		}
		if err := admit(lim, use, need, false); err != nil {
			return nil, false, fmt.Errorf("%w: %w", ErrBlobRefused, err)
		}
	}
	tmps, err := s.writeTemps(dir, todo)
	if err != nil {
		return nil, false, err
	}
	for i, it := range todo {
		// Never replacing a name a concurrent hook (or an export's reader)
		// already has: the name is the digest, so an existing one holds
		// these bytes. One link per file, as every spool file has.
		if err := renameNoReplace(tmps[i], filepath.Join(dir, it.name)); err != nil {
			if !errors.Is(err, fs.ErrExist) {
				for _, t := range tmps[i:] {
					os.Remove(t)
				}
				return nil, false, fmt.Errorf("stage blob: %w", err)
			}
			os.Remove(tmps[i])
		}
		s.fail("stage.blob.renamed")
	}
	if sync {
		if err := s.syncDir(dir); err != nil {
			return nil, true, fmt.Errorf("sync staged blobs: %w", err)
		}
		s.fail("stage.synced")
	}
	return refs, true, nil
}

// writeTemps writes each item to its own temporary file in dir and fsyncs
// them concurrently (a filesystem commits concurrent fsyncs together), so
// that a hook staging a changed file and its manifest waits for about one
// sync, not two. On an error every temporary file is removed.
func (s *Spool) writeTemps(dir string, todo []stagedItem) ([]string, error) {
	files := make([]*os.File, 0, len(todo))
	names := make([]string, 0, len(todo))
	fail := func(err error) ([]string, error) {
		for i, f := range files {
			f.Close()
			os.Remove(names[i])
		}
		return nil, fmt.Errorf("stage blob: %w", err)
	}
	if err := s.injected("stage.blob"); err != nil {
		return fail(err)
	}
	for _, it := range todo {
		name := filepath.Join(dir, fsutil.TempPrefix+randomHex(8))
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, fsutil.FileMode)
		if err != nil {
			return fail(err)
		}
		files, names = append(files, f), append(names, name)
		if _, err := f.Write(it.frame); err != nil {
			return fail(err)
		}
	}
	s.fail("stage.blob.temp-written")
	if !s.noSync {
		errs := make([]error, len(files))
		var wg sync.WaitGroup
		for i, f := range files {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = f.Sync() }()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return fail(err)
		}
	}
	for _, f := range files {
		if err := f.Close(); err != nil {
			return fail(err) // closing a closed file again is harmless
		}
	}
	s.fail("stage.blob.temp-synced")
	return names, nil
}

// hasSize reports whether path is a regular file of exactly size bytes.
func hasSize(path string, size int64) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Size() == size
}

// ensurePrivateSubdir creates the private spool subdirectory name on first
// use and checks its authority.
func (s *Spool) ensurePrivateSubdir(name string) (string, error) {
	dir := filepath.Join(s.dir, name)
	if err := fsutil.CheckPrivateDir(dir); err == nil {
		return dir, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w: %v", ErrUnsafeAuthority, err)
	}
	if err := os.Mkdir(dir, fsutil.DirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("create %s: %w", name, err)
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

// ReadStaged reads and verifies the blob ref names, retained or staged,
// under the held lock.
func (ss *Tx) ReadStaged(ref event.ArtifactRef) ([]byte, error) {
	if err := ss.held(); err != nil {
		return nil, err
	}
	b, err := ss.s.ReadBlob(ref)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return b, err
	}
	hexsum, err := refHex(ref)
	if err != nil {
		return nil, err
	}
	size := artifactFileSize(hexsum, ref.Bytes)
	f, err := readArtifactFile(filepath.Join(ss.s.dir, stagedDir, artifactName(hexsum, size)), hexsum, size)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func refHex(ref event.ArtifactRef) (string, error) {
	hexsum, ok := strings.CutPrefix(ref.Digest, "sha256:")
	if !ok || len(hexsum) != 64 || !isHex(hexsum) || ref.Bytes < 0 {
		return "", fmt.Errorf("%w: artifact digest", errMalformed)
	}
	return hexsum, nil
}

// readArtifactFile reads the artifact frame at path and checks that it
// holds exactly the bytes of digest hexsum in a file of size bytes.
func readArtifactFile(path, hexsum string, size int64) ([]byte, error) {
	b, err := fsutil.ReadFileNoFollow(path, size)
	if err != nil {
		return nil, err
	}
	f, err := decodeFrame(b)
	if err != nil || f.typ != typeArtifact || f.key != hexsum || f.sum != hexsum || int64(len(b)) != size {
		return nil, fmt.Errorf("%w: artifact %s", errMalformed, filepath.Base(path))
	}
	return f.body, nil
}

// AdmitStaged retains, under the held lock, the staged blobs refs name, in
// order: a blob already retained costs nothing (its staged copy is
// removed); a staged one is verified, admitted against the spool's limits
// as a new artifact (an ordinary record, never the headroom) and renamed
// into the artifacts, one directory fsync covering the call. A blob past a
// limit is refused with an error wrapping ErrBlobRefused (and the
// QuotaError), one missing or not verifying (then quarantined) with
// ErrBlobMissing; the blobs before it stay retained.
func (ss *Tx) AdmitStaged(refs []event.ArtifactRef) error {
	if err := ss.held(); err != nil {
		return err
	}
	s, st := ss.s, ss.g.st
	sdir, adir := filepath.Join(s.dir, stagedDir), filepath.Join(s.dir, artifactsDir)
	moved := false
	defer func() {
		if moved {
			if err := s.syncDir(adir); err != nil {
				st.suspect = true
			}
		}
	}()
	for i, r := range refs {
		hexsum, err := refHex(r)
		if err != nil {
			return fmt.Errorf("%w: blob %d: %v", ErrBlobMissing, i, err)
		}
		if r.Bytes > st.limits.ArtifactBytes {
			return fmt.Errorf("%w: blob %d is %d bytes, above the per-artifact limit of %d bytes (%s)", ErrBlobRefused, i, r.Bytes, st.limits.ArtifactBytes, event.GapReasonArtifactLimit)
		}
		size := artifactFileSize(hexsum, r.Bytes)
		name := artifactName(hexsum, size)
		key := stagedKey(name)
		path := filepath.Join(sdir, name)
		fi, serr := os.Lstat(path)
		if serr == nil {
			st.countIntake(key, fi.Size())
		}
		if s.artifactExists(st, hexsum, size) {
			if serr == nil {
				if err := os.Remove(path); err == nil || errors.Is(err, fs.ErrNotExist) {
					st.uncountIntake(key, true)
				}
			}
			continue
		}
		if serr != nil {
			return fmt.Errorf("%w: blob %d (%s): %v", ErrBlobMissing, i, r.Digest, serr)
		}
		if _, err := readArtifactFile(path, hexsum, size); err != nil {
			st.uncountIntake(key, false) // counted as quarantine from now on
			if qerr := s.quarantine(st, stagedDir, name); qerr != nil {
				return qerr
			}
			return fmt.Errorf("%w: blob %d (%s): %v", ErrBlobMissing, i, r.Digest, err)
		}
		use := st.usage
		use.Records--
		use.Bytes -= fi.Size()
		if err := admit(st.limits, use, Usage{Records: 1, Bytes: size}, false); err != nil {
			return fmt.Errorf("%w: blob %d: %w", ErrBlobRefused, i, err)
		}
		if err := os.Rename(path, filepath.Join(adir, name)); err != nil {
			return fmt.Errorf("retain staged blob %d: %w", i, err)
		}
		moved = true
		s.fail("stage.admit.renamed")
		st.uncountIntake(key, false) // the same file, an artifact now
		st.artifacts[hexsum] = size
	}
	if moved {
		moved = false
		if err := s.syncDir(adir); err != nil {
			st.suspect = true
			return fmt.Errorf("sync artifacts: %w", err)
		}
	}
	return nil
}

// countStagedDir counts every file of the staging directory in st's usage
// (with the intake: the summary's usage excludes both).
func (s *Spool) countStagedDir(st *state, budget *int) error {
	dir := filepath.Join(s.dir, stagedDir)
	names, err := listBounded(dir, budget)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, n := range names {
		var size int64
		if fi, err := os.Lstat(filepath.Join(dir, n)); err == nil {
			size = fi.Size()
		}
		st.countIntake(stagedKey(n), size)
	}
	return nil
}

// reclaimStaged runs under the lock when no intake file waits, so that no
// record can name a staged blob any more except one a hook still writing
// is about to write: every staged file older than the intake grace period
// is a dead hook's (its temporary file or a blob its record never named)
// or a copy of a retained artifact, and is removed; a file whose name is
// no blob's is quarantined.
func (s *Spool) reclaimStaged(st *state) error {
	dir := filepath.Join(s.dir, stagedDir)
	budget := MaxIntakeFiles*2 + 256
	names, err := listBounded(dir, &budget)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	removed := false
	for _, n := range names {
		var fst syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(dir, n), &fst); err != nil {
			continue
		}
		if time.Since(time.Unix(0, fsutil.SysMtimeNS(&fst))) < s.intakeGrace {
			continue
		}
		key := stagedKey(n)
		st.countIntake(key, fst.Size)
		if _, _, ok := parseArtifactName(n); !ok && !strings.HasPrefix(n, fsutil.TempPrefix) {
			st.uncountIntake(key, false)
			if err := s.quarantine(st, stagedDir, n); err != nil {
				return err
			}
			continue
		}
		if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("reclaim staged %s: %w", n, err)
		}
		st.uncountIntake(key, true)
		removed = true
	}
	if removed {
		s.fail("stage.reclaimed")
		return s.syncDir(dir)
	}
	return nil
}
