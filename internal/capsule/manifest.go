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
	"strings"
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
}

// Manifest is before.json / after.json.
type Manifest struct {
	SchemaVersion int             `json:"schema_version"`
	RunID         string          `json:"run_id"`
	Phase         string          `json:"phase"` // before or after
	Root          string          `json:"root"`
	TakenAt       time.Time       `json:"taken_at"`
	Entries       []ManifestEntry `json:"entries"`
	// BackupSkipped counts regular files without stored before-state content,
	// by reason (too_large, budget_exhausted).
	BackupSkipped map[string]int64 `json:"backup_skipped,omitempty"`
	// Incomplete explains why the manifest could not be taken (entries are then empty).
	Incomplete string `json:"incomplete,omitempty"`
}

func modeString(m fs.FileMode) string { return fmt.Sprintf("%04o", scan.UnixMode(m)) }

func parseMode(s string) (fs.FileMode, error) {
	var v uint32
	if _, err := fmt.Sscanf(s, "%o", &v); err != nil || v > 0o7777 || len(s) > 5 {
		return 0, fmt.Errorf("bad mode %q", s)
	}
	return scan.ModeFromUnix(v), nil
}

// scanOptions configures takeManifest.
type scanOptions struct {
	store  *objectStore              // when non-nil, eligible file contents are stored
	bounds BackupBounds              // backup bounds for the store
	reuse  map[string]*ManifestEntry // previous manifest: unchanged stat identity reuses the hash
	phase  string
	runID  string
}

// takeManifest walks root without following symlinks, hashing regular files
// through the walk's held directory fds.
func takeManifest(ctx context.Context, root string, o scanOptions) (*Manifest, error) {
	m := &Manifest{SchemaVersion: 1, RunID: o.runID, Phase: o.phase, Root: root, TakenAt: time.Now().UTC(), Entries: []ManifestEntry{}}
	var total, files int64
	buf := make([]byte, 64<<10)
	skip := func(rel string, isDir bool) bool { return rel == StateDir }
	err := scan.Walk(ctx, root, scan.Options{Skip: skip}, func(e *scan.Entry) error {
		me := ManifestEntry{
			Path: e.Path, Type: e.Type.String(), Size: e.Size, Mode: modeString(e.Mode),
			MtimeNS: e.ModTime.UnixNano(), Target: e.Target, Nlink: e.Nlink,
			ino: e.Ino, dev: e.Dev, ctimeNS: e.ChangeTime.UnixNano(), modeBits: e.Mode, hasStatID: true,
		}
		if e.Type == scan.Dir {
			me.Size = 0
			me.Nlink = 0
		}
		if e.Type == scan.File {
			cached := ""
			if prev := o.reuse[e.Path]; prev != nil && prev.hasStatID && prev.Type == "file" && prev.ino == e.Ino && prev.dev == e.Dev &&
				prev.Size == e.Size && prev.MtimeNS == me.MtimeNS && prev.ctimeNS == me.ctimeNS {
				cached = prev.SHA256
			}
			wantBackup := false
			if o.store != nil {
				switch {
				case e.Size > o.bounds.MaxFileBytes:
					m.skip("too_large")
				case total+e.Size > o.bounds.MaxTotalBytes || files+1 > o.bounds.MaxFiles:
					m.skip("budget_exhausted")
				default:
					wantBackup = true
				}
			}
			switch {
			case cached != "" && (!wantBackup || o.store.has(cached)):
				me.SHA256 = cached
				me.Backup = wantBackup
			default:
				sum, stored, err := hashEntry(e, o.store, wantBackup, buf)
				if err != nil {
					return err
				}
				me.SHA256 = sum
				me.Backup = stored
			}
			if me.Backup {
				total += e.Size
				files++
			}
		}
		m.Entries = append(m.Entries, me)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Manifest) skip(reason string) {
	if m.BackupSkipped == nil {
		m.BackupSkipped = map[string]int64{}
	}
	m.BackupSkipped[reason]++
}

// hashEntry hashes e and, when backup is set, makes sure the object store
// holds its content (copying it only when no object of that size exists); it
// refuses a file that changes while being read.
func hashEntry(e *scan.Entry, store *objectStore, backup bool, buf []byte) (string, bool, error) {
	h := sha256.New()
	if _, err := e.Copy(h, buf); err != nil {
		return "", false, fmt.Errorf("hash: %w", err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if !backup {
		return sum, false, nil
	}
	if store.has(sum) {
		return sum, true, nil // verified by hash whenever it is used
	}
	tmp, err := store.tempFile()
	if err != nil {
		return "", false, err
	}
	h.Reset()
	_, err = e.Copy(io.MultiWriter(h, tmp), buf)
	if err == nil && hex.EncodeToString(h.Sum(nil)) != sum {
		err = errors.New("file changed while being read")
	}
	if err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return "", false, fmt.Errorf("back up %q: %w", e.Path, err)
	}
	if err := store.commit(tmp, sum); err != nil {
		return "", false, err
	}
	return sum, true, nil
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
	names   map[string]bool // object names present when first asked (lazy)
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

// has reports whether an object named sum is present. The store's names are
// listed once per run (a few getdents calls instead of one stat per file); a
// truncated or corrupted object is caught when it is used, since every use
// re-hashes it.
func (s *objectStore) has(sum string) bool {
	if s.names == nil {
		s.names = map[string]bool{}
		subs, _ := os.ReadDir(s.dir)
		for _, d := range subs {
			if !d.IsDir() || len(d.Name()) != 2 {
				continue
			}
			ents, _ := os.ReadDir(filepath.Join(s.dir, d.Name()))
			for _, e := range ents {
				if e.Type().IsRegular() {
					s.names[e.Name()] = true
				}
			}
		}
	}
	return s.names[sum]
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
	if s.names != nil {
		s.names[sum] = true
	}
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
	dirs := map[string]bool{}
	for _, p := range s.written {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return fmt.Errorf("sync object: %w", err)
		}
		dirs[filepath.Dir(p)] = true
	}
	for d := range dirs {
		if err := fsutil.SyncDir(d); err != nil {
			return err
		}
	}
	return fsutil.SyncDir(s.dir)
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
	if m.SchemaVersion != 1 {
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
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
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
