package hookrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentscm/agentscm/internal/agent"
	"github.com/agentscm/agentscm/internal/agent/adapter"
	"github.com/agentscm/agentscm/internal/agent/hookfile"
	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/changelog/hubremote"
	"github.com/agentscm/agentscm/internal/connections"
	"github.com/agentscm/agentscm/internal/delivery"
	"github.com/agentscm/agentscm/internal/hookcore"
	"github.com/agentscm/agentscm/internal/hookroute"
)

// One hook pipeline. Every agent hook event starts one hook process: its
// arguments name a route of the one route table (hookroute: verb x agent),
// it reads and decodes the payload once with the route's adapter, then runs
// the parts the route names: the capture (the durable intake write, or the
// locked append where no detached deliverer can be started) and, on an
// event the changelog handles, beside it on a second thread, the changelog
// increment of the same checkout (the two write separate stores; two
// threads keep the parallelism two processes had); then one deliverer
// kick, once both are done (the detached deliverer the capture asked for is
// started only now, so that it does not compete with the increment for the
// CPU the agent waits on). One fail-open wrapper: whatever fails, at most
// one warning line on stderr (each part's own message, joined with "; "),
// exit status 0, and nothing on stdout but a SessionStart's recipe guidance
// (Claude Code) or, for a prompt the changelog refused (another session's
// turn runs), the host's blocking answer.

// ChangelogTimeout bounds a hook process that runs the changelog part (the
// capture part keeps its own Timeout inside it); the host's timeout of an
// installed hook is longer (hookfile.HookTimeoutSeconds).
const ChangelogTimeout = 18 * time.Second

// Parts are what one hook process runs.
type Parts = hookroute.Parts

// Options configure a hook process.
type Options struct {
	Parts
	// Exe, when not empty, is the binary a detached deliverer is started
	// from (`EXE change-capture deliver-spool`): every agent's capture
	// then writes the intake and the deliverer admits and delivers, and
	// an increment is uploaded by it too; empty: the capture takes the
	// locked path and delivers, and the increment uploads, in-process.
	Exe string
	// Watch is the changelog's ChangeSource factory (changelog.HookOptions
	// Watch); nil: WatchFor(Exe, getenv) when the changelog part runs.
	Watch func(dir string) changelog.ChangeSource
	// Agent is the host whose hook runs (nil: Claude Code): the turn's
	// agent, and the form of the blocking answer to a refused prompt.
	Agent adapter.Adapter
	// TurnWait overrides changelog.TurnWait (tests).
	TurnWait time.Duration
	// seen, when set (tests), is told of the checkout lookup each part
	// receives, as it starts.
	seen func(part string, co *Checkout)
}

// ClaudeHook runs the parts of o on one payload of o.Agent's host (Claude
// Code when nil) read from stdin: Run with the route those name. It fails
// open (see above) and returns exit status 0.
func ClaudeHook(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string, now time.Time, o Options) int {
	a := o.Agent
	if a == nil {
		a = adapter.Claude{}
	}
	r := hookroute.Route{Agent: a, Parts: o.Parts, Guidance: adapter.IsDefault(a)}
	return Run(ctx, r, stdin, stdout, stderr, getenv, now, o)
}

// Run is the hook process of route r (its Agent and Parts override o's)
// on one payload read from stdin. It fails open (see above) and returns
// exit status 0.
func Run(ctx context.Context, r hookroute.Route, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string, now time.Time, o Options) int {
	var warns hookcore.Warnings
	defer warns.Flush(stderr)
	o.Parts, o.Agent = r.Parts, r.Agent
	if o.Changelog {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, ChangelogTimeout)
		defer cancel()
	}
	failed, kind := "capture hook failed: ", "capture"
	if !o.Capture {
		failed, kind = "changelog hook failed: ", "changelog"
	}
	b, dir, p, err := hookcore.ReadPayload(stdin, getenv, r.Agent, kind)
	if err != nil {
		warns.Add(failed + hookcore.OneLine(err.Error()))
		return 0
	}
	store := capture.StateDir{Dir: dir}
	var (
		cres    *capture.HookResult
		cerr    error
		starter *deferredOpener
		cl      changelogPart
		wg      sync.WaitGroup
	)
	takeIncrement := o.Changelog && slices.Contains(changelog.HookEvents, p.HookEventName)
	agent := r.Agent
	// One lookup of the checkout, for both parts (only those the route
	// runs, and the changelog only on an event it takes).
	co := LookupCheckout(dir, p.Cwd, Parts{Capture: o.Capture, Changelog: takeIncrement})
	if takeIncrement {
		// The increment runs beside the capture: the two write separate
		// stores, and two threads keep the parallelism the two processes
		// had. Delivery waits for both.
		cl.start(ctx, &wg, dir, &co, p, getenv, now, o)
	}
	if o.Capture {
		op := delivery.Opener{ConfigDir: dir}
		deps := capture.HookDeps{Hubs: op, Lookup: op}
		if o.Exe != "" {
			// Every agent's capture is intake-first: the deferred
			// opener starts the detached deliverer after the increment.
			starter = &deferredOpener{detachedOpener: detachedOpener{Opener: delivery.Opener{ConfigDir: dir}, exe: o.Exe}}
			if !takeIncrement {
				starter.now = true // nothing runs after the capture: start it at once
			}
			deps = capture.HookDeps{Hubs: starter, Lookup: op, Deliverer: starter}
		}
		if o.seen != nil {
			o.seen("capture", &co)
		}
		if cerr = co.BindingsErr; cerr == nil {
			cres, cerr = hookcore.RunCaptureAt(ctx, store, deps, r.Agent, b, p, now, co.Binding)
		}
	}
	wg.Wait()
	lw, refused, stored := cl.warn, cl.refused, cl.stored
	var clLock *os.File
	if stored != "" && o.Exe != "" && mayUpload(dir, p.Cwd) {
		// The increment waits in the upload queue: the deliverer that
		// starts below (with the spool's, or on its own) uploads it;
		// when the lock is held, the running deliverer looks again
		// before it exits (DrainChangelog). A checkout without a
		// connection starts none (it has nowhere to upload to): `client
		// setup` and `work start` kick the queue (kickCheckout).
		if l, err := changelog.TryUploadLock(stored); err != nil {
			lw = joinWarn(lw, "changelog upload: "+hookcore.OneLine(err.Error()))
		} else {
			clLock = l
		}
	}
	if starter != nil || clLock != nil {
		if starter == nil {
			starter = &deferredOpener{detachedOpener: detachedOpener{Opener: delivery.Opener{ConfigDir: dir}, exe: o.Exe}}
		}
		// Also after a failed capture: it may have asked for a deliverer
		// before it failed (events of earlier hooks wait in the intake).
		if cres == nil {
			cres = &capture.HookResult{}
		}
		starter.clLock, starter.clDir = clLock, stored
		if w := starter.start(ctx, store, cres); w != "" {
			lw = joinWarn(lw, w)
		}
	}
	if o.Capture {
		warns.Add(hookcore.CaptureWarning(cres, cerr))
		if r.Guidance {
			warns.Add(hookcore.Guidance(store, b, stdout))
		}
	}
	warns.Add(lw)
	if refused != nil {
		// The one answer on stdout: the host's blocking answer, so the
		// prompt does not run beside another session's turn.
		if _, err := stdout.Write(agent.BlockPrompt(refused.Reason)); err != nil {
			warns.Add("changelog hook: write the refusal of the prompt: " + hookcore.OneLine(err.Error()))
		}
	}
	return 0
}

// changelogPart is the changelog part of a hook process, run beside the
// capture: what it says (without the prefix), the prompt it refused (nil:
// none) and the changelog directory it stored an increment in ("": none).
type changelogPart struct {
	warn    string
	refused *changelog.PromptRefusal
	stored  string
}

// start runs the changelog part on its own goroutine (wg), on its own copy
// of p, in the changelog co looked up.
func (c *changelogPart) start(ctx context.Context, wg *sync.WaitGroup, dir string, co *Checkout, p *agent.Payload, getenv func(string) string, now time.Time, o Options) {
	watch := o.Watch
	if watch == nil {
		watch = WatchFor(o.Exe, getenv)
	}
	pc := *p // its own copy: the capture may normalise fields of p
	FailedFinish(&pc)
	// With a detached deliverer (Exe) the hook never uploads: it stores
	// the increment and the deliverer uploads it (one deliverer for
	// events and increments, kicked below). Without one the increment is
	// uploaded in-process, as before.
	var remote func(context.Context, string) (changelog.Remote, func(), error)
	if o.Exe == "" {
		remote = hubremote.ForCheckout(dir)
	}
	noCopy := co.NoCopy
	opts := changelog.HookOptions{Watch: watch, Failpoint: getenv(changelog.FailpointEnv), Agent: o.Agent.Name(), TurnWait: o.TurnWait, Remote: remote,
		Sharing: func(root string) changelog.SharingPolicy {
			return checkoutSharing(dir, root, func() bool { return noCopy })
		}}
	if o.seen != nil {
		o.seen("changelog", co)
	}
	found := co.Changelog
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.warn, c.refused, c.stored = runChangelog(ctx, dir, found, &pc, now, opts)
	}()
}

// FailedFinish makes a tool finish whose host reported a non-zero exit
// code (Codex: read from its rollout; Gemini: from the shell tool's result
// text) a PostToolUseFailure, as Claude Code's own hook reports a failed
// call, so the changelog flags the call as failed. Codex and Gemini have no
// failure event of their own (a Gemini error already decodes as one).
func FailedFinish(p *agent.Payload) {
	if p.HookEventName != "PostToolUse" || p.ExitCodeSource == "" {
		return
	}
	var v struct {
		ExitCode *int `json:"exit_code"`
	}
	if json.Unmarshal(p.ToolResponse, &v) == nil && v.ExitCode != nil && *v.ExitCode != 0 {
		p.HookEventName = "PostToolUseFailure"
	}
}

// runChangelog is the changelog part: its message (without the prefix),
// "" when it has nothing to say, and the prompt it refused (nil: none).
func runChangelog(ctx context.Context, configDir string, f changelog.Found, p *agent.Payload, now time.Time, opts changelog.HookOptions) (warn string, refused *changelog.PromptRefusal, stored string) {
	defer func() {
		if r := recover(); r != nil {
			warn, refused = fmt.Sprintf("changelog hook failed: internal error: %v", r), nil
		}
	}()
	res, err := changelog.HandleAt(ctx, configDir, f, p, now, opts)
	if err == nil && res != nil {
		refused = res.Refused
	}
	if res != nil && res.Increment != nil {
		stored = res.Dir
	}
	return changelogWarning(res, err), refused, stored
}

// changelogWarning is what `agentscm changelog hook-claude` has always said,
// and what failed about the turn's marker.
func changelogWarning(res *changelog.HookResult, err error) string {
	w := incrementWarning(res, err)
	if err == nil && res != nil && res.TurnWarning != "" {
		if w != "" {
			w += "; "
		}
		w += "changelog: " + hookcore.OneLine(res.TurnWarning)
	}
	return w
}

func incrementWarning(res *changelog.HookResult, err error) string {
	switch {
	case err != nil:
		// The increment was not stored: its writes go to the next one.
		return "changelog hook failed: " + hookcore.OneLine(err.Error())
	case res != nil && len(res.SetAside) > 0:
		var b strings.Builder
		for i, t := range res.SetAside {
			if i > 0 {
				b.WriteString("; ")
			}
			fmt.Fprintf(&b, "set aside the stale turn of %s: %s", t.Describe(), t.Stale)
		}
		return "changelog: " + hookcore.OneLine(b.String())
	case res == nil || res.Increment == nil:
		return ""
	case res.Increment.Warning != "":
		return fmt.Sprintf("changelog increment %d: %s", res.Increment.Position, hookcore.OneLine(res.Increment.Warning))
	case res.Upload == nil:
		return ""
	}
	// The increment is stored locally; say once why the Hub does not hold
	// it (yet).
	u := res.Upload
	switch {
	case u.Err != "":
		return fmt.Sprintf("changelog increment %d stored locally; %d positions wait for the Hub: %s", res.Increment.Position, u.Pending, hookcore.OneLine(u.Err))
	case u.LocalOnly != "":
		return fmt.Sprintf("changelog increment %d kept locally only: %s", res.Increment.Position, hookcore.OneLine(u.LocalOnly))
	case len(u.Refused) > 0:
		return fmt.Sprintf("changelog increment %d stored locally; the Hub refused it (%s), so the next uploaded increment carries its writes", res.Increment.Position, hookcore.OneLine(u.RefusedReason))
	}
	return ""
}

// WatchFor is the changelog's watcher factory of a hook process running
// exe (agentscm or agentscm-hook): the watcher is on unless
// changelog.WatchEnv is "0" or the changelog's setting turns it off
// (changelog.HookWatch); the watch server is `agentscm changelog
// watch-serve`, the agentscm binary next to exe (exe itself when it is
// agentscm), and none is started when exe is not an absolute path.
func WatchFor(exe string, getenv func(string) string) func(dir string) changelog.ChangeSource {
	server := ""
	if filepath.IsAbs(exe) {
		server = exe
		if filepath.Base(exe) == hookfile.HookBinary {
			server = filepath.Join(filepath.Dir(exe), "agentscm")
		}
	}
	return changelog.HookWatch(getenv, server)
}

// CheckoutSharing is the changelog's sharing policy for the checkout at
// root: its capture binding's mode (metadata-only without one), shared only
// for a session that started in shared-conversation mode, with the binding
// saved for the repository and Hub the checkout is connected to. Any error
// shares nothing.
func CheckoutSharing(configDir, root string) changelog.SharingPolicy {
	return checkoutSharing(configDir, root, func() bool { return MetadataOnlyBinding(configDir, root) })
}

// checkoutSharing is CheckoutSharing with the binding's metadata-only test
// (a hook's comes from its one lookup, LookupCheckout).
func checkoutSharing(configDir, root string, noCopy func() bool) changelog.SharingPolicy {
	hub, repo := "", ""
	if c, err := connections.Lookup(configDir, root); err == nil {
		hub, repo = c.Hub, c.Repository
	}
	return func(session string) changelog.Sharing {
		sh, err := capture.StateDir{Dir: configDir}.ConversationSharing(root, session, hub, repo)
		if err != nil {
			return changelog.Sharing{Mode: sh.Mode, Reason: sh.Reason + ": " + err.Error()}
		}
		return changelog.Sharing{Mode: sh.Mode, Share: sh.Share, Reason: sh.Reason, NoCopy: noCopy()}
	}
}

// MetadataOnlyBinding reports whether the checkout at root has a capture
// binding in metadata-only mode: its changelog then keeps no copy of the
// conversation (changelog.Options.ConversationRefs).
func MetadataOnlyBinding(configDir, root string) bool {
	cfg, err := binding.Registry{Dir: configDir}.Load()
	return err == nil && metadataOnly(cfg, root)
}

// deferredOpener is the detachedOpener of a hook that runs the changelog
// after the capture: the deliver lock the capture hands over is kept (a
// duplicate of its descriptor, which holds the flock) and the deliverer is
// started from it by start, after the increment. If the hook dies before
// that, the lock goes with it and the next hook starts a deliverer for
// what waits.
type deferredOpener struct {
	detachedOpener
	// now starts the deliverer at once (nothing runs after the capture).
	now   bool
	lock  *os.File
	spool string
	// clLock and clDir are the changelog's held upload lock and directory
	// when the hook stored an increment: the same deliverer uploads it.
	clLock *os.File
	clDir  string
}

func (o *deferredOpener) StartDeliverer(lock *os.File, spoolDir string) error {
	if o.now || o.lock != nil {
		return o.detachedOpener.StartDeliverer(lock, spoolDir)
	}
	fd, err := syscall.Dup(int(lock.Fd()))
	if err != nil {
		return o.detachedOpener.StartDeliverer(lock, spoolDir)
	}
	syscall.CloseOnExec(fd)
	o.lock, o.spool = os.NewFile(uintptr(fd), lock.Name()), spoolDir
	return nil
}

// start starts the deferred deliverer (the spool's, the changelog's or
// both in one process), or delivers in-process (as the capture does when
// no process can be started), and folds what happened into res; it
// returns the changelog part's warning.
func (o *deferredOpener) start(ctx context.Context, store capture.StateDir, res *capture.HookResult) (warn string) {
	if o.lock == nil && o.clLock == nil {
		return ""
	}
	if o.lock != nil {
		defer o.lock.Close()
	}
	if o.clLock != nil {
		defer o.clLock.Close()
	}
	err := hookcore.StartDelivererFor(o.exe, o.ConfigDir, o.lock, o.spool, o.clLock, o.clDir)
	if err == nil {
		return ""
	}
	if o.lock != nil {
		if res.DeliveryErr == nil {
			res.DeliveryErr = fmt.Errorf("start the background deliverer (delivering in-process): %w", err)
		}
		rep, err := capture.DeliverSpool(ctx, store, o.Opener, o.spool, o.lock, capture.DeliverBounds{MaxRun: capture.DeliveryTimeout, MaxEnvelopes: capture.DeliveryPageSize})
		if rep != nil {
			res.Delivered += rep.Delivered
			res.Failed += rep.Failed
			res.Refused += rep.Refused
			res.Admitted += rep.Admitted
		}
		if err != nil && res.DeliveryErr == nil {
			res.DeliveryErr = err
		}
	}
	if o.clLock != nil {
		// No process: upload in-process within the hook's bound, as the
		// hook did before the one deliverer.
		uctx, cancel := context.WithTimeout(ctx, changelog.RemoteDeadline)
		defer cancel()
		dup, derr := syscall.Dup(int(o.clLock.Fd()))
		if derr != nil {
			return "changelog upload: " + hookcore.OneLine(derr.Error())
		}
		if _, _, uerr := DrainChangelog(uctx, o.ConfigDir, o.clDir, os.NewFile(uintptr(dup), "upload.lock")); uerr != nil {
			return "increment stored locally, upload pending: " + hookcore.OneLine(uerr.Error())
		}
	}
	return ""
}

// joinWarn joins two warnings of one hook into one line's text.
func joinWarn(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// mayUpload reports whether the checkout containing cwd may have a Hub to
// upload increments to: false only when the connections file names no
// connection containing it (an unreadable file says true: the deliverer
// then finds out).
func mayUpload(configDir, cwd string) bool {
	_, err := connections.LookupContaining(configDir, cwd)
	if !errors.Is(err, connections.ErrNoConnection) {
		return true
	}
	if real, rerr := filepath.EvalSymlinks(cwd); rerr == nil && real != cwd {
		_, err = connections.LookupContaining(configDir, real)
		return !errors.Is(err, connections.ErrNoConnection)
	}
	return false
}
