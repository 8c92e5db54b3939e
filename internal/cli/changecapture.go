package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

func changeCaptureCommand() *Command {
	return &Command{
		Name:    "change-capture",
		Summary: "capture agent sessions of a checkout into a private spool",
		Sub: []*Command{
			{Name: "configure", Summary: "bind a checkout to a spool and install the Claude Code hooks", Run: runConfigure},
			{Name: "unconfigure", Summary: "remove the marked Claude Code hooks and disable the binding", Run: runUnconfigure},
			{Name: "hook-claude", Summary: "the Claude Code hook (reads one hook payload on stdin)", Run: func(ctx context.Context, env *Env, args []string) error {
				if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
					fmt.Fprint(env.Stdout, hookHelp)
					return nil
				}
				if len(args) > 0 {
					return usagef("hook-claude takes no arguments")
				}
				runHookClaude(ctx, env)
				return nil
			}},
			{Name: "inspect", Summary: "list a spool's sessions and their events (read-only)", Run: runInspect},
		},
	}
}

const hookHelp = `Usage:
  agentscm change-capture hook-claude < payload.json

The Claude Code command hook that configure installs. It reads one hook
payload (at most 16 MiB) on stdin, finds the enabled capture binding whose
root contains the payload's cwd and durably appends the event to that
binding's spool. It never blocks the agent: whatever fails, it prints one
warning line on stderr, nothing on stdout, and exits 0.
`

func configStore(env *Env) (capture.Store, error) {
	dir, err := capture.ConfigDir(env.Getenv)
	if err != nil {
		return capture.Store{}, err
	}
	return capture.Store{Dir: dir}, nil
}

// runHookClaude is the hook entry point: it always exits 0 with empty stdout.
func runHookClaude(ctx context.Context, env *Env) int {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(env.Stderr, "agentscm: warning: capture hook failed: internal error: %v\n", r)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	store, err := configStore(env)
	if err == nil {
		_, err = capture.HandleClaudeHook(ctx, store, env.Stdin, env.Now())
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "agentscm: warning: capture hook failed: %s\n", oneLine(err.Error()))
	}
	return ExitOK
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\r", " ")
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 1000 {
		s = s[:1000] + "…"
	}
	return s
}

func runConfigure(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm change-capture configure",
		"--root ABS --spool ABS [--capture-mode metadata-only|local-conversation] [--format text|json]",
		`Bind a checkout to a private spool and install the marked agentscm hook for
the eleven Claude Code lifecycle events (each with a 20-second timeout) in
ROOT/.claude/settings.local.json. Unrelated settings and hooks are kept;
running it again adds nothing twice. The spool is created with directories
0700 and files 0600. metadata-only (the default) keeps no prompt, tool input,
tool output or error text; local-conversation keeps them in the spool only.`)
	root := fs.String("root", "", "absolute path of the checkout (must exist)")
	spoolDir := fs.String("spool", "", "absolute path of the private spool directory (created when missing)")
	mode := fs.String("capture-mode", event.ModeMetadataOnly, "metadata-only or local-conversation")
	format := formatFlag(fs)
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	if err := checkFormat(*format); err != nil {
		return err
	}
	if *root == "" || *spoolDir == "" {
		return usagef("--root and --spool are required")
	}
	store, err := configStore(env)
	if err != nil {
		return err
	}
	res, err := capture.Configure(ctx, store, capture.ConfigureOptions{
		Root: *root, Spool: *spoolDir, CaptureMode: *mode, Executable: env.Executable, Now: env.Now(),
	})
	if err != nil {
		return err
	}
	if *format == "json" {
		return writeJSON(env.Stdout, res)
	}
	fmt.Fprintf(env.Stdout, "capture configured for %s\n  spool:         %s\n  capture mode:  %s\n  claude hooks:  %s (%d events)\n",
		res.Root, res.Spool, res.CaptureMode, res.ClaudeSettings, len(res.HookEvents))
	if !res.SettingsChange {
		fmt.Fprintln(env.Stdout, "  (hooks were already installed; nothing changed)")
	}
	return nil
}

func runUnconfigure(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm change-capture unconfigure", "--root ABS [--format text|json]",
		`Remove only the marked agentscm hooks from the checkout's Claude settings
file and disable its capture binding. The binding and the private spool are
kept; nothing captured is deleted.`)
	root := fs.String("root", "", "absolute path of the checkout as it was configured")
	format := formatFlag(fs)
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	if err := checkFormat(*format); err != nil {
		return err
	}
	if *root == "" {
		return usagef("--root is required")
	}
	store, err := configStore(env)
	if err != nil {
		return err
	}
	res, err := capture.Unconfigure(ctx, store, *root)
	if err != nil {
		return err
	}
	if *format == "json" {
		return writeJSON(env.Stdout, res)
	}
	fmt.Fprintf(env.Stdout, "capture disabled for %s\n  hooks removed from: %s\n  spool retained:     %s\n", res.Root, res.ClaudeSettings, res.Spool)
	return nil
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

func runInspect(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm change-capture inspect", "--spool ABS [--format text|json]",
		`List the spool's sessions, in order of their first event, with their events
in arrival order. Read-only: it never changes the spool.`)
	spoolDir := fs.String("spool", "", "absolute path of the spool")
	format := formatFlag(fs)
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	if err := checkFormat(*format); err != nil {
		return err
	}
	if *spoolDir == "" {
		return usagef("--spool is required")
	}
	sp, err := spool.Open(*spoolDir)
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
		fmt.Fprintf(env.Stdout, "\nsession %s (%d events)\n", s.SessionID, len(s.Events))
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
