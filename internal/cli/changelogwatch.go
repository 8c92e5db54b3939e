package cli

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"time"

	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/watch"
)

// WatchEnv turns the changelog hook's watcher on ("1"): each capture then
// asks a per-changelog watch server (started on demand) which directories
// changed instead of listing every directory.
const WatchEnv = "AGENTSCM_CHANGELOG_WATCH"

// changelogWatchSource returns the hook's ChangeSource factory, nil when
// the watcher is off.
func changelogWatchSource(env *Env) func(dir string) changelog.ChangeSource {
	if env.Getenv(WatchEnv) != "1" {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil
	}
	return func(dir string) changelog.ChangeSource {
		return changelog.WatchSource(dir, []string{exe, "changelog", "watch-serve", "--dir", filepath.Join(dir, changelog.WatchDir), "--"})
	}
}

const watchServeHelp = `Usage:
  agentscm changelog watch-serve --dir DIR [--idle DURATION] [--] ROOT...

Hosts the changelog's filesystem watcher (internal/watch) on the Unix socket
DIR/sock, watching the ROOTs, until it has been idle for DURATION (default
15m) or its socket is removed. The changelog hook starts it on demand when
` + WatchEnv + `=1; it is not meant to be run by hand. DIR must be a private
directory (0700) of the calling user.
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
	err := watch.Serve(ctx, *dir, fs.Args(), watch.ServeOptions{Idle: *idle})
	if errors.Is(err, watch.ErrRunning) {
		return nil
	}
	return err
}
