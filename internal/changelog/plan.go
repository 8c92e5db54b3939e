package changelog

import (
	"strings"
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
	Changes  *Changes
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
