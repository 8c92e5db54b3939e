package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentscm/agentscm/internal/agent/adapter"
	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/connections"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/spool"
)

// expectFlags are the consent flags: the repository and Hub the person saw.
func expectLineage(repo, hub string) (*binding.Lineage, error) {
	if repo == "" && hub == "" {
		return nil, nil
	}
	if repo == "" || hub == "" {
		return nil, usagef("--expect-repository and --expect-hub go together")
	}
	return &binding.Lineage{Repository: repo, Hub: hub}, nil
}

func runEnable(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm change-capture enable", "[--root PATH] [--mode MODE] [--max-records N] [--max-bytes N] [--max-artifact-bytes N] [--max-replay-entries N] [--max-replay-bytes N] [--auto-compact PERCENT | --no-auto-compact] [--expect-repository NAME --expect-hub HUB] [--format text|json]",
		`One-step capture setup for a checkout with a current client connection.
With no binding it creates one through the configure code path with the
defaults: a private spool under <config>/agentscm/capture-spools/<random>,
the connection's worktree id, a random setup digest, the base ref from
origin/HEAD (else origin/main), the rule Bash=execution:partial:process_exit_code,
default spool limits, and hooks in ROOT/.claude/settings.local.json; a settings
file it creates (and the temporary files saved beside it) is added to the
repository's local exclude unless Git already ignores it. With a disabled
binding it re-enables it with everything the binding saved. With an enabled
binding it only changes the mode. A new binding records automatic
compaction at 50%: the hook compacts acknowledged history (as
'change-capture compact' does, never removing pending envelopes, incomplete
starts, artifacts or the replay index) when usage reaches 50% of a limit,
so capture keeps going through a long day with the default limits;
--no-auto-compact records no policy, --auto-compact PERCENT another
threshold, and on an existing binding either flag changes the saved choice.
--max-records/--max-bytes/--max-artifact-bytes/--max-replay-entries/
--max-replay-bytes raise the limits of the binding's spool (lowering below
what it holds is refused). --mode defaults to the binding's mode, else
metadata-only. --expect-repository/--expect-hub refuse when the checkout is
no longer connected to what the person confirmed. With --local, a checkout
that has no client connection is first connected to the embedded local Hub
(as 'agentscm client setup --local' does), so one command sets a solo user
up; without it such a checkout is refused with "no client connection for
this checkout".`)
	root := fs.String("root", "", rootHelp)
	mode := fs.String("mode", "", "metadata-only, local-conversation or shared-conversation")
	local := fs.Bool("local", false, "connect the checkout to the embedded local Hub first when it has no client connection")
	agent := fs.String("agent", "", agentFlagHelp)
	expRepo := fs.String("expect-repository", "", "repository the person confirmed")
	expHub := fs.String("expect-hub", "", "Hub the person confirmed")
	var lim spool.Limits
	var pol binding.PolicyChange
	fs.Int64Var(&lim.Records, "max-records", 0, fmt.Sprintf("spool record limit (default %d; raises an existing spool's)", spool.DefaultRecords))
	fs.Int64Var(&lim.Bytes, "max-bytes", 0, fmt.Sprintf("spool total byte limit (default %d; raises an existing spool's)", spool.DefaultBytes))
	fs.Int64Var(&lim.ArtifactBytes, "max-artifact-bytes", 0, fmt.Sprintf("spool per-artifact byte limit (default %d)", spool.DefaultArtifactBytes))
	fs.Int64Var(&lim.ReplayEntries, "max-replay-entries", 0, "bound of the compaction replay index in entries (default: twice the record limit, at most 8192)")
	fs.Int64Var(&lim.ReplayBytes, "max-replay-bytes", 0, "bound of the compaction replay index in bytes (default: an eighth of the byte limit, at most 8 MiB)")
	compactionFlags(fs, &pol)
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	if pol.Set != 0 && pol.Clear {
		return usagef("--auto-compact and --no-auto-compact exclude each other")
	}
	expect, err := expectLineage(*expRepo, *expHub)
	if err != nil {
		return err
	}
	store, conns, err := captureDeps(env)
	if err != nil {
		return err
	}
	// An explicit --agent is validated; without one a new binding takes the
	// detected agent and an existing binding keeps its own.
	agentName := *agent
	if agentName != "" {
		if _, err := adapter.For(agentName); err != nil {
			return usagef("--agent: %v", err)
		}
	} else if canon, err := binding.CanonicalRoot(*root); err == nil {
		if cur, err := store.Bindings().Load(); err == nil && cur.Find(canon) == nil {
			agentName = detectAgent(env, canon)
		}
	}
	if *local {
		if err := connectLocalIfMissing(ctx, env, store.Dir, *root); err != nil {
			return err
		}
	}
	res, err := binding.EnableCapture(ctx, store, conns, binding.EnableOptions{
		Root: *root, Mode: *mode, Expect: expect, ConfigDir: store.Dir, Executable: env.Executable, Now: env.Now(),
		Limits: lim, Compaction: pol, Agent: agentName,
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
	c, created, err := connectLocal(ctx, env, dir, rootFlag)
	if err == nil && created {
		fmt.Fprintf(env.Stdout, "connected %s to the local Hub (repository %s, worktree %s)\n", c.Root, c.Repository, c.WorktreeID)
	}
	return err
}

// connectLocal returns root's client connection, first connecting root to
// the embedded local Hub when it has none (created).
func connectLocal(ctx context.Context, env *Env, dir, rootFlag string) (connections.Connection, bool, error) {
	root, err := binding.CanonicalRoot(rootFlag)
	if err != nil {
		return connections.Connection{}, false, err
	}
	if c, err := connections.Lookup(dir, root); err == nil {
		return c, false, nil
	} else if !errors.Is(err, connections.ErrNoConnection) {
		return connections.Connection{}, false, err
	}
	name := repositoryName(ctx, root)
	if !api.ValidName(name) {
		return connections.Connection{}, false, fmt.Errorf("cannot name a repository after %q; run agentscm client setup --root %s --local --repository NAME", name, root)
	}
	c, _, err := client.SetupLocal(ctx, dir, root, name, env.Now())
	if err != nil {
		return connections.Connection{}, false, err
	}
	return c, true, nil
}

func runSetMode(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm change-capture set-mode", "[--root PATH] --mode MODE [--expect-repository NAME --expect-hub HUB] [--format text|json]",
		`Change only the stored capture mode of an enabled binding (run configure
first). Hooks and the spool are untouched and nothing is deleted locally or on
the Hub. Lowering the mode (to metadata-only, or from shared-conversation to
local-conversation) needs no client connection; raising it needs a current
connection to the repository and Hub the binding was saved for.`)
	root := fs.String("root", "", rootHelp)
	mode := fs.String("mode", "", "metadata-only, local-conversation or shared-conversation")
	expRepo := fs.String("expect-repository", "", "repository the person confirmed")
	expHub := fs.String("expect-hub", "", "Hub the person confirmed")
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	if *mode == "" {
		return usagef("--mode is required")
	}
	expect, err := expectLineage(*expRepo, *expHub)
	if err != nil {
		return err
	}
	store, conns, err := captureDeps(env)
	if err != nil {
		return err
	}
	res, err := binding.SetCaptureMode(ctx, store, conns, *root, *mode, expect)
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

// statusOut is one checkout of change-capture status: its setting and,
// when it is bound, what its spool holds.
type statusOut struct {
	binding.Setting
	SpoolStatus *capture.SpoolSummary `json:"spool_status,omitempty"`
	// SpoolError says why the spool could not be read.
	SpoolError string `json:"spool_error,omitempty"`
}

func runStatus(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm change-capture status", "[--root PATH] [--format text|json]",
		`Show the capture setting of a checkout (configured, enabled, capture_mode,
state, lineage_mismatch) or, without --root, of every bound checkout. States:
Not set up, Off, Metadata only, Local only, Shared with Hub. For a bound
checkout it also reads its spool (without locking or changing it): usage as
a fraction of each limit, the compaction policy and the last compaction
(manual or automatic), the envelopes not yet acknowledged by the Hub, and how
many facts stayed local as deferred facts and why (the Hub was unreachable,
no current Work, a refused target), so a session that never reached the Hub
is visible. After its output, for a spool where deliverable work waits and
no deliverer runs, it starts the background deliverer (as a hook would).`)
	root := fs.String("root", "", "path of a checkout (default: every bound checkout)")
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	store, conns, err := captureDeps(env)
	if err != nil {
		return err
	}
	var list []binding.Setting
	if *root != "" {
		s, err := binding.CaptureSetting(store, conns, *root)
		if err != nil {
			return err
		}
		list = []binding.Setting{*s}
	} else if list, err = binding.Settings(store, conns); err != nil {
		return err
	}
	cfg, err := store.Bindings().Load()
	if err != nil {
		return err
	}
	out := make([]statusOut, 0, len(list))
	var kick []string
	for _, s := range list {
		o := statusOut{Setting: s}
		if b := cfg.Find(s.Root); b != nil {
			if sum, err := store.SummarizeSpool(b); err != nil {
				o.SpoolError = err.Error()
			} else {
				o.SpoolStatus = sum
			}
			if b.Enabled {
				kick = append(kick, b.Spool)
			}
		}
		out = append(out, o)
	}
	// After the output: work a deliverer should take up gets one.
	defer func() {
		for _, sp := range kick {
			kickDelivery(env, store, sp)
		}
	}()
	if *format == "json" {
		if *root != "" {
			return writeJSON(env.Stdout, out[0])
		}
		return writeJSON(env.Stdout, out)
	}
	if *root == "" && len(list) == 0 {
		fmt.Fprintln(env.Stdout, "no checkout has a capture binding")
	}
	for _, o := range out {
		s := o.Setting
		fmt.Fprintf(env.Stdout, "%s: %s\n", s.Root, s.State)
		if s.StrayAdvice != "" {
			fmt.Fprintf(env.Stdout, "  half configured: %s\n", s.StrayAdvice)
		}
		if !s.Configured {
			continue
		}
		fmt.Fprintf(env.Stdout, "  capture_mode: %s\n  enabled: %v\n  saved for: %s on %s\n  spool: %s\n", s.Mode, s.Enabled, s.Repository, s.Hub, s.Spool)
		for _, a := range s.Agents {
			fmt.Fprintf(env.Stdout, "  agent: %s\n", agentHooksLine(s.Root, a, s.Enabled))
		}
		if s.ConnectedHub != "" {
			fmt.Fprintf(env.Stdout, "  connected to: %s on %s\n", s.ConnectedRepository, s.ConnectedHub)
		} else {
			fmt.Fprintln(env.Stdout, "  connected to: (no client connection)")
		}
		if s.LineageMismatch {
			fmt.Fprintf(env.Stdout, "  lineage_mismatch: sharing was set for %s on %s; this checkout is now connected to %s on %s\n", s.Repository, s.Hub, s.ConnectedRepository, s.ConnectedHub)
		}
		fmt.Fprintf(env.Stdout, "  compaction: %s\n", s.Compaction)
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
		if o.SpoolError != "" {
			fmt.Fprintf(env.Stdout, "  spool unreadable: %s\n", o.SpoolError)
			continue
		}
		printSpoolSummary(env, o.SpoolStatus)
	}
	return nil
}

func printSpoolSummary(env *Env, sum *capture.SpoolSummary) {
	w := env.Stdout
	fmt.Fprintf(w, "  usage: %d of %d records (%.0f%%), %d of %d bytes (%.0f%%)", sum.Usage.Records, sum.Limits.Records, sum.Fraction.Records*100,
		sum.Usage.Bytes, sum.Limits.Bytes, sum.Fraction.Bytes*100)
	if sum.Paused {
		fmt.Fprint(w, "; capture paused")
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  replay index: %d of %d entries, %d of %d bytes\n", sum.ReplayIndex["entries"], sum.ReplayIndex["entries_limit"], sum.ReplayIndex["bytes"], sum.ReplayIndex["bytes_limit"])
	if sum.LastCompact != nil {
		c := sum.LastCompact
		fmt.Fprintf(w, "  compactions: %d; last %s (%s): %d digests, %d receipts, %d replay entries",
			sum.Compactions, c.At.Format(time.RFC3339), c.Trigger, c.Digests, c.Receipts, c.Replay)
		if c.ReplayKept > 0 {
			fmt.Fprintf(w, ", %d kept whole (replay index full)", c.ReplayKept)
		}
		fmt.Fprintln(w)
	} else {
		fmt.Fprintln(w, "  compactions: none yet")
	}
	fmt.Fprintf(w, "  not yet acknowledged by the Hub: %d envelopes\n", sum.Unacknowledged)
	d := sum.Deferred
	if d.Total == 0 {
		fmt.Fprintln(w, "  deferred facts (stayed local): none")
	} else {
		fmt.Fprintf(w, "  deferred facts (stayed local): %d in %d sessions\n", d.Total, d.Sessions)
		for _, r := range d.Reasons {
			fmt.Fprintf(w, "    %d in %d sessions: %s [%s]\n", r.Facts, r.Sessions, r.Description, r.Reason)
		}
		fmt.Fprintln(w, "    (list them with agentscm change-capture deferred --spool SPOOL)")
	}
	for _, p := range sum.Problems {
		fmt.Fprintf(w, "  problem: %s\n", p)
	}
}

func runForget(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm change-capture forget", "[--root PATH] [--format text|json]",
		`Remove a disabled capture binding (after unconfigure) from the capture
config. The private spool is never deleted: its path is printed so you can
export or delete it yourself. Exclude lines that enable added for the
checkout's settings file are removed unless another binding of the same
repository uses that settings path. Works on a deleted checkout given the
absolute path it was saved with. The next enable creates a new spool.`)
	root := fs.String("root", "", rootHelp+"; as it was saved")
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	store, err := configStore(env)
	if err != nil {
		return err
	}
	res, err := binding.Forget(ctx, store, *root)
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
	for _, f := range res.HookFilesRemoved {
		fmt.Fprintf(env.Stdout, "  removed %s (created by setup, left empty)\n", f)
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(env.Stderr, "warning: %s\n", w)
	}
	return nil
}

// agentHooksLine says where one agent of a binding reads its capture hooks
// and whether they are all there (enabled: the binding is on).
func agentHooksLine(root string, a binding.AgentHookState, enabled bool) string {
	rel := relTo(root, a.Settings)
	switch {
	case !enabled && len(a.Installed) == 0:
		return fmt.Sprintf("%s: off (its hooks go back in %s on agentscm enable)", agentTitle(a.Agent), rel)
	case a.Error != "":
		return fmt.Sprintf("%s: hooks in %s unreadable: %s", agentTitle(a.Agent), rel, a.Error)
	case len(a.Installed) == len(a.Events):
		return fmt.Sprintf("%s: capture hooks in %s (%d events)", agentTitle(a.Agent), rel, len(a.Events))
	case len(a.Installed) == 0:
		return fmt.Sprintf("%s: NO capture hooks in %s (run agentscm enable --agent %s)", agentTitle(a.Agent), rel, a.Agent)
	}
	var missing []string
	for _, ev := range a.Events {
		if !slices.Contains(a.Installed, ev) {
			missing = append(missing, ev)
		}
	}
	return fmt.Sprintf("%s: capture hooks in %s MISSING for %s (run agentscm enable --agent %s)", agentTitle(a.Agent), rel, strings.Join(missing, ", "), a.Agent)
}
