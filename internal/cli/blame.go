package cli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/agentscm/agentscm/internal/attribution"
)

func blameCommand() *Command {
	return &Command{Name: "blame", Summary: "who last wrote each line of a file: an agent's tool call, outside the agent, or before capture", Run: runBlame}
}

func runBlame(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm blame", "[--root ABS] [--at POSITION] [--session ID] [--format text|json] FILE", `
For each line of FILE as it is now (or, with --at, right after that
position of the changelog), say who last wrote it: an agent's tool call
(its position, tool, session, the sequence number of the prompt whose turn
ran it and, for a shell call, its command), work done outside the agent
(the user, an editor, a formatter or another process: the changelog's
outside positions, the state stored before a rewind, or changes not yet
captured), a rewind, or nobody since the changelog began ("before
capture"). It replays the changelog's increments of the file with a line
diff per position and follows a rename when an increment deletes a file
and creates one with mostly the same lines. --session shows only that
session's lines. See docs/attribution.md.`)
	var rf rootFlags
	rf.register(fs, false)
	at := fs.Int("at", -1, "blame the file as it was right after this position (-1: as it is now)")
	session := fs.String("session", "", "show only the lines this session's tool calls wrote")
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, true); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("blame takes one FILE")
	}
	c, err := openChangelog(env, &rf, false)
	if err != nil {
		return err
	}
	repo, err := attribution.Open(c)
	if err != nil {
		return err
	}
	rel, err := checkoutRel(repo.Root(), fs.Arg(0))
	if err != nil {
		return err
	}
	b, err := repo.Blame(ctx, rel, *at)
	if errors.Is(err, attribution.ErrNoFile) {
		return usagef("%v", err)
	}
	if err != nil {
		return err
	}
	if *session != "" {
		var kept []attribution.Line
		for _, l := range b.Lines {
			if l.Owner.Kind == attribution.KindAgent && l.Owner.Session == *session {
				kept = append(kept, l)
			}
		}
		b.Lines = append([]attribution.Line{}, kept...)
	}
	if *format == "json" {
		return writeJSON(env.Stdout, b)
	}
	for _, from := range b.RenamedFrom {
		fmt.Fprintf(env.Stdout, "# followed the rename from %s\n", from)
	}
	width := 0
	for _, l := range b.Lines {
		width = max(width, len(l.Owner.Describe()))
	}
	var prev *attribution.Owner
	for _, l := range b.Lines {
		if l.Owner != prev && l.Owner.Command != "" {
			// A shell call's command, once before the lines it wrote.
			fmt.Fprintf(env.Stdout, "%4s  %-*s   $ %s\n", "", width, "", commandLine(l.Owner.Command))
		}
		prev = l.Owner
		fmt.Fprintf(env.Stdout, "%4d  %-*s | %s\n", l.Number, width, l.Owner.Describe(), l.Text)
	}
	return nil
}

func commandLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}

// checkoutRel turns a FILE argument (relative to the working directory, or
// absolute) into a slash path inside the checkout root.
func checkoutRel(root, file string) (string, error) {
	abs := file
	if !filepath.IsAbs(abs) {
		wd, err := filepath.Abs(".")
		if err != nil {
			return "", err
		}
		abs = filepath.Join(wd, file)
	}
	if real, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		abs = filepath.Join(real, filepath.Base(abs))
	}
	rel, err := filepath.Rel(root, abs)
	if err != nil || rel == "." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || rel == ".." {
		return "", usagef("%s is not a file inside the checkout %s", file, root)
	}
	return filepath.ToSlash(rel), nil
}
