package changelog

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/watch"
)

// editor makes random edits below a checkout and records, as a watcher
// would, the directories whose listing changed (dirs) and the directories
// created (trees).
type editor struct {
	t     *testing.T
	root  string
	rng   *rand.Rand
	dirs  map[string]bool
	trees map[string]bool
}

func (e *editor) abs(rel string) string { return filepath.Join(e.root, filepath.FromSlash(rel)) }

func (e *editor) touched(rel string) { e.dirs[parentOf(rel)] = true }

// existing lists the checkout's paths (no .git), directories with a
// trailing slash.
func (e *editor) existing() (files, dirs []string) {
	dirs = []string{""}
	filepath.Walk(e.root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(e.root, p)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		if rel == ".git" {
			return filepath.SkipDir
		}
		if fi.IsDir() {
			dirs = append(dirs, rel)
		} else {
			files = append(files, rel)
		}
		return nil
	})
	return files, dirs
}

func (e *editor) pick(list []string) string { return list[e.rng.IntN(len(list))] }

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// edit makes one random change.
func (e *editor) edit() {
	t := e.t
	files, dirs := e.existing()
	name := fmt.Sprintf("n%d", e.rng.IntN(40))
	switch op := e.rng.IntN(13); {
	case op < 3: // create or overwrite a file
		rel := join(e.pick(dirs), name+".txt")
		if fi, err := os.Lstat(e.abs(rel)); err == nil && fi.IsDir() {
			return
		}
		if err := os.WriteFile(e.abs(rel), []byte(fmt.Sprint(e.rng.Int())), 0o644); err != nil {
			t.Fatal(err)
		}
		e.touched(rel)
	case op == 3 && len(files) > 0: // modify in place, same size, mtime put back
		rel := e.pick(files)
		fi, err := os.Lstat(e.abs(rel))
		if err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
			return
		}
		b, _ := os.ReadFile(e.abs(rel))
		b[0] ^= 1
		os.WriteFile(e.abs(rel), b, fi.Mode().Perm())
		os.Chtimes(e.abs(rel), fi.ModTime(), fi.ModTime())
		e.touched(rel)
	case op == 4 && len(files) > 0: // delete a file
		rel := e.pick(files)
		os.Remove(e.abs(rel))
		e.touched(rel)
	case op == 5: // a new directory tree
		rel := join(e.pick(dirs), "d"+name)
		if _, err := os.Lstat(e.abs(rel)); err == nil {
			return
		}
		for k := range e.rng.IntN(4) {
			writeFile(t, e.abs(join(rel, fmt.Sprintf("sub%d/f%d", k%2, k))), fmt.Sprint(k))
		}
		os.MkdirAll(e.abs(rel), 0o755)
		e.touched(rel)
		e.trees[rel] = true
	case op == 6 && len(dirs) > 1: // remove a directory tree
		rel := e.pick(dirs[1:])
		os.RemoveAll(e.abs(rel))
		e.touched(rel)
	case op == 7 && len(files) > 0: // chmod a file
		rel := e.pick(files)
		if fi, err := os.Lstat(e.abs(rel)); err == nil && fi.Mode().IsRegular() {
			os.Chmod(e.abs(rel), fi.Mode().Perm()^0o100)
			e.touched(rel)
		}
	case op == 8 && len(dirs) > 1: // chmod a directory
		rel := e.pick(dirs[1:])
		fi, err := os.Lstat(e.abs(rel))
		if err == nil {
			os.Chmod(e.abs(rel), fi.Mode().Perm()^0o020)
			e.touched(rel)
		}
	case op == 9: // a symlink
		rel := join(e.pick(dirs), name+".lnk")
		if _, err := os.Lstat(e.abs(rel)); err == nil {
			return
		}
		os.Symlink("target-"+name, e.abs(rel))
		e.touched(rel)
	case op == 10: // ignored paths
		rel := join(e.pick(dirs), name+".log")
		if fi, err := os.Lstat(e.abs(rel)); err == nil && fi.IsDir() {
			return
		}
		os.WriteFile(e.abs(rel), []byte("log"), 0o644)
		e.touched(rel)
	case op == 12: // inside an ignored directory (a watcher sees it)
		rel := "build/sub/" + name + ".o"
		writeFile(t, e.abs(rel), fmt.Sprint(e.rng.Int()))
		e.touched(rel)
		e.trees["build/sub"] = true
	case op == 11 && len(dirs) > 1: // rename a directory
		from := e.pick(dirs[1:])
		to := join(parentOf(from), "r"+name)
		if _, err := os.Lstat(e.abs(to)); err == nil || strings.HasPrefix(to, from+"/") {
			return
		}
		if os.Rename(e.abs(from), e.abs(to)) == nil {
			e.touched(from)
			e.touched(to)
			e.trees[to] = true
		}
	}
}

// fixedHints is a ChangeSource replaying the editor's record.
type fixedHints struct {
	e   *editor
	n   int
	bad bool // cannot vouch
}

func (f *fixedHints) Since(ctx context.Context, roots []string, since string) (string, []*Hint, error) {
	f.n++
	tok := fmt.Sprint("t", f.n)
	if f.bad || since == "" {
		return tok, make([]*Hint, len(roots)), nil
	}
	h := &Hint{}
	for d := range f.e.dirs {
		h.Dirs = append(h.Dirs, d)
	}
	for d := range f.e.trees {
		h.Trees = append(h.Trees, d)
	}
	slices.Sort(h.Dirs)
	slices.Sort(h.Trees)
	return tok, []*Hint{h}, nil
}

func statesEqual(t *testing.T, what string, a, b *captureState) {
	t.Helper()
	if len(a.Roots) != len(b.Roots) {
		t.Fatalf("%s: %d roots vs %d", what, len(a.Roots), len(b.Roots))
	}
	for i := range a.Roots {
		x, y := a.Roots[i].Entries, b.Roots[i].Entries
		var diff []string
		mergeEntries(x, y, func(o, n *entry) {
			switch {
			case o == nil:
				diff = append(diff, "+"+n.Path)
			case n == nil:
				diff = append(diff, "-"+o.Path)
			case !sameStat(o, n):
				diff = append(diff, "~"+n.Path)
			}
		})
		if len(diff) > 0 {
			t.Fatalf("%s: states differ: %v", what, diff)
		}
	}
}

func changesKey(inc *Increment) string {
	ch := inc.Meta.Changes
	return fmt.Sprintf("created %v modified %v deleted %v files %d deleted %d", ch.Created, ch.Modified, ch.Deleted, inc.Meta.Files, inc.Meta.Deleted)
}

// TestFastCaptureMatchesFullCapture: under random edits, the fast capture
// (sections; with and without a watcher's hints) stores the same changes
// and reaches the same state as the full capture, and its increments
// replay to the tree.
func TestFastCaptureMatchesFullCapture(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			base := t.TempDir()
			co := filepath.Join(base, "repo")
			os.MkdirAll(co, 0o755)
			run(t, co, "git", "init", "-q")
			writeFile(t, filepath.Join(co, ".gitignore"), "*.log\nbuild/\n")
			for i := range 30 {
				writeFile(t, filepath.Join(co, fmt.Sprintf("a%d/b%d/f%d.txt", i%3, i%5, i)), fmt.Sprint(i))
			}
			writeFile(t, filepath.Join(co, "build/out.o"), "o")
			roots := []Root{{Name: "checkout", Path: co, Git: true}}
			e := &editor{t: t, root: co, rng: rand.New(rand.NewPCG(seed, 7)), dirs: map[string]bool{}, trees: map[string]bool{}}
			src := &fixedHints{e: e}
			open := func(name string, w ChangeSource) *Changelog {
				c, err := Open(filepath.Join(base, name), Options{Roots: roots, Watch: w})
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
			cookies := filepath.Join(base, "cookies")
			os.Mkdir(cookies, 0o700)
			tr, err := watch.New(cookies, watch.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			full, fast, hinted, watched := open("full", nil), open("fast", nil), open("hinted", src), open("watched", trackerSource{tr})
			full.forceFull = true
			ctx := context.Background()
			for round := range 40 {
				for range 1 + e.rng.IntN(4) {
					e.edit()
				}
				if round%7 == 3 {
					time.Sleep(60 * time.Millisecond) // let racy files settle sometimes
				}
				var keys []string
				for _, c := range []*Changelog{full, fast, hinted, watched} {
					inc, err := c.Capture(ctx, CaptureRequest{Position: -1, Tool: "Bash"})
					if err != nil {
						t.Fatalf("round %d: capture: %v", round, err)
					}
					keys = append(keys, changesKey(inc))
				}
				clear(e.dirs)
				clear(e.trees)
				if keys[0] != keys[1] || keys[0] != keys[2] || keys[0] != keys[3] {
					t.Fatalf("round %d: changes differ:\nfull    %s\nfast    %s\nhinted  %s\nwatched %s", round, keys[0], keys[1], keys[2], keys[3])
				}
				sf, err := full.loadState()
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range []*Changelog{fast, hinted, watched} {
					s, err := c.loadState()
					if err != nil {
						t.Fatalf("round %d: %v", round, err)
					}
					statesEqual(t, fmt.Sprintf("round %d %s", round, c.dir), sf, s)
				}
			}
			if fast.fastCaptures < 35 || hinted.hintedRoots < 33 || watched.hintedRoots < 30 {
				t.Fatalf("fast path taken %d times, hints used %d times, the watcher's %d times, of 40", fast.fastCaptures, hinted.hintedRoots, watched.hintedRoots)
			}
			// The hinted changelog replays to the tree.
			list, err := hinted.List()
			if err != nil {
				t.Fatal(err)
			}
			var paths []string
			for _, in := range list {
				paths = append(paths, hinted.incrementPath(in.Position))
			}
			out := t.TempDir()
			rr := []Root{{Name: "checkout", Path: filepath.Join(out, "repo"), Git: true}}
			if err := Replay(ctx, paths, rr); err != nil {
				t.Fatal(err)
			}
			skip := func(rel string) bool {
				return rel == ".git" || strings.HasPrefix(rel, ".git/") || strings.HasSuffix(rel, ".log") || rel == "build" || strings.HasPrefix(rel, "build/")
			}
			if d := diffTrees(snapshot(t, co, false, skip), snapshot(t, rr[0].Path, false, skip)); d != "" {
				t.Fatalf("replay differs from the tree:\n%s", d)
			}
		})
	}
}

// TestStateSurvivesKilledCaptures kills a real capturing process (SIGKILL,
// at random points of its edit-capture loop, many times over) and checks
// after each kill that the next capture's state is what a full capture of
// the tree reaches, and at the end that the increments replay to the tree.
func TestStateSurvivesKilledCaptures(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	os.MkdirAll(root, 0o755)
	writeFile(t, filepath.Join(root, "seed"), "seed")
	dir := filepath.Join(base, "cl")
	rng := rand.New(rand.NewPCG(11, 13))
	roots := []Root{{Name: "r", Path: root}}
	ctx := context.Background()
	for round := range 8 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "AGENTSCM_CHANGELOG_HELPER=crash", "HELPER_ROOT="+root, "HELPER_DIR="+dir)
		var errb strings.Builder
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(80+rng.IntN(400)) * time.Millisecond)
		cmd.Process.Kill()
		cmd.Wait()
		if errb.Len() > 0 {
			t.Fatalf("round %d: helper: %s", round, errb.String())
		}
		c, err := Open(dir, Options{Roots: roots})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Capture(ctx, CaptureRequest{Position: -1}); err != nil {
			t.Fatalf("round %d: capture after the kill: %v", round, err)
		}
		got, err := c.loadState()
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		ref, err := Open(filepath.Join(base, fmt.Sprint("ref", round)), Options{Roots: roots})
		if err != nil {
			t.Fatal(err)
		}
		ref.forceFull = true
		if _, err := ref.Capture(ctx, CaptureRequest{Position: -1}); err != nil {
			t.Fatal(err)
		}
		want, err := ref.loadState()
		if err != nil {
			t.Fatal(err)
		}
		statesEqual(t, fmt.Sprint("round ", round), want, got)
	}
	c, err := Open(dir, Options{Roots: roots})
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.List()
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, in := range list {
		paths = append(paths, c.incrementPath(in.Position))
	}
	out := filepath.Join(t.TempDir(), "out")
	if err := Replay(ctx, paths, []Root{{Name: "r", Path: out}}); err != nil {
		t.Fatal(err)
	}
	if d := diffTrees(snapshot(t, root, false, nil), snapshot(t, out, false, nil)); d != "" {
		t.Fatalf("replay after %d kills differs:\n%s", 8, d)
	}
}

// TestDamagedSectionsMeanFullCapture damages the format-3 base (its index,
// a section's bytes) and checks that the next capture is a full one with a
// warning, never an increment built on the damaged state; a damaged section
// that a watched capture does not read is caught when the base is next
// rewritten.
func TestDamagedSectionsMeanFullCapture(t *testing.T) {
	setup := func(t *testing.T, w ChangeSource) (*Changelog, string) {
		base := t.TempDir()
		root := filepath.Join(base, "root")
		for i := range 20 {
			writeFile(t, filepath.Join(root, fmt.Sprintf("d%d/f%d", i%4, i)), fmt.Sprint(i))
		}
		c, err := Open(filepath.Join(base, "cl"), Options{Roots: []Root{{Name: "r", Path: root}}, Watch: w})
		if err != nil {
			t.Fatal(err)
		}
		mustCapture(t, c, 0)
		return c, root
	}
	flip := func(t *testing.T, c *Changelog, at func(size int64) int64) {
		p := filepath.Join(c.dir, stateFile)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b[at(int64(len(b)))] ^= 0x40
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		at   func(size int64) int64
	}{
		{"index", func(int64) int64 { return v3HeaderSize + 3 }},
		{"section", func(size int64) int64 { return size - 5 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, root := setup(t, nil)
			flip(t, c, tc.at)
			writeFile(t, filepath.Join(root, "d1/new"), "n")
			inc := mustCapture(t, c, 1)
			if inc.Warning == "" || inc.Meta.Files < 21 {
				t.Fatalf("after damage: warning %q, %d files stored; want a full capture with a warning", inc.Warning, inc.Meta.Files)
			}
			writeFile(t, filepath.Join(root, "d2/new"), "n")
			if inc := mustCapture(t, c, 2); inc.Warning != "" || inc.Meta.Files != 1 {
				t.Fatalf("the capture after the full one: warning %q, %d files", inc.Warning, inc.Meta.Files)
			}
		})
	}
	t.Run("unread section, watched", func(t *testing.T) {
		e := &editor{dirs: map[string]bool{}, trees: map[string]bool{}}
		src := &fixedHints{e: e}
		c, root := setup(t, src)
		mustCapture(t, c, 1) // takes a token
		// Damage d3's section (the last one), then change only d0 for
		// longer than the journal holds.
		flip(t, c, func(size int64) int64 { return size - 3 })
		var failed, full bool
		for k := 2; k < 2+maxJournalRecords+3; k++ {
			writeFile(t, filepath.Join(root, "d0/f0"), fmt.Sprint("v", k))
			e.dirs["d0"] = true
			inc, err := c.Capture(context.Background(), CaptureRequest{Position: -1})
			clear(e.dirs)
			switch {
			case err != nil:
				failed = true // the rewrite of the base met the damage
			case failed && !full:
				if inc.Warning == "" || inc.Meta.Files < 20 {
					t.Fatalf("after the damaged rewrite: warning %q, %d files", inc.Warning, inc.Meta.Files)
				}
				full = true
			case inc.Meta.Files != 1:
				t.Fatalf("capture %d stored %d files", k, inc.Meta.Files)
			}
		}
		if !failed || !full {
			t.Fatalf("damage never caught: failed %v, full %v", failed, full)
		}
	})
}
