package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/agentscm/agentscm/internal/action"
	"github.com/agentscm/agentscm/internal/agent/adapter"
	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/delivery"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/hookcore"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/spool"
)

func changeCaptureCommand() *Command {
	return &Command{
		Name:    "change-capture",
		Summary: "capture agent sessions of a checkout into a private spool",
		Sub: append([]*Command{
			{Name: "configure", Summary: "bind a checkout to a spool and install the Claude Code hooks", Run: runConfigure},
			{Name: "unconfigure", Summary: "remove the marked Claude Code hooks and disable the binding", Run: runUnconfigure},
			{Name: "enable", Summary: "one-step setup: create, re-enable or change the mode of the capture binding", Run: runEnable},
			{Name: "set-mode", Summary: "change only the capture mode of an enabled binding", Run: runSetMode},
			{Name: "status", Summary: "show the capture setting of one checkout or of every bound checkout", Run: runStatus},
			{Name: "forget", Summary: "remove a disabled capture binding (the spool is kept)", Run: runForget},
			{Name: "hook-claude", Summary: "the Claude Code hook (reads one hook payload on stdin)", Run: func(ctx context.Context, env *Env, args []string) error {
				if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
					fmt.Fprint(env.Stdout, hookHelp)
					return nil
				}
				if len(args) == 1 && args[0] == "--changelog" {
					runHookArgs(ctx, env, "change-capture", "hook-claude", "--changelog")
					return nil
				}
				if len(args) > 0 {
					return usagef("hook-claude takes no arguments but --changelog")
				}
				runHookArgs(ctx, env, "change-capture", "hook-claude")
				return nil
			}},
			{Name: "hook-codex", Summary: "the Codex CLI hook (reads one hook payload on stdin)", Run: func(ctx context.Context, env *Env, args []string) error {
				if len(args) > 0 {
					return usagef("hook-codex takes no arguments")
				}
				runHookArgs(ctx, env, "change-capture", "hook-codex")
				return nil
			}},
			{Name: "hook-gemini", Summary: "the Gemini CLI hook (reads one hook payload on stdin)", Run: func(ctx context.Context, env *Env, args []string) error {
				if len(args) > 0 {
					return usagef("hook-gemini takes no arguments")
				}
				runHookArgs(ctx, env, "change-capture", "hook-gemini")
				return nil
			}},
			{Name: "deliver", Summary: "deliver a spool's pending envelopes to the Hub now (the background deliverer's run, in the foreground)", Run: runDeliver},
			{Name: "deliver-spool", Summary: "the background deliverer process that hooks, status, show and the local page start (one bounded run)", Run: runDeliverSpool},
			{Name: "events", Summary: "list a spool's sessions and their events in order (read-only)", Run: runEvents},
			changeCaptureShowCommand(),
			changeCaptureConversationCommand(),
			deferredCommand(),
		}, append(append(append(spoolCommands(), transcriptCommands()...), recipeCommands()...), exportCommands()...)...),
	}
}

const hookHelp = `Usage:
  agentscm change-capture hook-claude [--changelog] < payload.json

The Claude Code command hook that configure installs. It reads one hook
payload (at most 16 MiB) on stdin, finds the enabled capture binding whose
root contains the payload's cwd and durably appends the event to that
binding's spool. It never blocks the agent: whatever fails, it prints one
warning line on stderr and exits 0. It prints nothing on stdout, except on a
SessionStart of a checkout with registered recipes: then exactly the bounded
recipe guidance as Claude Code's additional context (hookSpecificOutput).

With --changelog (the one entry of an event on which 'agentscm changelog
enable' is on too) the same process then takes the changelog increment of
the tool call (PostToolUse, PostToolUseFailure) or keeps its turn marker
(UserPromptSubmit, Stop, SessionEnd), before it hands delivery to the
deliverer: one process per event, still at most one warning line.
`

func configStore(env *Env) (capture.StateDir, error) {
	dir, err := binding.ConfigDir(env.Getenv)
	if err != nil {
		return capture.StateDir{}, err
	}
	return capture.StateDir{Dir: dir}, nil
}

func oneLine(s string) string { return hookcore.OneLine(s) }

func captureDeps(env *Env) (capture.StateDir, delivery.Connections, error) {
	store, err := configStore(env)
	if err != nil {
		return capture.StateDir{}, delivery.Connections{}, err
	}
	return store, delivery.Connections{ConfigDir: store.Dir}, nil
}

func runConfigure(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm change-capture configure",
		"[--root PATH] --spool ABS [--worktree-id ID] [--base-ref REF] [--setup-digest SHA256] [--claude-history-root ABS] [--capture-mode MODE] [--action-rule TOOL=execution:COVERAGE:RESULT_SOURCE]... [--recipe-file ABS]... [--max-records N] [--max-bytes N] [--max-artifact-bytes N] [--max-replay-entries N] [--max-replay-bytes N] [--auto-compact PERCENT | --no-auto-compact] [--claude-settings REL] [--format text|json]",
		`Bind a checkout that has a current client connection (see 'agentscm client
setup') to a private spool, and install the marked agentscm hook for the
eleven Claude Code lifecycle events (each with a 20-second timeout) in
ROOT/.claude/settings.local.json (or --claude-settings). Unrelated settings
and hooks are kept; running it again adds nothing twice. The hook command is
the lean agentscm-hook when it sits next to this agentscm binary (faster to
start on every tool call), else 'agentscm change-capture hook-claude'. On
the events where the changelog is on too, the one entry runs both
('... change-capture hook-claude --changelog'); an older install with two
entries there is upgraded. The
spool is created with directories 0700 and files 0600 and is bound for life
to the checkout's Hub, repository and worktree.

Capture modes: metadata-only (default) keeps no prompt, tool input, tool
output or error text; local-conversation keeps them in the spool only;
shared-conversation also shares redacted bodies with the Hub.

An execution rule TOOL=execution:COVERAGE:RESULT_SOURCE makes a tool call an
action (COVERAGE complete|partial|unknown; RESULT_SOURCE process_exit_code,
only for Bash and PowerShell, or unverified); its verification is always
unknown. A recipe file is a strict JSON object {"id", "argv" (absolute
executable first), "coverage", "timeout_seconds", "max_output_bytes"}; at most
16 distinct recipes. With recipes, configure records this agentscm executable
as the runner: SessionStart gives Claude Code the exact command
'ABS/agentscm change-capture run-recipe --id ID' for each recipe, and that
exact Bash command is the recipe's verification (see run-recipe --help),
not a generic Bash action. Spool limits default to 4096 records, 64 MiB and 16 MiB
per artifact; a spool with rules or recipes needs at least 48 records and
64 KiB. Run again on an existing spool, the limit flags change its limits
(under the spool lock, atomically); lowering below what the spool holds is
refused and changes nothing. Automatic compaction is off unless
--auto-compact PERCENT records the choice: the hook then compacts
acknowledged history when usage reaches PERCENT of a limit (as
'change-capture compact' does; pending envelopes, incomplete starts,
artifacts and the replay index are never removed). --no-auto-compact turns
it off; without either flag a re-run keeps the current choice. Without a
client connection it fails with "no client connection for this checkout"
and changes nothing.`)
	var o binding.ConfigureOptions
	var rules, recipes multiFlag
	fs.StringVar(&o.Root, "root", "", rootHelp+"; it must exist")
	fs.StringVar(&o.Spool, "spool", "", "path of the private spool directory (created when missing)")
	fs.StringVar(&o.WorktreeID, "worktree-id", "", "worktree namespace on the Hub (default: the client connection's)")
	fs.StringVar(&o.BaseRef, "base-ref", "", "the base ref source bindings compare against, e.g. origin/main")
	fs.StringVar(&o.SetupDigest, "setup-digest", "", "64-hex SHA-256 the caller asserts for the agent setup")
	fs.StringVar(&o.ClaudeHistoryRoot, "claude-history-root", "", "absolute, non-symlink directory of Claude transcripts the hook may read")
	fs.StringVar(&o.CaptureMode, "capture-mode", event.ModeMetadataOnly, "metadata-only, local-conversation or shared-conversation")
	fs.Var(&rules, "action-rule", "TOOL=execution:COVERAGE:RESULT_SOURCE (repeatable)")
	fs.Var(&recipes, "recipe-file", "path of a recipe JSON file (repeatable)")
	fs.Int64Var(&o.Limits.Records, "max-records", 0, fmt.Sprintf("spool record limit (default %d)", spool.DefaultRecords))
	fs.Int64Var(&o.Limits.Bytes, "max-bytes", 0, fmt.Sprintf("spool total byte limit (default %d)", spool.DefaultBytes))
	fs.Int64Var(&o.Limits.ArtifactBytes, "max-artifact-bytes", 0, fmt.Sprintf("spool per-artifact byte limit (default %d, at most --max-bytes)", spool.DefaultArtifactBytes))
	fs.Int64Var(&o.Limits.ReplayEntries, "max-replay-entries", 0, "bound of the compaction replay index in entries (default: twice the record limit, at most 8192)")
	fs.Int64Var(&o.Limits.ReplayBytes, "max-replay-bytes", 0, "bound of the compaction replay index in bytes (default: an eighth of the byte limit, at most 8 MiB)")
	compactionFlags(fs, &o.Compaction)
	fs.StringVar(&o.ClaudeSettings, "claude-settings", "", "Claude settings file for the hooks, relative to the root (default .claude/settings.local.json; for --agent codex .codex/hooks.json, gemini .gemini/settings.json)")
	fs.StringVar(&o.Agent, "agent", "", "claude-code (default), codex or gemini: whose hooks to install; on a bound checkout it is added beside the binding's agents, and without --agent they are kept (docs/agents.md)")
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	if o.Spool == "" {
		return usagef("--spool is required")
	}
	if o.Compaction.Set != 0 && o.Compaction.Clear {
		return usagef("--auto-compact and --no-auto-compact exclude each other")
	}
	// Bad values are bad usage (exit 2), refused before anything is read.
	if _, err := action.ParseRules(rules); err != nil {
		return usagef("%v", err)
	}
	if o.SetupDigest != "" && !api.IsDigest(o.SetupDigest) {
		return usagef("--setup-digest must be 64 lowercase hex characters (a SHA-256)")
	}
	o.ActionRules, o.RecipeFiles = rules, recipes
	o.Executable, o.Now = env.Executable, env.Now()
	store, conns, err := captureDeps(env)
	if err != nil {
		return err
	}
	res, err := binding.Configure(ctx, store, conns, o)
	if err != nil {
		return err
	}
	if *format == "json" {
		return writeJSON(env.Stdout, res)
	}
	printConfigure(env, "capture configured", res)
	return nil
}

// compactionFlags registers --auto-compact and --no-auto-compact.
func compactionFlags(fs *flag.FlagSet, c *binding.PolicyChange) {
	fs.IntVar(&c.Set, "auto-compact", 0, "record automatic compaction of acknowledged history when usage reaches PERCENT (1-95) of a limit")
	fs.BoolVar(&c.Clear, "no-auto-compact", false, "turn automatic compaction off (compact by hand with change-capture compact)")
}

func printConfigure(env *Env, title string, res *binding.ConfigureResult) {
	w := env.Stdout
	fmt.Fprintf(w, "%s for %s\n", title, res.Root)
	fmt.Fprintf(w, "  capture mode:  %s\n  spool:         %s\n  hub:           %s\n  repository:    %s\n  worktree id:   %s\n",
		res.CaptureMode, res.Spool, res.Hub, res.Repository, res.WorktreeID)
	if res.BaseRef != "" {
		fmt.Fprintf(w, "  base ref:      %s\n", res.BaseRef)
	}
	for _, r := range res.ActionRules {
		fmt.Fprintf(w, "  action rule:   %s (verification unknown)\n", r)
	}
	for _, r := range res.Recipes {
		fmt.Fprintf(w, "  recipe:        %s\n", r)
	}
	fmt.Fprintf(w, "  spool limits:  %d records, %d bytes, %d bytes per artifact\n", res.Limits.Records, res.Limits.Bytes, res.Limits.ArtifactBytes)
	if res.PreviousLimits != nil {
		p := res.PreviousLimits
		fmt.Fprintf(w, "                 (changed from %d records, %d bytes, %d bytes per artifact)\n", p.Records, p.Bytes, p.ArtifactBytes)
	}
	fmt.Fprintf(w, "  compaction:    %s\n", res.Compaction)
	fmt.Fprintf(w, "  claude hooks:  %s (%d events)\n", res.ClaudeSettings, len(res.HookEvents))
	for _, a := range res.Agents {
		if a.Agent != res.Agent {
			fmt.Fprintf(w, "  also captured: %s, hooks in %s (%d events)\n", a.Agent, a.Settings, len(a.Events))
		}
	}
	if !res.SettingsChange {
		fmt.Fprintln(w, "  (hooks were already installed; nothing changed there)")
	}
	for _, warn := range res.Warnings {
		fmt.Fprintf(env.Stderr, "warning: %s\n", warn)
	}
}

func runUnconfigure(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm change-capture unconfigure", "[--root PATH] [--agent NAME] [--format text|json]",
		`Remove only the marked agentscm capture hooks from the hook file of every
agent of the checkout's binding and disable its capture binding. The
binding and the private spool are kept; nothing captured is deleted. With
--agent, only that agent's capture hooks go and the binding keeps the
others (it is disabled only when that was its last agent).`)
	root := fs.String("root", "", rootHelp+"; as it was configured")
	agent := fs.String("agent", "", "remove only this agent's capture hooks (claude-code, codex or gemini), keeping the binding's other agents")
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	store, err := configStore(env)
	if err != nil {
		return err
	}
	if *agent != "" {
		if _, err := adapter.For(*agent); err != nil {
			return usagef("--agent: %v", err)
		}
		res, err := binding.RemoveAgent(ctx, store, *root, *agent)
		if err != nil {
			return err
		}
		if *format == "json" {
			return writeJSON(env.Stdout, res)
		}
		if res.Capture != nil {
			fmt.Fprintf(env.Stdout, "capture disabled for %s (%s was its last agent)\n  %s\n  spool retained:     %s\n", res.Root, res.Agent, unconfigureHooksLine(res.Capture), res.Capture.Spool)
			return nil
		}
		state := "held no agentscm capture hooks"
		if res.HooksRemoved {
			state = "hooks removed"
		}
		fmt.Fprintf(env.Stdout, "capture of %s removed for %s\n  %s: %s\n  still captured:     %s\n", res.Agent, res.Root, res.Settings, state, strings.Join(res.Remaining, ", "))
		return nil
	}
	res, err := binding.Unconfigure(ctx, store, *root)
	if err != nil {
		return err
	}
	if *format == "json" {
		return writeJSON(env.Stdout, res)
	}
	if len(res.StrayHooks) > 0 {
		fmt.Fprintf(env.Stdout, "no enabled capture binding for %s; capture hooks removed from: %s\n", res.Root, strings.Join(res.StrayHooks, ", "))
		return nil
	}
	fmt.Fprintf(env.Stdout, "capture disabled for %s\n  %s\n  spool retained:     %s\n", res.Root, unconfigureHooksLine(res), res.Spool)
	if res.Warning != "" {
		fmt.Fprintf(env.Stderr, "agentscm: warning: %s\n", res.Warning)
	}
	return nil
}

// unconfigureHooksLine says what happened to the hooks, and only that.
func unconfigureHooksLine(res *binding.UnconfigureResult) string {
	files := res.ClaudeSettings
	if len(res.HookFiles) > 1 {
		files = strings.Join(res.HookFiles, ", ")
	}
	switch {
	case res.HooksRemoved:
		return "hooks removed from: " + files
	case !res.CheckoutExists:
		return "hooks untouched:    the checkout no longer exists, so " + files + " was not read or changed"
	default:
		return "hooks untouched:    " + files + " held no agentscm capture hooks"
	}
}

// inspectSession is one session of the inspect output.
type inspectSession struct {
	SessionID string         `json:"session_id"`
	Events    []event.Record `json:"events"`
}

type inspectOutput struct {
	Spool    string           `json:"spool"`
	Events   int              `json:"events"`
	Sessions []inspectSession `json:"sessions"`
}

func runEvents(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm change-capture events", "--spool ABS [--format text|json]",
		`List the spool's sessions, in order of their first event, with their events
in arrival order: kind, tool, outcome, the Hub target or "deferred", and
whether a local body is kept. Read-only: it opens the spool without the
lock and never changes it. For the spool's health, pending delivery and
quarantine use 'change-capture inspect'.`)
	spoolDir := fs.String("spool", "", "path of the spool")
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	if *spoolDir == "" {
		return usagef("--spool is required")
	}
	sp, err := spool.OpenReadOnly(*spoolDir)
	if err != nil {
		return err
	}
	recs, err := sp.Events()
	if err != nil {
		return err
	}
	out := inspectOutput{Spool: sp.Dir(), Events: len(recs), Sessions: []inspectSession{}}
	idx := map[string]int{}
	for _, r := range recs {
		i, ok := idx[r.SessionID]
		if !ok {
			i = len(out.Sessions)
			idx[r.SessionID] = i
			out.Sessions = append(out.Sessions, inspectSession{SessionID: r.SessionID})
		}
		out.Sessions[i].Events = append(out.Sessions[i].Events, r)
	}
	if *format == "json" {
		return writeJSON(env.Stdout, out)
	}
	fmt.Fprintf(env.Stdout, "spool %s: %d events in %d sessions\n", out.Spool, out.Events, len(out.Sessions))
	for _, s := range out.Sessions {
		// The agent whose hooks observed the session (several agents may be
		// captured in one checkout; every record names its agent).
		var agents []string
		for _, r := range s.Events {
			if r.Agent != "" && !slices.Contains(agents, r.Agent) {
				agents = append(agents, r.Agent)
			}
		}
		if len(agents) == 0 {
			agents = []string{"agent unknown"}
		}
		fmt.Fprintf(env.Stdout, "\nsession %s (%s, %d events)\n", s.SessionID, strings.Join(agents, ", "), len(s.Events))
		for _, r := range s.Events {
			fmt.Fprintf(env.Stdout, "  %6d  %s  %-16s %s\n", r.Seq, r.ObservedAt.Format(time.RFC3339), r.Kind, describe(r))
		}
	}
	return nil
}

func describe(r event.Record) string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	add("tool", r.ToolName)
	add("tool_use_id", r.ToolUseID)
	add("outcome", r.Outcome)
	add("source", r.Source)
	add("reason", r.Reason)
	add("agent_id", r.AgentID)
	add("message_id", r.MessageID)
	if r.Deferred {
		parts = append(parts, "deferred")
	} else if r.WorkID != "" {
		parts = append(parts, fmt.Sprintf("work=%s/%d/%s", r.WorkID, r.Generation, r.CanonicalSession))
	}
	if r.Body != nil {
		parts = append(parts, "body=kept")
	}
	return strings.Join(parts, " ")
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
