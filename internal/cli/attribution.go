package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/agentscm/agentscm/internal/attribution"
)

func attributionCommand() *Command {
	return &Command{Name: "attribution", Summary: "lines added per session and outside the agent; git notes of Agent Trace records (enable, disable)", Run: runAttribution}
}

func runAttribution(ctx context.Context, env *Env, args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "enable":
			return runAttributionEnable(ctx, env, args[1:], true)
		case "disable":
			return runAttributionEnable(ctx, env, args[1:], false)
		case "hook":
			return runAttributionHook(ctx, env, args[1:])
		}
	}
	fs := newFlags(env, "agentscm attribution", "[--root ABS] [--since REV] [--format text|json|markdown] | enable | disable", `
Count, per file and in total, the lines the working tree adds against
REV (default HEAD; git's renames followed), by the agent session whose
tool call wrote them, or outside the agent (your edits and any other
process's, found by the changelog), or before capture: a summary for a
pull-request comment (--format markdown writes one). Each line is
attributed as agentscm blame does.

  agentscm attribution enable    install the post-commit and post-rewrite
                                 git hooks that attach an Agent Trace
                                 record to each commit under
                                 refs/notes/agentscm and carry it over on
                                 amend and rebase
  agentscm attribution disable   remove exactly those hooks (notes stay)

See docs/attribution.md.`)
	var rf rootFlags
	rf.register(fs, false)
	since := fs.String("since", "HEAD", "the revision to count against")
	format := summaryFormat("text")
	fs.Var(&format, "format", "output format: text, json or markdown (for a pull-request comment)")
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	if format != "text" && format != "json" && format != "markdown" {
		return usagef("--format must be text, json or markdown, not %q", string(format))
	}
	c, err := openChangelog(env, &rf, false)
	if err != nil {
		return err
	}
	repo, err := attribution.Open(c)
	if err != nil {
		return err
	}
	s, err := repo.Summarize(ctx, *since)
	if err != nil {
		return err
	}
	switch format {
	case "json":
		return writeJSON(env.Stdout, s)
	case "markdown":
		printSummaryMarkdown(env.Stdout, s)
		return nil
	}
	fmt.Fprintf(env.Stdout, "lines added against %s (%s): %d\n", s.Since, shortRev(s.Revision), s.Added)
	for _, c := range s.Total {
		fmt.Fprintf(env.Stdout, "  %-44s %6d  %3d%%\n", countLabel(c), c.Lines, percent(c.Lines, s.Added))
	}
	for _, f := range s.Files {
		name := f.Path
		if f.OldPath != "" {
			name = f.OldPath + " -> " + f.Path
		}
		fmt.Fprintf(env.Stdout, "%s: %d\n", name, f.Added)
		for _, c := range f.By {
			fmt.Fprintf(env.Stdout, "  %-44s %6d\n", countLabel(c), c.Lines)
		}
	}
	for _, sk := range s.Skipped {
		fmt.Fprintf(env.Stdout, "not attributed: %s\n", sk)
	}
	return nil
}

func shortRev(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

func percent(n, total int) int {
	if total == 0 {
		return 0
	}
	return (100*n + total/2) / total
}

func countLabel(c attribution.Count) string {
	switch c.Kind {
	case attribution.KindAgent:
		s := "session " + c.Session
		if c.Agent != "" {
			s += " (" + c.Agent + ")"
		}
		return s
	case attribution.KindOutside:
		return "outside the agent"
	case attribution.KindRewind:
		return "rewind"
	}
	return "before capture"
}

func runAttributionEnable(ctx context.Context, env *Env, args []string, enable bool) error {
	verb := "disable"
	desc := `Remove the post-commit and post-rewrite hooks agentscm attribution
enable installed (a hook that is not agentscm's is left alone) and put
back each hook they chained. The notes already written stay under
refs/notes/agentscm (git notes --ref agentscm prune or update-ref -d
removes them).`
	if enable {
		verb = "enable"
		desc = `Install the post-commit and post-rewrite git hooks of the checkout (in
the directory git runs hooks from: core.hooksPath is honoured). After each
commit they attach an Agent Trace record (version 0.1.0) of the lines the
commit adds to it, as a git note under refs/notes/agentscm: one
conversation per agent session (contributor ai, with the model id the host
reported), one for work outside the agent (human), line ranges with
content hashes. On git commit --amend and git rebase they carry the notes
over to the new commits, moving each line to where it now is. A note never
holds conversation text: a prompt appears only as its sequence number and
session id. A hook already there is kept as NAME.agentscm-chained and run
first with the same arguments and input. Share the notes with
git push origin refs/notes/agentscm.`
	}
	fs := newFlags(env, "agentscm attribution "+verb, "[--root ABS] [--format text|json]", desc)
	var rf rootFlags
	rf.register(fs, false)
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	_, root, err := rf.roots()
	if err != nil {
		return err
	}
	var changes []attribution.HookChange
	if enable {
		if !strings.HasPrefix(env.Executable, "/") {
			return fmt.Errorf("cannot install hooks: agentscm executable path %q is not absolute", env.Executable)
		}
		changes, err = attribution.EnableHooks(ctx, root, env.Executable)
	} else {
		changes, err = attribution.DisableHooks(ctx, root)
	}
	if err != nil {
		return err
	}
	if *format == "json" {
		return writeJSON(env.Stdout, map[string]any{"enabled": enable, "hooks": changes, "notes_ref": attribution.NotesRef})
	}
	for _, h := range changes {
		line := fmt.Sprintf("%s: %s %s", h.Hook, h.Action, h.Path)
		if h.Chained != "" {
			if enable {
				line += " (your hook runs first, kept as " + h.Chained + ")"
			} else {
				line += " (your hook put back from " + h.Chained + ")"
			}
		}
		if h.Action == "left" {
			line += " (not agentscm's)"
		}
		fmt.Fprintln(env.Stdout, line)
	}
	if enable {
		fmt.Fprintf(env.Stdout, "each commit now gets an Agent Trace note under %s (git notes --ref agentscm show HEAD)\n", attribution.NotesRef)
	}
	return nil
}

// runAttributionHook is the git hooks' entry: it never fails the git
// command (one warning line on stderr, exit 0).
func runAttributionHook(ctx context.Context, env *Env, args []string) error {
	if len(args) == 0 || (args[0] != "post-commit" && args[0] != "post-rewrite") {
		return usagef("attribution hook takes post-commit or post-rewrite")
	}
	name := args[0]
	fs := newFlags(env, "agentscm attribution hook "+name, "--root ABS [git's arguments]", "The git hook's entry (installed by agentscm attribution enable).")
	var rf rootFlags
	rf.register(fs, false)
	err := parseFlags(env, fs, args[1:], true)
	if err == nil {
		err = attributionHook(ctx, env, &rf, name, fs.Args())
	}
	if err != nil && !errors.Is(err, errHelp) {
		// One line, whatever git said.
		msg, _, _ := strings.Cut(err.Error(), "\n")
		fmt.Fprintf(env.Stderr, "agentscm attribution: %s: no note written: %s\n", name, msg)
	}
	return nil
}

func attributionHook(ctx context.Context, env *Env, rf *rootFlags, name string, args []string) error {
	_, root, err := rf.roots()
	if err != nil {
		return err
	}
	// Git runs a hook at the top of the worktree that committed. Linked
	// worktrees share their hooks (and a global core.hooksPath is shared
	// by every repository): a commit elsewhere than in the checkout the
	// hooks were enabled for is attributed from its own worktree's
	// changelog, when it has one.
	own := true
	if wd, err := os.Getwd(); err == nil {
		if top := toplevel(ctx, wd); top != "" && top != toplevel(ctx, root) {
			root, own = top, false
			rf.root = top
		}
	}
	version := attribution.ToolVersion()
	if name == "post-rewrite" {
		pairs, err := attribution.ParseRewritten(env.Stdin)
		if err != nil {
			return err
		}
		amend := len(args) > 0 && args[0] == "amend"
		_, err = attribution.RewriteNotes(ctx, root, pairs, amend, env.Now(), version)
		return err
	}
	if attribution.RebaseInProgress(ctx, root) {
		return nil // post-rewrite carries the notes over
	}
	c, err := openChangelog(env, rf, false)
	if err != nil {
		if !own {
			return nil // a worktree or repository without a changelog
		}
		return err
	}
	repo, err := attribution.Open(c)
	if err != nil {
		return err
	}
	rec, err := repo.CommitTrace(ctx, "HEAD", env.Now(), version)
	if err != nil {
		return err
	}
	return attribution.WriteNote(ctx, root, rec.VCS.Revision, rec)
}

// toplevel is the top of the git worktree holding dir ("" when none).
func toplevel(ctx context.Context, dir string) string {
	out, err := gitIn(ctx, dir, "rev-parse", "--show-toplevel")
	if err != nil {
		return ""
	}
	top := strings.TrimSpace(out)
	if real, err := canonicalRoot(top); err == nil {
		return real
	}
	return top
}

// gitIn runs git in dir and returns its stdout.
func gitIn(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = attribution.GitEnv()
	out, err := cmd.Output()
	return string(out), err
}

// summaryFormat is attribution's --format: text, json or markdown.
type summaryFormat string

func (f *summaryFormat) String() string     { return string(*f) }
func (f *summaryFormat) Set(v string) error { *f = summaryFormat(v); return nil }
func (*summaryFormat) ownFormat()           {}

// printSummaryMarkdown writes s as a pull-request comment: the total by
// author, then each file.
func printSummaryMarkdown(w io.Writer, s *attribution.Summary) {
	fmt.Fprintf(w, "**Lines added against `%s` (`%s`): %d**\n\n", s.Since, shortRev(s.Revision), s.Added)
	fmt.Fprintf(w, "| author | lines | share |\n|---|---:|---:|\n")
	for _, c := range s.Total {
		fmt.Fprintf(w, "| %s | %d | %d%% |\n", markdownLabel(c), c.Lines, percent(c.Lines, s.Added))
	}
	if len(s.Files) > 0 {
		fmt.Fprintf(w, "\n<details><summary>%d %s</summary>\n\n| file | added | by |\n|---|---:|---|\n", len(s.Files), plural(len(s.Files), "file", "files"))
		for _, f := range s.Files {
			var by []string
			for _, c := range f.By {
				by = append(by, fmt.Sprintf("%s %d", markdownLabel(c), c.Lines))
			}
			fmt.Fprintf(w, "| `%s` | %d | %s |\n", strings.ReplaceAll(f.Path, "|", "\\|"), f.Added, strings.Join(by, ", "))
		}
		fmt.Fprintf(w, "\n</details>\n")
	}
	fmt.Fprintf(w, "\n<sub>agentscm attribution: from each tool call's recorded writes; outside the agent is your edits and other processes'.</sub>\n")
}

func markdownLabel(c attribution.Count) string {
	if c.Kind == attribution.KindAgent {
		s := "session `" + c.Session + "`"
		if c.Agent != "" {
			s += " (" + c.Agent + ")"
		}
		return s
	}
	return countLabel(c)
}
