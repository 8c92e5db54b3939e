package capsule

import (
	"bytes"
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
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/redact"
	"golang.org/x/sys/unix"
)

// SchemaVersion of every capsule JSON file.
const SchemaVersion = 1

// Capsule file names.
const (
	FileMetadata       = "metadata.json"
	FilePolicy         = "policy.json"
	FileBefore         = "before.json"
	FileAfter          = "after.json"
	FileRuntime        = "runtime.json"
	FileResult         = "result.json"
	FileEvents         = "events.jsonl"
	FileIntegrity      = "integrity.json"
	DirBackups         = "backups"
	FileRollbackResult = "rollback-result.json"
	// RollbackSealPrefix names the post-seal extension manifests
	// integrity-rollback-<n>.json (n = 1, 2, ...).
	RollbackSealPrefix = "integrity-rollback-"
)

// MaxCapsuleFileBytes bounds every capsule file read back.
const MaxCapsuleFileBytes = 512 << 20

var runIDPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}$`) })

// ValidRunID reports whether id has the run id shape (no path separators).
func ValidRunID(id string) bool { return runIDPattern().MatchString(id) }

// ErrBadRunID reports a malformed run id.
var ErrBadRunID = errors.New("malformed run id (want YYYYMMDDTHHMMSSZ-xxxxxxxx)")

// Metadata is metadata.json.
type Metadata struct {
	SchemaVersion int       `json:"schema_version"`
	RunID         string    `json:"run_id"`
	Task          string    `json:"task"`
	Command       []string  `json:"command"` // redacted argv
	Redactions    int       `json:"redactions"`
	CreatedAt     time.Time `json:"created_at"`
	Root          string    `json:"root"`
	PolicySource  string    `json:"policy_source"`
}

// RunOptions configure one transaction.
type RunOptions struct {
	Root         string
	Policy       *Policy
	PolicyBytes  []byte // exact bytes written to policy.json (canonical JSON when nil)
	PolicySource string // file path or "built-in default"
	Task         string
	Argv         []string
	Timeout      time.Duration
	Env          []string
	Stdin        io.Reader
	Stdout       io.Writer
	Stderr       io.Writer
	// FullListing lists the whole tree for the after manifest instead of
	// only the directories the inotify watch saw change.
	FullListing bool
	// KeyDir holds the per-user key that authenticates the stat cache
	// (outside the root); "" disables the cache and every file is hashed.
	KeyDir string
}

// fileSum is a sealed file's size and digest.
type fileSum struct {
	Path       string `json:"path"`
	Size       int64  `json:"size"`
	SHA256     string `json:"sha256"`
	AppendOnly bool   `json:"append_only,omitempty"`
}

// Integrity is integrity.json, and the shape of each integrity-rollback-<n>.json.
type Integrity struct {
	SchemaVersion  int       `json:"schema_version"`
	RunID          string    `json:"run_id"`
	Algorithm      string    `json:"algorithm"`
	SealedAt       time.Time `json:"sealed_at"`
	Sequence       int       `json:"sequence"`                  // 0 for integrity.json, n for integrity-rollback-<n>.json
	PreviousSHA256 string    `json:"previous_sha256,omitempty"` // digest of the previous seal file
	Files          []fileSum `json:"files"`
	Note           string    `json:"note"`
}

// writer records what agentdiff wrote to a capsule so that the seal covers
// exactly those bytes, whatever happens to the files on disk meanwhile.
type writer struct {
	dir    string
	sums   map[string]fileSum
	events bytes.Buffer
	seq    int
	now    func() time.Time
	// statOnly holds files tampered checks by stat identity instead of
	// content (the base manifest: large, and linked, not written, by this run).
	statOnly map[string]statID
	// unsynced names the files written since the last barrier.
	unsynced []string
}

func sumBytes(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func (w *writer) writeJSON(name string, v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	b = append(b, '\n')
	return b, w.writeRaw(name, b)
}

// writeCompact writes v as compact JSON (manifests can hold many entries).
func (w *writer) writeCompact(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return w.writeRaw(name, append(b, '\n'))
}

// writeRaw creates name in the new capsule directory (no-replace, no-follow);
// the next barrier makes it and its directory entry durable.
func (w *writer) writeRaw(name string, b []byte) error {
	f, err := os.OpenFile(filepath.Join(w.dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, fsutil.FileMode)
	if err != nil {
		return fmt.Errorf("write capsule %s: %w", name, err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("write capsule %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	w.unsynced = append(w.unsynced, name)
	w.sums[name] = fileSum{Path: name, Size: int64(len(b)), SHA256: sumBytes(b)}
	return nil
}

// barrier makes the files written and the events appended so far, every
// directory entry created so far and whatever extra syncs durable. The
// fsyncs are issued at once, so the filesystem can commit them together
// instead of one journal commit each.
func (w *writer) barrier(extra ...func() error) error {
	syncPath := func(p string, what string) func() error {
		return func() error {
			f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("sync %s: %w", what, err)
			}
			err = f.Sync()
			f.Close()
			if err != nil {
				return fmt.Errorf("sync %s: %w", what, err)
			}
			return nil
		}
	}
	fns := append([]func() error{}, extra...)
	for _, n := range w.unsynced {
		fns = append(fns, syncPath(filepath.Join(w.dir, n), "capsule "+n))
	}
	fns = append(fns, syncPath(filepath.Join(w.dir, FileEvents), "events"))
	if _, err := os.Lstat(filepath.Join(w.dir, DirBackups)); err == nil {
		fns = append(fns, func() error { return fsutil.SyncDir(filepath.Join(w.dir, DirBackups)) })
	}
	fns = append(fns, func() error { return fsutil.SyncDir(w.dir) })
	if err := runAll(fns); err != nil {
		return err
	}
	w.unsynced = w.unsynced[:0]
	return nil
}

// event appends one redacted event line; barrier makes it durable.
func (w *writer) event(kind string, fields map[string]any) error {
	w.seq++
	red, _ := redact.Value(fields)
	line, err := json.Marshal(map[string]any{"seq": w.seq, "time": w.now().UTC().Format(time.RFC3339Nano), "event": kind, "fields": red})
	if err != nil {
		return err
	}
	line = append(line, '\n')
	if err := appendFile(filepath.Join(w.dir, FileEvents), line, false); err != nil {
		return err
	}
	w.events.Write(line)
	return nil
}

// appendDurable appends data to a regular file (no-follow) and fsyncs it.
func appendDurable(path string, data []byte) error { return appendFile(path, data, true) }

// appendFile appends data to a regular file (no-follow), fsyncing when sync is set.
func appendFile(path string, data []byte, sync bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, fsutil.FileMode)
	if err != nil {
		return fmt.Errorf("append %s: %w", filepath.Base(path), err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("append %s: %w", filepath.Base(path), err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// tampered compares the on-disk bytes of what w wrote with what it wrote.
func (w *writer) tampered() []string {
	var bad []string
	names := make([]string, 0, len(w.sums))
	for n := range w.sums {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := w.sums[n]
		if id, ok := w.statOnly[n]; ok {
			var st unix.Stat_t
			if unix.Lstat(filepath.Join(w.dir, n), &st) != nil || statIDOf(&st) != id {
				bad = append(bad, n)
			}
			continue
		}
		b, err := fsutil.ReadFileNoFollow(filepath.Join(w.dir, n), MaxCapsuleFileBytes)
		if err != nil || sumBytes(b) != s.SHA256 {
			bad = append(bad, n)
		}
	}
	b, err := fsutil.ReadFileNoFollow(filepath.Join(w.dir, FileEvents), MaxCapsuleFileBytes)
	if err != nil || !bytes.Equal(b, w.events.Bytes()) {
		bad = append(bad, FileEvents)
	}
	return bad
}

// NewRunID returns a sortable, random run id.
func NewRunID(now time.Time) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return now.UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}

// StateDirs returns <root>/.agentdiff and its runs directory, creating them
// (0700) and refusing a symlinked or foreign state directory.
func StateDirs(root string) (state, runs string, err error) {
	state = filepath.Join(root, StateDir)
	for _, d := range []string{state, filepath.Join(state, "runs")} {
		if fi, err := os.Lstat(d); err == nil && !fi.IsDir() {
			return "", "", fmt.Errorf("%s exists and %w", d, ErrStateSymlink)
		}
		if err := fsutil.MkdirPrivate(d); err != nil {
			return "", "", err
		}
	}
	return state, filepath.Join(state, "runs"), nil
}

// ErrLocked reports a concurrent run or rollback on the same root.
var ErrLocked = errors.New("another agentdiff run or rollback holds the lock on this root")

// tryLock takes the root's exclusive lock without waiting.
func tryLock(state string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(state, "lock"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, fsutil.FileMode)
	if err != nil {
		return nil, fmt.Errorf("open lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if err == unix.EWOULDBLOCK {
			return nil, ErrLocked
		}
		return nil, fmt.Errorf("lock: %w", err)
	}
	return f, nil
}

// lookPath resolves argv0 like execvp, using the PATH from env; a name with
// a slash is taken relative to dir.
func lookPath(argv0, dir string, env []string) (string, error) {
	isExec := func(p string) error {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return fmt.Errorf("%s is not an executable regular file", p)
		}
		return nil
	}
	if strings.Contains(argv0, "/") {
		p := argv0
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		return p, isExec(p)
	}
	pathEnv := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" || !filepath.IsAbs(d) {
			continue // relative PATH entries would depend on the working directory
		}
		p := filepath.Join(d, argv0)
		if isExec(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("executable %q not found in PATH", argv0)
}

// heldLocation is where the directory held open as /proc/self/fd/N is now.
func heldLocation(held string) string {
	p, err := os.Readlink(held)
	if err != nil {
		return held
	}
	return p
}

// watchedRelist returns the directories the after manifest re-lists, or nil
// (list the whole tree) when the watch cannot vouch; it records the choice
// in rt.AfterListing.
func watchedRelist(watch *dirWatch, before []*ManifestEntry, rt *Runtime) map[string]bool {
	if watch == nil {
		return nil
	}
	dirty, err := watch.dirty()
	switch {
	case err != nil:
		rt.AfterListing = "full: " + err.Error()
		return nil
	case rt.Cleanup != nil && rt.Cleanup.Remaining > 0:
		rt.AfterListing = "full: processes of the command's group survived cleanup"
		return nil
	}
	for _, e := range before {
		if e.Type == "file" && e.Nlink > 1 {
			dirty[parentDir(e.Path)] = true // a write through another link is not reported here
		}
	}
	relist := relistSet(dirty)
	rt.AfterListing = fmt.Sprintf("watched: %d of %d directories re-listed", len(relist), watch.watched())
	return relist
}

// rebaseThreshold is the number of changes to the base above which a run
// writes a new base manifest.
func rebaseThreshold(entries int) int { return max(1024, entries/32) }

func derefAll(es []*ManifestEntry) []ManifestEntry {
	if len(es) == 0 {
		return nil
	}
	out := make([]ManifestEntry, len(es))
	for i, e := range es {
		out[i] = *e
	}
	return out
}

// cacheFiles returns the regular files of the post-run state the stat cache
// records beside its base: those that differ from it or were re-hashed.
func cacheFiles(bs *beforeState, as *afterState, newBase bool) []*ManifestEntry {
	changed := make(map[string]*ManifestEntry, len(as.changes))
	var out []*ManifestEntry
	for _, c := range as.changes {
		if c.before != nil {
			changed[c.before.Path] = c.after
		}
		if c.after.Type == "file" {
			out = append(out, c.after)
		}
	}
	gone := make(map[string]bool, len(as.removed))
	for _, r := range as.removed {
		gone[r.Path] = true
	}
	if newBase {
		return out
	}
	for _, e := range bs.entries {
		if e.Type != "file" || gone[e.Path] || changed[e.Path] != nil {
			continue
		}
		if !e.inBase || e.refreshed {
			out = append(out, e)
		}
	}
	return out
}

// linkBase hard-links the base manifest into the capsule; the seal covers
// it by its name (its digest), and tampered compares its stat identity.
func (w *writer) linkBase(src, sum string) error {
	dst := filepath.Join(w.dir, FileBase)
	if err := os.Link(src, dst); err != nil {
		return fmt.Errorf("link base manifest: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dst, &st); err != nil {
		return err
	}
	w.sums[FileBase] = fileSum{Path: FileBase, Size: st.Size, SHA256: sum}
	if w.statOnly == nil {
		w.statOnly = map[string]statID{}
	}
	w.statOnly[FileBase] = statIDOf(&st)
	return nil
}

// sameDir checks that path still names the directory open as f.
func sameDir(f *os.File, path string) error {
	var a, b unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &a); err != nil {
		return err
	}
	if err := unix.Lstat(path, &b); err != nil || a.Dev != b.Dev || a.Ino != b.Ino {
		return fmt.Errorf("capsule directory %s was moved or replaced during the run; its contents were not sealed there", path)
	}
	return nil
}

// linkBackup hard-links a verified object into the capsule's backups/.
func linkBackup(store *objectStore, dir, sum string, w *writer) error {
	bdir := filepath.Join(dir, DirBackups)
	if err := os.Mkdir(bdir, fsutil.DirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if fi, err := os.Lstat(bdir); err != nil || !fi.IsDir() {
		return fmt.Errorf("capsule backups is not a directory")
	}
	dst := filepath.Join(bdir, sum)
	if err := os.Link(store.path(sum), dst); err != nil {
		return fmt.Errorf("link backup: %w", err)
	}
	fi, err := os.Lstat(dst)
	if err != nil {
		return err
	}
	name := DirBackups + "/" + sum
	w.sums[name] = fileSum{Path: name, Size: fi.Size(), SHA256: sum}
	return nil
}

// seal writes integrity.json (no-replace) over everything w wrote: the seal
// covers the bytes agentdiff produced, so later or concurrent mutation shows
// up in verify. Its bytes go to a temporary file that the same barrier as the
// files it covers makes durable (one round of concurrent fsyncs); then it is
// linked under its name and the directory synced. A durable integrity.json
// therefore still implies durable contents, in two rounds of fsyncs instead
// of three (barrier, seal file, directory).
func seal(w *writer, id string) error {
	files := make([]fileSum, 0, len(w.sums)+1)
	for _, s := range w.sums {
		files = append(files, s)
	}
	files = append(files, fileSum{Path: FileEvents, Size: int64(w.events.Len()), SHA256: sumBytes(w.events.Bytes()), AppendOnly: true})
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	in := Integrity{SchemaVersion: SchemaVersion, RunID: id, Algorithm: "sha256", SealedAt: w.now().UTC(), Files: files,
		Note: "checksums detect ordinary mutation; they are not signatures or remote attestation"}
	b, err := json.MarshalIndent(in, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(w.dir, fsutil.TempPrefix+"integrity-")
	if err != nil {
		return fmt.Errorf("seal: %w", err)
	}
	name := tmp.Name()
	defer os.Remove(name)
	_, err = tmp.Write(append(b, '\n'))
	if err == nil {
		err = w.barrier(tmp.Sync)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("seal: %w", err)
	}
	failpointOf(RunFailpointEnv, "seal-synced")
	if err := os.Link(name, filepath.Join(w.dir, FileIntegrity)); err != nil {
		return fmt.Errorf("seal: install %s: %w", FileIntegrity, err)
	}
	if err := os.Remove(name); err != nil {
		return fmt.Errorf("seal: remove temporary file: %w", err)
	}
	return fsutil.SyncDir(w.dir)
}
