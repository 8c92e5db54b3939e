package changelog

import (
	"fmt"
	"strings"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
)

// The planning of rewinds and reverts that needs no disk: pure functions
// over increments' recorded changes and per-path states, so each rule is
// tested by table. The executors (Apply, Revert) feed them what they read
// and carry out what they return.

// laterIncrement is what planning needs of an increment stored after a
// rewind's target: its position, kind and recorded changes.
type laterIncrement struct {
	Position int
	Kind     string
	Changes  *incmeta.Changes
}

// OutsidePath is a path whose latest change after a rewind's target is
// work done outside the agent (an outside increment's).
type OutsidePath struct {
	Root string
	Rel  string
	// How is what the outside work did: created, modified or deleted.
	How string
	// Position is the outside increment that recorded it.
	Position int
	// Unnamed marks a path the planner could not name because the outside
	// increment named only the first incmeta.MaxChangePaths of a kind:
	// Rel is then "" and every path the rewind changes is suspect.
	Unnamed bool
}

// planOutside returns the paths whose latest recorded change after a
// rewind's target, in the increments later (in position order), is an
// outside increment's: the work a rewind must not change or delete unless
// told to. A deletion of a directory counts for everything below it. roots
// names the capture roots (the first one's paths are recorded without a
// root prefix). An outside increment with omitted paths yields one Unnamed
// entry per root, unless a later increment of another kind changed
// everything it could have named (never assumed).
func planOutside(later []laterIncrement, roots []string) []OutsidePath {
	type rec struct {
		pos  int
		kind string
		how  string
	}
	last := map[[2]string]rec{} // (root, rel) -> latest change
	lastDirDel := map[[2]string]rec{}
	var unnamed []OutsidePath
	for _, in := range later {
		ch := in.Changes
		if ch == nil {
			continue
		}
		if in.Kind == KindOutside && ch.CreatedOmitted+ch.ModifiedOmitted+ch.DeletedOmitted > 0 {
			unnamed = append(unnamed, OutsidePath{Position: in.Position, Unnamed: true})
		}
		for _, l := range []struct {
			paths []string
			how   string
		}{{ch.Created, ChangeCreated}, {ch.Modified, ChangeModified}, {ch.Deleted, ChangeDeleted}} {
			for _, p := range l.paths {
				root, rel, dir := splitChangePath(p, roots)
				k := [2]string{root, rel}
				r := rec{pos: in.Position, kind: in.Kind, how: l.how}
				last[k] = r
				if dir && l.how == ChangeDeleted {
					lastDirDel[k] = r
				}
			}
		}
	}
	var out []OutsidePath
	for k, r := range last {
		// A later deletion of an ancestor directory supersedes it.
		for a := k[1]; a != ""; {
			a = parentOf(a)
			if d, ok := lastDirDel[[2]string{k[0], a}]; ok && d.pos > r.pos {
				r = d
			}
			if a == "" {
				break
			}
		}
		if r.kind == KindOutside && k[1] != "" {
			out = append(out, OutsidePath{Root: k[0], Rel: k[1], How: r.how, Position: r.pos})
		}
	}
	sortOutside(out, roots)
	return append(out, unnamed...)
}

func sortOutside(out []OutsidePath, roots []string) {
	idx := map[string]int{}
	for i, r := range roots {
		idx[r] = i
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0; j-- {
			a, b := out[j-1], out[j]
			if idx[a.Root] < idx[b.Root] || (a.Root == b.Root && comparePaths(a.Rel, b.Rel) <= 0) {
				break
			}
			out[j-1], out[j] = b, a
		}
	}
}

// splitChangePath parses a path of a Changes list (see changePath): the
// first root's paths are bare, another root's are "name:rel"; a directory
// ends in "/", the first root itself is "./" and another root "name:/".
func splitChangePath(p string, roots []string) (root, rel string, dir bool) {
	root = ""
	if len(roots) > 0 {
		root = roots[0]
	}
	if name, rest, ok := strings.Cut(p, ":"); ok {
		for _, r := range roots[min(1, len(roots)):] {
			if r == name {
				root, p = name, rest
				break
			}
		}
	}
	if p == "./" || p == "/" {
		return root, "", true
	}
	if strings.HasSuffix(p, "/") {
		return root, strings.TrimSuffix(p, "/"), true
	}
	return root, p, false
}

// RevertPath is one path a tool call changed, as planRevert needs it: its
// kind before the call, right after it, and now ("file", "dir",
// "symlink", "gone" or "other"), whether its current state equals its
// state right after the call (kind and content), and, for a directory now,
// its current children (relative to the root, excluded ones included).
type RevertPath struct {
	Root           string
	Rel            string
	Before, After  string
	Current        string
	CurrentIsAfter bool
	Children       []string
	// ParentCurrent is the current kind of the path's directory.
	ParentCurrent string
}

// RevertAction is what a revert does to one path: Change is created,
// modified or deleted and Kind the path's kind afterwards (before, for a
// deletion).
type RevertAction struct {
	Root   string `json:"root"`
	Path   string `json:"path"`
	Change string `json:"change"`
	Kind   string `json:"kind"`
	// from is the path's current kind (what the executor removes first).
	from string
}

// RevertConflict is a path a revert leaves alone, and why.
type RevertConflict struct {
	Root   string `json:"root"`
	Path   string `json:"path"`
	Reason string `json:"reason"`
	// Current is the path's kind now.
	Current string `json:"current"`
}

const kindGone = "gone"

// planRevert decides, path by path, what undoing one tool call does, under
// the recovery rule: a path is changed back to its state before the call
// only when its current state equals its state right after the call; any
// other path is a conflict and stays as it is. A directory the call created
// is removed only when everything in it now is removed too (else it holds
// later work); a path is restored only into a directory that is (or is
// restored as) a directory. Actions come shallow paths first.
func planRevert(paths []RevertPath) ([]RevertAction, []RevertConflict) {
	sorted := append([]RevertPath(nil), paths...)
	// Shallow first: a parent's fate is known before its children's.
	sortPaths := func(ps []RevertPath) {
		for i := 1; i < len(ps); i++ {
			for j := i; j > 0 && (ps[j-1].Root > ps[j].Root || (ps[j-1].Root == ps[j].Root && comparePaths(ps[j-1].Rel, ps[j].Rel) > 0)); j-- {
				ps[j-1], ps[j] = ps[j], ps[j-1]
			}
		}
	}
	sortPaths(sorted)
	type key = [2]string
	byKey := map[key]*RevertPath{}
	for i := range sorted {
		byKey[key{sorted[i].Root, sorted[i].Rel}] = &sorted[i]
	}
	conflict := map[key]string{}
	// final is a path's kind once the revert ran, as far as decided.
	final := func(root, rel string) (string, bool) {
		p, ok := byKey[key{root, rel}]
		if !ok {
			return "", false
		}
		if _, bad := conflict[key{root, rel}]; bad {
			return p.Current, true
		}
		return p.Before, true
	}
	for _, p := range sorted {
		k := key{p.Root, p.Rel}
		if !p.CurrentIsAfter {
			conflict[k] = fmt.Sprintf("changed after the call (the call left it %s, it is %s now)", kindWord(p.After), kindWord(p.Current))
			continue
		}
		if p.Before != kindGone && p.Rel != "" {
			par := parentOf(p.Rel)
			kind, ok := final(p.Root, par)
			if !ok {
				kind = p.ParentCurrent
			}
			if kind != "dir" {
				conflict[k] = fmt.Sprintf("its directory %s is not restored", showRel(par))
			}
		}
	}
	// Deepest first: a directory goes only once all it holds goes.
	for i := len(sorted) - 1; i >= 0; i-- {
		p := sorted[i]
		k := key{p.Root, p.Rel}
		if _, bad := conflict[k]; bad || p.Current != "dir" || p.Before == "dir" {
			continue
		}
		for _, c := range p.Children {
			cp, ok := byKey[key{p.Root, c}]
			_, bad := conflict[key{p.Root, c}]
			if !ok || bad || cp.Before != kindGone {
				conflict[k] = fmt.Sprintf("it holds %s, which the revert does not remove", showRel(c))
				break
			}
		}
	}
	var actions []RevertAction
	var conflicts []RevertConflict
	for _, p := range sorted {
		k := key{p.Root, p.Rel}
		if why, bad := conflict[k]; bad {
			conflicts = append(conflicts, RevertConflict{Root: p.Root, Path: p.Rel, Reason: why, Current: p.Current})
			continue
		}
		a := RevertAction{Root: p.Root, Path: p.Rel, Kind: p.Before, from: p.Current}
		switch {
		case p.Before == p.Current && p.Before == "dir":
			continue // a directory stays a directory
		case p.Before == kindGone:
			a.Change, a.Kind = ChangeDeleted, p.Current
		case p.Current == kindGone:
			a.Change = ChangeCreated
		default:
			a.Change = ChangeModified
		}
		actions = append(actions, a)
	}
	return actions, conflicts
}

func kindWord(k string) string {
	if k == kindGone {
		return "deleted"
	}
	return "a " + k
}

func showRel(rel string) string {
	if rel == "" {
		return "the root"
	}
	return rel
}
