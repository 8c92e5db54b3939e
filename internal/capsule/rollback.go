package capsule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/scan"
	"golang.org/x/sys/unix"
)

// Rollback outcomes per path.
const (
	OutcomeRolledBack = "rolled_back"
	OutcomeAlready    = "already_rolled_back"
	OutcomeConflict   = "conflict"
	OutcomeNotRecov   = "not_recoverable"
	OutcomeError      = "error"
)

// Rollback statuses.
const (
	RollbackComplete = "complete" // every selected path is back to its before-state
	RollbackPartial  = "partial"  // conflicts, unrecoverable paths or errors remain
)

// RollbackItem is the outcome for one path.
type RollbackItem struct {
	Path string `json:"path"`
	// PathRaw holds Path byte-exact when it is not valid UTF-8 (names.go).
	PathRaw []byte `json:"path_raw,omitempty"`
	Change  string `json:"change"`
	Action  string `json:"action"`
	Outcome string `json:"outcome"`
	Reason  string `json:"reason,omitempty"`
}

// RollbackAttempt is one rollback invocation.
type RollbackAttempt struct {
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	Selected   []string  `json:"selected_paths"` // --path arguments; empty means all
	// SafeOnly: only the changes decided review or deny were selected.
	SafeOnly bool           `json:"safe_only,omitempty"`
	Status   string         `json:"status"`
	Items    []RollbackItem `json:"items"`
	// ClearedTemporaries names the temporary copies an earlier, interrupted
	// rollback left in .agentdiff/tmp, removed before this one started.
	ClearedTemporaries []string `json:"cleared_temporaries,omitempty"`
}

// RollbackResult is rollback-result.json: every attempt on this capsule, oldest first.
type RollbackResult struct {
	SchemaVersion int               `json:"schema_version"`
	RunID         string            `json:"run_id"`
	Attempts      []RollbackAttempt `json:"attempts"`
}

// ErrNoSuchChange reports a --path that names no recorded change.
var ErrNoSuchChange = errors.New("no recorded change at or below that path")

// loadCapsule reads and cross-checks the verified capsule's manifests and
// result (checkCapsule) and refuses incomplete manifests.
func loadCapsule(dir string) (before, after *Manifest, res *Result, err error) {
	before, after, res, err = checkCapsule(dir)
	if err != nil {
		return nil, nil, nil, err
	}
	if before.Incomplete != "" || after.Incomplete != "" {
		return nil, nil, nil, errors.New("the capsule's manifests are incomplete; nothing to roll back")
	}
	return before, after, res, nil
}

// checkCapsule reads and cross-checks a capsule's manifests and result:
// every path must be safe and result.json must agree with the manifests.
// Verify and rollback both run it.
func checkCapsule(dir string) (before, after *Manifest, res *Result, err error) {
	before, after, res = &Manifest{}, &Manifest{}, &Result{}
	for _, x := range []struct {
		name string
		v    any
	}{{FileBefore, before}, {FileAfter, after}, {FileResult, res}} {
		if err := readJSON(dir, x.name, x.v); err != nil {
			return nil, nil, nil, err
		}
	}
	if err := res.applyRawPaths(); err != nil {
		return nil, nil, nil, err
	}
	if err := before.resolve(dir, nil); err != nil {
		return nil, nil, nil, fmt.Errorf("before.json: %w", err)
	}
	if err := before.validate(); err != nil {
		return nil, nil, nil, fmt.Errorf("before.json: %w", err)
	}
	if err := after.resolve(dir, before); err != nil {
		return nil, nil, nil, fmt.Errorf("after.json: %w", err)
	}
	if err := after.validate(); err != nil {
		return nil, nil, nil, fmt.Errorf("after.json: %w", err)
	}
	want := diff(before, after)
	if len(want) != len(res.Changes) {
		return nil, nil, nil, fmt.Errorf("result.json lists %d changes, the manifests show %d", len(res.Changes), len(want))
	}
	for i, c := range res.Changes {
		if err := validRel(c.Path); err != nil {
			return nil, nil, nil, fmt.Errorf("result.json: %w", err)
		}
		if c.Path != want[i].Path || c.Change != want[i].Change {
			return nil, nil, nil, fmt.Errorf("result.json change %q (%s) disagrees with the manifests", c.Path, c.Change)
		}
	}
	return before, after, res, nil
}

// RollbackOptions select paths (exact paths or directories whose recorded
// changes below are selected); empty selects every change.
type RollbackOptions struct {
	Paths []string
	// SafeOnly keeps only the changes the run's policy decided review or
	// deny (result.json), leaving allowed work in place.
	SafeOnly bool
}

// Rollback restores the before-state of a verified capsule's changes. A path
// changes only when its current state equals the recorded post-run state;
// deleted files are recreated from verified backups without replacing
// anything that appeared since; conflicts are reported, never overwritten.
// Afterwards rollback-result.json and recovery events are added and sealed by
// a new integrity-rollback-<n>.json that chains to the previous seal.
func Rollback(ctx context.Context, root, id string, o RollbackOptions) (*RollbackAttempt, *VerifyReport, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, nil, err
	}
	if _, err := CapsuleDir(root, id); err != nil {
		return nil, nil, err
	}
	// Hold the state and capsule directories, opened through a no-follow
	// openat chain from the root, and work through those fds: a symlink
	// swapped in for .agentdiff or .agentdiff/runs cannot redirect a write.
	stateDir, err := scan.OpenDir(root, StateDir)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w: %w", StateDir, ErrStateSymlink, err)
	}
	defer stateDir.Close()
	capDir, err := scan.OpenDir(root, StateDir+"/runs/"+id)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("capsule %s not found (or not a directory)", id)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("open capsule %s: %w: %w", id, ErrStateSymlink, err)
	}
	defer capDir.Close()
	state, dir := heldPath(stateDir), heldPath(capDir)
	lock, err := tryLock(state)
	if err != nil {
		return nil, nil, err
	}
	defer lock.Close()
	cleared, err := clearRollbackTemps(state)
	if err != nil {
		return nil, nil, err
	}
	rep, err := verifyCapsule(ctx, dir, id)
	if err != nil {
		return nil, nil, err
	}
	rep.ClearedTemporaries = cleared
	if !rep.OK {
		return nil, rep, fmt.Errorf("%w: refusing to roll back (run agentdiff verify %s)", ErrUnverified, id)
	}
	before, after, res, err := loadCapsule(dir)
	if err != nil {
		return nil, rep, fmt.Errorf("%w: %w", ErrUnverified, err)
	}
	var prior RollbackResult
	if rep.Rollbacks > 0 {
		if err := readJSON(dir, FileRollbackResult, &prior); err != nil {
			return nil, rep, fmt.Errorf("%w: %w", ErrUnverified, err)
		}
	} else {
		prior = RollbackResult{SchemaVersion: SchemaVersion, RunID: id, Attempts: []RollbackAttempt{}}
	}
	changes := diff(before, after)
	if o.SafeOnly {
		changes = notAllowed(changes, res.Changes)
	}
	sel, err := selectChanges(changes, o.Paths)
	if err != nil {
		return nil, rep, err
	}
	tmp, err := openTmpDir(state)
	if err != nil {
		return nil, rep, err
	}
	defer tmp.Close()
	att := &RollbackAttempt{StartedAt: time.Now().UTC(), Selected: append([]string{}, o.Paths...), SafeOnly: o.SafeOnly, Items: []RollbackItem{}, ClearedTemporaries: cleared}
	rb := &roller{root: root, dir: dir, id: id, tmp: tmp, bi: before.index(), ai: after.index()}
	att.Items = rb.run(ctx, sel)
	for i := range att.Items {
		if !utf8.ValidString(att.Items[i].Path) {
			att.Items[i].PathRaw = []byte(att.Items[i].Path)
		}
	}
	att.FinishedAt = time.Now().UTC()
	att.Status = RollbackComplete
	for _, it := range att.Items {
		if it.Outcome != OutcomeRolledBack && it.Outcome != OutcomeAlready {
			att.Status = RollbackPartial
		}
	}
	failpoint("before-seal")
	prior.Attempts = append(prior.Attempts, *att)
	if err := sealRollback(dir, id, rep.Rollbacks+1, &prior, att); err != nil {
		return att, rep, err
	}
	return att, rep, nil
}

// heldPath names an open directory through /proc/self/fd, so path-based
// calls below it resolve through the held directory; without /proc it is
// the directory's own path.
func heldPath(d *os.File) string {
	p := fmt.Sprintf("/proc/self/fd/%d", d.Fd())
	if _, err := os.Stat(filepath.Join(p, ".")); err != nil {
		return d.Name()
	}
	return p
}

// notAllowed keeps the changes whose recorded decision (result.json, which
// checkCapsule has matched to the manifests path by path) is review or deny.
func notAllowed(changes, recorded []Change) []Change {
	decided := make(map[string]Decision, len(recorded))
	for _, c := range recorded {
		decided[c.Path] = c.Decision
	}
	var out []Change
	for _, c := range changes {
		if d := decided[c.Path]; d == Review || d == Deny {
			out = append(out, c)
		}
	}
	return out
}

func selectChanges(changes []Change, paths []string) ([]Change, error) {
	if len(paths) == 0 {
		return changes, nil
	}
	var out []Change
	for _, p := range paths {
		p = strings.TrimSuffix(filepath.ToSlash(filepath.Clean(p)), "/")
		if err := validRel(p); err != nil {
			return nil, err
		}
		n := 0
		for _, c := range changes {
			if c.Path == p || strings.HasPrefix(c.Path, p+"/") {
				if !containsChange(out, c.Path) {
					out = append(out, c)
				}
				n++
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("%w: %q", ErrNoSuchChange, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func containsChange(cs []Change, p string) bool {
	for _, c := range cs {
		if c.Path == p {
			return true
		}
	}
	return false
}

type roller struct {
	root, dir, id string
	tmp           *os.File // <root>/.agentdiff/tmp: temporary copies are written here, never in the workspace
	bi, ai        map[string]*ManifestEntry
}

func depth(p string) int { return strings.Count(p, "/") }

// run applies the selected changes in a safe order: remove post-run objects
// deepest first, recreate before-state directories shallowest first, then
// restore file content and modes.
func (r *roller) run(ctx context.Context, sel []Change) []RollbackItem {
	items := map[string]*RollbackItem{}
	var order []string
	for _, c := range sel {
		it := &RollbackItem{Path: c.Path, Change: c.Change}
		items[c.Path] = it
		order = append(order, c.Path)
		b, a := r.bi[c.Path], r.ai[c.Path]
		if (b != nil && (b.Type == "symlink" || b.Type == "other")) || (a != nil && (a.Type == "symlink" || a.Type == "other")) {
			it.Action, it.Outcome, it.Reason = "none", OutcomeNotRecov, "symlinks and special files are recorded, not recoverable"
			continue
		}
		cur, err := r.current(c.Path)
		if err != nil {
			it.Action, it.Outcome, it.Reason = "none", OutcomeConflict, err.Error()
			continue
		}
		switch {
		case r.equals(cur, c.Path, a):
			it.Action = "pending"
		case r.equals(cur, c.Path, b):
			it.Action, it.Outcome, it.Reason = "none", OutcomeAlready, "current state already equals the before-state"
		default:
			it.Action, it.Outcome, it.Reason = "none", OutcomeConflict, "current state differs from the recorded post-run state (later work is kept)"
		}
	}
	pending := func(p string) bool { return items[p].Action == "pending" }
	// Phase 1: remove post-run objects that must go (created paths, type changes), deepest first.
	var removals []string
	for _, p := range order {
		b, a := r.bi[p], r.ai[p]
		if pending(p) && a != nil && (b == nil || b.Type != a.Type) {
			removals = append(removals, p)
		}
	}
	sort.Slice(removals, func(i, j int) bool {
		if depth(removals[i]) != depth(removals[j]) {
			return depth(removals[i]) > depth(removals[j])
		}
		return removals[i] > removals[j]
	})
	for _, p := range removals {
		it := items[p]
		if err := r.remove(p, r.ai[p]); err != nil {
			it.Action, it.Outcome, it.Reason = "remove", OutcomeConflict, err.Error()
			continue
		}
		if r.bi[p] == nil {
			it.Action, it.Outcome = "removed", OutcomeRolledBack
		}
	}
	// Phase 2: recreate before-state directories, shallowest first.
	var dirs []string
	for _, p := range order {
		b, a := r.bi[p], r.ai[p]
		if pending(p) && b != nil && b.Type == "dir" && (a == nil || a.Type != "dir") {
			dirs = append(dirs, p)
		}
	}
	sort.Slice(dirs, func(i, j int) bool {
		if depth(dirs[i]) != depth(dirs[j]) {
			return depth(dirs[i]) < depth(dirs[j])
		}
		return dirs[i] < dirs[j]
	})
	for _, p := range dirs {
		it := items[p]
		if err := r.mkdir(p, r.bi[p]); err != nil {
			it.Action, it.Outcome, it.Reason = "recreate_dir", OutcomeConflict, err.Error()
			continue
		}
		it.Action, it.Outcome = "recreated_dir", OutcomeRolledBack
	}
	// Phase 3: files and modes.
	for _, p := range order {
		if err := ctx.Err(); err != nil {
			break
		}
		it := items[p]
		if it.Action != "pending" {
			continue
		}
		b, a := r.bi[p], r.ai[p]
		var err error
		switch {
		case b.Type == "file" && a != nil && a.Type == "file" && b.SHA256 == a.SHA256:
			it.Action = "restore_mode"
			err = r.chmod(p, a, b)
		case b.Type == "dir" && a != nil && a.Type == "dir":
			it.Action = "restore_mode"
			err = r.chmod(p, a, b)
		case b.Type == "file":
			it.Action = "restore_backup"
			err = r.restoreFile(p, b, a)
		default:
			err = fmt.Errorf("unsupported change %s -> %v", b.Type, a)
		}
		if err != nil {
			it.Outcome, it.Reason = OutcomeConflict, err.Error()
			if errors.Is(err, errNoBackup) {
				it.Outcome = OutcomeNotRecov
			}
			continue
		}
		it.Outcome = OutcomeRolledBack
	}
	out := make([]RollbackItem, 0, len(order))
	for _, p := range order {
		if items[p].Action == "pending" {
			items[p].Action, items[p].Outcome, items[p].Reason = "none", OutcomeError, "interrupted"
		}
		out = append(out, *items[p])
	}
	return out
}

// current stats path now; nil means absent. A symlink ancestor is an error.
func (r *roller) current(p string) (*scan.Entry, error) {
	e, err := scan.Lstat(r.root, p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot inspect current state: %w", err)
	}
	return e, nil
}

// equals compares the current object with a manifest entry (nil = absent).
func (r *roller) equals(cur *scan.Entry, p string, m *ManifestEntry) bool {
	if m == nil || cur == nil {
		return m == nil && cur == nil
	}
	if cur.Type.String() != m.Type || modeString(cur.Mode) != m.Mode {
		return false
	}
	switch m.Type {
	case "file":
		if cur.Size != m.Size {
			return false
		}
		f, err := scan.OpenFile(r.root, p)
		if err != nil {
			return false
		}
		defer f.Close()
		sum, err := hashReader(f, cur.Size, make([]byte, 64<<10), nil)
		return err == nil && sum == m.SHA256
	case "symlink":
		return cur.Target == m.Target
	}
	return true
}

func splitParent(p string) (string, string) {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i], p[i+1:]
	}
	return "", p
}

// remove deletes the post-run object at p (a file or an empty directory).
func (r *roller) remove(p string, a *ManifestEntry) error {
	parent, name := splitParent(p)
	d, err := scan.OpenDir(r.root, parent)
	if err != nil {
		return err
	}
	defer d.Close()
	flags := 0
	if a.Type == "dir" {
		flags = unix.AT_REMOVEDIR
	}
	if err := unix.Unlinkat(int(d.Fd()), name, flags); err != nil {
		if err == unix.ENOTEMPTY || err == unix.EEXIST {
			return errors.New("directory is not empty: it holds later work, kept")
		}
		return fmt.Errorf("remove: %w", err)
	}
	return d.Sync()
}

func (r *roller) mkdir(p string, b *ManifestEntry) error {
	parent, name := splitParent(p)
	d, err := scan.OpenDir(r.root, parent)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.Mkdirat(int(d.Fd()), name, 0o700); err != nil {
		if err == unix.EEXIST {
			return errors.New("something appeared at this path since the run; not replaced")
		}
		return fmt.Errorf("mkdir: %w", err)
	}
	sub, err := scan.OpenDir(r.root, p)
	if err != nil {
		return err
	}
	defer sub.Close()
	if err := unix.Fchmod(int(sub.Fd()), scan.UnixMode(b.modeBits)); err != nil {
		return err
	}
	return d.Sync()
}

func (r *roller) chmod(p string, a, b *ManifestEntry) error {
	var f *os.File
	var err error
	if b.Type == "dir" {
		f, err = scan.OpenDir(r.root, p)
	} else {
		f, err = scan.OpenFile(r.root, p)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	if modeString(scan.ModeFromUnix(uint32(st.Mode))) != a.Mode {
		return errors.New("mode changed since the check; kept")
	}
	return unix.Fchmod(int(f.Fd()), scan.UnixMode(b.modeBits))
}

var errNoBackup = errors.New("no verified backup of the before-state content")

// restoreFile writes the verified backup to a temporary file in
// .agentdiff/tmp and renames it into place: over the post-run file
// (re-checked just before the rename) or, for a deleted path, with
// RENAME_NOREPLACE so nothing that appeared since is replaced. A path on
// another filesystem than .agentdiff is not restored (rename cannot cross).
func (r *roller) restoreFile(p string, b, a *ManifestEntry) error {
	if !b.Backup {
		return errNoBackup
	}
	src, err := scan.OpenFile(r.dir, DirBackups+"/"+b.SHA256)
	if err != nil {
		return fmt.Errorf("%w: %w", errNoBackup, err)
	}
	defer src.Close()
	parent, name := splitParent(p)
	d, err := scan.OpenDir(r.root, parent)
	if err != nil {
		return err
	}
	defer d.Close()
	dfd, tfd := int(d.Fd()), int(r.tmp.Fd())
	tmpName := rollbackTempPrefix + r.id + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	fd, err := unix.Openat(tfd, tmpName, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create temporary file: %w", err)
	}
	tmp := os.NewFile(uintptr(fd), tmpName)
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			unix.Unlinkat(tfd, tmpName, 0)
		}
	}()
	sum, err := hashReader(src, b.Size, make([]byte, 64<<10), tmp)
	if err != nil || sum != b.SHA256 {
		return fmt.Errorf("%w: backup does not match its digest", errNoBackup)
	}
	if err := unix.Fchmod(fd, scan.UnixMode(b.modeBits)); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	failpoint("temp-written")
	if a == nil || a.Type != "file" {
		// The path must still be absent: never replace what appeared since.
		if err := fsutil.RenameNoReplace(tfd, tmpName, dfd, name); err != nil {
			if err == unix.EEXIST {
				return errors.New("something appeared at this path since the run; not replaced")
			}
			return renameErr(err)
		}
	} else {
		// Re-check that the post-run file is still the one we hashed.
		cur, err := scan.LstatAt(d, name, p)
		if err != nil || !r.equals(cur, p, a) {
			return errors.New("file changed since the check; later work is kept")
		}
		if err := unix.Renameat(tfd, tmpName, dfd, name); err != nil {
			return renameErr(err)
		}
	}
	ok = true
	tmp.Close()
	if err := r.tmp.Sync(); err != nil {
		return err
	}
	return d.Sync()
}

func renameErr(err error) error {
	if err == unix.EXDEV {
		return errors.New("the path is on another filesystem than .agentdiff; not restored")
	}
	return fmt.Errorf("rename: %w", err)
}

// sealRollback appends recovery events, rewrites rollback-result.json and
// writes integrity-rollback-<n>.json chaining to the previous seal.
func sealRollback(dir, id string, n int, rr *RollbackResult, att *RollbackAttempt) error {
	var lines []byte
	ev := func(kind string, fields map[string]any) {
		b, _ := json.Marshal(map[string]any{"time": time.Now().UTC().Format(time.RFC3339Nano), "event": kind, "fields": fields})
		lines = append(append(lines, b...), '\n')
	}
	ev("rollback_started", map[string]any{"attempt": len(rr.Attempts), "selected_paths": att.Selected})
	for _, it := range att.Items {
		ev("recovery", map[string]any{"path": it.Path, "change": it.Change, "action": it.Action, "outcome": it.Outcome, "reason": it.Reason})
	}
	ev("rollback_finished", map[string]any{"status": att.Status})
	// The events file was verified just before; seal exactly that plus our lines.
	evs, err := readAll(dir, FileEvents)
	if err != nil {
		return err
	}
	evs = append(evs, lines...)
	if err := appendDurable(filepath.Join(dir, FileEvents), lines); err != nil {
		return err
	}
	rb, err := json.MarshalIndent(rr, "", "  ")
	if err != nil {
		return err
	}
	rb = append(rb, '\n')
	if err := fsutil.WriteAtomic(filepath.Join(dir, FileRollbackResult), rb, fsutil.FileMode); err != nil {
		return err
	}
	prevName := FileIntegrity
	if n > 1 {
		prevName = RollbackSealPrefix + strconv.Itoa(n-1) + ".json"
	}
	prev, err := fsutil.ReadFileNoFollow(filepath.Join(dir, prevName), MaxCapsuleFileBytes)
	if err != nil {
		return err
	}
	ext := Integrity{SchemaVersion: SchemaVersion, RunID: id, Algorithm: "sha256", SealedAt: time.Now().UTC(), Sequence: n,
		PreviousSHA256: sumBytes(prev),
		Files: []fileSum{
			{Path: FileEvents, Size: int64(len(evs)), SHA256: sumBytes(evs), AppendOnly: true},
			{Path: FileRollbackResult, Size: int64(len(rb)), SHA256: sumBytes(rb)},
		},
		Note: "post-seal extension written by rollback; chains to the previous seal by SHA-256"}
	b, err := json.MarshalIndent(ext, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteNew(filepath.Join(dir, RollbackSealPrefix+strconv.Itoa(n)+".json"), append(b, '\n'), fsutil.FileMode)
}

func readAll(dir, name string) ([]byte, error) {
	f, err := scan.OpenFile(dir, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return fsutil.ReadBounded(f, MaxCapsuleFileBytes)
}
