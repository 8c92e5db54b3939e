package cli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/connections"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/spool"
)

// statusTimeout bounds the Hub questions of agentscm status, so a down Hub
// costs the screen at most this long.
const statusTimeout = 2 * time.Second

// checkoutStatus is agentscm status's one screen, also its --format json.
type checkoutStatus struct {
	Root       string                `json:"root"`
	Connection *connectionView       `json:"connection,omitempty"`
	HubCheck   *hubCheck             `json:"hub_check,omitempty"`
	Capture    *binding.Setting      `json:"capture,omitempty"`
	Spool      *capture.SpoolSummary `json:"spool,omitempty"`
	// CurrentWork is the checkout's current Work on the Hub ("" = none or
	// not asked because the Hub did not answer).
	CurrentWork      string           `json:"current_work,omitempty"`
	CurrentWorkTitle string           `json:"current_work_title,omitempty"`
	Changelog        *changelogStatus `json:"changelog,omitempty"`
	LastEvent        *time.Time       `json:"last_event,omitempty"`
	// HookBinaries are the binaries the installed hooks name, each with
	// its build and what is wrong with it (missing, another build).
	HookBinaries []hookBinaryCheck `json:"hook_binaries,omitempty"`
	Warnings     []string          `json:"warnings"`
}

type changelogStatus struct {
	Dir        string     `json:"dir"`
	Increments int        `json:"increments"`
	Newest     int        `json:"newest_position"`
	NewestAt   *time.Time `json:"newest_at,omitempty"`
	Problems   int        `json:"unreadable,omitempty"`
}

func runCheckoutStatus(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm status", "[--root PATH] [--format text|json]",
		`One screen for the checkout at --root (default: the git worktree holding the
working directory): its client connection and whether the Hub answers (each
Hub question waits at most 2 s), the capture mode and state, the spool's
usage as fractions of its limits, the current Work, the changelog (how many
increments, the newest), the time of the last captured event, and warnings
(each names what to run). The same as change-capture status, client status
--check, work show and changelog list together, read-only.`)
	rootF := fs.String("root", "", rootHelp)
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	store, conns, err := captureDeps(env)
	if err != nil {
		return err
	}
	dir := store.Dir
	root, err := binding.CanonicalRoot(*rootF)
	if err != nil {
		return err
	}
	st := checkoutStatus{Root: root, Warnings: []string{}}
	warn := func(format string, a ...any) { st.Warnings = append(st.Warnings, fmt.Sprintf(format, a...)) }

	c, err := connections.Lookup(dir, root)
	switch {
	case errors.Is(err, connections.ErrNoConnection):
		warn("no client connection: run agentscm client setup --root %s --local (or --hub URL --repository NAME --token-file PATH)", root)
	case err != nil:
		warn("client connections unreadable: %v", err)
	default:
		v := viewOf(c)
		st.Connection = &v
		hctx, cancel := context.WithTimeout(ctx, statusTimeout)
		st.HubCheck = checkConnection(hctx, env, c)
		if st.HubCheck.Valid {
			if conn, err := client.Open(hctx, c, client.Options{}); err == nil {
				cur, err := conn.CurrentWork(hctx, c.WorktreeID)
				if e, ok := api.AsError(err); ok && e.Code == api.CodeNotFound {
					warn("no current Work: captured facts stay local; run agentscm work start --root %s --title TEXT", root)
				} else if err != nil {
					warn("current Work unknown: %v", err)
				} else {
					st.CurrentWork, st.CurrentWorkTitle = cur.Work.ID, cur.Work.Title
				}
				conn.Close()
			}
		} else {
			warn("the Hub %s does not answer as expected: %s (capture keeps going; facts wait in the spool)", c.Hub, st.HubCheck.Error)
		}
		cancel()
	}

	if set, err := binding.CaptureSetting(store, conns, root); err != nil {
		warn("capture setting unreadable: %v", err)
	} else {
		st.Capture = set
		switch {
		case set.StrayAdvice != "":
			warn("capture is half configured: %s", set.StrayAdvice)
		case !set.Configured:
			warn("capture is off: run agentscm change-capture enable --root %s", root)
		}
		if set.LineageMismatch {
			warn("sharing was set for %s on %s; the checkout is now connected to %s on %s", set.Repository, set.Hub, set.ConnectedRepository, set.ConnectedHub)
		}
		if set.Refused != nil && set.Refused.Total > 0 {
			warn("the Hub refused %d envelopes (agentscm change-capture inspect --spool %s)", set.Refused.Total, set.Spool)
		}
	}
	if cfg, err := store.Bindings().Load(); err == nil {
		if b := cfg.Find(root); b != nil {
			if b.Enabled {
				defer kickDelivery(env, store, b.Spool) // after the output
			}
			defer kickUploads(env, store.Dir, root)
			if sum, err := store.SummarizeSpool(b); err != nil {
				warn("spool unreadable: %v", err)
			} else {
				st.Spool = sum
				for _, f := range spoolFindings(b, sum) {
					warn("%s: %s", f.Problem, f.Fix)
				}
			}
			if sp, err := spool.OpenReadOnly(b.Spool); err == nil {
				if recs, err := sp.Events(); err == nil {
					for _, r := range recs {
						if st.LastEvent == nil || r.ObservedAt.After(*st.LastEvent) {
							t := r.ObservedAt
							st.LastEvent = &t
						}
					}
				}
			}
		}
	}
	if st.Capture != nil && st.Capture.Configured {
		// The binaries every agent's hooks name, each binary once.
		seen := map[string]bool{}
		for _, a := range st.Capture.Agents {
			checks, err := checkHookBinaries(ctx, a.Settings)
			if err != nil {
				continue
			}
			for _, c := range checks {
				if seen[c.Path] {
					continue
				}
				seen[c.Path] = true
				st.HookBinaries = append(st.HookBinaries, c)
				if c.Problem != "" {
					warn("hook binary %s: %s: %s", c.Path, c.Problem, hookBinaryFix(c.Path))
				}
			}
		}
		if st.Capture.Enabled {
			for _, a := range st.Capture.Agents {
				if len(a.Installed) < len(a.Events) {
					warn("%s", agentHooksLine(root, a, true))
				}
			}
		}
	}
	if cl := changelog.DirFor(dir, root); cl != "" {
		if roots, err := changelog.LoadRoots(cl); err == nil {
			if c, err := changelog.Open(cl, changelog.Options{Roots: roots, Exclude: configExclude(env)}); err == nil {
				if list, err := c.List(); err == nil {
					cs := &changelogStatus{Dir: cl, Increments: len(list)}
					for _, in := range list {
						if in.Err != "" {
							cs.Problems++
							continue
						}
						cs.Newest = in.Position
						t := in.CreatedAt
						cs.NewestAt = &t
					}
					st.Changelog = cs
				}
			}
		}
	}
	if *format == "json" {
		return writeJSON(env.Stdout, st)
	}
	printCheckoutStatus(env, &st)
	return nil
}

func printCheckoutStatus(env *Env, st *checkoutStatus) {
	w := env.Stdout
	fmt.Fprintf(w, "%s\n", st.Root)
	if v := st.Connection; v != nil {
		hub := "not checked"
		if c := st.HubCheck; c != nil && c.Valid {
			hub = fmt.Sprintf("reachable (%s, %s)", c.Human, c.Scope)
		} else if c != nil {
			hub = "NOT reachable"
		}
		fmt.Fprintf(w, "  connection:   %s on %s, worktree %s; Hub %s\n", v.Repository, v.Hub, v.WorktreeID, hub)
	} else {
		fmt.Fprintln(w, "  connection:   none")
	}
	if s := st.Capture; s != nil {
		if s.Configured {
			fmt.Fprintf(w, "  capture:      %s (%s, enabled %v)\n", s.State, s.Mode, s.Enabled)
			for _, a := range s.Agents {
				fmt.Fprintf(w, "  agent:        %s\n", agentHooksLine(st.Root, a, s.Enabled))
			}
		} else if len(s.StrayHooks) > 0 {
			fmt.Fprintf(w, "  capture:      %s, but capture hooks are installed (half configured: see the warning)\n", s.State)
		} else {
			fmt.Fprintf(w, "  capture:      %s\n", s.State)
		}
	}
	if sum := st.Spool; sum != nil {
		fmt.Fprintf(w, "  spool:        %d/%d records (%.0f%%), %d/%d bytes (%.0f%%); %d not yet acknowledged by the Hub; %d deferred facts\n",
			sum.Usage.Records, sum.Limits.Records, sum.Fraction.Records*100, sum.Usage.Bytes, sum.Limits.Bytes, sum.Fraction.Bytes*100,
			sum.Unacknowledged, sum.Deferred.Total)
	}
	switch {
	case st.CurrentWork != "":
		title := st.CurrentWorkTitle
		if title == "" {
			title = "(untitled)"
		}
		fmt.Fprintf(w, "  current Work: %s  %s\n", st.CurrentWork, title)
	default:
		fmt.Fprintln(w, "  current Work: none")
	}
	if cs := st.Changelog; cs != nil {
		at := ""
		if cs.NewestAt != nil {
			at = " at " + cs.NewestAt.Format(time.RFC3339)
		}
		fmt.Fprintf(w, "  changelog:    %d increments, newest position %d%s (%s)\n", cs.Increments, cs.Newest, at, filepath.Base(cs.Dir))
	} else {
		fmt.Fprintln(w, "  changelog:    none")
	}
	if st.LastEvent != nil {
		fmt.Fprintf(w, "  last event:   %s\n", st.LastEvent.Format(time.RFC3339))
	} else {
		fmt.Fprintln(w, "  last event:   none")
	}
	for _, x := range st.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", x)
	}
}
