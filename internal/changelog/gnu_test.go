package changelog

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestGNUIncrementsReplayLikeGNUTar checks the other direction: increments
// made by GNU tar --listed-incremental, applied by our reader, give the tree
// GNU tar itself extracts and the tree that was archived.
func TestGNUIncrementsReplayLikeGNUTar(t *testing.T) {
	needGNUTar(t)
	base := t.TempDir()
	root := filepath.Join(base, "src", "tree")
	snap := filepath.Join(base, "snap")
	arch := filepath.Join(base, "arch")
	os.MkdirAll(arch, 0o755)
	p := func(rel string) string { return filepath.Join(root, rel) }
	steps := []func(){
		func() {
			writeFile(t, p("a.txt"), "a")
			writeFile(t, p("d/b.txt"), "b")
			writeFile(t, p("d/sub/c.txt"), "c")
			os.Symlink("a.txt", p("link"))
			os.MkdirAll(p("empty"), 0o755)
		},
		func() {
			writeFile(t, p("a.txt"), "a changed")
			os.Remove(p("d/b.txt"))
			writeFile(t, p("d/new.txt"), "new")
		},
		func() {
			// Create before removing, so GNU tar cannot mistake a reused
			// inode for a rename (it then fails on its own archive).
			os.Remove(p("link"))
			writeFile(t, p("link/inside"), "now a directory")
			os.RemoveAll(p("d/sub"))
			os.Chmod(p("a.txt"), 0o600)
		},
		func() {
			os.RemoveAll(p("empty"))
			os.Remove(p("a.txt"))
			os.Symlink("d", p("a.txt"))
		},
		func() { // a directory rename: GNU tar records it as an R/T pair
			if err := os.Rename(p("d"), p("moved")); err != nil {
				t.Fatal(err)
			}
			writeFile(t, p("moved/after.txt"), "after the rename")
		},
	}
	var want []tree
	var paths []string
	for k, step := range steps {
		if k > 0 {
			// File timestamps come from the kernel's coarse clock (up to a
			// tick behind the time GNU tar records as its dump's start): a
			// change within a tick of the previous dump can look older than
			// it and be left out of the increment. Wait past a tick.
			time.Sleep(30 * time.Millisecond)
		}
		step()
		ip := filepath.Join(arch, IncrementName(k))
		run(t, base, "tar", "--listed-incremental="+snap, "-czf", ip, root)
		want = append(want, snapshot(t, root, true, nil))
		paths = append(paths, ip)
	}
	prefix := strings.TrimPrefix(root, "/")
	for k := range steps {
		// Ours, in place over the last state (deletions must replay).
		if err := Replay(context.Background(), paths[:k+1], []Root{{Name: "tree", Path: root}}); err != nil {
			t.Fatalf("replay GNU increments 0..%d: %v", k, err)
		}
		got := snapshot(t, root, true, nil)
		if d := diffTrees(want[k], got); d != "" {
			t.Errorf("position %d: our replay of GNU increments differs from the archived tree:\n%s", k, d)
		}
		gnu := t.TempDir()
		for _, ip := range paths[:k+1] {
			run(t, gnu, "tar", "--incremental", "-xzf", ip, "-C", gnu)
		}
		if d := diffTrees(snapshot(t, filepath.Join(gnu, prefix), true, nil), got); d != "" {
			t.Errorf("position %d: our replay differs from GNU tar's:\n%s", k, d)
		}
	}
}
