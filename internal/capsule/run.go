package capsule

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/redact"
	"github.com/agentscm/agentscm/internal/scan"
	"golang.org/x/sys/unix"
)

// Run executes one transaction and writes its capsule. It returns the result
// and the capsule directory; err is non-nil only when agentdiff itself could
// not produce a sealed capsule (a launch failure is status "error" instead).
//
// The steps: prepare (capsule, metadata, command decision), observeBefore
// (before manifest, ports), launch, observeAfter (after manifest, backups,
// runtime, tampering), judge (pure: the verdict) and finish (result, seal).
func Run(ctx context.Context, o RunOptions) (*Result, string, error) {
	r := &run{o: o}
	defer r.release()
	if err := r.prepare(); err != nil {
		return nil, r.dir, err
	}
	if err := r.observeBefore(ctx); err != nil {
		return nil, r.dir, err
	}
	if err := r.launch(ctx); err != nil {
		return nil, r.dir, err
	}
	obs, err := r.observeAfter(ctx)
	if err != nil {
		return nil, r.dir, err
	}
	res := judge(obs, r.pol)
	if err := r.finish(res, obs.movedTo); err != nil {
		return nil, r.dir, err
	}
	return res, r.dir, nil
}

// run is one transaction's state between the steps of Run.
type run struct {
	o        RunOptions
	pol      *Policy
	root     string
	state    string
	id       string
	dir      string // the capsule directory, once created
	dirf     *os.File
	held     string // the path writes go through (dirf's magic link)
	store    *objectStore
	w        *writer
	rt       *Runtime
	mark     time.Time
	redArgv  []string
	resolved string
	cmdDec   CommandDecision
	blocked  bool
	execErr  error
	launched bool // the command is to be (or was) launched

	key         []byte
	lst         *lister
	bs          *beforeState
	baseSum     string
	baseTaken   int64
	beforeTaken time.Time
	newBase     bool
	incomplete  string
	portsBefore []string

	watching      chan watchResult // the watch being added, until taken
	watch         *dirWatch
	watchReleased chan struct{}

	// releases run in reverse order when Run returns.
	releases []func()
}

func (r *run) deferRelease(f func()) { r.releases = append(r.releases, f) }

// release runs the deferred releases, last first.
func (r *run) release() {
	for i := len(r.releases) - 1; i >= 0; i-- {
		r.releases[i]()
	}
}

// phase adds the time since the previous phase to name's.
func (r *run) phase(name string) {
	t := time.Now()
	r.rt.PhaseMS[name] += t.Sub(r.mark).Milliseconds()
	r.mark = t
}

// prepare validates the request, takes the state lock, creates the capsule
// directory and writes its metadata and policy, and decides the command.
func (r *run) prepare() error {
	o := r.o
	if len(o.Argv) == 0 {
		return errors.New("no command given")
	}
	root, err := filepath.Abs(o.Root)
	if err != nil {
		return err
	}
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		return fmt.Errorf("root %s is not a directory", root)
	}
	r.root = root
	r.pol = o.Policy
	if r.pol == nil {
		r.pol = DefaultPolicy()
	}
	if err := r.pol.Validate(); err != nil {
		return err
	}
	polBytes := o.PolicyBytes
	if polBytes == nil {
		polBytes = r.pol.Marshal()
	}
	state, runs, err := StateDirs(root)
	if err != nil {
		return err
	}
	r.state = state
	lock, err := tryLock(state)
	if err != nil {
		return err
	}
	r.deferRelease(func() { lock.Close() })
	if r.store, err = openStore(state); err != nil {
		return err
	}
	r.deferRelease(r.store.close)
	now := time.Now
	r.id = NewRunID(now())
	dir := filepath.Join(runs, r.id)
	if err := os.Mkdir(dir, fsutil.DirMode); err != nil {
		return fmt.Errorf("create capsule: %w", err)
	}
	r.dir = dir
	// Every capsule write goes through the directory fd we created, via its
	// /proc/self/fd magic link, so a child that renames the capsule directory
	// or swaps a symlink in for it cannot redirect agentdiff's writes.
	dirf, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open capsule: %w", err)
	}
	r.dirf = dirf
	r.deferRelease(func() { dirf.Close() })
	r.held = fmt.Sprintf("/proc/self/fd/%d", dirf.Fd())
	if _, err := os.Stat(filepath.Join(r.held, ".")); err != nil {
		r.held = dir // no /proc: fall back to the path (checked again before sealing)
	}
	r.w = &writer{dir: r.held, sums: map[string]fileSum{}, now: now}
	redArgv, nred := redact.Args(o.Argv)
	task, ntask := redact.String(o.Task)
	r.redArgv = redArgv
	meta := Metadata{SchemaVersion: SchemaVersion, RunID: r.id, Task: task, Command: redArgv, Redactions: nred + ntask,
		CreatedAt: now().UTC(), Root: root, PolicySource: o.PolicySource}
	if err := r.w.event("run_created", map[string]any{"command": redArgv, "task": task}); err != nil {
		return err
	}
	if _, err := r.w.writeJSON(FileMetadata, meta); err != nil {
		return err
	}
	if err := r.w.writeRaw(FilePolicy, polBytes); err != nil {
		return err
	}
	r.rt = &Runtime{SchemaVersion: SchemaVersion, RunID: r.id, Backend: Backend, Argv: redArgv, Dir: root, PhaseMS: map[string]int64{}}
	r.mark = time.Now()
	if o.Timeout > 0 {
		r.rt.Timeout = o.Timeout.String()
	}
	resolved, resolveErr := lookPath(o.Argv[0], root, o.Env)
	r.rt.Executable, r.resolved = resolved, resolved
	r.cmdDec = r.pol.DecideCommand(o.Argv[0], resolved)
	r.blocked = r.cmdDec.Decision == Deny
	if resolveErr != nil && !r.blocked {
		r.execErr = resolveErr
	}
	r.launched = !r.blocked && r.execErr == nil
	r.w.event("command_decision", map[string]any{"executable": o.Argv[0], "resolved": resolved, "decision": string(r.cmdDec.Decision), "provenance": r.cmdDec.Provenance.Source})
	return nil
}

// observeBefore takes the before manifest (adding the inotify watches
// meanwhile when the command will run) and the listening ports. Without a
// complete before-state the command is not launched.
func (r *run) observeBefore(ctx context.Context) error {
	key, kerr := cacheKey(r.o.KeyDir)
	if kerr != nil {
		key = nil // the cache is an optimisation only
	}
	r.key = key
	r.lst = newLister(r.root, r.store)
	// Parse the stat cache's base while the tree is listed.
	cached := make(chan *statCache, 1)
	go func() { cached <- loadStatCache(r.state, key) }()
	r.beforeTaken = time.Now().UTC()
	list, err := r.lst.list(ctx, nil)
	// Add the inotify watches while the listing is merged into the before manifest.
	if err == nil && r.launched && !r.o.FullListing {
		r.startWatch(list)
	}
	cache := <-cached
	var base []ManifestEntry
	if cache != nil {
		base, r.baseSum, r.baseTaken = cache.base, cache.baseSum, cache.baseTaken
	}
	if err == nil {
		r.bs, err = r.lst.before(ctx, list, base, cache, r.pol.Backups, r.launched)
	}
	list = nil
	if err != nil {
		// Without a complete before-state there is no transaction: refuse to launch.
		if ctx.Err() != nil {
			return fmt.Errorf("before manifest: %w", err)
		}
		r.execErr = fmt.Errorf("cannot take the before manifest, command not launched: %w", err)
		r.launched = false
		r.incomplete = err.Error()
		r.bs = &beforeState{}
	}
	r.phase("before_manifest")
	if err := r.writeBefore(len(base)); err != nil {
		return err
	}
	r.phase("write_before")
	portsBefore, perr := listeningPorts()
	r.portsBefore = portsBefore
	r.rt.Ports = PortObservation{Source: "NETLINK_SOCK_DIAG (TCP_LISTEN), else /proc/net/tcp,/proc/net/tcp6", Before: portsBefore,
		Caveats: "machine-wide observation of listening TCP sockets before, every 100 ms while the command runs, once before its process group is cleaned up, and after: not causal attribution (group_listeners are the sockets a process of the group held open); a socket opened and closed between two samples is not seen"}
	if perr != nil {
		r.rt.Ports.Error = perr.Error()
	}
	return nil
}

// startWatch adds the inotify watches on the listed directories in the
// background; launch takes them, or Run releases them.
func (r *run) startWatch(list []scan.Stat) {
	var dirs []string
	for i := range list {
		if list[i].Type == scan.Dir && !list[i].Skipped {
			dirs = append(dirs, list[i].Path)
		}
	}
	ch := make(chan watchResult, 1)
	r.watching = ch
	go func() {
		w, err := watchDirs(r.lst.root, dirs)
		ch <- watchResult{w, err}
	}()
	r.deferRelease(func() {
		if r.watching != nil { // not taken: release it
			(<-r.watching).w.close()
		}
	})
}

// writeBefore writes the before manifest: its changes to the base, and a
// new base when there is none or the changes to it have grown.
func (r *run) writeBefore(nCached int) error {
	bs := r.bs
	before := &Manifest{SchemaVersion: ManifestSchemaV2, RunID: r.id, Phase: "before", Root: r.root, TakenAt: r.beforeTaken,
		Total: len(bs.entries), BackupSkipped: bs.skipped, Incomplete: r.incomplete}
	if r.incomplete == "" {
		// (Re-hashed entries count: the stat cache lists them beside the base.)
		if r.baseSum == "" || len(bs.changes)+len(bs.removed)+bs.refreshed > rebaseThreshold(len(bs.entries)) {
			sum, _, err := writeBase(r.state, bs.entries)
			if err != nil {
				return err
			}
			r.baseSum, r.baseTaken, r.newBase = sum, r.beforeTaken.UnixNano(), true
			bs.changes, bs.removed = nil, nil
		}
		if err := r.w.linkBase(filepath.Join(r.state, dirBases, r.baseSum), r.baseSum); err != nil {
			return err
		}
		nBase := nCached
		if r.newBase {
			nBase = len(bs.entries)
		}
		before.Base = &ManifestBase{File: FileBase, SHA256: r.baseSum, Entries: nBase}
		before.Changes, before.Removed = derefAll(bs.changes), bs.removed
	}
	before.RawNames = rawNamesOf(before)
	if err := r.w.writeCompact(FileBefore, before); err != nil {
		return err
	}
	r.w.event("before_manifest", map[string]any{"entries": len(bs.entries), "changes_to_base": len(bs.changes) + len(bs.removed), "new_base": r.newBase})
	return nil
}

// releaseWatch closes the inotify instance in the background once drained
// (the kernel removes a watch per directory, 1,101 on the benchmark tree);
// Run waits for it before returning.
func (r *run) releaseWatch() {
	if r.watch != nil && r.watchReleased == nil {
		done := make(chan struct{})
		r.watchReleased = done
		go func(dw *dirWatch) { dw.close(); close(done) }(r.watch)
	}
}

// launch runs the command, when it is to run, after everything recorded so
// far is durable, sampling the listening ports meanwhile.
func (r *run) launch(ctx context.Context) error {
	rt := r.rt
	r.deferRelease(func() {
		r.releaseWatch()
		if r.watchReleased != nil {
			<-r.watchReleased
		}
	})
	if !r.launched {
		if r.execErr != nil {
			rt.LaunchError = r.execErr.Error()
		}
		r.phase("command")
		return nil
	}
	if r.o.FullListing {
		rt.AfterListing = "full: --full-listing"
	} else if r.watching != nil {
		res := <-r.watching
		r.watching = nil
		r.watch = res.w
		if res.err != nil {
			rt.AfterListing = "full: " + res.err.Error()
		}
	}
	r.phase("watch")
	r.w.event("command_started", map[string]any{"argv": r.redArgv})
	// Everything recorded so far, and the before-state objects, are
	// durable before the command can run.
	if err := r.w.barrier(r.store.sync); err != nil {
		return err
	}
	r.phase("ports_and_barrier")
	o := r.o
	sampler := newPortSampler(r.portsBefore)
	r.execErr = runCommand(ctx, launchSpec{path: r.resolved, argv: o.Argv, dir: r.root, env: o.Env,
		stdin: o.Stdin, stdout: o.Stdout, stderr: o.Stderr, timeout: o.Timeout, ports: sampler}, rt)
	sampler.report(&rt.Ports)
	if r.execErr != nil && !rt.Launched {
		rt.LaunchError = r.execErr.Error()
	}
	fields := map[string]any{"launched": rt.Launched}
	if rt.Exit != nil {
		fields["exit_code"], fields["signal"], fields["timed_out"] = rt.Exit.ExitCode, rt.Exit.Signal, rt.Exit.TimedOut
	}
	if rt.Cleanup != nil {
		fields["descendants"] = len(rt.Cleanup.Descendants)
	}
	r.w.event("command_finished", fields)
	r.phase("command")
	return nil
}

// observePorts completes the port observation after the command.
func (r *run) observePorts() {
	rt := r.rt
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
	rt.Ports.Opened, _ = diffSorted(r.portsBefore, seen)
	_, rt.Ports.Closed = diffSorted(r.portsBefore, portsAfter)
	if rt.Cleanup == nil {
		rt.Cleanup = &ProcessCleanup{Descendants: []Descendant{}, Note: "command was not launched"}
	}
}

// observeAfter takes the after manifest, verifies and links the backups of
// the changed files, writes the after manifest and the runtime, and looks
// for tampering with the capsule: everything judge needs.
func (r *run) observeAfter(ctx context.Context) (observation, error) {
	r.observePorts()
	bs, rt := r.bs, r.rt
	as := &afterState{}
	afterTaken := time.Now().UTC()
	if r.launched {
		// Finish the capsule even when the run was interrupted: the command ran.
		relist := watchedRelist(r.watch, bs.entries, rt)
		r.releaseWatch()
		var err error
		as, err = r.lst.takeAfter(context.WithoutCancel(ctx), bs.entries, r.beforeTaken, relist)
		if errors.Is(err, errRelist) {
			rt.AfterListing = "full: " + err.Error()
			as, err = r.lst.takeAfter(context.WithoutCancel(ctx), bs.entries, r.beforeTaken, nil)
		}
		if err != nil {
			return observation{}, fmt.Errorf("after manifest: %w", err)
		}
	}
	r.phase("after_manifest")
	obs := observation{runID: r.id, cmdDec: r.cmdDec, blocked: r.blocked, execErr: r.execErr, rt: rt}
	obs.changes, obs.before, obs.after = classifyDelta(as)
	after := &Manifest{SchemaVersion: ManifestSchemaV2, RunID: r.id, Phase: "after", Root: r.root, TakenAt: afterTaken, Incomplete: r.incomplete,
		Base: &ManifestBase{File: FileBefore, Entries: len(bs.entries)}, Total: len(bs.entries) - len(as.removed)}
	for _, c := range as.changes {
		after.Changes = append(after.Changes, *c.after)
		if c.before == nil {
			after.Total++
		}
	}
	for _, rm := range as.removed {
		after.Removed = append(after.Removed, rm.Path)
	}
	var err error
	if obs.verified, obs.tamperedObjects, err = r.linkBackups(obs.changes, obs.before); err != nil {
		return observation{}, err
	}
	// The stat cache is written while the capsule is finished and sealed
	// (an optimisation: failure only costs hashing next time; it records
	// what the listings saw, whether or not the capsule seals). Run waits
	// for it before returning.
	if r.launched && r.incomplete == "" {
		saved := make(chan struct{})
		go func() {
			defer close(saved)
			_ = saveStatCache(r.state, r.key, r.baseSum, r.baseTaken, r.beforeTaken, cacheFiles(bs, as, r.newBase), r.store)
			if r.newBase {
				pruneBases(r.state, r.baseSum)
			}
		}()
		r.deferRelease(func() { <-saved })
	}
	after.RawNames = rawNamesOf(after)
	if err := r.w.writeCompact(FileAfter, after); err != nil {
		return observation{}, err
	}
	r.phase("classify_and_write_after")
	if _, err := r.w.writeJSON(FileRuntime, rt); err != nil {
		return observation{}, err
	}
	// Did anything rewrite what agentdiff had written while the command ran?
	obs.tamperedFiles = r.w.tampered()
	// A command that moved its own capsule directory, or put something else
	// in its place, did not stop the capsule: every write went through the
	// held directory, which is sealed where it now is, and the result and
	// events say where that is and why.
	if r.held != r.dir && sameDir(r.dirf, r.dir) != nil {
		obs.movedFrom, obs.movedTo = r.dir, heldLocation(r.held)
	}
	return obs, nil
}

// linkBackups verifies the before-state content of the changed files and
// links it into backups/; it returns the verified digests and the objects
// that changed during the run (dropped from the store).
func (r *run) linkBackups(changes []Change, bi map[string]*ManifestEntry) (map[string]bool, []string, error) {
	verified := map[string]bool{}
	var tampered []string
	for _, c := range changes {
		b := bi[c.Path]
		if b == nil || b.Type != "file" || !b.Backup || verified[b.SHA256] {
			continue
		}
		if c.Change == Modified && !containsStr(c.Aspects, "content") && !containsStr(c.Aspects, "type") {
			continue
		}
		ok, _ := r.store.verify(b.SHA256)
		if !ok {
			tampered = append(tampered, b.SHA256)
			r.store.drop(b.SHA256)
			continue
		}
		if err := linkBackup(r.store, r.w.dir, b.SHA256, r.w); err != nil {
			return nil, nil, err
		}
		verified[b.SHA256] = true
	}
	return verified, tampered, nil
}

// finish writes the result and the last events and seals the capsule
// where it is (movedTo when the command moved it).
func (r *run) finish(res *Result, movedTo string) error {
	if _, err := r.w.writeJSON(FileResult, res); err != nil {
		return err
	}
	if err := r.w.event("run_finished", map[string]any{"status": res.Status, "safety_outcome": string(res.SafetyOutcome), "changes": len(res.Changes)}); err != nil {
		return err
	}
	if movedTo != "" {
		if err := r.w.event("capsule_moved", map[string]any{"from": r.dir, "to": movedTo}); err != nil {
			return err
		}
		r.dir = movedTo
	} else if err := sameDir(r.dirf, r.dir); err != nil {
		return err
	}
	return seal(r.w, r.id)
}
