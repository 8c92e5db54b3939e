package capsule

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/scan"
	"golang.org/x/sys/unix"
)

// StateDir is the directory below the root that holds agentdiff state; it is
// never part of a manifest.
const StateDir = ".agentdiff"

// ManifestEntry is one object in a no-follow manifest.
type ManifestEntry struct {
	Path    string `json:"path"`
	Type    string `json:"type"` // file, dir, symlink, other
	Size    int64  `json:"size"`
	Mode    string `json:"mode"` // octal permission and special bits, e.g. "0644"
	MtimeNS int64  `json:"mtime_ns"`
	SHA256  string `json:"sha256,omitempty"` // regular files
	Target  string `json:"target,omitempty"` // symlinks, never followed
	Nlink   uint64 `json:"nlink,omitempty"`
	Backup  bool   `json:"backup,omitempty"` // before-state content was stored in the object store

	ino, dev  uint64
	ctimeNS   int64
	modeBits  fs.FileMode
	hasStatID bool
	inBase    bool // an entry of the loaded base manifest
	reuse     bool // (stat cache) its hash may be reused when the stat identity matches
	refreshed bool // (base entry) re-hashed by this run although its stat identity is the base's
}

// Manifest is before.json / after.json. Schema version 1 (older capsules)
// lists every entry in Entries. Version 2 stores changes to a base: the
// before manifest to the base manifest hard-linked into the capsule
// (Base.File = FileBase, a complete manifest in the line format of
// basefile.go, shared by the runs of a root), the after manifest to the
// before manifest (Base.File = FileBefore). Changes lists the entries that
// differ from or are absent in the base, Removed the base paths that are
// gone, Total the resulting number of entries; reading resolves them into
// Entries.
type Manifest struct {
	SchemaVersion int             `json:"schema_version"`
	RunID         string          `json:"run_id"`
	Phase         string          `json:"phase"` // before or after
	Root          string          `json:"root"`
	TakenAt       time.Time       `json:"taken_at"`
	Entries       []ManifestEntry `json:"entries,omitempty"`
	Base          *ManifestBase   `json:"base,omitempty"`
	Changes       []ManifestEntry `json:"changes,omitempty"`
	Removed       []string        `json:"removed,omitempty"`
	// RawNames holds, byte-exact, the names of Changes and Removed that
	// are not valid UTF-8 (names.go).
	RawNames []RawName `json:"raw_names,omitempty"`
	Total    int       `json:"total,omitempty"`
	// BackupSkipped counts regular files without stored before-state content,
	// by reason (too_large, budget_exhausted).
	BackupSkipped map[string]int64 `json:"backup_skipped,omitempty"`
	// Incomplete explains why the manifest could not be taken (entries are then empty).
	Incomplete string `json:"incomplete,omitempty"`
}

// ManifestBase names what a version-2 manifest's changes apply to.
type ManifestBase struct {
	File    string `json:"file"`             // FileBase or FileBefore
	SHA256  string `json:"sha256,omitempty"` // of FileBase
	Entries int    `json:"entries"`
}

// ManifestSchemaV2 is the schema version of manifests stored as changes to a base.
const ManifestSchemaV2 = 2

// FileBase is the base manifest hard-linked into a capsule.
const FileBase = "manifest-base"

func modeString(m fs.FileMode) string { return fmt.Sprintf("%04o", scan.UnixMode(m)) }

func parseMode(s string) (fs.FileMode, error) {
	var v uint32
	if _, err := fmt.Sscanf(s, "%o", &v); err != nil || v > 0o7777 || len(s) > 5 {
		return 0, fmt.Errorf("bad mode %q", s)
	}
	return scan.ModeFromUnix(v), nil
}

// lister walks a root for a manifest: scan.List (no-follow, directory fds,
// several directories at once) for the stat of every object, then an open
// (openat chain refusing symlinks) only for the regular files whose hash is
// not known from the previous manifest.
type lister struct {
	root  string // the directory to list (the root, its symlink resolved)
	store *objectStore
	buf   []byte
	modes map[fs.FileMode]string
}

func newLister(root string, store *objectStore) *lister {
	l := &lister{root: root, store: store, buf: make([]byte, 64<<10), modes: map[fs.FileMode]string{}}
	if fi, err := os.Lstat(root); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		if r, err := filepath.EvalSymlinks(root); err == nil {
			l.root = r // the root's own path is resolved normally, as scan.Walk does
		}
	}
	return l
}

// list returns every object below the root except .agentdiff, in walk
// order; a directory prune (nil: none) reports is listed Skipped and not
// descended.
func (l *lister) list(ctx context.Context, prune func(rel string) bool) ([]scan.Stat, error) {
	// Twice as many workers as processors: a worker whose system call
	// outlasts the scheduler's patience loses its processor to another
	// (git status lists with up to 20 threads).
	st, err := scan.List(ctx, l.root, scan.ListOptions{Workers: 2 * runtime.GOMAXPROCS(0), Skip: func(rel string, isDir bool) bool {
		return rel == StateDir || (isDir && prune != nil && prune(rel))
	}})
	if err != nil {
		return nil, err
	}
	out := st[:0]
	for _, s := range st[1:] {
		if s.Skipped && s.Path == StateDir {
			continue
		}
		out = append(out, s)
	}
	return out, nil
}

// entry converts a listed object (without its hash).
func (l *lister) entry(s *scan.Stat) ManifestEntry {
	m, ok := l.modes[s.Mode]
	if !ok {
		m = modeString(s.Mode)
		l.modes[s.Mode] = m
	}
	e := ManifestEntry{Path: s.Path, Type: s.Type.String(), Size: s.Size, Mode: m, MtimeNS: s.MTime, Target: s.Target,
		ino: s.Ino, dev: s.Dev, ctimeNS: s.CTime, modeBits: s.Mode, hasStatID: true}
	if s.Type == scan.Dir {
		e.Size = 0
	}
	return e
}

// sameStatID reports whether a cached entry describes the listed object.
func sameStatID(c, e *ManifestEntry) bool {
	return c.hasStatID && c.Type == e.Type && c.ino == e.ino && c.dev == e.dev && c.Size == e.Size && c.MtimeNS == e.MtimeNS && c.ctimeNS == e.ctimeNS
}

// sameEntry reports whether two entries record the same object state,
// stat identity included.
func sameEntry(a, b *ManifestEntry) bool {
	return a.Path == b.Path && a.Type == b.Type && a.Size == b.Size && a.Mode == b.Mode && a.MtimeNS == b.MtimeNS &&
		a.SHA256 == b.SHA256 && a.Target == b.Target && a.Nlink == b.Nlink && a.Backup == b.Backup &&
		a.ino == b.ino && a.dev == b.dev && a.ctimeNS == b.ctimeNS
}

// hash opens the listed regular file e (refusing symlinks and a replaced
// file), hashes it, records its link count and, when backup is set, makes
// sure the object store holds its content (copied only when absent).
func (l *lister) hash(e *ManifestEntry, backup bool) error {
	f, err := scan.OpenFile(l.root, e.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	if uint64(st.Dev) != e.dev || st.Ino != e.ino {
		return &scan.PathError{Op: "open", Path: e.Path, Err: scan.ErrChanged}
	}
	e.Nlink = uint64(st.Nlink)
	sum, err := hashReader(f, e.Size, l.buf, nil)
	if err != nil {
		return fmt.Errorf("hash %q: %w", e.Path, err)
	}
	e.SHA256 = sum
	if !backup {
		return nil
	}
	if l.store.has(sum) {
		e.Backup = true // verified by hash whenever it is used
		return nil
	}
	tmp, err := l.store.tempFile()
	if err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err == nil {
		var got string
		if got, err = hashReader(f, e.Size, l.buf, tmp); err == nil && got != sum {
			err = errors.New("file changed while being read")
		}
	}
	if err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("back up %q: %w", e.Path, err)
	}
	if err := l.store.commit(tmp, sum); err != nil {
		return err
	}
	e.Backup = true
	return nil
}

// beforeState is the before manifest of a run: every entry in walk order
// (unchanged ones shared with the base) and its changes to the base.
type beforeState struct {
	entries []*ManifestEntry
	changes []*ManifestEntry
	removed []string
	skipped map[string]int64
	// refreshed counts the base entries the stat cache must list beside the
	// base (their hash was re-taken or came from the cache's own list).
	refreshed int
}

// takeBefore lists the root and builds the before manifest against base
// (walk order, may be empty), reusing the hashes cache vouches for and
// storing (when backup is set) the before-state content of every file within
// bounds.
func (l *lister) takeBefore(ctx context.Context, base []ManifestEntry, cache *statCache, bounds BackupBounds, backup bool) (*beforeState, error) {
	list, err := l.list(ctx, nil)
	if err != nil {
		return nil, err
	}
	return l.before(ctx, list, base, cache, bounds, backup)
}

// before builds the before manifest from a listing (see takeBefore).
func (l *lister) before(ctx context.Context, list []scan.Stat, base []ManifestEntry, cache *statCache, bounds BackupBounds, backup bool) (*beforeState, error) {
	bs := &beforeState{entries: make([]*ManifestEntry, 0, len(list))}
	var plan map[int]string
	if backup {
		plan = planBackups(list, bounds)
	}
	skip := func(reason string) {
		if bs.skipped == nil {
			bs.skipped = map[string]int64{}
		}
		bs.skipped[reason]++
	}
	j := 0
	for i := range list {
		if i&1023 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		s := &list[i]
		for j < len(base) && walkCompare(base[j].Path, s.Path) < 0 {
			bs.removed = append(bs.removed, base[j].Path)
			j++
		}
		var b *ManifestEntry
		if j < len(base) && base[j].Path == s.Path {
			b = &base[j]
			j++
		}
		e := l.entry(s)
		if e.Type == "file" {
			wantBackup := false
			switch {
			case !backup:
			case plan[i] != "":
				skip(plan[i])
			default:
				wantBackup = true
			}
			c := cache.lookup(e.Path, b)
			switch {
			case c != nil && sameStatID(c, &e) && (!wantBackup || (c.Backup && l.store.present(c.SHA256, cache)) || l.store.has(c.SHA256)):
				e.SHA256, e.Nlink, e.Backup = c.SHA256, c.Nlink, wantBackup
			default:
				if err := l.hash(&e, wantBackup); err != nil {
					return nil, err
				}
			}
			if b != nil && !b.reuse && c != b && sameEntry(b, &e) {
				// The base cannot vouch for this hash by itself (racy when the
				// base was taken): the stat cache keeps it beside the base.
				b.refreshed = true
				bs.refreshed++
			}
		}
		if b != nil && sameEntry(b, &e) {
			bs.entries = append(bs.entries, b)
			continue
		}
		p := new(ManifestEntry)
		*p = e
		bs.entries = append(bs.entries, p)
		bs.changes = append(bs.changes, p)
	}
	for ; j < len(base); j++ {
		bs.removed = append(bs.removed, base[j].Path)
	}
	return bs, nil
}

// planBackups decides, before any file is read, which regular files of a
// listing get before-state content within bounds, and returns the skip
// reason (too_large, budget_exhausted) by listing index for the others.
// The budget goes to the files a command most likely changes: files
// outside any .git directory first, the most recently modified first, and
// .git's own files last, so a large repository's history never spends the
// budget that the one file a command edits needs.
func planBackups(list []scan.Stat, bounds BackupBounds) map[int]string {
	plan := map[int]string{}
	var order []int
	for i := range list {
		s := &list[i]
		if s.Type != scan.File || s.Skipped {
			continue
		}
		if s.Size > bounds.MaxFileBytes {
			plan[i] = "too_large"
			continue
		}
		order = append(order, i)
	}
	sort.SliceStable(order, func(x, y int) bool {
		a, b := &list[order[x]], &list[order[y]]
		if va, vb := inGitDir(a.Path), inGitDir(b.Path); va != vb {
			return vb
		}
		return a.MTime > b.MTime
	})
	var total, files int64
	for _, i := range order {
		size := list[i].Size
		if total+size > bounds.MaxTotalBytes || files+1 > bounds.MaxFiles {
			plan[i] = "budget_exhausted"
			continue
		}
		total += size
		files++
	}
	return plan
}

// inGitDir reports whether a slash-separated relative path lies inside a
// .git directory (the repository's own or a nested one).
func inGitDir(p string) bool {
	return strings.HasPrefix(p, ".git/") || strings.Contains(p, "/.git/")
}

// afterChange pairs a changed or new entry of the after manifest with its
// before entry (nil when created).
type afterChange struct {
	before, after *ManifestEntry
}

// afterState is the after manifest as changes to the before manifest.
type afterState struct {
	changes []afterChange    // walk order
	removed []*ManifestEntry // before entries that are gone
}

// errRelist reports a watched listing that cannot be spliced into the
// before manifest (a re-listed directory is another directory now).
var errRelist = errors.New("a re-listed directory was replaced")

// takeAfter lists the root again and returns what differs from before. A
// file whose stat identity is unchanged keeps its hash unless it was
// modified within racyWindow of the before manifest (then it is re-hashed).
// With relist (the watched case) only those directories are listed, plus
// every directory the before manifest lacks; the subtrees of the others are
// the before manifest's.
func (l *lister) takeAfter(ctx context.Context, before []*ManifestEntry, beforeTaken time.Time, relist map[string]bool) (*afterState, error) {
	var prune func(string) bool
	if relist != nil {
		dirs := make(map[string]bool)
		for _, b := range before {
			if b.Type == "dir" {
				dirs[b.Path] = true
			}
		}
		prune = func(rel string) bool { return dirs[rel] && !relist[rel] }
	}
	list, err := l.list(ctx, prune)
	if err != nil {
		return nil, err
	}
	limit := beforeTaken.Add(-racyWindow).UnixNano()
	as := &afterState{}
	j := 0
	for i := range list {
		s := &list[i]
		for j < len(before) && walkCompare(before[j].Path, s.Path) < 0 {
			as.removed = append(as.removed, before[j])
			j++
		}
		var b *ManifestEntry
		if j < len(before) && before[j].Path == s.Path {
			b = before[j]
			j++
		}
		if s.Skipped {
			// An unchanged directory: its subtree is the before manifest's.
			if b == nil || b.Type != "dir" {
				return nil, errRelist
			}
			for j < len(before) && strings.HasPrefix(before[j].Path, s.Path+"/") {
				j++
			}
			continue
		}
		e := l.entry(s)
		if relist != nil && e.Type == "dir" && b != nil && b.Type == "dir" && relist[e.Path] && (b.ino != e.ino || b.dev != e.dev) {
			return nil, errRelist
		}
		if b != nil && sameStatID(b, &e) && b.Mode == e.Mode && b.Target == e.Target &&
			(e.Type != "file" || (b.MtimeNS < limit && b.ctimeNS < limit)) {
			continue // unchanged
		}
		if e.Type == "file" {
			if err := l.hash(&e, false); err != nil {
				return nil, err
			}
			if b != nil {
				e.Backup = b.Backup && b.SHA256 == e.SHA256
			}
		}
		if b != nil && sameEntry(b, &e) {
			continue
		}
		p := new(ManifestEntry)
		*p = e
		as.changes = append(as.changes, afterChange{before: b, after: p})
	}
	for ; j < len(before); j++ {
		as.removed = append(as.removed, before[j])
	}
	return as, nil
}

// hashReader hashes exactly size bytes of r (copying them to w when non-nil).
func hashReader(r io.Reader, size int64, buf []byte, w io.Writer) (string, error) {
	h := sha256.New()
	dst := io.Writer(h)
	if w != nil {
		dst = io.MultiWriter(h, w)
	}
	n, err := io.CopyBuffer(dst, io.LimitReader(r, size+1), buf)
	if err != nil {
		return "", err
	}
	if n != size {
		return "", fmt.Errorf("file changed while being read (%d bytes, stat said %d)", n, size)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// objectStore is the content-addressed before-state store shared by the runs
// of one root: <root>/.agentdiff/objects/<sha256[:2]>/<sha256>, mode 0400.
// An object's name is its SHA-256, and every use re-hashes it.
type objectStore struct {
	dir     string
	dirfd   int             // open objects directory, for fstatat lookups
	names   map[string]bool // objects known to be present this run
	trusted map[string]bool // subdirectory -> unchanged since the stat cache recorded it
	written []string        // objects installed by this process, not yet synced
}

func openStore(stateDir string) (*objectStore, error) {
	dir := filepath.Join(stateDir, "objects")
	if err := fsutil.MkdirPrivate(filepath.Join(dir, "tmp")); err != nil {
		return nil, err
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open object store: %w", err)
	}
	return &objectStore{dir: dir, dirfd: fd}, nil
}

// close releases the store's directory fd.
func (s *objectStore) close() { unix.Close(s.dirfd) }

// has reports whether an object named sum is present (one fstatat, then
// remembered for the run); a truncated or corrupted object is caught when it
// is used, since every use re-hashes it.
func (s *objectStore) has(sum string) bool {
	if s.names == nil {
		s.names = map[string]bool{}
	}
	if s.names[sum] {
		return true
	}
	var st unix.Stat_t
	if unix.Fstatat(s.dirfd, sum[:2]+"/"+sum, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
		s.names[sum] = true
		return true
	}
	return false
}

// present reports whether the object of a hash reused from the stat cache,
// whose entry had a backup, is still in the store: yes without a stat of its
// own when its subdirectory is exactly as the cache recorded it (nothing was
// added or removed there since), else has.
func (s *objectStore) present(sum string, c *statCache) bool {
	if s.trusted == nil {
		s.trusted = map[string]bool{}
	}
	sub := sum[:2]
	t, ok := s.trusted[sub]
	if !ok {
		var st unix.Stat_t
		if rec, known := c.objDirs[sub]; known && unix.Fstatat(s.dirfd, sub, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			t = dirStatID(&st) == rec
		}
		s.trusted[sub] = t
	}
	return t || s.has(sum)
}

func dirStatID(st *unix.Stat_t) statID {
	id := statIDOf(st)
	id.size = 0
	return id
}

type subdirStat struct {
	name string
	id   statID
}

// subdirStats returns the stat identity of every object subdirectory.
func (s *objectStore) subdirStats() []subdirStat {
	var out []subdirStat
	const hexdig = "0123456789abcdef"
	for i := range 256 {
		name := string([]byte{hexdig[i>>4], hexdig[i&15]})
		var st unix.Stat_t
		if unix.Fstatat(s.dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			out = append(out, subdirStat{name, dirStatID(&st)})
		}
	}
	return out
}

func (s *objectStore) path(sum string) string { return filepath.Join(s.dir, sum[:2], sum) }

func (s *objectStore) tempFile() (*os.File, error) {
	return os.CreateTemp(filepath.Join(s.dir, "tmp"), fsutil.TempPrefix+"obj-")
}

// commit installs tmp as object sum unless an object with that name already
// verifies, in which case tmp is dropped.
func (s *objectStore) commit(tmp *os.File, sum string) error {
	name := tmp.Name()
	if err := tmp.Chmod(0o400); err != nil {
		tmp.Close()
		os.Remove(name)
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(name)
		return err
	}
	rel := sum[:2] + "/" + sum
	// Replacing is fine: an existing name was not listed or failed its re-hash.
	err := unix.Renameat(unix.AT_FDCWD, name, s.dirfd, rel)
	if err == unix.ENOENT {
		if err := unix.Mkdirat(s.dirfd, sum[:2], 0o700); err != nil && err != unix.EEXIST {
			os.Remove(name)
			return fmt.Errorf("object store: %w", err)
		}
		err = unix.Renameat(unix.AT_FDCWD, name, s.dirfd, rel)
	}
	if err != nil {
		os.Remove(name)
		return fmt.Errorf("install object %s: %w", sum, err)
	}
	final := s.path(sum)
	s.written = append(s.written, final)
	if s.names == nil {
		s.names = map[string]bool{}
	}
	s.names[sum] = true
	return nil
}

// drop removes a corrupt object so a later run stores it again.
func (s *objectStore) drop(sum string) {
	unix.Unlinkat(s.dirfd, sum[:2]+"/"+sum, 0)
	delete(s.names, sum)
}

// syncfsThreshold is the number of new objects above which one syncfs(2)
// replaces per-object fsyncs.
const syncfsThreshold = 256

// sync makes the objects installed since the last sync durable: a few are
// fsynced one by one (with their directories); many are covered by one
// syncfs(2), whose cost depends on everything else dirty on the filesystem.
func (s *objectStore) sync() error {
	if len(s.written) == 0 {
		return nil
	}
	defer func() { s.written = s.written[:0] }()
	if len(s.written) > syncfsThreshold {
		d, err := os.Open(s.dir)
		if err != nil {
			return err
		}
		defer d.Close()
		if err := fsutil.Syncfs(int(d.Fd())); err != nil {
			return fmt.Errorf("sync object store: %w", err)
		}
		return nil
	}
	// The objects, their subdirectories and the store directory are synced
	// at once (one round instead of three in a row): the barrier that calls
	// this returns, and the command is launched, only when all are durable.
	// A crash in between can leave an object's name durable before its
	// content; every object is re-hashed before it becomes a backup, and a
	// corrupt one is removed (see verify and drop).
	fns := []func() error{func() error { return fsutil.SyncDir(s.dir) }}
	dirs := map[string]bool{}
	for _, p := range s.written {
		fns = append(fns, func() error {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			err = f.Sync()
			f.Close()
			if err != nil {
				return fmt.Errorf("sync object: %w", err)
			}
			return nil
		})
		if d := filepath.Dir(p); !dirs[d] {
			dirs[d] = true
			fns = append(fns, func() error { return fsutil.SyncDir(d) })
		}
	}
	return runAll(fns)
}

// runAll runs fns at once and returns their errors joined.
func runAll(fns []func() error) error {
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// verify re-hashes object sum (no-follow) and reports whether it matches.
func (s *objectStore) verify(sum string) (bool, error) {
	f, err := os.OpenFile(s.path(sum), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return false, errors.New("object is not a regular file")
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return false, err
	}
	return hex.EncodeToString(h.Sum(nil)) == sum, nil
}

// index maps manifest paths to entries.
func (m *Manifest) index() map[string]*ManifestEntry {
	idx := make(map[string]*ManifestEntry, len(m.Entries))
	for i := range m.Entries {
		idx[m.Entries[i].Path] = &m.Entries[i]
	}
	return idx
}

// validate checks a manifest read back from a capsule: every path is a clean
// relative path outside the state directory, types and hashes are well formed.
func (m *Manifest) validate() error {
	if m.SchemaVersion != 1 && m.SchemaVersion != ManifestSchemaV2 {
		return fmt.Errorf("manifest schema_version %d unsupported", m.SchemaVersion)
	}
	seen := make(map[string]bool, len(m.Entries))
	for i := range m.Entries {
		e := &m.Entries[i]
		if err := validRel(e.Path); err != nil {
			return err
		}
		if seen[e.Path] {
			return fmt.Errorf("manifest lists %q twice", e.Path)
		}
		seen[e.Path] = true
		if _, err := scan.ParseType(e.Type); err != nil {
			return fmt.Errorf("manifest entry %q: %w", e.Path, err)
		}
		mode, err := parseMode(e.Mode)
		if err != nil {
			return fmt.Errorf("manifest entry %q: %w", e.Path, err)
		}
		e.modeBits = mode
		if e.Type == "file" && !validSum(e.SHA256) {
			return fmt.Errorf("manifest entry %q: bad sha256", e.Path)
		}
	}
	return nil
}

func validSum(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// validRel refuses anything but a clean relative path outside .agentdiff.
func validRel(p string) error {
	if _, err := scan.SplitRel(p); err != nil {
		return fmt.Errorf("unsafe path in capsule: %w", err)
	}
	if p == StateDir || strings.HasPrefix(p, StateDir+"/") {
		return fmt.Errorf("unsafe path in capsule: %q is agentdiff state", p)
	}
	return nil
}

// resolve turns a version-2 manifest read from capsule dir into its full
// Entries: the base (FileBase, checked against its digest, or before's
// entries for an after manifest) with Changes applied and Removed taken
// out. A version-1 manifest is left as it is. Paths are checked by validate.
func (m *Manifest) resolve(dir string, before *Manifest) error {
	switch m.SchemaVersion {
	case 1:
		if m.Base != nil || m.Changes != nil || m.Removed != nil || m.Total != 0 {
			return errors.New("a version 1 manifest has version 2 fields")
		}
		return nil
	case ManifestSchemaV2:
	default:
		return fmt.Errorf("manifest schema_version %d unsupported", m.SchemaVersion)
	}
	if err := m.applyRawNames(); err != nil {
		return err
	}
	if m.Entries != nil {
		return errors.New("a version 2 manifest lists entries instead of changes")
	}
	var base []ManifestEntry
	switch {
	case m.Base == nil:
	case m.Base.File == FileBase && before == nil:
		if !validSum(m.Base.SHA256) {
			return errors.New("base: bad sha256")
		}
		f, err := scan.OpenFile(dir, FileBase)
		if err != nil {
			return fmt.Errorf("base manifest: %w", err)
		}
		base, err = readBase(f, m.Base.SHA256)
		f.Close()
		if err != nil {
			return err
		}
	case m.Base.File == FileBefore && before != nil && m.Base.SHA256 == "":
		base = before.Entries
	default:
		return fmt.Errorf("manifest base %q is not allowed here", m.Base.File)
	}
	if m.Base != nil && len(base) != m.Base.Entries {
		return fmt.Errorf("base has %d entries, the manifest says %d", len(base), m.Base.Entries)
	}
	if len(m.Changes) > maxEntries || len(m.Removed) > maxEntries {
		return errors.New("too many changes")
	}
	removed := make(map[string]bool, len(m.Removed))
	for _, p := range m.Removed {
		if removed[p] {
			return fmt.Errorf("removes %q twice", p)
		}
		removed[p] = true
	}
	changed := make(map[string]int, len(m.Changes))
	for i := range m.Changes {
		p := m.Changes[i].Path
		if _, dup := changed[p]; dup {
			return fmt.Errorf("changes %q twice", p)
		}
		if removed[p] {
			return fmt.Errorf("both changes and removes %q", p)
		}
		changed[p] = i
	}
	out := make([]ManifestEntry, 0, len(base)+len(m.Changes))
	nRemoved := 0
	for i := range base {
		p := base[i].Path
		if removed[p] {
			nRemoved++
			continue
		}
		if j, ok := changed[p]; ok {
			out = append(out, m.Changes[j])
			delete(changed, p)
			continue
		}
		out = append(out, base[i])
	}
	if nRemoved != len(removed) {
		return errors.New("removes a path its base does not list")
	}
	for i := range m.Changes {
		if _, ok := changed[m.Changes[i].Path]; ok {
			out = append(out, m.Changes[i])
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return walkCompare(out[i].Path, out[j].Path) < 0 })
	if len(out) != m.Total {
		return fmt.Errorf("resolves to %d entries, the manifest says %d", len(out), m.Total)
	}
	m.Entries = out
	return nil
}

// maxEntries bounds the changes a manifest read back may list.
const maxEntries = 10_000_000
