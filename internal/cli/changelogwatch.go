package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/watch"
)

// WatchEnv turns the changelog hook's watcher off ("0"): it is on by
// default, each capture then asking a per-changelog watch server (started
// on demand) which directories changed instead of listing every directory.
const WatchEnv = changelog.WatchEnv

// changelogWatchSource returns the hook's ChangeSource factory, nil when
// the watcher is off. A missing server is started only by the running
// agentscm binary itself (env.Executable is it): a test binary standing
// in for agentscm asks a running server but starts none.
func changelogWatchSource(env *Env) func(dir string) changelog.ChangeSource {
	return changelog.HookWatch(env.Getenv, watchBinary(env))
}

// watchBinary is the agentscm binary that may start watch servers: env's
// executable when it is the running program, else "".
func watchBinary(env *Env) string {
	if !filepath.IsAbs(env.Executable) {
		return ""
	}
	self, err := os.Executable()
	if err != nil {
		return ""
	}
	a, err1 := os.Stat(self)
	b, err2 := os.Stat(env.Executable)
	if err1 != nil || err2 != nil || !os.SameFile(a, b) {
		return ""
	}
	return env.Executable
}

const watchServeHelp = `Usage:
  agentscm changelog watch-serve --dir DIR [--idle DURATION] [--] ROOT...

Hosts the changelog's filesystem watcher (internal/watch) on the Unix socket
DIR/sock, watching the ROOTs, until it has been idle for DURATION (default
15m), its socket or directory is removed, or it is asked to stop (agentscm
changelog watch stop). The changelog hook starts it on demand (unless
` + WatchEnv + `=0 or agentscm changelog watch off); it is not meant to be
run by hand. DIR must be a private directory (0700) of the calling user.
`

func runChangelogWatchServe(ctx context.Context, env *Env, args []string) error {
	fs := flag.NewFlagSet("agentscm changelog watch-serve", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	fs.Usage = func() { env.Stdout.Write([]byte(watchServeHelp)) }
	dir := fs.String("dir", "", "the server's private directory")
	idle := fs.Duration("idle", 15*time.Minute, "exit after this long without a request")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		return usagef("%v", err)
	}
	if *dir == "" || !filepath.IsAbs(*dir) || fs.NArg() == 0 {
		return usagef("watch-serve needs --dir (absolute) and at least one root")
	}
	for _, r := range fs.Args() {
		if !filepath.IsAbs(r) || filepath.Clean(r) != r {
			return usagef("root %q is not a clean absolute path", r)
		}
	}
	// The hooks' captures are taken here too (changelog.CaptureOps).
	err := watch.Serve(ctx, *dir, fs.Args(), watch.ServeOptions{Idle: *idle, Ops: changelog.CaptureOps(*dir, env.Getenv(changelog.FailpointEnv))})
	if errors.Is(err, watch.ErrRunning) {
		return nil
	}
	return err
}

func runChangelogStatus(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm changelog status", "[--root PATH] [--format text|json]", `
Say how the next tool call of a checkout will be captured: the increments
stored, and whether the changelog's filesystem watcher vouches for what
changed since the last capture (then only the directories it saw change
are listed), its pid, and why not when it does not (then every directory
is listed: no server yet, a restart, lost events, a watch limit, too many
changed directories, the watcher turned off); for a checkout with a
client connection, what the Hub holds of the changelog under the current
Work (asked with a 2-second bound): the positions, the grant's use, and the
positions it lacks (changelog upload sends them); and the sessions' turns:
running ones (they refuse a rewind, a snapshot load and changelog enable
with exit status 5) and stale ones (their agent process is gone or their
lease expired: the next such command sets them aside), and whether
parallel sessions are on. Starts nothing, changes nothing.`)
	var rf rootFlags
	rf.register(fs, false)
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	c, err := openChangelog(env, &rf, false)
	if err != nil {
		return err
	}
	next, err := c.StatePosition()
	if err != nil {
		return err
	}
	next++
	rep, err := c.WatchStatus(ctx, env.Getenv)
	if err != nil {
		return err
	}
	hub := hubHolding(ctx, env, c.Roots()[0].Path, next)
	turns, err := changelog.Turns(c.Dir(), env.Now())
	if err != nil {
		return err
	}
	if turns == nil {
		turns = []changelog.TurnStatus{}
	}
	parallel := changelog.ParallelSessions(c.Dir())
	withheld, err := c.UploadPreview(ctx)
	if err != nil {
		return err
	}
	if *format == "json" {
		return writeJSON(env.Stdout, map[string]any{"dir": c.Dir(), "root": c.Roots()[0].Path, "next_position": next, "watch": rep, "hub": hub, "turns": turns, "parallel_sessions": parallel, "uploads": withheld})
	}
	defer printTurns(env, turns, parallel)
	fmt.Fprintf(env.Stdout, "changelog of %s (%s)\n  next position: %d\n", c.Roots()[0].Path, c.Dir(), next)
	switch {
	case rep.Vouches:
		fmt.Fprintf(env.Stdout, "  watch:         vouches (server pid %d, since %s): the next capture lists only what changed\n", rep.PID, rep.Started.UTC().Format(time.RFC3339))
	case rep.Running:
		fmt.Fprintf(env.Stdout, "  watch:         does not vouch (server pid %d): %s\n", rep.PID, rep.Reason)
	default:
		fmt.Fprintf(env.Stdout, "  watch:         does not vouch: %s\n", rep.Reason)
	}
	fmt.Fprintf(env.Stdout, "  hub:           %s\n", hub.describe())
	var b strings.Builder
	fmt.Fprintf(&b, "  uploads:       %d %s, %d bytes of the workspace as captured (a Hub gets them as increments)\n", withheld.Files, plural(withheld.Files, "file", "files"), withheld.Bytes)
	describeWithheld(&b, withheld, 15)
	fmt.Fprint(env.Stdout, b.String())
	return nil
}

func runChangelogEndTurn(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm changelog end-turn", "[--root PATH] --session ID", `
Declare the turn of session ID over: its marker is removed, so a rewind,
snapshot load or changelog enable no longer waits for it. For a turn the
agent will not end by itself: Claude Code fires no turn end when you
interrupt it (Esc), and its process still runs, so the turn stays
running until its next prompt ends. A turn whose agent process is gone
needs nothing: it is set aside by itself. If the agent is in fact still
working, its writes will mix with what you do next.`)
	var rf rootFlags
	rf.register(fs, false)
	session := fs.String("session", "", "the session whose turn is over (changelog status lists them)")
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	if *session == "" {
		return usagef("want --session ID (changelog status lists the sessions' turns)")
	}
	c, err := openChangelog(env, &rf, false)
	if err != nil {
		return err
	}
	t, err := changelog.SetTurnAside(c.Dir(), *session, env.Now())
	if err != nil {
		return err
	}
	state := "running"
	if !t.Running {
		state = "stale: " + t.Stale
	}
	fmt.Fprintf(env.Stdout, "ended the turn of %s (it was %s)\n", t.Describe(), state)
	return nil
}

// printTurns lists the sessions' turns for changelog status.
func printTurns(env *Env, turns []changelog.TurnStatus, parallel bool) {
	if parallel {
		fmt.Fprintln(env.Stdout, "  sessions:      parallel (several sessions' turns may run at once)")
	} else {
		fmt.Fprintln(env.Stdout, "  sessions:      one at a time")
	}
	if len(turns) == 0 {
		fmt.Fprintln(env.Stdout, "  turns:         none running")
	}
	for _, t := range turns {
		if t.Running {
			fmt.Fprintf(env.Stdout, "  turn running:  %s\n", t.Describe())
		} else {
			fmt.Fprintf(env.Stdout, "  turn stale:    %s: %s (set aside by the next rewind, snapshot load or enable)\n", t.Describe(), t.Stale)
		}
	}
}

func runChangelogWatch(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm changelog watch", "[--root PATH] on|off|stop", `
Set whether the changelog hook of a checkout uses the filesystem watcher
(on, the default: a per-changelog server, started on demand, tells each
capture which directories changed), or turn it off (off: every capture
lists every directory; the running server is stopped). stop ends the
running server only (the next tool call starts a new one). The environment
variable `+WatchEnv+`=0 turns the watcher off for every changelog.`)
	var rf rootFlags
	rf.register(fs, false)
	if err := parseFlags(env, fs, args, true); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("want one of on, off, stop")
	}
	if a := fs.Arg(0); a != "on" && a != "off" && a != "stop" {
		return usagef("want one of on, off, stop, not %q", a)
	}
	c, err := openChangelog(env, &rf, false)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	switch fs.Arg(0) {
	case "on", "off":
		if err := changelog.SetWatch(ctx, c.Dir(), fs.Arg(0) == "on"); err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "changelog watcher %s for %s\n", fs.Arg(0), c.Roots()[0].Path)
	default: // stop
		pid, err := changelog.StopWatch(ctx, c.Dir())
		if err != nil {
			return err
		}
		if pid == 0 {
			fmt.Fprintln(env.Stdout, "no watch server ran")
		} else {
			fmt.Fprintf(env.Stdout, "watch server %d stopped\n", pid)
		}
	}
	return nil
}
