package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentscm/agentscm/internal/agent/adapter"
	"github.com/agentscm/agentscm/internal/agent/codex"
	"github.com/agentscm/agentscm/internal/agent/gemini"
	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/connections"
	"github.com/agentscm/agentscm/internal/hub/api"
)

// newcomerCommands are the one-command setup of a checkout and its undoing
// (issue 32): enable, disable, show (change-capture show's short name) and
// doctor.
func newcomerCommands() []*Command {
	return []*Command{
		{Name: "enable", Summary: "turn agentscm on for this checkout: connect, capture, changelog, a current Work", Run: runNewcomerEnable},
		{Name: "disable", Summary: "turn capture and the changelog off for this checkout (the record is kept)", Run: runNewcomerDisable},
		{Name: "show", Summary: "print the current Work's timeline: each session, each tool call and the files it changed (change-capture show)", Run: runChangeCaptureShow},
		{Name: "doctor", Summary: "check hooks, trust, binaries, spool, deliverer, Hub and changelog; name the fix of each problem", Run: runDoctor},
	}
}

// enableReport is what agentscm enable did, also its --format json.
type enableReport struct {
	Root string `json:"root"`
	// Connected is true when enable connected the checkout to the embedded
	// local Hub (it had no connection).
	Connected  bool   `json:"connected"`
	Hub        string `json:"hub"`
	Repository string `json:"repository"`
	// Capture is change-capture enable's result: its action is created,
	// re-enabled or mode-changed (an enabled binding: its hooks put back).
	Capture   *binding.EnableResult  `json:"capture"`
	Changelog *changelogEnableResult `json:"changelog"`
	Work      *enableWork            `json:"work,omitempty"`
	Warnings  []string               `json:"warnings"`
	Next      []nextCommand          `json:"next"`
}

// enableWork is the checkout's current Work after enable.
type enableWork struct {
	ID      string `json:"id"`
	Title   string `json:"title,omitempty"`
	Started bool   `json:"started"`
}

// nextCommand is one command enable suggests, with what it does.
type nextCommand struct {
	Command string `json:"command"`
	Does    string `json:"does"`
}

// enableNext is what enable suggests running next.
func enableNext() []nextCommand {
	return []nextCommand{
		{"agentscm show", "what each session and each tool call did, and the files it changed"},
		{"agentscm rewind --to N", "put the files back as they were after tool call N (undoable)"},
		{"agentscm status", "one screen for this checkout (agentscm doctor when something looks off)"},
		{"agentscm disable", "turn it off again; everything recorded is kept"},
	}
}

func runNewcomerEnable(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm enable", "[--root PATH] [--agent NAME] [--format text|json]",
		`Turn agentscm on for the checkout holding the working directory, in one
step: connect it to the embedded local Hub when it has no client connection
(as 'client setup --local' does), turn on change capture ('change-capture
enable'), turn on the changelog ('changelog enable': one increment per tool
call, so 'rewind' works), and start a Work when none is current ('work
start'), so the record reaches the Hub. It prints what it did and what to
run next. Running it again changes nothing that is already on and puts
back hooks that were removed. The agent (Claude Code, Codex CLI or Gemini
CLI) is the one whose directory (.claude, .codex, .gemini) the checkout or
your home holds, or --agent; on a checkout already on for other agents,
--agent adds that agent (its hooks where it reads them) and keeps theirs,
so one checkout may be captured for several agents ('agentscm disable
--agent' removes one). 'agentscm disable' undoes it and keeps the
record; the change-capture, changelog and work commands give full control.`)
	root := fs.String("root", "", rootHelp)
	agent := fs.String("agent", "", agentFlagHelp)
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	rep, err := enableCheckout(ctx, env, *root, *agent)
	if rep == nil {
		return err
	}
	if *format == "json" {
		if werr := writeJSON(env.Stdout, rep); werr != nil {
			return werr
		}
		return err
	}
	printEnableReport(env.Stdout, rep)
	for _, w := range rep.Warnings {
		fmt.Fprintf(env.Stderr, "agentscm: warning: %s\n", w)
	}
	return err
}

// enableCheckout runs the steps of agentscm enable on root. A report with
// an error says what was done before the step that failed.
func enableCheckout(ctx context.Context, env *Env, rootFlag, agent string) (*enableReport, error) {
	store, conns, err := captureDeps(env)
	if err != nil {
		return nil, err
	}
	root, err := binding.CanonicalRoot(rootFlag)
	if err != nil {
		return nil, err
	}
	rep := &enableReport{Root: root, Warnings: []string{}, Next: enableNext()}
	c, created, err := connectLocal(ctx, env, store.Dir, root)
	if err != nil {
		return nil, err
	}
	rep.Connected, rep.Hub, rep.Repository = created, c.Hub, c.Repository

	agentName := agent
	if agentName == "" {
		if cur, err := store.Bindings().Load(); err == nil && cur.Find(root) == nil {
			agentName = detectAgent(env, root)
		}
	}
	capRes, err := binding.EnableCapture(ctx, store, conns, binding.EnableOptions{
		Root: root, ConfigDir: store.Dir, Executable: env.Executable, Now: env.Now(), Agent: agentName,
	})
	if err != nil {
		return nil, fmt.Errorf("turn on capture: %w", err)
	}
	rep.Capture = capRes
	rep.Warnings = append(rep.Warnings, capRes.Warnings...)

	rf := rootFlags{root: root, transcript: transcriptOn, home: env.Getenv("HOME")}
	// The changelog's hooks for every agent capture has (the one asked
	// for first), each where that agent reads them.
	var more []string
	for _, a := range capRes.Agents {
		more = append(more, a.Agent)
	}
	clRes, err := enableChangelog(ctx, env, changelogEnableOptions{rf: &rf, agent: capRes.Agent, more: more})
	if err != nil {
		return rep, fmt.Errorf("capture is on, but the changelog is not: %w", err)
	}
	rep.Changelog = clRes

	w, err := ensureWork(ctx, env, c)
	if err != nil {
		return rep, fmt.Errorf("capture and the changelog are on, but no Work is current (captured facts stay local until one is: run agentscm work start when the Hub answers): %w", err)
	}
	rep.Work = w
	return rep, nil
}

// ensureWork returns the checkout's current Work, starting one (titled
// after the checkout) when none is current.
func ensureWork(ctx context.Context, env *Env, c connections.Connection) (*enableWork, error) {
	ctx, cancel := context.WithTimeout(ctx, hubTimeout)
	defer cancel()
	conn, err := client.Open(ctx, c, client.Options{})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	cur, err := conn.CurrentWork(ctx, c.WorktreeID)
	if err == nil {
		return &enableWork{ID: cur.Work.ID, Title: cur.Work.Title}, nil
	}
	if e, ok := api.AsError(err); !ok || e.Code != api.CodeNotFound {
		return nil, err
	}
	w, err := conn.StartWork(ctx, api.StartWorkRequest{Title: filepath.Base(c.Root), WorktreeID: c.WorktreeID})
	if err != nil {
		return nil, err
	}
	forgetGrant(env, c.Root)
	noteWorkChanged(env, c.Root)
	return &enableWork{ID: w.ID, Title: w.Title, Started: true}, nil
}

func printEnableReport(w io.Writer, rep *enableReport) {
	fmt.Fprintf(w, "agentscm is on for %s\n", rep.Root)
	if rep.Connected {
		fmt.Fprintf(w, "  connected to the local Hub (repository %s)\n", rep.Repository)
	} else {
		fmt.Fprintf(w, "  connection kept: repository %s on %s\n", rep.Repository, rep.Hub)
	}
	if c := rep.Capture; c != nil {
		what := "on"
		switch c.Action {
		case "created":
			what = "turned on"
		case "re-enabled":
			what = "turned on again (same spool)"
		}
		fmt.Fprintf(w, "  capture %s (%s): %s hooks in %s\n", what, c.CaptureMode, agentTitle(c.Agent), relTo(rep.Root, c.ClaudeSettings))
		for _, a := range c.Agents {
			if a.Agent != c.Agent {
				fmt.Fprintf(w, "  capture kept for %s: hooks in %s\n", agentTitle(a.Agent), relTo(rep.Root, a.Settings))
			}
		}
	}
	if cl := rep.Changelog; cl != nil {
		fmt.Fprintln(w, "  changelog on: one increment per tool call, so you can rewind")
	}
	if wk := rep.Work; wk != nil {
		if wk.Started {
			fmt.Fprintf(w, "  started a Work (%s)\n", wk.Title)
		} else {
			fmt.Fprintf(w, "  Work already current (%s)\n", orUntitled(wk.Title))
		}
	}
	for _, a := range agentsOf(rep) {
		switch a {
		case codex.AgentName:
			fmt.Fprintf(w, "  note: %s (agentscm doctor checks the project's trust)\n", codex.TrustNote(rep.Root))
		case gemini.AgentName:
			fmt.Fprintf(w, "  note: %s\n", gemini.TrustNote(rep.Root))
		}
	}
	fmt.Fprintf(w, "\nNow use %s in this checkout, then:\n", agentTitle(agentOf(rep)))
	for _, n := range rep.Next {
		fmt.Fprintf(w, "  %-24s %s\n", n.Command, n.Does)
	}
}

// agentsOf is every agent capture has after enable, the one enable was
// about first.
func agentsOf(rep *enableReport) []string {
	out := []string{agentOf(rep)}
	if rep.Capture != nil {
		for _, a := range rep.Capture.Agents {
			if a.Agent != out[0] {
				out = append(out, a.Agent)
			}
		}
	}
	return out
}

func agentOf(rep *enableReport) string {
	if rep.Capture != nil {
		return rep.Capture.Agent
	}
	return ""
}

// agentTitle is an agent's name as people write it.
func agentTitle(name string) string {
	switch name {
	case codex.AgentName:
		return "Codex CLI"
	case gemini.AgentName:
		return "Gemini CLI"
	}
	return "Claude Code"
}

func orUntitled(s string) string {
	if s == "" {
		return "untitled"
	}
	return s
}

// relTo is path relative to root when it is inside it.
func relTo(root, path string) string {
	if !filepath.IsAbs(path) {
		return path
	}
	if r, err := filepath.Rel(root, path); err == nil && filepath.IsLocal(r) {
		return r
	}
	return path
}

// disableReport is what agentscm disable did, also its --format json.
type disableReport struct {
	Root string `json:"root"`
	// Agent is the one agent --agent turned off ("" for all).
	Agent     string                     `json:"agent,omitempty"`
	Changelog *changelogDisableResult    `json:"changelog,omitempty"`
	Capture   *binding.UnconfigureResult `json:"capture,omitempty"`
	// Agents are the changelog hooks removed, one entry per agent.
	Agents []changelogDisableResult `json:"changelog_agents,omitempty"`
	// Removed is what --agent did to capture: that agent's hooks gone,
	// the others' kept (capture stays on while any agent remains).
	Removed *binding.RemoveAgentResult `json:"capture_agent,omitempty"`
	// Kept lists what stays: the spool, the changelog's increments, the
	// connection and the Work.
	Kept []string `json:"kept"`
}

func runNewcomerDisable(ctx context.Context, env *Env, args []string) error {
	flags := newFlags(env, "agentscm disable", "[--root PATH] [--agent NAME] [--format text|json]",
		`Undo agentscm enable for the checkout holding the working directory:
remove the changelog's hooks ('changelog disable') and the capture hooks
of every agent, and disable the capture binding ('change-capture
unconfigure'). With --agent, only that agent's hooks (capture and
changelog) go: the other agents of the checkout stay captured, and capture
turns off only when it was the last. Nothing recorded is deleted: the
spool, the changelog's increments (rewind keeps working), the client
connection and the Work stay; 'agentscm enable' turns it all on again with
the same spool. Refused with exit status 5 while an agent turn runs.`)
	root := flags.String("root", "", rootHelp)
	agent := flags.String("agent", "", "turn off only this agent (claude-code, codex or gemini), keeping the others")
	format := formatFlag(flags)
	if err := parseFlags(env, flags, args, false); err != nil {
		return err
	}
	store, err := configStore(env)
	if err != nil {
		return err
	}
	canon, err := binding.CanonicalRoot(*root)
	if err != nil {
		return err
	}
	one := ""
	if *agent != "" {
		a, err := adapter.For(*agent)
		if err != nil {
			return usagef("--agent: %v", err)
		}
		one = a.Name()
	}
	rep := &disableReport{Root: canon, Agent: one, Kept: []string{}}
	var b *binding.Binding
	if cfg, err := store.Bindings().Load(); err == nil {
		b = cfg.Find(canon)
	}
	if dir := changelog.DirFor(store.Dir, canon); dir != "" {
		if _, err := changelog.LoadRoots(dir); err == nil {
			for _, h := range disableAgents(canon, b, one) {
				if one == "" {
					if _, err := os.Stat(h.Path(canon)); err != nil {
						continue // no hook file: nothing of this agent's to remove
					}
				}
				rf := rootFlags{root: canon}
				res, err := disableChangelog(env, &rf, h.Settings, true, h.Agent)
				if err != nil {
					return fmt.Errorf("turn off the changelog of %s: %w", agentTitle(h.Agent), err)
				}
				if rep.Changelog == nil {
					rep.Changelog = res
					rep.Kept = append(rep.Kept, "the changelog's increments in "+res.Dir+" (rewind still works)")
				}
				rep.Agents = append(rep.Agents, *res)
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if one != "" {
		res, err := binding.RemoveAgent(ctx, store, canon, one)
		switch {
		case err == nil:
			rep.Removed, rep.Capture = res, res.Capture
			if res.Capture != nil {
				rep.Kept = append(rep.Kept, "the capture spool "+res.Capture.Spool)
			}
		case !slices.ContainsFunc(rep.Agents, func(c changelogDisableResult) bool { return c.Removed }) ||
			!errors.Is(err, binding.ErrAgentNotBound) && !errors.Is(err, binding.ErrNoBinding):
			// Nothing of the agent's was on: say why.
			return err
		}
	} else {
		res, err := binding.Unconfigure(ctx, store, canon)
		switch {
		case err == nil:
			rep.Capture = res
			rep.Kept = append(rep.Kept, "the capture spool "+res.Spool)
		case rep.Changelog == nil:
			return err
		}
	}
	if c, err := connections.Lookup(store.Dir, canon); err == nil {
		rep.Kept = append(rep.Kept, fmt.Sprintf("the connection to repository %s on %s, and its Works", c.Repository, c.Hub))
	}
	if *format == "json" {
		return writeJSON(env.Stdout, rep)
	}
	if r := rep.Removed; r != nil && len(r.Remaining) > 0 {
		fmt.Fprintf(env.Stdout, "agentscm is off for %s in %s\n", agentTitle(one), canon)
	} else {
		fmt.Fprintf(env.Stdout, "agentscm is off for %s\n", canon)
	}
	for _, c := range rep.Agents {
		if c.Removed {
			fmt.Fprintf(env.Stdout, "  changelog hooks removed from %s\n", relTo(canon, c.Settings))
		}
	}
	if r := rep.Removed; r != nil && len(r.Remaining) > 0 {
		line := "no capture hooks were in " + relTo(canon, r.Settings)
		if r.HooksRemoved {
			line = "hooks removed from " + relTo(canon, r.Settings)
		}
		fmt.Fprintf(env.Stdout, "  capture of %s: %s\n", agentTitle(one), line)
		var names []string
		for _, a := range r.Remaining {
			names = append(names, agentTitle(a))
		}
		fmt.Fprintf(env.Stdout, "  capture stays on for %s\n", strings.Join(names, ", "))
	} else if rep.Capture != nil {
		fmt.Fprintf(env.Stdout, "  capture: %s\n", unconfigureHooksLine(rep.Capture))
		if rep.Capture.Warning != "" {
			fmt.Fprintf(env.Stderr, "agentscm: warning: %s\n", rep.Capture.Warning)
		}
	}
	for _, k := range rep.Kept {
		fmt.Fprintf(env.Stdout, "  kept: %s\n", k)
	}
	fmt.Fprintln(env.Stdout, "Run agentscm enable to turn it on again.")
	return nil
}

// disableAgents are the agents whose changelog hooks disable removes, each
// with its hook file: one when given; else every agent of the capture
// binding b (nil: none) and every agent whose own hook file in root holds
// changelog hooks (Claude Code when none). A binding's agent keeps the
// hook file the binding records.
func disableAgents(root string, b *binding.Binding, one string) []binding.AgentHooks {
	var out []binding.AgentHooks
	add := func(h binding.AgentHooks) {
		if !slices.ContainsFunc(out, func(o binding.AgentHooks) bool { return o.Agent == h.Agent }) {
			out = append(out, h)
		}
	}
	if b != nil {
		for _, h := range b.Hooks() {
			if one == "" || h.Agent == one {
				add(h)
			}
		}
	}
	for _, a := range adapter.All() {
		if one == "" && slices.Contains(changelogHookAgents(root), a) || a.Name() == one {
			add(binding.AgentHooks{Agent: a.Name(), Settings: a.HookFile()})
		}
	}
	if len(out) == 0 {
		a := adapter.All()[0]
		add(binding.AgentHooks{Agent: a.Name(), Settings: a.HookFile()})
	}
	return out
}
