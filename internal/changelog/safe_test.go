package changelog

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
)

// safeRepo is a git checkout with two captured calls: call 0 writes a.txt
// and b.txt, call 1 changes a.txt and adds c.txt.
func safeRepo(t *testing.T) (root string, c *Changelog) {
	t.Helper()
	base := t.TempDir()
	root = filepath.Join(base, "repo")
	os.MkdirAll(root, 0o755)
	run(t, root, "git", "init", "-q")
	writeFile(t, filepath.Join(root, ".gitignore"), "build/\n")
	writeFile(t, filepath.Join(root, "a.txt"), "a0")
	writeFile(t, filepath.Join(root, "b.txt"), "b0")
	c, err := Open(filepath.Join(base, "cl"), Options{Roots: []Root{{Name: "checkout", Path: root, Git: true}}})
	if err != nil {
		t.Fatal(err)
	}
	mustCapture(t, c, 0)
	writeFile(t, filepath.Join(root, "a.txt"), "a1 agent")
	writeFile(t, filepath.Join(root, "c.txt"), "c1")
	mustCapture(t, c, 1)
	return root, c
}

func changeNames(list []PathChange) []string {
	var out []string
	for _, pc := range list {
		s := pc.Change + " " + pc.Path
		if pc.Since != "" {
			s = pc.Since + "->" + s
		}
		out = append(out, s)
	}
	return out
}

// TestRewindOverLaterEdits: a user's edit after the newest capture that the
// rewind would overwrite, delete or recreate refuses it with the list and
// changes nothing; --dry-run lists everything and changes nothing; --force
// rewinds, and its undo restores the user's state byte for byte.
func TestRewindOverLaterEdits(t *testing.T) {
	for _, tc := range []struct {
		name string
		to   int
		edit func(root string)
		// conflicts as since->change path; nil: the rewind goes ahead.
		conflicts []string
		// effects of the dry run (change path).
		effects []string
	}{
		{
			name:      "modified file",
			to:        0,
			edit:      func(root string) { writeFile(t, filepath.Join(root, "a.txt"), "user edit") },
			conflicts: []string{"modified->modified a.txt"},
			effects:   []string{"modified a.txt", "deleted c.txt"},
		},
		{
			name:      "created file",
			to:        0,
			edit:      func(root string) { writeFile(t, filepath.Join(root, "mine.txt"), "user file") },
			conflicts: []string{"created->deleted mine.txt"},
			effects:   []string{"modified a.txt", "deleted c.txt", "deleted mine.txt"},
		},
		{
			name:      "deleted file",
			to:        0,
			edit:      func(root string) { os.Remove(filepath.Join(root, "b.txt")) },
			conflicts: []string{"deleted->created b.txt"},
			effects:   []string{"modified a.txt", "created b.txt", "deleted c.txt"},
		},
		{
			name: "created directory",
			to:   1,
			edit: func(root string) { writeFile(t, filepath.Join(root, "new/deep/f.txt"), "x") },
			conflicts: []string{"created->deleted new", "created->deleted new/deep",
				"created->deleted new/deep/f.txt"},
			effects: []string{"deleted new", "deleted new/deep", "deleted new/deep/f.txt"},
		},
		{
			name:    "an edit the rewind leaves as it is",
			to:      0,
			edit:    func(root string) { writeFile(t, filepath.Join(root, "b.txt"), "b0") },
			effects: []string{"modified a.txt", "deleted c.txt"},
		},
		{
			name:    "an edit to the content the rewind restores",
			to:      0,
			edit:    func(root string) { writeFile(t, filepath.Join(root, "a.txt"), "a0") },
			effects: []string{"deleted c.txt"},
		},
		{
			name:    "an ignored file is no conflict and is never touched",
			to:      0,
			edit:    func(root string) { writeFile(t, filepath.Join(root, "build/out.o"), "obj") },
			effects: []string{"modified a.txt", "deleted c.txt"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, c := safeRepo(t)
			ctx := context.Background()
			tc.edit(root)
			edited := snapshot(t, root, true, nil)
			pos, _ := c.positions()

			dry, err := c.Apply(ctx, ApplyRequest{To: tc.to, DryRun: true})
			if err != nil {
				t.Fatal(err)
			}
			if got := changeNames(dry.Effects); !slices.Equal(got, tc.effects) {
				t.Errorf("dry run effects %v, want %v", got, tc.effects)
			}
			if got := changeNames(dry.Conflicts); !slices.Equal(got, tc.conflicts) {
				t.Errorf("dry run conflicts %v, want %v", got, tc.conflicts)
			}
			if d := diffTrees(edited, snapshot(t, root, true, nil)); d != "" {
				t.Fatalf("the dry run changed the checkout:\n%s", d)
			}
			if after, _ := c.positions(); !slices.Equal(after, pos) {
				t.Fatalf("the dry run stored increments: %v -> %v", pos, after)
			}

			res, err := c.Apply(ctx, ApplyRequest{To: tc.to})
			if tc.conflicts != nil {
				var ce *ChangedError
				if !errors.As(err, &ce) || !errors.Is(err, ErrChangedSinceCapture) {
					t.Fatalf("rewind over a later edit: %v, want a *ChangedError", err)
				}
				if got := changeNames(ce.Paths); !slices.Equal(got, tc.conflicts) || ce.Position != 1 {
					t.Errorf("refusal lists %v at %d, want %v at 1", got, ce.Position, tc.conflicts)
				}
				if d := diffTrees(edited, snapshot(t, root, true, nil)); d != "" {
					t.Fatalf("the refused rewind changed the checkout:\n%s", d)
				}
				if after, _ := c.positions(); !slices.Equal(after, pos) {
					t.Fatalf("the refused rewind stored increments: %v -> %v", pos, after)
				}
				if res, err = c.Apply(ctx, ApplyRequest{To: tc.to, Force: true}); err != nil {
					t.Fatal(err)
				}
				if got := changeNames(res.Conflicts); !slices.Equal(got, tc.conflicts) {
					t.Errorf("forced rewind reports %v, want %v", got, tc.conflicts)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			rewound := snapshot(t, root, true, nil)
			want := map[int]map[string]string{
				0: {"a.txt": "a0", "b.txt": "b0"},
				1: {"a.txt": "a1 agent", "b.txt": "b0", "c.txt": "c1"},
			}[tc.to]
			for name, content := range want {
				if b, err := os.ReadFile(filepath.Join(root, name)); err != nil || string(b) != content {
					t.Errorf("after the rewind %s = %q, %v; want %q", name, b, err, content)
				}
			}
			if tc.to == 0 {
				if _, err := os.Stat(filepath.Join(root, "c.txt")); err == nil {
					t.Errorf("c.txt survived the rewind to 0")
				}
			}
			// The undo restores the edited state byte for byte (times too).
			if _, err := c.Apply(ctx, ApplyRequest{To: res.PreApply.Position}); err != nil {
				t.Fatalf("undo: %v", err)
			}
			if d := diffTrees(edited, snapshot(t, root, true, nil)); d != "" {
				t.Fatalf("the undo differs from the state before the rewind:\n%s", d)
			}
			// And undoing the undo gives the rewound state again.
			last, _ := c.positions()
			if _, err := c.Apply(ctx, ApplyRequest{To: last[len(last)-3]}); err != nil {
				t.Fatal(err)
			}
			if d := diffTrees(rewound, snapshot(t, root, true, nil)); d != "" {
				t.Fatalf("redoing the rewind differs:\n%s", d)
			}
		})
	}
}

// ignoreLayout builds a git repository and returns the capture root, the
// changelog's Root for it and a function that writes below the root.
type ignoreLayout struct {
	name  string
	setup func(t *testing.T, base string) (root string)
}

// TestIgnoredPathsOutsideScopeBothWays: for a checkout at the repository's
// top, one that is a subdirectory of it (the .gitignore at the top), and a
// linked worktree (an info/exclude rule of the common git dir), ignored
// paths, .agentdiff and .git never enter an increment, and a rewind and its
// undo neither delete nor change them, even when an agent's command created
// them after the position rewound to; an untracked, unignored .env is a
// workspace file.
func TestIgnoredPathsOutsideScopeBothWays(t *testing.T) {
	for _, tc := range []ignoreLayout{
		{"top level", func(t *testing.T, base string) string {
			repo := filepath.Join(base, "repo")
			os.MkdirAll(repo, 0o755)
			run(t, repo, "git", "init", "-q")
			writeFile(t, filepath.Join(repo, ".gitignore"), "build/\n*.log\nnode_modules/\n")
			return repo
		}},
		{"subdirectory", func(t *testing.T, base string) string {
			repo := filepath.Join(base, "repo")
			os.MkdirAll(filepath.Join(repo, "sub"), 0o755)
			run(t, repo, "git", "init", "-q")
			writeFile(t, filepath.Join(repo, ".gitignore"), "build/\n*.log\nnode_modules/\n")
			writeFile(t, filepath.Join(repo, "top.txt"), "outside the root")
			return filepath.Join(repo, "sub")
		}},
		{"linked worktree", func(t *testing.T, base string) string {
			repo := filepath.Join(base, "repo")
			os.MkdirAll(repo, 0o755)
			run(t, repo, "git", "init", "-q")
			writeFile(t, filepath.Join(repo, ".gitignore"), "build/\nnode_modules/\n")
			writeFile(t, filepath.Join(repo, ".git", "info", "exclude"), "*.log\n")
			run(t, repo, "git", "add", ".gitignore")
			run(t, repo, "git", "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "init")
			wt := filepath.Join(base, "wt")
			run(t, repo, "git", "worktree", "add", "-q", wt)
			return wt
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			root := tc.setup(t, base)
			at := func(p string) string { return filepath.Join(root, p) }
			c, err := Open(filepath.Join(base, "cl"), Options{Roots: []Root{{Name: "checkout", Path: root, Git: true}}})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			writeFile(t, at("main.go"), "package main")
			writeFile(t, at(".env"), "TOKEN=untracked-but-not-ignored")
			writeFile(t, at("early.log"), "ignored before call 0")
			writeFile(t, at(".agentdiff/objects/x"), "evidence")
			mustCapture(t, c, 0)
			// The agent's command creates ignored files in new and existing
			// directories, and a workspace file.
			writeFile(t, at("build/out.o"), "object")
			writeFile(t, at("pkg/node_modules/dep/index.js"), "dependency")
			writeFile(t, at("pkg/lib.go"), "package pkg")
			writeFile(t, at("run.log"), "log")
			writeFile(t, at(".agentdiff/objects/y"), "more evidence")
			writeFile(t, at("early.log"), "changed by the agent")
			mustCapture(t, c, 1)
			for p := 0; p <= 1; p++ {
				names, _ := members(t, c.incrementPath(p))
				for _, n := range names {
					if strings.Contains(n, ".log") || strings.Contains(n, "build/") || strings.Contains(n, "node_modules") ||
						strings.Contains(n, ".agentdiff") || strings.Contains(n, "/.git/") || strings.HasSuffix(n, "/.git") {
						t.Errorf("increment %d stores an excluded path: %s", p, n)
					}
				}
				if p == 0 && !slices.ContainsFunc(names, func(n string) bool { return strings.HasSuffix(n, "/.env") }) {
					t.Errorf("increment 0 does not store the untracked, unignored .env: %v", names)
				}
			}
			ignored := func() tree {
				out := tree{}
				for _, p := range []string{"build/out.o", "pkg/node_modules/dep/index.js", "run.log", "early.log", ".agentdiff/objects/x", ".agentdiff/objects/y"} {
					b, err := os.ReadFile(at(p))
					if err != nil {
						out[p] = "missing"
						continue
					}
					out[p] = string(b)
				}
				return out
			}
			want := ignored()
			before := snapshot(t, root, true, nil)
			res, err := c.Apply(ctx, ApplyRequest{To: 0})
			if err != nil {
				t.Fatal(err)
			}
			if d := diffTrees(want, ignored()); d != "" {
				t.Errorf("the rewind changed excluded paths:\n%s", d)
			}
			if _, err := os.Stat(at("pkg/lib.go")); err == nil {
				t.Errorf("the rewind kept pkg/lib.go, written after call 0")
			}
			if b, _ := os.ReadFile(at(".env")); string(b) != "TOKEN=untracked-but-not-ignored" {
				t.Errorf(".env after the rewind = %q", b)
			}
			if _, err := c.Apply(ctx, ApplyRequest{To: res.PreApply.Position}); err != nil {
				t.Fatal(err)
			}
			if d := diffTrees(before, snapshot(t, root, true, nil)); d != "" {
				t.Errorf("the undo differs from the state before the rewind:\n%s", d)
			}
			if tc.name == "subdirectory" {
				if b, _ := os.ReadFile(filepath.Join(filepath.Dir(root), "top.txt")); string(b) != "outside the root" {
					t.Errorf("a file outside the root changed: %q", b)
				}
			}
		})
	}
}

// TestIgnoreStampFollowsRepositoryLayout: the ignore classification is
// redone when a .gitignore above a subdirectory root changes, and git
// rev-parse is not run again while the repository's .git stays the same.
func TestIgnoreStampFollowsRepositoryLayout(t *testing.T) {
	base := t.TempDir()
	repo := filepath.Join(base, "repo")
	root := filepath.Join(repo, "a", "b")
	os.MkdirAll(root, 0o755)
	run(t, repo, "git", "init", "-q")
	writeFile(t, filepath.Join(root, "x.tmp"), "x")
	writeFile(t, filepath.Join(root, "keep.txt"), "k")
	c, err := Open(filepath.Join(base, "cl"), Options{Roots: []Root{{Name: "checkout", Path: root, Git: true}}})
	if err != nil {
		t.Fatal(err)
	}
	stored := func(pos int) []string {
		names, _ := members(t, c.incrementPath(pos))
		var out []string
		for _, n := range names {
			if flag, name, _ := strings.Cut(n, " "); flag != "D" && name != incmeta.Member {
				out = append(out, filepath.Base(name))
			}
		}
		slices.Sort(out)
		return out
	}
	mustCapture(t, c, 0)
	if got := stored(0); !slices.Equal(got, []string{"keep.txt", "x.tmp"}) {
		t.Fatalf("increment 0 stores %v", got)
	}
	// A .gitignore in a directory between the top level and the root.
	writeFile(t, filepath.Join(repo, "a", ".gitignore"), "*.tmp\n")
	writeFile(t, filepath.Join(root, "y.tmp"), "y")
	mustCapture(t, c, 1)
	if got := stored(1); len(got) != 0 {
		t.Errorf("increment 1 stores %v; y.tmp is ignored by a/.gitignore", got)
	}
	st, err := c.loadState()
	if err != nil {
		t.Fatal(err)
	}
	rs := st.root("checkout")
	if g := parseStampRepo(rs.Stamp); g == nil || g.top != repo || g.gitDir != filepath.Join(repo, ".git") {
		t.Fatalf("stamp records %+v, want the repository at %s", g, repo)
	}
	for _, e := range rs.Entries {
		// A captured path stays captured once ignored (it is restored
		// exactly by a rewind); a new ignored one is never captured.
		if e.Path == "x.tmp" && e.Excluded {
			t.Errorf("x.tmp, captured before, is excluded after a/.gitignore appeared")
		}
		if e.Path == "y.tmp" && !e.Excluded {
			t.Errorf("y.tmp is not excluded after a/.gitignore appeared")
		}
	}
	// With git gone, a capture still works while the layout is unchanged
	// (the located repository is reused), then fails loudly once .git moves.
	c.opts.Git = filepath.Join(base, "no-such-git")
	writeFile(t, filepath.Join(root, "keep.txt"), "k2") // no new path: no check-ignore either
	if _, err := c.Capture(context.Background(), CaptureRequest{Position: 2}); err != nil {
		t.Fatalf("capture with the repository located before: %v", err)
	}
	os.Rename(filepath.Join(repo, ".git"), filepath.Join(repo, ".git-moved"))
	os.Mkdir(filepath.Join(repo, ".git"), 0o755)
	if _, err := c.Capture(context.Background(), CaptureRequest{Position: 3}); err == nil || !strings.Contains(err.Error(), "rev-parse") {
		t.Errorf("capture after .git was replaced and git is gone: %v, want a rev-parse error", err)
	}
}

// TestSnapshotLoadIsUndoable: loading a snapshot checks like a rewind,
// stores an undo point and restores the state before it on undo.
func TestSnapshotLoadIsUndoable(t *testing.T) {
	root, c := safeRepo(t)
	ctx := context.Background()
	snap := filepath.Join(filepath.Dir(root), "snap.tgz")
	f, err := os.Create(snap)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := SaveSnapshot(ctx, c.Roots(), f, ""); err != nil {
		t.Fatal(err)
	}
	f.Close()
	writeFile(t, filepath.Join(root, "d.txt"), "agent, after the snapshot")
	os.Remove(filepath.Join(root, "b.txt"))
	mustCapture(t, c, 2)
	writeFile(t, filepath.Join(root, "user.txt"), "the user's, never captured")
	before := snapshot(t, root, true, nil)
	_, err = c.ApplySnapshot(ctx, snap, ApplyRequest{})
	var ce *ChangedError
	if !errors.As(err, &ce) || !slices.Equal(changeNames(ce.Paths), []string{"created->deleted user.txt"}) {
		t.Fatalf("snapshot load over an uncaptured file: %v", err)
	}
	if d := diffTrees(before, snapshot(t, root, true, nil)); d != "" {
		t.Fatalf("the refused load changed the checkout:\n%s", d)
	}
	res, err := c.ApplySnapshot(ctx, snap, ApplyRequest{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"a.txt": "a1 agent", "b.txt": "b0", "c.txt": "c1", "d.txt": "", "user.txt": ""} {
		b, err := os.ReadFile(filepath.Join(root, name))
		if (want == "") != (err != nil) || string(b) != want {
			t.Errorf("after the load %s = %q, %v; want %q", name, b, err, want)
		}
	}
	if res.Result.Meta.Kind != KindApply || res.Result.Meta.AppliedTo != nil || res.PreApply.Meta.Kind != KindPreApply {
		t.Errorf("load increments: pre %+v, result %+v", res.PreApply.Meta, res.Result.Meta)
	}
	if _, err := c.Apply(ctx, ApplyRequest{To: res.PreApply.Position}); err != nil {
		t.Fatal(err)
	}
	if d := diffTrees(before, snapshot(t, root, true, nil)); d != "" {
		t.Fatalf("undoing the load differs:\n%s", d)
	}
}

// TestDryRunPredictsTheRewind: over seeded random sequences of tool calls
// (writes, deletions, directories replacing files, symlinks, ignored
// paths) and a user's uncaptured edits, the dry run's effects are exactly
// what the forced rewind then changes, its conflicts are the effects on the
// paths the user changed, ignored paths never change, and the undo restores
// the tree before the rewind.
func TestDryRunPredictsTheRewind(t *testing.T) {
	paths := []string{"a", "b", "d/c", "d/e/f", "g", "d/ign/z"}
	ignoredPaths := []string{"ign/x", "k.tmp", "d/ign/y", "n/ign/deep/q"}
	for seed := int64(1); seed <= 30; seed++ {
		t.Run(strconv.FormatInt(seed, 10), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seed), 7))
			base := t.TempDir()
			root := filepath.Join(base, "repo")
			os.MkdirAll(root, 0o755)
			run(t, root, "git", "init", "-q")
			writeFile(t, filepath.Join(root, ".gitignore"), "ign/\n*.tmp\n")
			c, err := Open(filepath.Join(base, "cl"), Options{Roots: []Root{{Name: "checkout", Path: root, Git: true}}})
			if err != nil {
				t.Fatal(err)
			}
			at := func(p string) string { return filepath.Join(root, p) }
			mutate := func(n int) map[string]bool {
				touched := map[string]bool{}
				for range n {
					p := paths[rng.IntN(len(paths))]
					switch rng.IntN(5) {
					case 0:
						os.RemoveAll(at(p))
					case 1:
						os.RemoveAll(at(p))
						writeFile(t, at(p+"/inner"), "inner"+strconv.Itoa(rng.IntN(3)))
						touched[p+"/inner"] = true
					case 2:
						os.RemoveAll(at(p))
						os.MkdirAll(filepath.Dir(at(p)), 0o755)
						os.Symlink("target"+strconv.Itoa(rng.IntN(2)), at(p))
					default:
						os.RemoveAll(at(p))
						writeFile(t, at(p), "content"+strconv.Itoa(rng.IntN(3)))
					}
					touched[p] = true
				}
				return touched
			}
			steps := 3 + rng.IntN(4)
			for k := range steps {
				mutate(1 + rng.IntN(3))
				if rng.IntN(2) == 0 {
					p := ignoredPaths[rng.IntN(len(ignoredPaths))]
					if fi, err := os.Lstat(filepath.Dir(at(p))); err == nil && !fi.IsDir() {
						continue
					}
					writeFile(t, at(p), "ignored"+strconv.Itoa(k))
				}
				mustCapture(t, c, k)
			}
			if rng.IntN(3) > 0 {
				mutate(1 + rng.IntN(2)) // the user's uncaptured edits
			}
			skipGit := func(rel string) bool { return rel == ".git" }
			before := snapshot(t, root, true, skipGit)
			to := rng.IntN(steps)
			dry, err := c.Apply(context.Background(), ApplyRequest{To: to, DryRun: true})
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.Apply(context.Background(), ApplyRequest{To: to, Force: true})
			if err != nil {
				t.Fatal(err)
			}
			after := snapshot(t, root, true, skipGit)
			// What actually changed (directory modes and file times aside).
			var actual []string
			norm := func(s string) string {
				if strings.HasPrefix(s, "dir ") {
					return "dir"
				}
				if i := strings.LastIndex(s, " t="); i > 0 {
					return s[:i]
				}
				return s
			}
			for p, b := range before {
				a, ok := after[p]
				switch {
				case !ok:
					actual = append(actual, "deleted "+p)
				case norm(a) != norm(b):
					actual = append(actual, "modified "+p)
				}
			}
			for p := range after {
				if _, ok := before[p]; !ok {
					actual = append(actual, "created "+p)
				}
			}
			slices.Sort(actual)
			var predicted []string
			for _, pc := range dry.Effects {
				predicted = append(predicted, pc.Change+" "+pc.Path)
			}
			slices.Sort(predicted)
			t.Logf("rewind to %d of %d: %d effects, %d conflicts: %v", to, steps, len(predicted), len(dry.Conflicts), predicted)
			if !slices.Equal(actual, predicted) {
				t.Fatalf("rewind to %d: the dry run predicted\n  %v\nthe rewind changed\n  %v", to, predicted, actual)
			}
			if !slices.EqualFunc(dry.Conflicts, res.Conflicts, func(a, b PathChange) bool { return a == b }) {
				t.Errorf("dry run conflicts %v, forced rewind %v", dry.Conflicts, res.Conflicts)
			}
			for _, pc := range dry.Conflicts {
				if !slices.Contains(predicted, pc.Change+" "+pc.Path) {
					t.Errorf("conflict %+v is not among the effects", pc)
				}
			}
			for p, b := range before {
				if isIgnored(p) && after[p] != b {
					t.Errorf("the rewind changed the ignored %s: %s -> %s", p, b, after[p])
				}
			}
			if _, err := c.Apply(context.Background(), ApplyRequest{To: res.PreApply.Position}); err != nil {
				t.Fatal(err)
			}
			if d := diffTrees(before, snapshot(t, root, true, skipGit)); d != "" {
				t.Fatalf("the undo differs from the tree before the rewind:\n%s", d)
			}
		})
	}
}

func isIgnored(p string) bool {
	return strings.HasPrefix(p, "ign") || strings.Contains(p, "/ign") || strings.HasSuffix(p, ".tmp")
}
