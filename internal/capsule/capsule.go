package capsule

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
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/redact"
	"github.com/agentscm/agentscm/internal/scan"
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

// Run executes one transaction and writes its capsule. It returns the result
// and the capsule directory; err is non-nil only when agentdiff itself could
// not produce a sealed capsule (a launch failure is status "error" instead).
func Run(ctx context.Context, o RunOptions) (*Result, string, error) {
	if len(o.Argv) == 0 {
		return nil, "", errors.New("no command given")
	}
	root, err := filepath.Abs(o.Root)
	if err != nil {
		return nil, "", err
	}
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		return nil, "", fmt.Errorf("root %s is not a directory", root)
	}
	pol := o.Policy
	if pol == nil {
		pol = DefaultPolicy()
	}
	if err := pol.Validate(); err != nil {
		return nil, "", err
	}
	polBytes := o.PolicyBytes
	if polBytes == nil {
		polBytes = pol.Marshal()
	}
	state, runs, err := StateDirs(root)
	if err != nil {
		return nil, "", err
	}
	lock, err := tryLock(state)
	if err != nil {
		return nil, "", err
	}
	defer lock.Close()
	store, err := openStore(state)
	if err != nil {
		return nil, "", err
	}
	defer store.close()
	now := time.Now
	id := NewRunID(now())
	dir := filepath.Join(runs, id)
	if err := os.Mkdir(dir, fsutil.DirMode); err != nil {
		return nil, "", fmt.Errorf("create capsule: %w", err)
	}
	// Every capsule write goes through the directory fd we created, via its
	// /proc/self/fd magic link, so a child that renames the capsule directory
	// or swaps a symlink in for it cannot redirect agentdiff's writes.
	dirf, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, dir, fmt.Errorf("open capsule: %w", err)
	}
	defer dirf.Close()
	held := fmt.Sprintf("/proc/self/fd/%d", dirf.Fd())
	if _, err := os.Stat(filepath.Join(held, ".")); err != nil {
		held = dir // no /proc: fall back to the path (checked again before sealing)
	}
	w := &writer{dir: held, sums: map[string]fileSum{}, now: now}
	redArgv, nred := redact.Args(o.Argv)
	task, ntask := redact.String(o.Task)
	meta := Metadata{SchemaVersion: SchemaVersion, RunID: id, Task: task, Command: redArgv, Redactions: nred + ntask,
		CreatedAt: now().UTC(), Root: root, PolicySource: o.PolicySource}
	if err := w.event("run_created", map[string]any{"command": redArgv, "task": task}); err != nil {
		return nil, dir, err
	}
	if _, err := w.writeJSON(FileMetadata, meta); err != nil {
		return nil, dir, err
	}
	if err := w.writeRaw(FilePolicy, polBytes); err != nil {
		return nil, dir, err
	}

	rt := &Runtime{SchemaVersion: SchemaVersion, RunID: id, Backend: Backend, Argv: redArgv, Dir: root, PhaseMS: map[string]int64{}}
	mark := time.Now()
	phase := func(name string) {
		t := time.Now()
		rt.PhaseMS[name] += t.Sub(mark).Milliseconds()
		mark = t
	}
	if o.Timeout > 0 {
		rt.Timeout = o.Timeout.String()
	}
	resolved, resolveErr := lookPath(o.Argv[0], root, o.Env)
	rt.Executable = resolved
	cmdDec := pol.DecideCommand(o.Argv[0], resolved)
	blocked := cmdDec.Decision == Deny
	var execErr error
	if resolveErr != nil && !blocked {
		execErr = resolveErr
	}
	launch := !blocked && execErr == nil
	w.event("command_decision", map[string]any{"executable": o.Argv[0], "resolved": resolved, "decision": string(cmdDec.Decision), "provenance": cmdDec.Provenance.Source})

	var warnings []Warning
	key, kerr := cacheKey(o.KeyDir)
	if kerr != nil {
		key = nil // the cache is an optimisation only
	}
	lst := newLister(root, store)
	// Parse the stat cache's base while the tree is listed.
	cached := make(chan *statCache, 1)
	go func() { cached <- loadStatCache(state, key) }()
	beforeTaken := now().UTC()
	list, err := lst.list(ctx, nil)
	// Add the inotify watches while the listing is merged into the before manifest.
	var watching chan watchResult
	if err == nil && launch && !o.FullListing {
		var dirs []string
		for i := range list {
			if list[i].Type == scan.Dir && !list[i].Skipped {
				dirs = append(dirs, list[i].Path)
			}
		}
		watching = make(chan watchResult, 1)
		go func() {
			w, err := watchDirs(lst.root, dirs)
			watching <- watchResult{w, err}
		}()
		defer func() {
			if watching != nil { // not taken: release it
				(<-watching).w.close()
			}
		}()
	}
	cache := <-cached
	var base []ManifestEntry
	baseSum, baseTaken := "", int64(0)
	if cache != nil {
		base, baseSum, baseTaken = cache.base, cache.baseSum, cache.baseTaken
	}
	var bs *beforeState
	if err == nil {
		bs, err = lst.before(ctx, list, base, cache, pol.Backups, launch)
	}
	list = nil
	incomplete := ""
	if err != nil {
		// Without a complete before-state there is no transaction: refuse to launch.
		if ctx.Err() != nil {
			return nil, dir, fmt.Errorf("before manifest: %w", err)
		}
		execErr = fmt.Errorf("cannot take the before manifest, command not launched: %w", err)
		launch = false
		incomplete = err.Error()
		bs = &beforeState{}
	}
	phase("before_manifest")
	before := &Manifest{SchemaVersion: ManifestSchemaV2, RunID: id, Phase: "before", Root: root, TakenAt: beforeTaken,
		Total: len(bs.entries), BackupSkipped: bs.skipped, Incomplete: incomplete}
	newBase := false
	if incomplete == "" {
		// A new base when there is none or the changes to it have grown.
		// (Re-hashed entries count: the stat cache lists them beside the base.)
		if baseSum == "" || len(bs.changes)+len(bs.removed)+bs.refreshed > rebaseThreshold(len(bs.entries)) {
			sum, _, err := writeBase(state, bs.entries)
			if err != nil {
				return nil, dir, err
			}
			baseSum, baseTaken, newBase = sum, beforeTaken.UnixNano(), true
			bs.changes, bs.removed = nil, nil
		}
		if err := w.linkBase(filepath.Join(state, dirBases, baseSum), baseSum); err != nil {
			return nil, dir, err
		}
		nBase := len(base)
		if newBase {
			nBase = len(bs.entries)
		}
		before.Base = &ManifestBase{File: FileBase, SHA256: baseSum, Entries: nBase}
		before.Changes, before.Removed = derefAll(bs.changes), bs.removed
	}
	before.RawNames = rawNamesOf(before)
	if err := w.writeCompact(FileBefore, before); err != nil {
		return nil, dir, err
	}
	w.event("before_manifest", map[string]any{"entries": len(bs.entries), "changes_to_base": len(bs.changes) + len(bs.removed), "new_base": newBase})
	phase("write_before")

	portsBefore, perr := listeningPorts()
	rt.Ports = PortObservation{Source: "NETLINK_SOCK_DIAG (TCP_LISTEN), else /proc/net/tcp,/proc/net/tcp6", Before: portsBefore,
		Caveats: "machine-wide observation of listening TCP sockets before, every 100 ms while the command runs, once before its process group is cleaned up, and after: not causal attribution (group_listeners are the sockets a process of the group held open); a socket opened and closed between two samples is not seen"}
	if perr != nil {
		rt.Ports.Error = perr.Error()
	}

	var watch *dirWatch
	// The inotify instance is closed in the background once drained (the
	// kernel removes a watch per directory, 1,101 on the benchmark tree);
	// Run waits for it before returning.
	var watchReleased chan struct{}
	releaseWatch := func() {
		if watch != nil && watchReleased == nil {
			done := make(chan struct{})
			watchReleased = done
			go func(dw *dirWatch) { dw.close(); close(done) }(watch)
		}
	}
	defer func() {
		releaseWatch()
		if watchReleased != nil {
			<-watchReleased
		}
	}()
	if launch {
		if o.FullListing {
			rt.AfterListing = "full: --full-listing"
		} else if watching != nil {
			r := <-watching
			watching = nil
			watch = r.w
			if r.err != nil {
				rt.AfterListing = "full: " + r.err.Error()
			}
		}
		phase("watch")
		w.event("command_started", map[string]any{"argv": redArgv})
		// Everything recorded so far, and the before-state objects, are
		// durable before the command can run.
		if err := w.barrier(store.sync); err != nil {
			return nil, dir, err
		}
		phase("ports_and_barrier")
		sampler := newPortSampler(portsBefore)
		execErr = runCommand(ctx, launchSpec{path: resolved, argv: o.Argv, dir: root, env: o.Env,
			stdin: o.Stdin, stdout: o.Stdout, stderr: o.Stderr, timeout: o.Timeout, ports: sampler}, rt)
		sampler.report(&rt.Ports)
		if execErr != nil && !rt.Launched {
			rt.LaunchError = execErr.Error()
		}
		fields := map[string]any{"launched": rt.Launched}
		if rt.Exit != nil {
			fields["exit_code"], fields["signal"], fields["timed_out"] = rt.Exit.ExitCode, rt.Exit.Signal, rt.Exit.TimedOut
		}
		if rt.Cleanup != nil {
			fields["descendants"] = len(rt.Cleanup.Descendants)
		}
		w.event("command_finished", fields)
	} else if execErr != nil {
		rt.LaunchError = execErr.Error()
	}
	phase("command")
	portsAfter, perr := listeningPorts()
	rt.Ports.After = portsAfter
	if perr != nil && rt.Ports.Error == "" {
		rt.Ports.Error = perr.Error()
	}
	if rt.Ports.During == nil {
		rt.Ports.During, rt.Ports.GroupListeners = []string{}, []GroupListener{}
	}
	// Opened: listening after the run, or held by the command's group at a
	// sample (machine-wide sockets seen only in samples stay in During).
	seen := append([]string{}, portsAfter...)
	for _, g := range rt.Ports.GroupListeners {
		seen = append(seen, g.Addr)
	}
	slices.Sort(seen)
	seen = slices.Compact(seen)
	rt.Ports.Opened, _ = diffSorted(portsBefore, seen)
	_, rt.Ports.Closed = diffSorted(portsBefore, portsAfter)
	if rt.Cleanup == nil {
		rt.Cleanup = &ProcessCleanup{Descendants: []Descendant{}, Note: "command was not launched"}
	}

	as := &afterState{}
	afterTaken := now().UTC()
	if launch {
		// Finish the capsule even when the run was interrupted: the command ran.
		relist := watchedRelist(watch, bs.entries, rt)
		releaseWatch()
		as, err = lst.takeAfter(context.WithoutCancel(ctx), bs.entries, beforeTaken, relist)
		if errors.Is(err, errRelist) {
			rt.AfterListing = "full: " + err.Error()
			as, err = lst.takeAfter(context.WithoutCancel(ctx), bs.entries, beforeTaken, nil)
		}
		if err != nil {
			return nil, dir, fmt.Errorf("after manifest: %w", err)
		}
	}
	phase("after_manifest")
	changes, bi, ai := classifyDelta(as)
	after := &Manifest{SchemaVersion: ManifestSchemaV2, RunID: id, Phase: "after", Root: root, TakenAt: afterTaken, Incomplete: incomplete,
		Base: &ManifestBase{File: FileBefore, Entries: len(bs.entries)}, Total: len(bs.entries) - len(as.removed)}
	for _, c := range as.changes {
		after.Changes = append(after.Changes, *c.after)
		if c.before == nil {
			after.Total++
		}
	}
	for _, r := range as.removed {
		after.Removed = append(after.Removed, r.Path)
	}
	// Verify and link the before-state content of changed files into backups/.
	verified := map[string]bool{}
	var tamperedObjects []string
	for _, c := range changes {
		b := bi[c.Path]
		if b == nil || b.Type != "file" || !b.Backup || verified[b.SHA256] {
			continue
		}
		if c.Change == Modified && !containsStr(c.Aspects, "content") && !containsStr(c.Aspects, "type") {
			continue
		}
		ok, _ := store.verify(b.SHA256)
		if !ok {
			tamperedObjects = append(tamperedObjects, b.SHA256)
			store.drop(b.SHA256)
			continue
		}
		if err := linkBackup(store, w.dir, b.SHA256, w); err != nil {
			return nil, dir, err
		}
		verified[b.SHA256] = true
	}
	// The stat cache is written while the capsule is finished and sealed
	// (an optimisation: failure only costs hashing next time; it records
	// what the listings saw, whether or not the capsule seals). Run waits
	// for it before returning.
	if launch && incomplete == "" {
		saved := make(chan struct{})
		go func() {
			defer close(saved)
			_ = saveStatCache(state, key, baseSum, baseTaken, beforeTaken, cacheFiles(bs, as, newBase), store)
			if newBase {
				pruneBases(state, baseSum)
			}
		}()
		defer func() { <-saved }()
	}
	for i := range changes {
		c := &changes[i]
		d := pol.DecidePath(c.Path)
		c.Decision, c.Provenance = d.Decision, d.Provenance
		c.Recovery = recoveryFor(*c, bi[c.Path], ai[c.Path], verified)
	}
	warnings = append(warnings, unbackedWarnings(changes, bi, pol.Backups)...)
	if len(tamperedObjects) > 0 {
		warnings = append(warnings, Warning{Code: "capsule_tampered", Message: fmt.Sprintf("%d before-state backup objects changed during the run; their paths have no recovery evidence", len(tamperedObjects))})
	}
	written := bytesWritten(changes, ai)
	dur := time.Duration(rt.DurationMS) * time.Millisecond
	violations := checkLimits(pol.Limits, changes, written, dur)
	if rt.Cleanup != nil && len(rt.Cleanup.Descendants) > 0 {
		warnings = append(warnings, Warning{Code: "descendants_killed", Message: fmt.Sprintf("%d processes in the command's process group were still running and were killed", len(rt.Cleanup.Descendants))})
	}
	if rt.Cleanup != nil && rt.Cleanup.Remaining > 0 {
		warnings = append(warnings, Warning{Code: "descendants_remaining", Message: fmt.Sprintf("%d processes of the command's process group survived cleanup", rt.Cleanup.Remaining)})
	}
	// Only the sockets the command's own process group held are the
	// command's: they warn and count in the blast radius. The others are
	// machine-wide point-in-time observations (seed 001), reported without
	// raising either.
	var machine []Warning
	if len(rt.Ports.GroupListeners) > 0 {
		var held []string
		for _, g := range rt.Ports.GroupListeners {
			held = append(held, fmt.Sprintf("%s (pid %d %s)", g.Addr, g.PID, g.Comm))
		}
		warnings = append(warnings, Warning{Code: "listening_ports_opened", Message: "the command's process group held listening TCP sockets during the run: " + strings.Join(held, ", ")})
	}
	if others := portsOutsideGroup(rt.Ports); len(others) > 0 {
		machine = append(machine, Warning{Code: "listening_ports_opened_elsewhere", Message: "listening TCP sockets appeared on the machine during the run, not held by the command's process group (machine-wide, not attributed): " + strings.Join(others, ", ")})
	}
	if rt.Cancelled {
		warnings = append(warnings, Warning{Code: "cancelled", Message: "agentdiff was interrupted while the command ran and killed its process group"})
	}
	if rt.Ports.Error != "" {
		warnings = append(warnings, Warning{Code: "port_observation_incomplete", Message: rt.Ports.Error})
	}

	after.RawNames = rawNamesOf(after)
	if err := w.writeCompact(FileAfter, after); err != nil {
		return nil, dir, err
	}
	phase("classify_and_write_after")
	if _, err := w.writeJSON(FileRuntime, rt); err != nil {
		return nil, dir, err
	}
	// Did anything rewrite what agentdiff had written while the command ran?
	tampered := w.tampered()
	if len(tampered) > 0 {
		warnings = append(warnings, Warning{Code: "capsule_tampered", Message: "capsule files changed on disk while the command ran: " + strings.Join(tampered, ", ") + "; the seal covers what agentdiff wrote, so verify reports them"})
	}
	nTamper := len(tampered) + len(tamperedObjects)
	// A command that moved its own capsule directory, or put something else
	// in its place, did not stop the capsule: every write went through the
	// held directory, which is sealed where it now is, and the result and
	// events say where that is and why.
	moved := ""
	if held != dir && sameDir(dirf, dir) != nil {
		moved = heldLocation(held)
		warnings = append(warnings, Warning{Code: "capsule_moved", Message: fmt.Sprintf("the capsule directory %s was moved or replaced during the run; agentdiff kept writing to it and sealed it at %s", dir, moved)})
		nTamper++
	}

	outcome := Allow
	if cmdDec.Decision == Review {
		outcome = Review
	}
	for _, c := range changes {
		outcome = Stronger(outcome, c.Decision)
	}
	if len(violations) > 0 || nTamper > 0 {
		outcome = Deny
	}
	if warnings == nil {
		warnings = []Warning{}
	}
	if changes == nil {
		changes = []Change{}
	}
	res := &Result{
		SchemaVersion: SchemaVersion, RunID: id, SafetyOutcome: outcome, CommandDecision: cmdDec,
		Changes: changes, LimitViolations: violations, ObservationWarnings: warnings, MachineObservations: machine,
		BlastRadius: blastRadius(changes, written, len(violations), len(rt.Cleanup.Descendants), len(rt.Ports.GroupListeners), nTamper),
		Runtime: RuntimeSummary{Launched: rt.Launched, Exit: rt.Exit, DurationMS: rt.DurationMS,
			Descendants: len(rt.Cleanup.Descendants), PortsOpened: rt.Ports.Opened, PortsClosed: rt.Ports.Closed},
	}
	if execErr != nil {
		msg, _ := redact.String(execErr.Error())
		res.ExecutionError = &msg
	}
	res.Status = finalStatus(blocked, execErr, rt.Exit, outcome, len(warnings))
	setRawPaths(res.Changes)
	if _, err := w.writeJSON(FileResult, res); err != nil {
		return nil, dir, err
	}
	if err := w.event("run_finished", map[string]any{"status": res.Status, "safety_outcome": string(outcome), "changes": len(changes)}); err != nil {
		return nil, dir, err
	}
	if moved != "" {
		if err := w.event("capsule_moved", map[string]any{"from": dir, "to": moved}); err != nil {
			return nil, dir, err
		}
		dir = moved
	} else if err := sameDir(dirf, dir); err != nil {
		return nil, dir, err
	}
	if err := seal(w, id); err != nil {
		return nil, dir, err
	}
	return res, dir, nil
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
