package changelog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/watch"
)

// WatchDir is the watch server's private directory inside a changelog
// directory: its Unix socket, lock and cookies.
const WatchDir = "watch"

// WatchEnv is the environment variable that turns the changelog hook's
// watcher off ("0"); the watcher is on by default (see HookWatch).
const WatchEnv = "AGENTSCM_CHANGELOG_WATCH"

// WatchSource is a ChangeSource backed by the watch server (internal/watch)
// of the changelog directory dir, reached over dir/watch/sock and started
// on demand with command (the roots are appended), detached. When no
// server answers within the client's bounded wait the capture lists every
// directory.
func WatchSource(dir string, command []string) ChangeSource {
	return &watchSource{c: watchClient(dir, command)}
}

func watchClient(dir string, command []string) *watch.Client {
	return &watch.Client{Dir: filepath.Join(dir, WatchDir), Command: command}
}

// WatchCommand is the command line that starts the watch server of the
// changelog directory dir with the agentscm binary agentscm (the roots are
// appended by the client).
func WatchCommand(agentscm, dir string) []string {
	return []string{agentscm, "changelog", "watch-serve", "--dir", filepath.Join(dir, WatchDir), "--"}
}

// HookWatch returns the hook's ChangeSource factory: the watcher is on
// unless getenv(WatchEnv) is "0" or the changelog's setting turns it off
// (SetWatch). agentscm is the binary that starts a missing server; ""
// starts none (a running server is still asked). Both hook entry points
// (agentscm changelog hook-claude, agentscm-hook) pass it as
// HookOptions.Watch.
//
// Unless getenv(WarmEnv) is "0", the hook also asks the running server to
// take the capture itself (the warm capture, see CaptureOps), waiting at
// most WarmWait (getenv(WarmWaitEnv) overrides it) before it captures
// itself.
func HookWatch(getenv func(string) string, agentscm string) func(dir string) ChangeSource {
	if getenv(WatchEnv) == "0" {
		return nil
	}
	warm := getenv(WarmEnv) != "0"
	wait := WarmWait
	if d, err := time.ParseDuration(getenv(WarmWaitEnv)); err == nil && d > 0 {
		wait = d
	}
	return func(dir string) ChangeSource {
		if !WatchEnabled(dir) {
			return nil
		}
		var cmd []string
		if agentscm != "" {
			cmd = WatchCommand(agentscm, dir)
		}
		return &watchSource{c: watchClient(dir, cmd), warm: warm, wait: wait}
	}
}

type watchSource struct {
	c *watch.Client
	// warm: ask the server to take the capture (warmCapture), waiting at
	// most wait.
	warm bool
	wait time.Duration
}

func (w *watchSource) Since(ctx context.Context, roots []string, since string) (string, []*Hint, error) {
	tok, ch, err := w.c.Since(ctx, roots, since)
	if err != nil {
		return "", nil, err
	}
	return tok, hints(ch), nil
}

// watchSettingFile holds the changelog's watcher setting ("off" turns it
// off); absent means on.
const watchSettingFile = "watch.json"

type watchSetting struct {
	Watch string `json:"watch"` // "on" or "off"
}

// WatchEnabled reports whether the changelog directory dir's setting lets
// the hook use the watcher (no setting: yes).
func WatchEnabled(dir string) bool {
	b, err := fsutil.ReadFileNoFollow(filepath.Join(dir, watchSettingFile), 4096)
	if err != nil {
		return true
	}
	var s watchSetting
	return json.Unmarshal(b, &s) != nil || s.Watch != "off"
}

// SetWatch records whether the hook may use the watcher for the changelog
// directory dir; turning it off also stops a running server.
func SetWatch(ctx context.Context, dir string, on bool) error {
	s := watchSetting{Watch: "on"}
	if !on {
		s.Watch = "off"
	}
	b, _ := json.Marshal(s)
	if err := fsutil.WriteAtomic(filepath.Join(dir, watchSettingFile), append(b, '\n'), fsutil.FileMode); err != nil {
		return fmt.Errorf("changelog watch setting: %w", err)
	}
	if !on {
		if _, err := StopWatch(ctx, dir); err != nil {
			return err
		}
	}
	return nil
}

// StopWatch stops the watch server of the changelog directory dir, if one
// runs, and waits (within ctx) for it to exit; it returns its pid (0: none
// ran).
func StopWatch(ctx context.Context, dir string) (int, error) {
	return watchClient(dir, nil).Stop(ctx)
}

// WatchReport says whether the watcher vouches for the next capture of a
// changelog.
type WatchReport struct {
	// Enabled is the changelog's setting (SetWatch).
	Enabled bool `json:"enabled"`
	// Running: a server answered; PID and Started are its.
	Running bool      `json:"running"`
	PID     int       `json:"pid,omitempty"`
	Started time.Time `json:"started,omitzero"`
	// Vouches: the server vouches for every existing root's changes since
	// the capture state's token, so the next capture lists only what it
	// reports. Reason says why not otherwise.
	Vouches bool               `json:"vouches"`
	Reason  string             `json:"reason,omitempty"`
	Roots   []watch.RootStatus `json:"roots,omitempty"`
}

// WatchStatus asks the changelog's watch server (if one runs; none is
// started) whether it vouches for the changes since the capture state's
// token. getenv is the hook's environment (WatchEnv).
func (c *Changelog) WatchStatus(ctx context.Context, getenv func(string) string) (*WatchReport, error) {
	rep := &WatchReport{Enabled: WatchEnabled(c.dir)}
	token := ""
	if lk, err := c.lock(); err == nil {
		if st, err := c.loadStateLazy(); err == nil {
			token = st.token
			st.release()
		}
		lk.Unlock()
	}
	roots := make([]string, len(c.opts.Roots))
	for i, r := range c.opts.Roots {
		roots[i] = r.Path
	}
	s, err := watchClient(c.dir, nil).Status(ctx, roots, token)
	switch {
	case errors.Is(err, watch.ErrNoServer):
		rep.Reason = "no watch server runs for this changelog (the next tool call's hook starts one; that call lists every directory)"
	case err != nil:
		rep.Reason = err.Error()
	default:
		rep.Running, rep.PID, rep.Started, rep.Roots = true, s.PID, s.Started, s.Roots
		rep.Vouches = true
		for i, r := range s.Roots {
			if fi, err := os.Lstat(roots[i]); err != nil || !fi.IsDir() {
				continue // a missing root is not listed anyway
			}
			if !r.Vouches {
				rep.Vouches = false
				if rep.Reason == "" {
					rep.Reason = fmt.Sprintf("root %s: %s", c.opts.Roots[i].Name, r.Reason)
				}
			}
		}
	}
	switch {
	case getenv != nil && getenv(WatchEnv) == "0":
		rep.Vouches, rep.Reason = false, WatchEnv+"=0 turns the watcher off in this environment"
	case !rep.Enabled:
		rep.Vouches, rep.Reason = false, "the changelog's watch setting is off (agentscm changelog watch on)"
	}
	return rep, nil
}

// StatePosition returns the last position the capture state records (-1:
// none), without changing anything; a damaged state reports the last
// stored increment's position.
func (c *Changelog) StatePosition() (int, error) {
	lk, err := c.lock()
	if err != nil {
		return 0, err
	}
	defer lk.Unlock()
	st, err := c.loadStateLazy()
	if err == nil {
		defer st.release()
		return st.LastPosition, nil
	}
	pos, perr := c.positions()
	if perr != nil {
		return 0, perr
	}
	if len(pos) == 0 {
		return -1, nil
	}
	return pos[len(pos)-1], nil
}
