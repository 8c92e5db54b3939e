package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/hub/api"
)

// expectFlags are the consent flags: the repository and Hub the person saw.
func expectLineage(repo, hub string) (*capture.Lineage, error) {
	if repo == "" && hub == "" {
		return nil, nil
	}
	if repo == "" || hub == "" {
		return nil, usagef("--expect-repository and --expect-hub go together")
	}
	return &capture.Lineage{Repository: repo, Hub: hub}, nil
}

func runEnable(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm change-capture enable", "--root ABS [--mode MODE] [--expect-repository NAME --expect-hub HUB] [--format text|json]",
		`One-step capture setup for a checkout with a current client connection.
With no binding it creates one through the configure code path with the
defaults: a private spool under <config>/agentscm/capture-spools/<random>,
the connection's worktree id, a random setup digest, the base ref from
origin/HEAD (else origin/main), the rule Bash=execution:partial:process_exit_code,
default spool limits, and hooks in ROOT/.claude/settings.local.json; a settings
file it creates (and the temporary files saved beside it) is added to the
repository's local exclude unless Git already ignores it. With a disabled
binding it re-enables it with everything the binding saved. With an enabled
binding it only changes the mode. --mode defaults to the binding's mode, else
metadata-only. --expect-repository/--expect-hub refuse when the checkout is
no longer connected to what the person confirmed. With --local, a checkout
that has no client connection is first connected to the embedded local Hub
(as 'agentscm client setup --local' does), so one command sets a solo user
up; without it such a checkout is refused with "no client connection for
this checkout".`)
	root := fs.String("root", "", "absolute path of the checkout")
	mode := fs.String("mode", "", "metadata-only, local-conversation or shared-conversation")
	local := fs.Bool("local", false, "connect the checkout to the embedded local Hub first when it has no client connection")
	expRepo := fs.String("expect-repository", "", "repository the person confirmed")
	expHub := fs.String("expect-hub", "", "Hub the person confirmed")
	format := formatFlag(fs)
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	if *root == "" {
		return usagef("--root is required")
	}
	expect, err := expectLineage(*expRepo, *expHub)
	if err != nil {
		return err
	}
	store, conns, err := captureDeps(env)
	if err != nil {
		return err
	}
	if *local {
		if err := connectLocalIfMissing(ctx, env, store.Dir, *root); err != nil {
			return err
		}
	}
	res, err := capture.EnableCapture(ctx, store, conns, capture.EnableOptions{
		Root: *root, Mode: *mode, Expect: expect, ConfigDir: store.Dir, Executable: env.Executable, Now: env.Now(),
	})
	if err != nil {
		return err
	}
	if *format == "json" {
		return writeJSON(env.Stdout, res)
	}
	printConfigure(env, "capture "+res.Action, res.ConfigureResult)
	for _, l := range res.ExcludeAdded {
		fmt.Fprintf(env.Stdout, "  local exclude: added %s\n", l)
	}
	return nil
}

// connectLocalIfMissing connects root to the embedded local Hub, as
// 'client setup --local' does, unless it already has a connection.
func connectLocalIfMissing(ctx context.Context, env *Env, dir, rootFlag string) error {
	root, err := capture.CanonicalRoot(rootFlag)
	if err != nil {
		return err
	}
	if _, err := client.Lookup(dir, root); err == nil {
		return nil
	} else if !errors.Is(err, client.ErrNoConnection) {
		return err
	}
	name := repositoryName(ctx, root)
	if !api.ValidName(name) {
		return fmt.Errorf("cannot name a repository after %q; run agentscm client setup --root %s --local --repository NAME", name, root)
	}
	c, _, err := client.SetupLocal(ctx, dir, root, name, env.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "connected %s to the local Hub (repository %s, worktree %s)\n", c.Root, c.Repository, c.WorktreeID)
	return nil
}

func runSetMode(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm change-capture set-mode", "--root ABS --mode MODE [--expect-repository NAME --expect-hub HUB] [--format text|json]",
		`Change only the stored capture mode of an enabled binding (run configure
first). Hooks and the spool are untouched and nothing is deleted locally or on
the Hub. Lowering the mode (to metadata-only, or from shared-conversation to
local-conversation) needs no client connection; raising it needs a current
connection to the repository and Hub the binding was saved for.`)
	root := fs.String("root", "", "absolute path of the checkout")
	mode := fs.String("mode", "", "metadata-only, local-conversation or shared-conversation")
	expRepo := fs.String("expect-repository", "", "repository the person confirmed")
	expHub := fs.String("expect-hub", "", "Hub the person confirmed")
	format := formatFlag(fs)
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	if *root == "" || *mode == "" {
		return usagef("--root and --mode are required")
	}
	expect, err := expectLineage(*expRepo, *expHub)
	if err != nil {
		return err
	}
	store, conns, err := captureDeps(env)
	if err != nil {
		return err
	}
	res, err := capture.SetCaptureMode(ctx, store, conns, *root, *mode, expect)
	if err != nil {
		return err
	}
	if *format == "json" {
		return writeJSON(env.Stdout, res)
	}
	if res.Changed {
		fmt.Fprintf(env.Stdout, "capture mode of %s: %s -> %s\n", res.Root, res.Previous, res.Mode)
	} else {
		fmt.Fprintf(env.Stdout, "capture mode of %s is already %s\n", res.Root, res.Mode)
	}
	return nil
}

func runStatus(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm change-capture status", "[--root ABS] [--format text|json]",
		`Show the capture setting of a checkout (configured, enabled, capture_mode,
state, lineage_mismatch) or, without --root, of every bound checkout. States:
Not set up, Off, Metadata only, Local only, Shared with Hub.`)
	root := fs.String("root", "", "absolute path of the checkout")
	format := formatFlag(fs)
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	store, conns, err := captureDeps(env)
	if err != nil {
		return err
	}
	var list []capture.Setting
	if *root != "" {
		s, err := capture.CaptureSetting(store, conns, *root)
		if err != nil {
			return err
		}
		if *format == "json" {
			return writeJSON(env.Stdout, s)
		}
		list = []capture.Setting{*s}
	} else {
		if list, err = capture.Settings(store, conns); err != nil {
			return err
		}
		if *format == "json" {
			return writeJSON(env.Stdout, list)
		}
		if len(list) == 0 {
			fmt.Fprintln(env.Stdout, "no checkout has a capture binding")
		}
	}
	for _, s := range list {
		fmt.Fprintf(env.Stdout, "%s: %s\n", s.Root, s.State)
		if !s.Configured {
			continue
		}
		fmt.Fprintf(env.Stdout, "  capture_mode: %s\n  enabled: %v\n  saved for: %s on %s\n  spool: %s\n", s.Mode, s.Enabled, s.Repository, s.Hub, s.Spool)
		if s.ConnectedHub != "" {
			fmt.Fprintf(env.Stdout, "  connected to: %s on %s\n", s.ConnectedRepository, s.ConnectedHub)
		} else {
			fmt.Fprintln(env.Stdout, "  connected to: (no client connection)")
		}
		if s.LineageMismatch {
			fmt.Fprintf(env.Stdout, "  lineage_mismatch: sharing was set for %s on %s; this checkout is now connected to %s on %s\n", s.Repository, s.Hub, s.ConnectedRepository, s.ConnectedHub)
		}
		if r := s.Refused; r != nil {
			fmt.Fprintf(env.Stdout, "  refused by the Hub: %d envelopes (kept in the spool, never acknowledged)\n", r.Total)
			for _, f := range r.Refusals {
				gap := "no gap"
				if f.Gap {
					gap = "hub_refused gap appended"
				}
				fmt.Fprintf(env.Stdout, "    spool seq %d %s: %s (%s): %s\n", f.SpoolSeq, f.Kind, f.Reason, gap, f.Detail)
			}
		}
	}
	return nil
}

func runForget(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm change-capture forget", "--root ABS [--format text|json]",
		`Remove a disabled capture binding (after unconfigure) from the capture
config. The private spool is never deleted: its path is printed so you can
export or delete it yourself. Exclude lines that enable added for the
checkout's settings file are removed unless another binding of the same
repository uses that settings path. Works on a deleted checkout given the
absolute path it was saved with. The next enable creates a new spool.`)
	root := fs.String("root", "", "absolute path of the checkout as it was saved")
	format := formatFlag(fs)
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	if *root == "" {
		return usagef("--root is required")
	}
	store, err := configStore(env)
	if err != nil {
		return err
	}
	res, err := capture.Forget(ctx, store, *root)
	if err != nil {
		return err
	}
	if *format == "json" {
		return writeJSON(env.Stdout, res)
	}
	fmt.Fprintf(env.Stdout, "capture binding of %s forgotten\n  spool retained: %s (spool_retained: true; export or delete it yourself)\n", res.Root, res.Spool)
	for _, l := range res.ExcludeRemoved {
		fmt.Fprintf(env.Stdout, "  local exclude: removed %s\n", l)
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(env.Stderr, "warning: %s\n", w)
	}
	return nil
}
