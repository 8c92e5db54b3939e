package source

import (
	"fmt"
	"sort"
	"strings"
)

// capturePlan is what a capture reads and records: plan's result.
type capturePlan struct {
	// manifest is the manifest's skeleton (head, scope, transforms); nil
	// when there is nothing to read (a clean checkout without transforms).
	manifest *Manifest
	// entries are the paths to read, in path order.
	entries []plannedEntry
	// omit holds the omissions known before reading; reading adds to it.
	omit map[string]bool
	// stop is the bound the plan already passes (the path bound): the
	// capture stops without reading.
	stop error
}

// plannedEntry is one path of a plan.
type plannedEntry struct {
	entry *ManifestEntry
	parts []string // the path's components, when it is safe
	// nested marks an untracked nested repository (git lists the directory).
	nested bool
	// pathErr stops the capture when reading reaches the path (unsafe or
	// not UTF-8).
	pathErr error
}

// baseOmissions are the omissions of a binding's git facts alone.
func baseOmissions(f *facts) map[string]bool {
	omit := map[string]bool{}
	if f.wantMergeBase && f.mergeBase == "" {
		omit[OmissionMergeBase] = true
	}
	return omit
}

// plan decides from git's facts which paths a capture reads: the paths git
// status reports, and with a transform every tracked path too (scope
// "worktree" instead of "delta"); submodules are omitted, staged index
// state is an omission, and more paths than lim.Paths stop the capture. It
// does no I/O.
func plan(f *facts, lim Limits) *capturePlan {
	p := &capturePlan{omit: baseOmissions(f)}
	if len(f.entries) == 0 && len(f.transforms) == 0 {
		return p
	}
	p.manifest = &Manifest{Version: 1, Head: f.head, Scope: "delta", Transforms: sortedKeys(f.transforms)}
	want := map[string]*ManifestEntry{}
	add := func(path, status string) *ManifestEntry {
		if e, ok := want[path]; ok {
			if status != "" {
				e.Status = status
			}
			return e
		}
		e := &ManifestEntry{Path: path, Status: status}
		want[path] = e
		return e
	}
	for _, e := range f.entries {
		me := add(e.Path, e.Status)
		if e.staged() {
			p.omit[OmissionIndex] = true
		}
		if strings.HasSuffix(e.Status, " S") {
			me.Kind, me.Reason = "omitted", OmissionSubmodule
		}
	}
	if len(f.transforms) > 0 {
		p.manifest.Scope = "worktree"
		for _, t := range f.tracked {
			me := add(t.path, "")
			if t.gitlink {
				me.Kind, me.Reason = "omitted", OmissionSubmodule
			}
		}
	}
	list := make([]*ManifestEntry, 0, len(want))
	for _, e := range want {
		list = append(list, e)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Path < list[j].Path })
	if len(list) > lim.Paths {
		p.stop = stop(StopPathBound, list[lim.Paths].Path, fmt.Errorf("%d paths, bound %d", len(list), lim.Paths))
	}
	p.entries = make([]plannedEntry, len(list))
	for i, e := range list {
		path, nested := strings.CutSuffix(e.Path, "/")
		parts, err := checkPath(path)
		p.entries[i] = plannedEntry{entry: e, parts: parts, nested: nested, pathErr: err}
	}
	return p
}
