package recipe

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/fsutil"
)

// EnvAllowlist is every variable the child inherits, when present; the
// child environment is cleared first.
var EnvAllowlist = [...]string{"PATH", "HOME", "USER", "TMPDIR", "LANG", "CARGO_HOME", "RUSTUP_HOME", "CARGO_TARGET_DIR"}

// Claude Code's child-session marker and session identity, as it sets them
// in the environment of the commands its Bash tool runs.
const (
	EnvClaudeCode   = "CLAUDECODE"
	EnvChildSession = "CLAUDE_CODE_CHILD_SESSION"
	EnvSessionID    = "CLAUDE_CODE_SESSION_ID"
	// EnvToolUseID is the provider tool_use_id of the Bash call when the
	// host exports it to the command (Claude Code 2.1.328 names the
	// variable but does not set it for Bash commands); when present it
	// selects the managed occurrence exactly.
	EnvToolUseID = "CLAUDE_CODE_TOOL_USE_ID"
)

// FailpointEnv names an injected crash point of the runner (tests): at
// that point the runner kills itself with SIGKILL. Points: reserved (the
// attempt is durable, no start yet), started (the start is durable, no
// child yet), spawned (the child runs, the phase still says reserved),
// finished (the finish is durable, the attempt not yet removed).
const FailpointEnv = "AGENTSCM_RECIPE_FAILPOINT"

// Stop reasons: the runner, not the child's own exit, ended the run. None
// of them can report a passed check.
const (
	StopTimeout     = "timeout"
	StopCancelled   = "cancelled"
	StopOutputLimit = "output_limit"
	StopSpawn       = "spawn"
	StopIO          = "io"
)

// killGrace is how long a stopped child's process group has between
// SIGTERM and SIGKILL; drainGrace how long the output pipes may stay open
// after the child exited (a background grandchild holding them).
const (
	killGrace  = 2 * time.Second
	drainGrace = 2 * time.Second
	// finishTimeout bounds the durable writes after a stop.
	finishTimeout = 30 * time.Second
)

// Options are the inputs of one run-recipe invocation. The command line
// offers only the recipe id: no argv, source, Work, generation or result.
type Options struct {
	Store capture.StateDir
	Hubs  capture.HubOpener
	// ID is the registered recipe id.
	ID string
	// Cwd is the working directory; it must be exactly the configured root.
	Cwd       string
	LookupEnv func(string) (string, bool)
	Stdout    io.Writer
	Stderr    io.Writer
	Now       func() time.Time
	// Signals delivers SIGINT/SIGTERM (the CLI subscribes it); each cancels
	// the run.
	Signals <-chan os.Signal
	// Failpoint is FailpointEnv's value.
	Failpoint string
	// Host is the local host identity (CurrentHost unless a test sets it).
	Host func() HostIdentity
}

// Receipt is what a run retained: the verification result and the bounded
// output copies (local files; only the action reaches the Hub).
type Receipt struct {
	ActionID     string `json:"action_id"`
	RecipeID     string `json:"recipe_id"`
	RecipeDigest string `json:"recipe_digest"`
	WorkID       string `json:"work_id"`
	Generation   int64  `json:"generation"`
	Session      string `json:"session"`
	ToolUseID    string `json:"tool_use_id"`
	// SelectedBy says how the managed occurrence was chosen: tool_use_id
	// (the host's CLAUDE_CODE_TOOL_USE_ID) or single_waiting_marker.
	SelectedBy string `json:"selected_by"`
	// Result is succeeded, failed or incomplete; Verification passed,
	// failed or incomplete.
	Result       string `json:"result"`
	Verification string `json:"verification"`
	// Stop is the runner's stop reason, empty when the child exited.
	Stop       string `json:"stop,omitempty"`
	StopDetail string `json:"stop_detail,omitempty"`
	ExitCode   *int   `json:"exit_code,omitempty"`
	Signal     string `json:"signal,omitempty"`
	// Output is the admitted, retained prefix of each stream.
	Stdout         Output    `json:"stdout"`
	Stderr         Output    `json:"stderr"`
	MaxOutputBytes int64     `json:"max_output_bytes"`
	StartedAt      time.Time `json:"started_at"`
	FinishedAt     time.Time `json:"finished_at"`
	Drift          string    `json:"drift,omitempty"`
}

// Output is one output stream of a run: the admitted prefix's size and
// digest, and its spool artifact (availability retained, or missing with
// NotRetained saying why: a limit of the spool refused it). Path names the
// streamed copy beside the markers while the run lasts; it is empty once
// the copy moved into the spool.
type Output struct {
	Path        string             `json:"path,omitempty"`
	Bytes       int64              `json:"bytes"`
	SHA256      string             `json:"sha256"`
	Artifact    *event.ArtifactRef `json:"artifact,omitempty"`
	NotRetained string             `json:"not_retained,omitempty"`
}

// Refusal is a run-recipe refusal before anything was spawned.
type Refusal struct{ Msg string }

func (r *Refusal) Error() string { return r.Msg }

func refuse(format string, a ...any) error { return &Refusal{Msg: fmt.Sprintf(format, a...)} }

// ExitStatus is the runner's own exit status for a receipt: the child's
// exit code when it exited, 128+signal when a signal killed it, 124 for a
// timeout, 125 for an output limit or I/O stop, 127 for a spawn failure
// and 130 for a cancellation.
func (r *Receipt) ExitStatus() int {
	switch r.Stop {
	case StopTimeout:
		return 124
	case StopOutputLimit, StopIO:
		return 125
	case StopSpawn:
		return 127
	case StopCancelled:
		return 130
	}
	if r.ExitCode != nil {
		return *r.ExitCode
	}
	return 1
}

func (o *Options) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

func (o *Options) host() HostIdentity {
	if o.Host != nil {
		return o.Host()
	}
	return CurrentHost()
}

func (o *Options) fail(point string) {
	for _, p := range strings.Split(o.Failpoint, ",") {
		if p == point {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			time.Sleep(time.Minute) // never reached
		}
	}
}

// findBinding finds the enabled binding whose root is exactly the canonical
// cwd, and the registered recipe.
func findBinding(store capture.StateDir, cwd, id string) (*binding.Binding, binding.Recipe, error) {
	if !filepath.IsAbs(cwd) {
		return nil, binding.Recipe{}, refuse("the working directory %q is not absolute", cwd)
	}
	real, err := filepath.EvalSymlinks(cwd)
	if err != nil {
		return nil, binding.Recipe{}, refuse("the working directory %s: %v", cwd, err)
	}
	cfg, err := store.Bindings().Load()
	if err != nil {
		return nil, binding.Recipe{}, err
	}
	bd := cfg.Find(real)
	if bd == nil || !bd.Enabled {
		if cover := cfg.ForPath(real); cover != nil {
			return nil, binding.Recipe{}, refuse("run-recipe runs only from the exact configured repository root %s, not %s", cover.Root, real)
		}
		return nil, binding.Recipe{}, refuse("no enabled capture binding has the root %s; run-recipe runs only from a configured repository root", real)
	}
	r, ok := bd.RecipeByID(id)
	if !ok {
		var ids []string
		for _, x := range bd.Recipes {
			ids = append(ids, x.ID)
		}
		if len(ids) == 0 {
			return nil, binding.Recipe{}, refuse("recipe id %q is not registered for %s: no recipe is registered", id, bd.Root)
		}
		return nil, binding.Recipe{}, refuse("recipe id %q is not registered for %s (registered: %s)", id, bd.Root, strings.Join(ids, ", "))
	}
	if bd.Runner == "" {
		return nil, binding.Recipe{}, refuse("the binding of %s records no recipe runner; run change-capture configure again with its --recipe-file", bd.Root)
	}
	return bd, r, nil
}

// Run runs one registered recipe as the verification action of the managed
// Bash occurrence that invoked it. It returns a Refusal (nothing spawned,
// nothing appended) or the receipt of a run whose start was durably
// retained before the child was spawned; an error with a receipt says that
// retaining the finish failed.
func Run(ctx context.Context, o Options) (*Receipt, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var cancelled sync.Once
	cancelledBy := make(chan os.Signal, 1)
	if o.Signals != nil {
		go func() {
			select {
			case s := <-o.Signals:
				cancelled.Do(func() { cancelledBy <- s })
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	bd, r, err := findBinding(o.Store, o.Cwd, o.ID)
	if err != nil {
		return nil, err
	}
	// Claude's child-session marker and session identity.
	marker, _ := o.LookupEnv(EnvChildSession)
	code, _ := o.LookupEnv(EnvClaudeCode)
	if marker != "1" && code != "1" {
		return nil, refuse("run-recipe runs only as a command of a Claude Code session: neither %s=1 nor %s=1 is set", EnvChildSession, EnvClaudeCode)
	}
	session, _ := o.LookupEnv(EnvSessionID)
	if session == "" || len(session) > 256 || strings.ContainsAny(session, " \t\r\n\x00") {
		return nil, refuse("run-recipe needs Claude Code's session identity: %s is missing or invalid", EnvSessionID)
	}
	dev, ino, err := rootIdentity(bd.Root)
	if err != nil {
		return nil, refuse("the repository root %s: %v", bd.Root, err)
	}
	cdir := checkoutDir(o.Store.Dir, bd.Root, bd.Repository, bd.WorktreeID)
	lock, err := lockCheckout(ctx, cdir, true)
	if err != nil {
		return nil, refuse("%v", err)
	}
	defer lock.unlock()

	ms, err := o.Store.OpenManaged(bd)
	if err != nil {
		return nil, err
	}
	hub, err := o.Hubs.Open(ctx, bd.Root)
	if err != nil {
		return nil, refuse("no Hub connection to resolve the current authorized target: %v", err)
	}
	defer hub.Close()
	if err := ms.Admit(ctx, hub); err != nil {
		return nil, fmt.Errorf("admit the spool's waiting hook events: %w", err)
	}
	rctx, rcancel := context.WithTimeout(ctx, capture.ResolveTimeout)
	t, err := hub.Resolve(rctx, bd.WorktreeID, session)
	rcancel()
	if err != nil {
		return nil, refuse("no current authorized target for session %s: %v; nothing was run", session, err)
	}
	cmd := capture.RunnerCommand(bd.Runner, r.ID)
	pres, err := ms.Markers(session, r.ID)
	if err != nil {
		return nil, err
	}
	selectedBy := "single_waiting_marker"
	if tu, ok := o.LookupEnv(EnvToolUseID); ok && tu != "" {
		// The host names the call: only its own occurrence qualifies.
		var mine []capture.ManagedPre
		for _, p := range pres {
			if p.ToolUseID == tu {
				mine = append(mine, p)
			}
		}
		pres, selectedBy = mine, "tool_use_id"
	}
	switch {
	case len(pres) == 0:
		return nil, refuse("no durable managed PreToolUse of the exact command %q waits in session %s (a run of that occurrence already started, or it was not run through Claude Code's Bash tool exactly as the SessionStart guidance says); nothing was run, and an occurrence that ran is never launched again", cmd, session)
	case len(pres) > 1:
		return nil, refuse("%d managed PreToolUse occurrences of recipe %s wait in session %s: which one this is is ambiguous; nothing was run", len(pres), r.ID, session)
	}
	pre := pres[0]
	if pre.RecipeDigest != r.Digest {
		return nil, refuse("recipe %s changed since its PreToolUse was observed (digest %s, now %s); nothing was run", r.ID, short(pre.RecipeDigest), short(r.Digest))
	}
	if t.WorkID != pre.WorkID || t.Generation != pre.Generation || t.Session != pre.CanonicalSession {
		return nil, refuse("the session's current target (Work %s generation %d) is not the one its PreToolUse was captured under (Work %s generation %d); nothing was run", t.WorkID, t.Generation, pre.WorkID, pre.Generation)
	}
	// The attempt fence of the Work, canonical checkout and recipe.
	as := attemptStore{dir: filepath.Join(cdir, attemptsDir)}
	key := FenceKey(t.WorkID, bd.Root, r.ID)
	if prev, err := as.read(key); err == nil {
		return nil, refuse("an unresolved attempt (action %s, phase %s, since %s) fences recipe %s for Work %s on %s; run agentscm change-capture reconcile-recipe --id %s",
			prev.ActionID, prev.Phase, prev.CreatedAt.Format(time.RFC3339), r.ID, t.WorkID, bd.Root, r.ID)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, refuse("cancelled before the run was reserved; nothing was run")
	}
	host := o.host()
	att := &Attempt{Version: attemptVersion, FenceKey: key, Root: bd.Root, Dev: dev, Ino: ino, Repository: bd.Repository,
		WorktreeID: bd.WorktreeID, Spool: bd.Spool, WorkID: t.WorkID, Generation: t.Generation, CanonicalSession: t.Session,
		Session: session, ToolUseID: pre.ToolUseID, ActionID: pre.ActionID, RecipeID: r.ID, RecipeDigest: r.Digest,
		Phase: PhaseReserved, BootID: host.BootID, MachineID: host.MachineID, PID: os.Getpid(), CreatedAt: o.now().UTC()}
	if err := as.create(att); err != nil {
		return nil, fmt.Errorf("reserve the attempt: %w", err)
	}
	o.fail("reserved")

	// The verification start, durable before the child is spawned.
	src, _ := ms.Source(ctx, false) // an unbound source stays absent, visibly
	started := o.now().UTC()
	start := &event.Record{Agent: pre.Agent, SessionID: pre.Session, Kind: event.ActionStart, HookEvent: "run-recipe",
		ToolName: "Bash", ToolUseID: pre.ToolUseID, WorkID: t.WorkID, Generation: t.Generation, CanonicalSession: t.Session,
		ObservedAt: started, CaptureMode: pre.CaptureMode, Managed: true,
		Action: &event.Action{ID: pre.ActionID, Class: "verification", Coverage: r.Coverage, ResultSource: "recipe_child_status",
			RecipeDigest: r.Digest, SetupDigest: bd.SetupDigest, Source: src, ObservationScope: ms.ObservationScope(),
			ObservationOrder: int64(pre.PreSeq), StartedAt: started.Truncate(time.Second)}}
	if err := ms.AppendStart(context.WithoutCancel(ctx), start); err != nil {
		// The receipt may or may not have reached the spool: the attempt
		// stays for reconcile-recipe; nothing was spawned.
		return nil, fmt.Errorf("retain the verification start (nothing was run; the attempt stays for reconcile-recipe): %w", err)
	}
	o.fail("started")

	rc := &Receipt{ActionID: pre.ActionID, RecipeID: r.ID, RecipeDigest: r.Digest, WorkID: t.WorkID, Generation: t.Generation,
		Session: session, ToolUseID: pre.ToolUseID, SelectedBy: selectedBy, MaxOutputBytes: r.MaxOutputBytes, StartedAt: started}
	sv := supervisor{argv: r.Argv, dir: bd.Root, env: childEnv(o.LookupEnv), stdout: o.Stdout, stderr: o.Stderr,
		limit: r.MaxOutputBytes, timeout: time.Duration(r.TimeoutSeconds) * time.Second, outDir: ms.Dir(), name: pre.ActionID,
		onSpawn: func(pid int) {
			o.fail("spawned")
			att.Phase, att.ChildPID = PhaseSpawned, pid
			if err := as.update(att); err != nil {
				fmt.Fprintf(o.Stderr, "agentscm: warning: the attempt's spawned phase was not persisted: %v\n", err)
			}
		}}
	sv.run(ctx, rc)
	select {
	case s := <-cancelledBy:
		if rc.Stop == StopCancelled {
			rc.StopDetail = "the runner received " + s.String()
		}
	default:
	}
	rc.FinishedAt = o.now().UTC()
	mapResult(rc)

	// The finish: original bindings, the child's real status.
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer wcancel()
	fin := *start.Action
	fin.Result, fin.Verification, fin.ExitCode = rc.Result, rc.Verification, rc.ExitCode
	fin.CompletionSetupDigest = bd.SetupDigest
	fin.FinishedAt = rc.FinishedAt.Truncate(time.Second)
	fin.Drift = ms.Drift(wctx, start.Action.Source)
	rc.Drift = fin.Drift
	// The output moves into the spool (its limits, its export) before the
	// finish that names it.
	out, why := retainOutputs(wctx, ms, ms.Dir(), pre.ActionID)
	fin.Output = out
	applyOutputs(rc, out, why)
	for i, w := range why {
		if out != nil && w != "" {
			fmt.Fprintf(o.Stderr, "agentscm: warning: the recipe's %s is not retained in the spool: %s\n", outputExts[i][1:], w)
		}
	}
	finish := &event.Record{Agent: pre.Agent, SessionID: pre.Session, Kind: event.ActionFinish, HookEvent: "run-recipe",
		ToolName: "Bash", ToolUseID: pre.ToolUseID, Outcome: outcomeOf(rc), WorkID: t.WorkID, Generation: t.Generation,
		CanonicalSession: t.Session, ObservedAt: rc.FinishedAt, CaptureMode: pre.CaptureMode, Managed: true, Action: &fin}
	if err := ms.AppendFinish(wctx, finish); err != nil {
		return rc, fmt.Errorf("retain the verification finish (the attempt stays unresolved for reconcile-recipe): %w", err)
	}
	if b, err := json.MarshalIndent(rc, "", "  "); err == nil {
		if err := fsutil.WriteNew(filepath.Join(ms.Dir(), pre.ActionID+".run.json"), append(b, '\n'), fsutil.FileMode); err != nil {
			fmt.Fprintf(o.Stderr, "agentscm: warning: the local run receipt was not written: %v\n", err)
		}
	}
	if err := dropOutputs(ms.Dir(), pre.ActionID); err != nil {
		fmt.Fprintf(o.Stderr, "agentscm: warning: the output copies beside the markers were not removed: %v\n", err)
	}
	o.fail("finished")
	if err := as.remove(key); err != nil {
		return rc, fmt.Errorf("the finish is retained but the attempt record could not be removed: %w", err)
	}
	return rc, nil
}

func short(d string) string {
	if len(d) > 12 {
		return d[:12]
	}
	return d
}

// mapResult maps the run onto result and verification: only the child's
// own exit status 0 passes; a runner stop is incomplete, never passed.
func mapResult(rc *Receipt) {
	switch {
	case rc.Stop != "":
		rc.Result, rc.Verification = "incomplete", "incomplete"
	case rc.ExitCode != nil && *rc.ExitCode == 0:
		rc.Result, rc.Verification = "succeeded", "passed"
	default:
		rc.Result, rc.Verification = "failed", "failed"
	}
}

func outcomeOf(rc *Receipt) string {
	if rc.Result == "succeeded" {
		return event.OutcomeReturned
	}
	return event.OutcomeFailed
}

// childEnv is the cleared environment plus the allowlisted variables that
// are present.
func childEnv(lookup func(string) (string, bool)) []string {
	env := []string{}
	for _, k := range EnvAllowlist {
		if v, ok := lookup(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// supervisor runs the child in its own process group with null stdin,
// streams the admitted prefixes of stdout and stderr (their combined size
// bounded by limit) to the runner's own and to retained private files, and
// stops the group on a timeout, a cancellation, the output limit or an I/O
// failure.
type supervisor struct {
	argv           []string
	dir            string
	env            []string
	stdout, stderr io.Writer
	limit          int64
	timeout        time.Duration
	outDir, name   string
	onSpawn        func(pid int)
}

type budget struct {
	mu   sync.Mutex
	left int64
}

// take admits at most n bytes and reports how many.
func (b *budget) take(n int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := int64(n)
	if k > b.left {
		k = b.left
	}
	b.left -= k
	return int(k)
}

type stream struct {
	visible io.Writer
	file    *os.File
	sum     hash.Hash
	n       int64
}

func (sv *supervisor) run(ctx context.Context, rc *Receipt) {
	stopCh := make(chan string, 4)
	stopDetail := make(chan string, 4)
	signalStop := func(reason, detail string) {
		select {
		case stopCh <- reason:
			stopDetail <- detail
		default:
		}
	}
	streams := [2]*stream{{visible: sv.stdout}, {visible: sv.stderr}}
	for i, ext := range []string{".stdout", ".stderr"} {
		p := filepath.Join(sv.outDir, sv.name+ext)
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, fsutil.FileMode)
		if err != nil {
			rc.Stop, rc.StopDetail = StopIO, "create the retained output copy: "+err.Error()
			for _, s := range streams {
				if s.file != nil {
					s.file.Close()
				}
			}
			return
		}
		streams[i].file, streams[i].sum = f, sha256.New()
	}
	defer func() {
		for i, s := range streams {
			s.file.Sync()
			s.file.Close()
			o := Output{Path: s.file.Name(), Bytes: s.n, SHA256: hex.EncodeToString(s.sum.Sum(nil))}
			if i == 0 {
				rc.Stdout = o
			} else {
				rc.Stderr = o
			}
		}
		fsutil.SyncDir(sv.outDir)
	}()
	var pipes [2][2]*os.File // [stream][read, write]
	for i := range pipes {
		r, w, err := os.Pipe()
		if err != nil {
			rc.Stop, rc.StopDetail = StopSpawn, "create the output pipes: "+err.Error()
			return
		}
		pipes[i] = [2]*os.File{r, w}
	}
	cmd := &exec.Cmd{Path: sv.argv[0], Args: sv.argv, Dir: sv.dir, Env: sv.env,
		Stdout: pipes[0][1], Stderr: pipes[1][1], // Stdin nil: the null device
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true}}
	err := cmd.Start()
	pipes[0][1].Close()
	pipes[1][1].Close()
	if err != nil {
		pipes[0][0].Close()
		pipes[1][0].Close()
		rc.Stop, rc.StopDetail = StopSpawn, err.Error()
		return
	}
	pgid := cmd.Process.Pid
	if sv.onSpawn != nil {
		sv.onSpawn(pgid)
	}
	b := &budget{left: sv.limit}
	var readers sync.WaitGroup
	for i := range streams {
		readers.Add(1)
		go func(s *stream, r *os.File) {
			defer readers.Done()
			defer r.Close()
			buf := make([]byte, 32<<10)
			over := false
			for {
				n, err := r.Read(buf)
				if n > 0 && !over {
					k := b.take(n)
					if k > 0 {
						if _, werr := s.file.Write(buf[:k]); werr != nil {
							signalStop(StopIO, "retain output: "+werr.Error())
						}
						s.sum.Write(buf[:k])
						s.n += int64(k)
						if _, werr := s.visible.Write(buf[:k]); werr != nil {
							signalStop(StopIO, "stream output: "+werr.Error())
						}
					}
					if k < n {
						over = true
						signalStop(StopOutputLimit, fmt.Sprintf("the combined output exceeded %d bytes", sv.limit))
					}
				}
				if err != nil {
					if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, os.ErrClosed) {
						signalStop(StopIO, "read output: "+err.Error())
					}
					return
				}
			}
		}(streams[i], pipes[i][0])
	}
	waitCh := make(chan error, 1)
	go func() { waitCh <- cmd.Wait() }()
	timer := time.NewTimer(sv.timeout)
	defer timer.Stop()
	var werr error
	exited := false
	select {
	case werr = <-waitCh:
		exited = true
	case <-timer.C:
		rc.Stop, rc.StopDetail = StopTimeout, fmt.Sprintf("the recipe's %s timeout expired", sv.timeout)
	case <-ctx.Done():
		rc.Stop, rc.StopDetail = StopCancelled, "the runner was cancelled"
	case reason := <-stopCh:
		rc.Stop, rc.StopDetail = reason, <-stopDetail
	}
	if !exited {
		werr = stopGroup(pgid, waitCh)
	}
	// The child exited: give the pipes a moment (a background grandchild
	// may hold them), then end the owned group and stop reading.
	done := make(chan struct{})
	go func() { readers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(drainGrace):
		syscall.Kill(-pgid, syscall.SIGKILL)
		select {
		case <-done:
		case <-time.After(drainGrace):
			pipes[0][0].SetReadDeadline(time.Now())
			pipes[1][0].SetReadDeadline(time.Now())
			<-done
			if rc.Stop == "" {
				rc.Stop, rc.StopDetail = StopIO, "the output pipes stayed open after the child's process group was killed"
			}
		}
	}
	if rc.Stop == "" {
		select {
		case reason := <-stopCh:
			rc.Stop, rc.StopDetail = reason, <-stopDetail
		default:
		}
	}
	if rc.Stop != "" {
		syscall.Kill(-pgid, syscall.SIGKILL) // the rest of the owned group
	}
	if ps := cmd.ProcessState; ps != nil {
		if st, ok := ps.Sys().(syscall.WaitStatus); ok && st.Signaled() {
			rc.Signal = st.Signal().String()
		} else if ps.Exited() {
			c := ps.ExitCode()
			rc.ExitCode = &c
		}
	} else if werr != nil && rc.Stop == "" {
		rc.Stop, rc.StopDetail = StopIO, "wait for the child: "+werr.Error()
	}
}

// stopGroup ends the child's process group: SIGTERM, then SIGKILL after
// killGrace; it reaps the child and returns its wait error.
func stopGroup(pgid int, waitCh <-chan error) error {
	syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case err := <-waitCh:
		return err
	case <-time.After(killGrace):
	}
	syscall.Kill(-pgid, syscall.SIGKILL)
	return <-waitCh
}
