package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"

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
your home holds, or --agent. 'agentscm disable' undoes it and keeps the
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
	clRes, err := enableChangelog(ctx, env, changelogEnableOptions{rf: &rf, agent: capRes.Agent})
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
	switch agentOf(rep) {
	case codex.AgentName:
		fmt.Fprintf(w, "  note: %s (agentscm doctor checks the project's trust)\n", codex.TrustNote(rep.Root))
	case gemini.AgentName:
		fmt.Fprintf(w, "  note: %s\n", gemini.TrustNote(rep.Root))
	}
	fmt.Fprintf(w, "\nNow use %s in this checkout, then:\n", agentTitle(agentOf(rep)))
	for _, n := range rep.Next {
		fmt.Fprintf(w, "  %-24s %s\n", n.Command, n.Does)
	}
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
	Root      string                     `json:"root"`
	Changelog *changelogDisableResult    `json:"changelog,omitempty"`
	Capture   *binding.UnconfigureResult `json:"capture,omitempty"`
	// Kept lists what stays: the spool, the changelog's increments, the
	// connection and the Work.
	Kept []string `json:"kept"`
}

func runNewcomerDisable(ctx context.Context, env *Env, args []string) error {
	flags := newFlags(env, "agentscm disable", "[--root PATH] [--format text|json]",
		`Undo agentscm enable for the checkout holding the working directory:
remove the changelog's hooks ('changelog disable') and the capture hooks,
and disable the capture binding ('change-capture unconfigure'). Nothing
recorded is deleted: the spool, the changelog's increments (rewind keeps
working), the client connection and the Work stay; 'agentscm enable' turns
it all on again with the same spool. Refused with exit status 5 while an
agent turn runs.`)
	root := flags.String("root", "", rootHelp)
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
	rep := &disableReport{Root: canon, Kept: []string{}}
	if dir := changelog.DirFor(store.Dir, canon); dir != "" {
		if _, err := changelog.LoadRoots(dir); err == nil {
			agent := ""
			if cfg, err := store.Bindings().Load(); err == nil {
				if b := cfg.Find(canon); b != nil {
					agent = b.Agent
				}
			}
			rf := rootFlags{root: canon}
			res, err := disableChangelog(env, &rf, "", false, agent)
			if err != nil {
				return fmt.Errorf("turn off the changelog: %w", err)
			}
			rep.Changelog = res
			rep.Kept = append(rep.Kept, "the changelog's increments in "+res.Dir+" (rewind still works)")
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	res, err := binding.Unconfigure(ctx, store, canon)
	switch {
	case err == nil:
		rep.Capture = res
		rep.Kept = append(rep.Kept, "the capture spool "+res.Spool)
	case rep.Changelog == nil:
		return err
	}
	if c, err := connections.Lookup(store.Dir, canon); err == nil {
		rep.Kept = append(rep.Kept, fmt.Sprintf("the connection to repository %s on %s, and its Works", c.Repository, c.Hub))
	}
	if *format == "json" {
		return writeJSON(env.Stdout, rep)
	}
	fmt.Fprintf(env.Stdout, "agentscm is off for %s\n", canon)
	if rep.Changelog != nil {
		fmt.Fprintln(env.Stdout, "  changelog hooks removed")
	}
	if rep.Capture != nil {
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
