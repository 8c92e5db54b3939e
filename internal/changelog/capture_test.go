package changelog

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
)

// scenario is a checkout (a git repository with ignored paths) plus a
// transcripts root, changed by a sequence of tool calls.
type scenario struct {
	base     string
	checkout string
	trans    string
	roots    []Root
	c        *Changelog
	// want[k] is the tree of every root after call k (excluded paths left out).
	want []map[string]tree
	// stored[k] lists the file/symlink member names increment k must hold.
	stored [][]string
}

func newScenario(t *testing.T) *scenario {
	t.Helper()
	base := t.TempDir()
	s := &scenario{base: base, checkout: filepath.Join(base, "work", "repo"), trans: filepath.Join(base, "home", "transcripts")}
	if err := os.MkdirAll(s.checkout, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, s.checkout, "git", "init", "-q")
	writeFile(t, filepath.Join(s.checkout, ".gitignore"), "build/\n*.log\n")
	writeFile(t, filepath.Join(s.checkout, "README"), "hello\n")
	writeFile(t, filepath.Join(s.trans, "s1.jsonl"), "{}\n")
	s.roots = []Root{{Name: "checkout", Path: s.checkout, Git: true}, {Name: "transcripts", Path: s.trans}}
	c, err := Open(filepath.Join(base, "changelog"), Options{Roots: s.roots})
	if err != nil {
		t.Fatal(err)
	}
	s.c = c
	return s
}

func (s *scenario) skip(rel string) bool {
	return rel == ".git" || strings.HasPrefix(rel, "build") || strings.HasSuffix(rel, ".log")
}

func (s *scenario) record(t *testing.T) {
	t.Helper()
	s.want = append(s.want, map[string]tree{
		"checkout":    snapshot(t, s.checkout, true, s.skip),
		"transcripts": snapshot(t, s.trans, true, nil),
	})
}

// calls runs the scenario's tool calls, capturing after each one.
func (s *scenario) calls(t *testing.T) {
	co := func(p string) string { return filepath.Join(s.checkout, p) }
	steps := []struct {
		do     func()
		stored []string
	}{
		{func() { // 0: the first capture holds everything
			writeFile(t, co("a.txt"), "a0")
			writeFile(t, co("src/b.go"), "package b")
			writeFile(t, co("build/out.bin"), "ignored")
			writeFile(t, co("x.log"), "ignored")
		}, []string{"README", ".gitignore", "a.txt", "src/b.go", "T:s1.jsonl"}},
		{func() { // 1: a modification and a new file
			writeFile(t, co("a.txt"), "a1 longer")
			writeFile(t, co("src/c.go"), "package c")
			writeFile(t, co("build/more.bin"), "ignored")
		}, []string{"a.txt", "src/c.go"}},
		{func() { // 2: a deletion, a new directory, a symlink, a transcript append
			os.Remove(co("src/b.go"))
			writeFile(t, co("d/e/f.txt"), "f")
			os.Symlink("a.txt", co("l"))
			writeFile(t, filepath.Join(s.trans, "s1.jsonl"), "{}\n{\"x\":1}\n")
		}, []string{"d/e/f.txt", "l", "T:s1.jsonl"}},
		{func() { // 3: a failed call removes a tree and turns a file into a directory
			os.RemoveAll(co("d"))
			os.Remove(co("a.txt"))
			writeFile(t, co("a.txt/inner"), "inner")
			os.Chmod(co("src/c.go"), 0o600)
		}, []string{"a.txt/inner", "src/c.go"}},
		{func() { // 4: the transcripts root is removed
			os.RemoveAll(s.trans)
			os.Remove(co("l"))
			os.Symlink("src", co("l"))
		}, []string{"l"}},
		{func() { // 5: the root comes back
			writeFile(t, filepath.Join(s.trans, "s2.jsonl"), "new")
		}, []string{"T:s2.jsonl"}},
		{func() { // 6: nothing changed
		}, nil},
	}
	for k, st := range steps {
		st.do()
		// Make sure mtimes differ from the previous capture's second.
		inc, err := s.c.Capture(context.Background(), CaptureRequest{Position: k, SessionID: "s1", Tool: "Bash", Failed: k == 3})
		if err != nil {
			t.Fatalf("capture %d: %v", k, err)
		}
		if inc.Meta.Position != k || inc.Meta.Failed != (k == 3) {
			t.Fatalf("increment %d meta = %+v", k, inc.Meta)
		}
		s.record(t)
		s.stored = append(s.stored, st.stored)
	}
}

func (s *scenario) prefix(root string) string {
	if root == "transcripts" {
		return strings.TrimPrefix(s.trans, "/")
	}
	return strings.TrimPrefix(s.checkout, "/")
}

func TestEachIncrementHoldsOnlyItsWrites(t *testing.T) {
	s := newScenario(t)
	s.calls(t)
	for k, want := range s.stored {
		names, _ := members(t, s.c.incrementPath(k))
		var got []string
		for _, n := range names {
			flag, name, _ := strings.Cut(n, " ")
			if flag == "D" {
				continue
			}
			switch {
			case name == incmeta.Member:
				continue
			case strings.HasPrefix(name, s.prefix("transcripts")+"/"):
				got = append(got, "T:"+strings.TrimPrefix(name, s.prefix("transcripts")+"/"))
			default:
				got = append(got, strings.TrimPrefix(name, s.prefix("checkout")+"/"))
			}
		}
		slices.Sort(got)
		w := slices.Clone(want)
		slices.Sort(w)
		if !slices.Equal(got, w) {
			t.Errorf("increment %d stores %v, want %v", k, got, w)
		}
	}
	m, err := ReadMeta(s.c.incrementPath(4))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.RemovedRoots, []string{"transcripts"}) {
		t.Errorf("increment 4 removed roots = %v", m.RemovedRoots)
	}
	if m3, _ := ReadMeta(s.c.incrementPath(3)); !m3.Failed || m3.Position != 3 || m3.SessionID != "s1" {
		t.Errorf("increment 3 meta = %+v", m3)
	}
	list, err := s.c.List()
	if err != nil || len(list) != len(s.stored) {
		t.Fatalf("list = %v, %v", list, err)
	}
}

// replayRoots maps the scenario's roots under a fresh base directory.
func (s *scenario) replayRoots(base string) []Root {
	return []Root{
		{Name: "checkout", Path: filepath.Join(base, s.prefix("checkout")), Git: true},
		{Name: "transcripts", Path: filepath.Join(base, s.prefix("transcripts"))},
	}
}

func TestReplayMatchesEveryPositionAndGNUTar(t *testing.T) {
	needGNUTar(t)
	s := newScenario(t)
	s.calls(t)
	for k := range s.want {
		var paths []string
		for p := 0; p <= k; p++ {
			paths = append(paths, s.c.incrementPath(p))
		}
		// Our own replay onto a fresh directory.
		ours := t.TempDir()
		roots := s.replayRoots(ours)
		if err := Replay(context.Background(), paths, roots); err != nil {
			t.Fatalf("replay to %d: %v", k, err)
		}
		// GNU tar, increment by increment, with the removed roots replayed.
		gnu := t.TempDir()
		for p, ip := range paths {
			m, err := ReadMeta(ip)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range m.RemovedRoots {
				os.RemoveAll(filepath.Join(gnu, s.prefix(name)))
			}
			run(t, gnu, "tar", "--incremental", "--anchored", "--exclude="+incmeta.Dir, "-xzf", ip, "-C", gnu)
			_ = p
		}
		for i, name := range []string{"checkout", "transcripts"} {
			want := s.want[k][name]
			got := snapshot(t, roots[i].Path, true, nil)
			if d := diffTrees(want, got); d != "" {
				t.Errorf("position %d, root %s: our replay differs from the captured tree:\n%s", k, name, d)
			}
			g := snapshot(t, filepath.Join(gnu, s.prefix(name)), true, nil)
			if d := diffTrees(got, g); d != "" {
				t.Errorf("position %d, root %s: GNU tar differs from our replay:\n%s", k, name, d)
			}
		}
		if _, err := os.Stat(filepath.Join(gnu, incmeta.Dir)); !os.IsNotExist(err) {
			t.Errorf("GNU tar extracted the metadata directory")
		}
	}
}

func TestApplyRewindsInPlaceAndCanBeUndone(t *testing.T) {
	s := newScenario(t)
	s.calls(t)
	before := snapshot(t, s.checkout, true, nil)
	ignoredBefore := snapshot(t, filepath.Join(s.checkout, "build"), true, nil)
	res, err := s.c.Apply(context.Background(), ApplyRequest{To: 1, SessionID: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Target.Position != 1 || res.Target.SessionID != "s1" {
		t.Errorf("apply target meta = %+v", res.Target)
	}
	if res.PreApply.Position != 7 || res.Result.Position != 8 || !slices.Equal(res.Applied, []int{0, 1}) {
		t.Fatalf("apply result = pre %d, result %d, applied %v", res.PreApply.Position, res.Result.Position, res.Applied)
	}
	if d := diffTrees(s.want[1]["checkout"], snapshot(t, s.checkout, true, s.skip)); d != "" {
		t.Errorf("checkout after rewind to 1:\n%s", d)
	}
	if d := diffTrees(s.want[1]["transcripts"], snapshot(t, s.trans, true, nil)); d != "" {
		t.Errorf("transcripts after rewind to 1:\n%s", d)
	}
	// .git and ignored paths are left alone.
	if _, err := os.Stat(filepath.Join(s.checkout, ".git", "HEAD")); err != nil {
		t.Errorf(".git damaged by the rewind: %v", err)
	}
	if d := diffTrees(ignoredBefore, snapshot(t, filepath.Join(s.checkout, "build"), true, nil)); d != "" {
		t.Errorf("ignored build/ changed:\n%s", d)
	}
	// Undo: rewind to the pre-apply increment.
	if _, err := s.c.Apply(context.Background(), ApplyRequest{To: res.PreApply.Position}); err != nil {
		t.Fatal(err)
	}
	if d := diffTrees(before, snapshot(t, s.checkout, true, nil)); d != "" {
		t.Errorf("checkout after undoing the rewind:\n%s", d)
	}
	// The whole sequence still replays to the current tree.
	pos, _ := s.c.positions()
	var paths []string
	for _, p := range pos {
		paths = append(paths, s.c.incrementPath(p))
	}
	fresh := t.TempDir()
	roots := s.replayRoots(fresh)
	if err := Replay(context.Background(), paths, roots); err != nil {
		t.Fatal(err)
	}
	if d := diffTrees(snapshot(t, s.checkout, true, s.skip), snapshot(t, roots[0].Path, true, nil)); d != "" {
		t.Errorf("full replay differs from the working tree:\n%s", d)
	}
	if _, err := s.c.Apply(context.Background(), ApplyRequest{To: 99}); err == nil {
		t.Errorf("apply to a missing position succeeded")
	}
}

func TestFailedStoreLeavesWritesToNextIncrement(t *testing.T) {
	for _, tc := range []string{"limit"} {
		t.Run(tc, func(t *testing.T) {
			base := t.TempDir()
			root := filepath.Join(base, "root")
			writeFile(t, filepath.Join(root, "a"), "a")
			res := &Reservation{Path: filepath.Join(base, "reservation"), Grant: Grant{MaxObjects: 100}}
			opts := Options{Roots: []Root{{Name: "r", Path: root}}, Reservation: res}
			c, err := Open(filepath.Join(base, "cl"), opts)
			if err != nil {
				t.Fatal(err)
			}
			mustCapture(t, c, 0)
			writeFile(t, filepath.Join(root, "b"), "b")
			res.Grant.MaxObjects = 1
			_, err = c.Capture(context.Background(), CaptureRequest{Position: 1})
			if err == nil {
				t.Fatal("capture 1 succeeded")
			}
			if tc == "limit" && !strings.Contains(err.Error(), "objects") {
				t.Errorf("refusal does not name the bound: %v", err)
			}
			if _, err := os.Stat(c.incrementPath(1)); !os.IsNotExist(err) {
				t.Errorf("refused increment 1 left in place")
			}
			res.Grant.MaxObjects = 100
			writeFile(t, filepath.Join(root, "c"), "c")
			mustCapture(t, c, 2)
			names, _ := members(t, c.incrementPath(2))
			joined := strings.Join(names, "\n")
			for _, want := range []string{"/b", "/c"} {
				if !strings.Contains(joined, want+"\n") && !strings.HasSuffix(joined, want) {
					t.Errorf("increment 2 lacks %s:\n%s", want, joined)
				}
			}
			u, _ := res.Used()
			if u.Objects != 2 {
				t.Errorf("reservation counts %d objects, want 2", u.Objects)
			}
		})
	}
}

// An increment past the state (a crash lost the state's unsynced journal
// record, or came before the state advanced) is durable and stays in the
// sequence; the next capture is a full one, so replaying both is right.
func TestIncrementPastTheStateIsKept(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	writeFile(t, filepath.Join(root, "a"), "a")
	c, err := Open(filepath.Join(base, "cl"), Options{Roots: []Root{{Name: "r", Path: root}}})
	if err != nil {
		t.Fatal(err)
	}
	mustCapture(t, c, 0)
	// Simulate a crash that lost the state's record of increment 1.
	st, _ := c.loadState()
	writeFile(t, filepath.Join(root, "b"), "b")
	mustCapture(t, c, 1)
	if err := c.saveState(st); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(root, "b"))
	writeFile(t, filepath.Join(root, "c"), "c")
	if _, err := c.Capture(context.Background(), CaptureRequest{Position: 1}); !errors.Is(err, ErrPosition) {
		t.Errorf("capture at the kept position 1: %v, want ErrPosition", err)
	}
	inc, err := c.Capture(context.Background(), CaptureRequest{Position: -1})
	if err != nil {
		t.Fatal(err)
	}
	if inc.Position != 2 || inc.Warning == "" || !inc.Meta.Full {
		t.Errorf("capture after the lost record: position %d, full %v, warning %q; want a full increment 2 with a warning", inc.Position, inc.Meta.Full, inc.Warning)
	}
	if _, err := os.Stat(c.incrementPath(1)); err != nil {
		t.Errorf("increment 1 left the sequence: %v", err)
	}
	// Replaying 0..2 gives the tree as captured at 2 (b deleted).
	os.Remove(filepath.Join(root, "c"))
	if _, err := c.Apply(context.Background(), ApplyRequest{To: 2, Force: true}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"a": true, "b": false, "c": true} {
		if _, err := os.Lstat(filepath.Join(root, name)); (err == nil) != want {
			t.Errorf("after replay to 2: %s exists = %v, want %v", name, err == nil, want)
		}
	}
	// And to 1: b is back, c is not.
	if _, err := c.Apply(context.Background(), ApplyRequest{To: 1, Force: true}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"a": true, "b": true, "c": false} {
		if _, err := os.Lstat(filepath.Join(root, name)); (err == nil) != want {
			t.Errorf("after replay to 1: %s exists = %v, want %v", name, err == nil, want)
		}
	}
}

func TestChangelogDirectoryRefusals(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	os.MkdirAll(root, 0o755)
	roots := []Root{{Name: "r", Path: root}}
	os.MkdirAll(filepath.Join(base, "real"), 0o700)
	os.Symlink(filepath.Join(base, "real"), filepath.Join(base, "link"))
	writeFile(t, filepath.Join(base, "file"), "x")
	os.MkdirAll(filepath.Join(base, "open"), 0o755)
	os.Chmod(filepath.Join(base, "open"), 0o755)
	for name, dir := range map[string]string{
		"link":        filepath.Join(base, "link"),
		"file":        filepath.Join(base, "file"),
		"not private": filepath.Join(base, "open"),
		"the root":    root,
		"holds root":  base,
		"relative":    "cl",
	} {
		if _, err := Open(dir, Options{Roots: roots}); err == nil {
			t.Errorf("%s: Open(%s) succeeded", name, dir)
		}
	}
	if os.Geteuid() == 0 {
		other := filepath.Join(base, "other")
		os.Mkdir(other, 0o700)
		os.Chown(other, 12345, 12345)
		if _, err := Open(other, Options{Roots: roots}); err == nil {
			t.Errorf("a directory owned by another user was accepted")
		}
	}
	c, err := Open(filepath.Join(base, "new", "cl"), Options{Roots: roots})
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(c.Dir()); fi.Mode().Perm() != 0o700 {
		t.Errorf("changelog directory mode %o", fi.Mode().Perm())
	}
	// A changelog directory inside a root is excluded from it: never
	// captured, never touched by a rewind.
	writeFile(t, filepath.Join(root, "f"), "x")
	in, err := Open(filepath.Join(root, ".cl"), Options{Roots: roots})
	if err != nil {
		t.Fatalf("a changelog directory inside the root: %v", err)
	}
	mustCapture(t, in, 0)
	writeFile(t, filepath.Join(root, "g"), "y")
	mustCapture(t, in, 1)
	for _, p := range []int{0, 1} {
		names, _ := members(t, in.incrementPath(p))
		for _, n := range names {
			if strings.Contains(n, "/.cl/") {
				t.Errorf("increment %d stores the changelog's own directory: %s", p, n)
			}
		}
	}
	if _, err := in.Apply(context.Background(), ApplyRequest{To: 0}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(in.incrementPath(1)); err != nil {
		t.Errorf("the rewind damaged the changelog directory inside the root: %v", err)
	}
}

func TestUserFileNamedLikeMetadataIsRestored(t *testing.T) {
	needGNUTar(t)
	base := t.TempDir()
	root := filepath.Join(base, "root")
	writeFile(t, filepath.Join(root, incmeta.Dir, "meta.json"), "user data")
	c, err := Open(filepath.Join(base, "cl"), Options{Roots: []Root{{Name: "r", Path: root}}})
	if err != nil {
		t.Fatal(err)
	}
	inc := mustCapture(t, c, 0)
	fresh := filepath.Join(t.TempDir(), "root")
	if err := Replay(context.Background(), []string{inc.Path}, []Root{{Name: "r", Path: fresh}}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(fresh, incmeta.Dir, "meta.json")); err != nil || string(b) != "user data" {
		t.Errorf("user file not restored: %q %v", b, err)
	}
	gnu := t.TempDir()
	run(t, gnu, "tar", "--incremental", "--anchored", "--exclude="+incmeta.Dir, "-xzf", inc.Path, "-C", gnu)
	if b, err := os.ReadFile(filepath.Join(gnu, strings.TrimPrefix(root, "/"), incmeta.Dir, "meta.json")); err != nil || string(b) != "user data" {
		t.Errorf("GNU tar did not restore the user file: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(gnu, incmeta.Dir)); !os.IsNotExist(err) {
		t.Errorf("GNU tar extracted the capture metadata")
	}
}

// TestFullCaptureUnderLowFileLimit guards against holding every stored file
// open at once: with few descriptors, a full capture must still store every
// file (it once silently left out what it could not open).
func TestFullCaptureUnderLowFileLimit(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	for i := range 300 {
		writeFile(t, filepath.Join(root, "d", strconv.Itoa(i%3), strconv.Itoa(i)), "x")
	}
	c, err := Open(filepath.Join(base, "cl"), Options{Roots: []Root{{Name: "r", Path: root}}})
	if err != nil {
		t.Fatal(err)
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	low := old
	low.Cur = 64
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skip(err)
	}
	inc, err := c.Capture(context.Background(), CaptureRequest{Position: 0})
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
	if err != nil {
		t.Fatal(err)
	}
	if inc.Meta.Files != 300 {
		t.Errorf("increment 0 stores %d files, want 300", inc.Meta.Files)
	}
	names, _ := members(t, inc.Path)
	n := 0
	for _, m := range names {
		if strings.HasPrefix(m, "0 ") {
			n++
		}
	}
	if n != 301 { // 300 files and the metadata
		t.Errorf("increment 0 has %d regular members, want 301", n)
	}
}

// TestIgnoreRulesChange checks that ignored paths are left out, that a
// changed .gitignore reclassifies them, and that index changes (git add)
// do not turn unchanged files into writes.
func TestIgnoreRulesChange(t *testing.T) {
	s := newScenario(t)
	co := func(p string) string { return filepath.Join(s.checkout, p) }
	stored := func(pos int) []string {
		names, _ := members(t, s.c.incrementPath(pos))
		var out []string
		for _, n := range names {
			if flag, name, _ := strings.Cut(n, " "); flag != "D" && name != incmeta.Member {
				out = append(out, strings.TrimPrefix(name, s.prefix("checkout")+"/"))
			}
		}
		slices.Sort(out)
		return out
	}
	writeFile(t, co("app.log"), "log")
	writeFile(t, co("build/x.o"), "obj")
	writeFile(t, co("main.go"), "package main")
	mustCapture(t, s.c, 0)
	if got := stored(0); slices.Contains(got, "app.log") || slices.Contains(got, "build/x.o") {
		t.Errorf("ignored paths captured: %v", got)
	}
	writeFile(t, co("new.log"), "new ignored")
	writeFile(t, co("build/sub/y.o"), "new ignored dir content")
	mustCapture(t, s.c, 1)
	if got := stored(1); len(got) != 0 {
		t.Errorf("increment 1 stores %v, want nothing (only ignored writes)", got)
	}
	run(t, s.checkout, "git", "add", "main.go")
	mustCapture(t, s.c, 2)
	if got := stored(2); len(got) != 0 {
		t.Errorf("git add made increment 2 store %v", got)
	}
	writeFile(t, co(".gitignore"), "build/\n")
	mustCapture(t, s.c, 3)
	if got, want := stored(3), []string{".gitignore", "app.log", "new.log"}; !slices.Equal(got, want) {
		t.Errorf("after un-ignoring *.log, increment 3 stores %v, want %v", got, want)
	}
}

// TestFailedWriteLeavesWritesToNextIncrement: a capture that fails while
// writing the archive (here: cancelled) stores nothing and does not advance
// the state, so the next increment carries its writes.
func TestFailedWriteLeavesWritesToNextIncrement(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	writeFile(t, filepath.Join(root, "a"), "a")
	c, err := Open(filepath.Join(base, "cl"), Options{Roots: []Root{{Name: "r", Path: root}}})
	if err != nil {
		t.Fatal(err)
	}
	mustCapture(t, c, 0)
	writeFile(t, filepath.Join(root, "b"), "b")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Capture(ctx, CaptureRequest{Position: 1}); err == nil {
		t.Fatal("cancelled capture succeeded")
	}
	if _, err := os.Stat(c.incrementPath(1)); !os.IsNotExist(err) {
		t.Errorf("failed capture left increment 1")
	}
	ents, _ := os.ReadDir(filepath.Join(c.Dir(), incrementsDir))
	if len(ents) != 1 {
		t.Errorf("failed capture left files in the increments directory: %v", ents)
	}
	writeFile(t, filepath.Join(root, "c"), "c")
	mustCapture(t, c, 2)
	names, _ := members(t, c.incrementPath(2))
	if j := strings.Join(names, " "); !strings.Contains(j, "root/b") || !strings.Contains(j, "root/c") {
		t.Errorf("increment 2 does not carry the failed capture's writes: %s", j)
	}
}
