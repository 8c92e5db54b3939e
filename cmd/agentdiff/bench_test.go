package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkRun measures whole processes on a generated tree of
// AGENTDIFF_BENCH_FILES files (default 10,000; 100 per directory) with a
// command that changes 10 of them: the command run bare, under `agentdiff run`
// with a warm object store, and under `agentdiff run` with an empty state
// directory (every file copied into the object store). Capsules are removed
// between iterations outside the timer. The cold case runs only with
// AGENTDIFF_BENCH_COLD=1 (it copies the whole tree per iteration).
func BenchmarkRun(b *testing.B) {
	n := 10000
	if s := os.Getenv("AGENTDIFF_BENCH_FILES"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		n = v
	}
	tmp := b.TempDir()
	bin := filepath.Join(tmp, "agentdiff")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	root := filepath.Join(tmp, "tree")
	for i := range n {
		dir := filepath.Join(root, fmt.Sprintf("d%03d", i/1000), fmt.Sprintf("e%02d", i/100%10))
		if i%100 == 0 {
			os.MkdirAll(dir, 0o755)
		}
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d.txt", i%100)), []byte(fmt.Sprintf("file %d\n%s", i, strings.Repeat("x", 200))), 0o644)
	}
	var sb strings.Builder
	for i := range 10 {
		fmt.Fprintf(&sb, "echo $$ >> d000/e0%d/f%02d.txt; ", i, i*7)
	}
	script := sb.String()
	bare := func() *exec.Cmd {
		c := exec.Command("sh", "-c", script)
		c.Dir = root
		return c
	}
	wrapped := func() *exec.Cmd {
		c := exec.Command(bin, "run", "--root", root, "--fail-on", "never", "--format", "json", "--", "sh", "-c", script)
		c.Env = append(os.Environ(), "AGENTDIFF_CONFIG_DIR="+filepath.Join(tmp, "config"))
		return c
	}
	state := filepath.Join(root, ".agentdiff")
	runOne := func(b *testing.B, mk func() *exec.Cmd) {
		if out, err := mk().CombinedOutput(); err != nil {
			b.Fatalf("%v\n%.2000s", err, out)
		}
	}
	// Reference: one `git status` over the same tree (a full stat pass with a
	// warm index). The repository lives outside the tree so the tree holds
	// exactly the generated files (a .git inside would be in agentdiff's manifests).
	gitDir := filepath.Join(tmp, "gitdir")
	git := func(args ...string) *exec.Cmd {
		return exec.Command("git", append([]string{"--git-dir=" + gitDir, "--work-tree=" + root, "-c", "user.name=b", "-c", "user.email=b@example.com", "-c", "gc.auto=0", "-c", "maintenance.auto=false"}, args...)...)
	}
	for _, a := range [][]string{{"init", "-q"}, {"add", "-A"}, {"commit", "-q", "-m", "tree"}} {
		if out, err := git(a...).CombinedOutput(); err != nil {
			b.Fatalf("git %v: %v\n%s", a, err, out)
		}
	}
	os.WriteFile(filepath.Join(gitDir, "info", "exclude"), []byte(".agentdiff/\n"), 0o644)
	b.Run("git-status", func(b *testing.B) {
		for b.Loop() {
			runOne(b, func() *exec.Cmd { return git("status", "--porcelain") })
		}
	})
	b.Run("bare", func(b *testing.B) {
		for b.Loop() {
			runOne(b, bare)
		}
	})
	runOne(b, wrapped) // warm the object store
	b.Run("agentdiff-warm", func(b *testing.B) {
		for b.Loop() {
			runOne(b, wrapped)
			b.StopTimer()
			os.RemoveAll(filepath.Join(state, "runs"))
			b.StartTimer()
		}
	})
	if os.Getenv("AGENTDIFF_BENCH_COLD") == "" {
		return
	}
	b.Run("agentdiff-cold", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			os.RemoveAll(state)
			b.StartTimer()
			runOne(b, wrapped)
		}
	})
}
