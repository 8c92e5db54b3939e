package scan

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// TestMain doubles as a whole-process walker for BenchmarkTree/walk-process:
// with AGENTSCM_SCAN_HELPER_ROOT set it walks that root and exits.
func TestMain(m *testing.M) {
	if root := os.Getenv("AGENTSCM_SCAN_HELPER_ROOT"); root != "" {
		n := 0
		err := Walk(context.Background(), root, Options{Skip: func(rel string, isDir bool) bool { return rel == ".git" }},
			func(e *Entry) error { n++; return nil })
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(n)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// benchTree builds (or reuses, via AGENTSCM_SCAN_BENCH_DIR) a git repository
// with AGENTSCM_SCAN_BENCH_FILES files (default 10,000), 100 per directory,
// committed so that `git status` has a warm index.
func benchTree(b *testing.B) (string, int) {
	b.Helper()
	n := 10000
	if s := os.Getenv("AGENTSCM_SCAN_BENCH_FILES"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		n = v
	}
	root := os.Getenv("AGENTSCM_SCAN_BENCH_DIR")
	if root == "" {
		root = b.TempDir()
	} else {
		root = filepath.Join(root, strconv.Itoa(n))
		if _, err := os.Stat(filepath.Join(root, ".done")); err == nil {
			return root, n
		}
	}
	for i := range n {
		dir := filepath.Join(root, fmt.Sprintf("d%03d", i/1000), fmt.Sprintf("e%02d", i/100%10))
		if i%100 == 0 {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d.txt", i%100)), []byte(fmt.Sprintf("file %d\n", i)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	git := func(args ...string) {
		cmd := exec.Command("git", append([]string{"-C", root, "-c", "user.name=b", "-c", "user.email=b@example.com"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q")
	git("add", "-A")
	git("commit", "-q", "-m", "tree")
	git("status", "--porcelain")
	os.WriteFile(filepath.Join(root, ".git", "info", "exclude"), []byte(".done\n"), 0o644)
	os.WriteFile(filepath.Join(root, ".done"), nil, 0o644)
	return root, n
}

// BenchmarkTree compares Walk (in process and as a whole process) with
// `find -printf` (which lstats every entry) and `git status` on the same tree.
func BenchmarkTree(b *testing.B) {
	root, n := benchTree(b)
	skipGit := Options{Skip: func(rel string, isDir bool) bool { return rel == ".git" }}
	b.Run("walk", func(b *testing.B) {
		for b.Loop() {
			c := 0
			if err := Walk(context.Background(), root, skipGit, func(e *Entry) error { c++; return nil }); err != nil {
				b.Fatal(err)
			}
			if c < n {
				b.Fatalf("walked %d entries, want >= %d", c, n)
			}
		}
	})
	run := func(name string, mk func() *exec.Cmd) {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				cmd := mk()
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("%v: %v\n%.500s", cmd.Args, err, out)
				}
			}
		})
	}
	run("walk-process", func() *exec.Cmd {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "AGENTSCM_SCAN_HELPER_ROOT="+root)
		return cmd
	})
	run("find", func() *exec.Cmd {
		cmd := exec.Command("find", ".", "-path", "./.git", "-prune", "-o", "-printf", "%p %y %s %T@ %m %n %i\n")
		cmd.Dir = root
		cmd.Stdout = nil
		return cmd
	})
	run("git-status", func() *exec.Cmd {
		return exec.Command("git", "-C", root, "status", "--porcelain")
	})
}
