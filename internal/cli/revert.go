package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentscm/agentscm/internal/changelog"
)

// ExitPartial is the exit status of a rewind or revert that did all it
// could but left listed paths as they were: a revert's conflicts (paths
// changed after the reverted call) and what a rewind cannot restore.
const ExitPartial = 8

func revertCommand() *Command {
	return &Command{Name: "revert", Summary: "undo one tool call's changes, keeping every later call's and your work", Run: runRevert}
}

func runRevert(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm revert", "[--root ABS] --call N [--dry-run] [--format text|json]", `
Undo only tool call N's changes (N is its position in agentscm changelog
list), keeping every later call's and your own work: each path the call
created, modified or deleted is set back to its state before the call
only when its current state equals its state right after the call; every
other path is a conflict, listed and left as it is. A directory the call
created is removed only when nothing else is in it now. Conversation
roots and excluded paths (.git, ignored paths) are never touched.

Like a rewind, the current state is stored first as its own position
(agentscm changelog apply --to that position undoes the revert) and the
result after. --dry-run prints what it would change and the conflicts and
changes nothing. Exit status: 0 when every path was changed back, 8 when
conflicts were left alone (what could be changed back was), 5 while an
agent turn runs.`)
	var rf rootFlags
	rf.register(fs, false)
	call := fs.Int("call", -1, "the position of the tool call to undo (required)")
	dryRun := fs.Bool("dry-run", false, "print what the revert would change and the conflicts, and change nothing")
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	if *call < 0 {
		return usagef("--call N is required")
	}
	c, err := openChangelog(env, &rf, false)
	if err != nil {
		return err
	}
	if !*dryRun {
		if err := turnExit(changelog.RefuseDuringTurn(c.Dir())); err != nil {
			return err
		}
	}
	res, err := c.Revert(ctx, changelog.RevertRequest{Call: *call, DryRun: *dryRun})
	if err != nil {
		if errors.Is(err, changelog.ErrNotACall) {
			return usagef("%v", err)
		}
		return archiveExit(err)
	}
	roots := c.Roots()
	show := func(root, rel string) string {
		return displayPath(roots, changelog.PathChange{Root: root, Path: rel})
	}
	if *format == "json" {
		type jsonAction struct {
			changelog.RevertAction
			Abs string `json:"abs_path"`
		}
		type jsonConflict struct {
			changelog.RevertConflict
			Abs string `json:"abs_path"`
		}
		acts := []jsonAction{}
		for _, a := range res.Reverted {
			acts = append(acts, jsonAction{a, show(a.Root, a.Path)})
		}
		confs := []jsonConflict{}
		for _, k := range res.Conflicts {
			confs = append(confs, jsonConflict{k, show(k.Root, k.Path)})
		}
		out := map[string]any{"call": res.Call, "dry_run": res.DryRun, "reverted": acts, "conflicts": confs, "partial": len(res.Conflicts) > 0}
		if res.PreApply != nil {
			out["undo_position"] = res.PreApply.Position
		}
		if res.Result != nil {
			out["result_position"] = res.Result.Position
		}
		if err := writeJSON(env.Stdout, out); err != nil {
			return err
		}
	} else {
		verb := "reverted"
		if res.DryRun {
			verb = "dry run: reverting"
		}
		fmt.Fprintf(env.Stdout, "%s call %d: %d %s changed back, %d %s left alone\n", verb, res.Call,
			len(res.Reverted), plural(len(res.Reverted), "path", "paths"), len(res.Conflicts), plural(len(res.Conflicts), "conflict", "conflicts"))
		for _, a := range res.Reverted {
			fmt.Fprintf(env.Stdout, "  %-8s %-7s %s\n", a.Change, a.Kind, show(a.Root, a.Path))
		}
		for _, k := range res.Conflicts {
			fmt.Fprintf(env.Stdout, "  conflict %s: %s\n", show(k.Root, k.Path), k.Reason)
		}
		if res.PreApply != nil {
			fmt.Fprintf(env.Stdout, "undo with: agentscm changelog apply --root %s --to %d\n", roots[0].Path, res.PreApply.Position)
		}
	}
	if len(res.Conflicts) > 0 {
		return &ExitCodeError{Code: ExitPartial, Err: fmt.Errorf("%d %s changed after call %d %s left as %s", len(res.Conflicts),
			plural(len(res.Conflicts), "path", "paths"), res.Call, plural(len(res.Conflicts), "was", "were"), plural(len(res.Conflicts), "it is", "they are"))}
	}
	return nil
}
