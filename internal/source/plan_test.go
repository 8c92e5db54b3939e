package source

import (
	"errors"
	"reflect"
	"testing"
)

// TestPlan table-tests what a capture reads and records, from git's facts
// alone: no git process runs and no file is read.
func TestPlan(t *testing.T) {
	st := func(path, status string) statusEntry { return statusEntry{Path: path, Status: status} }
	lim := Limits{}.withDefaults()
	type want struct {
		noManifest bool
		scope      string
		paths      []string
		omit       []string
		stop       string // the plan's stop reason
		pathStops  map[string]string
		kinds      map[string]string // path -> kind/reason decided by the plan
		nested     []string
	}
	tests := []struct {
		name string
		f    facts
		lim  Limits
		want want
	}{
		{name: "clean", f: facts{head: "h"}, want: want{noManifest: true}},
		{name: "clean, the base ref did not resolve", f: facts{head: "h", wantMergeBase: true},
			want: want{noManifest: true, omit: []string{OmissionMergeBase}}},
		{name: "clean with a merge base", f: facts{head: "h", wantMergeBase: true, mergeBase: "m"}, want: want{noManifest: true}},
		{name: "dirty: the delta in path order",
			f:    facts{head: "h", entries: []statusEntry{st("b.txt", ".M"), st("a.txt", "??")}},
			want: want{scope: "delta", paths: []string{"a.txt", "b.txt"}}},
		{name: "staged index state is an omission",
			f:    facts{entries: []statusEntry{st("a.txt", "M.")}},
			want: want{scope: "delta", paths: []string{"a.txt"}, omit: []string{OmissionIndex}}},
		{name: "a submodule is omitted when read",
			f:    facts{entries: []statusEntry{st("sub", ".M S")}},
			want: want{scope: "delta", paths: []string{"sub"}, kinds: map[string]string{"sub": "omitted/" + OmissionSubmodule}}},
		{name: "a transform makes the worktree the scope",
			f: facts{head: "h", transforms: map[string]bool{TransformCRLF: true},
				entries: []statusEntry{st("b.txt", ".M")},
				tracked: []trackedPath{{path: "a.txt"}, {path: "b.txt"}, {path: "mod", gitlink: true}}},
			want: want{scope: "worktree", paths: []string{"a.txt", "b.txt", "mod"}, kinds: map[string]string{"mod": "omitted/" + OmissionSubmodule}}},
		{name: "the path bound stops before reading",
			f:    facts{entries: []statusEntry{st("c", "??"), st("a", "??"), st("b", "??")}},
			lim:  Limits{Paths: 2},
			want: want{scope: "delta", paths: []string{"a", "b", "c"}, stop: StopPathBound}},
		{name: "at the path bound",
			f:    facts{entries: []statusEntry{st("a", "??"), st("b", "??")}},
			lim:  Limits{Paths: 2},
			want: want{scope: "delta", paths: []string{"a", "b"}}},
		{name: "unsafe paths stop when reading reaches them",
			f: facts{entries: []statusEntry{st(".git/config", "??"), st("a/../b", "??"), st("ok", "??"), st("x\xff", "??")}},
			want: want{scope: "delta", paths: []string{".git/config", "a/../b", "ok", "x\xff"},
				pathStops: map[string]string{".git/config": StopUnsafePath, "a/../b": StopUnsafePath, "x\xff": StopNotUTF8}}},
		{name: "an untracked nested repository",
			f:    facts{entries: []statusEntry{st("vendor/repo/", "??")}},
			want: want{scope: "delta", paths: []string{"vendor/repo/"}, nested: []string{"vendor/repo/"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := lim
			if tc.lim.Paths != 0 {
				l.Paths = tc.lim.Paths
			}
			p := plan(&tc.f, l)
			w := tc.want
			if got := sortedKeys(p.omit); !reflect.DeepEqual(got, w.omit) && len(got)+len(w.omit) > 0 {
				t.Errorf("omissions %v, want %v", got, w.omit)
			}
			if w.noManifest {
				if p.manifest != nil || p.entries != nil || p.stop != nil {
					t.Errorf("plan %+v, want nothing to read", p)
				}
				return
			}
			if p.manifest == nil || p.manifest.Scope != w.scope || p.manifest.Head != tc.f.head {
				t.Fatalf("manifest %+v, want scope %s", p.manifest, w.scope)
			}
			var paths []string
			for _, pe := range p.entries {
				paths = append(paths, pe.entry.Path)
				if want := w.kinds[pe.entry.Path]; pe.entry.Kind+"/"+pe.entry.Reason != want && (want != "" || pe.entry.Kind != "") {
					t.Errorf("%s: kind %s/%s, want %s", pe.entry.Path, pe.entry.Kind, pe.entry.Reason, want)
				}
				var se *stopError
				if wantStop := w.pathStops[pe.entry.Path]; wantStop != "" {
					if !errors.As(pe.pathErr, &se) || se.reason != wantStop {
						t.Errorf("%s: path error %v, want stop %s", pe.entry.Path, pe.pathErr, wantStop)
					}
				} else if pe.pathErr != nil || len(pe.parts) == 0 {
					t.Errorf("%s: path error %v, parts %q", pe.entry.Path, pe.pathErr, pe.parts)
				}
				nested := false
				for _, n := range w.nested {
					nested = nested || n == pe.entry.Path
				}
				if pe.nested != nested {
					t.Errorf("%s: nested %v, want %v", pe.entry.Path, pe.nested, nested)
				}
			}
			if !reflect.DeepEqual(paths, w.paths) {
				t.Errorf("paths %q, want %q", paths, w.paths)
			}
			var se *stopError
			switch {
			case w.stop == "" && p.stop != nil:
				t.Errorf("stop %v, want none", p.stop)
			case w.stop != "" && (!errors.As(p.stop, &se) || se.reason != w.stop):
				t.Errorf("stop %v, want %s", p.stop, w.stop)
			}
		})
	}
}
