package cli

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/hookrun"
)

// configExclude is the agentscm config directory (spool, changelog store,
// keys) as a changelog exclusion, for a checkout that holds it.
func configExclude(env *Env) []string {
	cfg, err := binding.ConfigDir(env.Getenv)
	if err != nil || !filepath.IsAbs(cfg) {
		return nil
	}
	return []string{filepath.Clean(cfg)}
}

// conversationRefs reports whether the checkout at root keeps no copy of
// its conversation in the changelog (its capture binding is in
// metadata-only mode; see changelog.Options.ConversationRefs).
func conversationRefs(env *Env, root string) bool {
	cfg, err := binding.ConfigDir(env.Getenv)
	return err == nil && hookrun.MetadataOnlyBinding(cfg, root)
}

// displayPath names a path of a rewind for people: its absolute path.
func displayPath(roots []changelog.Root, pc changelog.PathChange) string {
	for _, r := range roots {
		if r.Name == pc.Root {
			if pc.Path == "" {
				return r.Path
			}
			return filepath.Join(r.Path, filepath.FromSlash(pc.Path))
		}
	}
	return pc.Root + ":" + pc.Path
}

// jsonChange is a PathChange with its absolute path, for --format json.
type jsonChange struct {
	changelog.PathChange
	Abs string `json:"abs_path"`
}

func jsonChangesOf(roots []changelog.Root, list []changelog.PathChange) []jsonChange {
	out := make([]jsonChange, 0, len(list))
	for _, pc := range list {
		out = append(out, jsonChange{PathChange: pc, Abs: displayPath(roots, pc)})
	}
	return out
}

// jsonChanges is list as JSON, nil (omitted as null) when empty.
func jsonChanges(list []changelog.PathChange) []changelog.PathChange {
	if len(list) == 0 {
		return nil
	}
	return list
}

// applyExit maps a rewind's error to its exit status: 4 for an unreadable
// archive, 6 (with the list of paths, on stdout too with --format json) for
// paths changed since the newest captured position or work done outside
// the agent after the target that the rewind would change.
func applyExit(env *Env, roots []changelog.Root, format string, err error) error {
	var ce *changelog.ChangedError
	if !errors.As(err, &ce) {
		return archiveExit(err)
	}
	if format == "json" {
		refused := "changed_since_capture"
		var why []string
		if len(ce.Paths) > 0 {
			why = append(why, "changed_since_capture")
		}
		if len(ce.Outside) > 0 {
			why = append(why, "outside_work")
			if len(ce.Paths) == 0 {
				refused = "outside_work"
			}
		}
		_ = writeJSON(env.Stdout, map[string]any{
			"refused":           refused,
			"refusals":          why,
			"exit_status":       ExitChangedSinceCapture,
			"captured_position": ce.Position,
			"paths":             jsonChangesOf(roots, ce.Paths),
			"target":            ce.Target,
			"outside_work":      jsonChangesOf(roots, ce.Outside),
		})
	}
	var b strings.Builder
	var flags []string
	if len(ce.Paths) > 0 {
		since := fmt.Sprintf("after the newest captured position (%d)", ce.Position)
		if ce.Position < 0 {
			since = "and never captured (the changelog has no captured position yet)"
		}
		fmt.Fprintf(&b, "refused: %d %s changed %s would be changed by this rewind; nothing was changed:\n",
			len(ce.Paths), plural(len(ce.Paths), "path", "paths"), since)
		for _, pc := range ce.Paths {
			fmt.Fprintf(&b, "  %-8s since, would be %-8s  %s\n", pc.Since, pc.Change, displayPath(roots, pc))
		}
		flags = append(flags, "--discard-uncaptured-edits")
	}
	if len(ce.Outside) > 0 {
		fmt.Fprintf(&b, "refused: %d %s of work done outside the agent after position %d would be changed by this rewind; nothing was changed:\n",
			len(ce.Outside), plural(len(ce.Outside), "path", "paths"), ce.Target)
		for _, pc := range ce.Outside {
			fmt.Fprintf(&b, "  %-8s outside (position %s), would be %-8s  %s\n", pc.Since, outsideAt(pc), pc.Change, displayPath(roots, pc))
		}
		flags = append(flags, "--discard-outside-edits")
	}
	if len(ce.Paths) > 0 {
		fmt.Fprintf(&b, "capture them first (agentscm changelog capture --root %s), or ", roots[0].Path)
	}
	fmt.Fprintf(&b, "rerun with %s (the undo point, which holds them, is stored first); --dry-run lists every change", strings.Join(flags, " "))
	return &ExitCodeError{Code: ExitChangedSinceCapture, Err: errors.New(b.String())}
}

func outsideAt(pc changelog.PathChange) string {
	if pc.OutsideAt == nil {
		return "?"
	}
	return fmt.Sprint(*pc.OutsideAt)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// printDryRun prints what a dry run found.
func printDryRun(env *Env, roots []changelog.Root, format, what string, res *changelog.ApplyResult) error {
	by := map[string][]changelog.PathChange{}
	for _, pc := range res.Effects {
		by[pc.Change] = append(by[pc.Change], pc)
	}
	if format == "json" {
		return writeJSON(env.Stdout, map[string]any{
			"dry_run":               true,
			"created":               jsonChangesOf(roots, by[changelog.ChangeCreated]),
			"modified":              jsonChangesOf(roots, by[changelog.ChangeModified]),
			"deleted":               jsonChangesOf(roots, by[changelog.ChangeDeleted]),
			"changed_since_capture": jsonChangesOf(roots, res.Conflicts),
			"outside_work":          jsonChangesOf(roots, res.Outside),
			"would_refuse":          len(res.Conflicts) > 0 || len(res.Outside) > 0,
			"unrestorable":          jsonUnrestorable(roots, res.Unrestorable),
			"partial":               isPartial(res),
		})
	}
	fmt.Fprintf(env.Stdout, "dry run: %s would create %d, modify %d and delete %d paths (nothing was changed)\n", what,
		len(by[changelog.ChangeCreated]), len(by[changelog.ChangeModified]), len(by[changelog.ChangeDeleted]))
	for _, pc := range res.Effects {
		fmt.Fprintf(env.Stdout, "  %-8s %-7s %s\n", pc.Change, pc.Kind, displayPath(roots, pc))
	}
	if len(res.Conflicts) > 0 {
		fmt.Fprintf(env.Stdout, "it would be refused (exit status %d) without --discard-uncaptured-edits: %d of these %s changed after the newest captured position:\n",
			ExitChangedSinceCapture, len(res.Conflicts), plural(len(res.Conflicts), "was", "were"))
		for _, pc := range res.Conflicts {
			fmt.Fprintf(env.Stdout, "  %-8s since  %s\n", pc.Since, displayPath(roots, pc))
		}
	}
	if len(res.Unrestorable) > 0 {
		what := fmt.Sprintf("it would be partial (exit status %d)", ExitPartial)
		fmt.Fprintf(env.Stdout, "%s: %d %s cannot be restored:\n", what, len(res.Unrestorable), plural(len(res.Unrestorable), "path", "paths"))
		for _, u := range res.Unrestorable {
			fmt.Fprintf(env.Stdout, "  %s: %s\n", unrestorablePath(roots, u), u.Reason)
		}
	}
	if len(res.Outside) > 0 {
		fmt.Fprintf(env.Stdout, "it would be refused (exit status %d) without --discard-outside-edits: %d of these %s work done outside the agent after the target:\n",
			ExitChangedSinceCapture, len(res.Outside), plural(len(res.Outside), "holds", "hold"))
		for _, pc := range res.Outside {
			fmt.Fprintf(env.Stdout, "  %-8s outside (position %s)  %s\n", pc.Since, outsideAt(pc), displayPath(roots, pc))
		}
	}
	return nil
}

// warnForced says on stderr which later changes a rewind told to discard
// them replaced.
func warnForced(env *Env, roots []changelog.Root, res *changelog.ApplyResult) {
	if res.PreApply == nil {
		return
	}
	if len(res.Conflicts) > 0 {
		fmt.Fprintf(env.Stderr, "agentscm: warning: --discard-uncaptured-edits: %d %s changed after the newest captured position were changed by the rewind; they are in the undo point %d:\n",
			len(res.Conflicts), plural(len(res.Conflicts), "path", "paths"), res.PreApply.Position)
		for _, pc := range res.Conflicts {
			fmt.Fprintf(env.Stderr, "  %-8s since, now %-8s  %s\n", pc.Since, pc.Change, displayPath(roots, pc))
		}
	}
	if len(res.Outside) > 0 {
		fmt.Fprintf(env.Stderr, "agentscm: warning: --discard-outside-edits: %d %s of work done outside the agent were changed by the rewind; they are in the undo point %d:\n",
			len(res.Outside), plural(len(res.Outside), "path", "paths"), res.PreApply.Position)
		for _, pc := range res.Outside {
			fmt.Fprintf(env.Stderr, "  %-8s outside (position %s), now %-8s  %s\n", pc.Since, outsideAt(pc), pc.Change, displayPath(roots, pc))
		}
	}
}

// discardFlags are the flags that let a rewind replace later work.
type discardFlags struct {
	uncaptured, outside *bool
}

func (d *discardFlags) register(fs *flag.FlagSet) {
	d.uncaptured = fs.Bool("discard-uncaptured-edits", false, "rewind even though paths it changes were changed after the newest captured position (the undo point still holds them)")
	d.outside = fs.Bool("discard-outside-edits", false, "rewind even though it changes work done outside the agent after the target position (outside positions; the undo point still holds it)")
}

// resolve folds the deprecated --force (an alias of
// --discard-uncaptured-edits for this refusal) in, with a warning.
func (d *discardFlags) resolve(env *Env, force bool) (uncaptured, outside bool) {
	if force {
		fmt.Fprintln(env.Stderr, "agentscm: warning: --force is deprecated for paths changed since the newest capture: use --discard-uncaptured-edits")
	}
	return *d.uncaptured || force, *d.outside
}

// jsonUnrestorable is the unrestorable list with absolute paths, for
// --format json (an empty list, not null).
func jsonUnrestorable(roots []changelog.Root, list []changelog.Unrestorable) []map[string]any {
	out := []map[string]any{}
	for _, u := range list {
		m := map[string]any{"root": u.Root, "path": u.Path, "abs_path": unrestorablePath(roots, u), "reason": u.Reason}
		if u.Withheld {
			m["withheld"] = true
		}
		if u.Digest != "" {
			m["digest"] = u.Digest
		}
		out = append(out, m)
	}
	return out
}

func unrestorablePath(roots []changelog.Root, u changelog.Unrestorable) string {
	s := displayPath(roots, changelog.PathChange{Root: u.Root, Path: u.Path})
	if u.Path == "" {
		s = strings.TrimSuffix(s, ":") // a whole root this machine has no path for
	}
	return s
}

// partialExit says on stderr what a rewind that went through could not
// restore, and returns its exit status (ExitPartial), nil when nothing.
// A conversation root withheld from the Hub by the checkout's sharing
// choice counts too: the rewind did not restore it.
func partialExit(env *Env, roots []changelog.Root, res *changelog.ApplyResult) error {
	failed := res.Unrestorable
	if len(failed) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the rewind is partial: %d %s could not be restored:", len(failed), plural(len(failed), "path", "paths"))
	for _, u := range failed {
		fmt.Fprintf(&b, "\n  %s: %s", unrestorablePath(roots, u), u.Reason)
	}
	return &ExitCodeError{Code: ExitPartial, Err: errors.New(b.String())}
}

// isPartial reports whether res leaves something unrestored, which makes
// the rewind partial.
func isPartial(res *changelog.ApplyResult) bool {
	return len(res.Unrestorable) > 0
}
