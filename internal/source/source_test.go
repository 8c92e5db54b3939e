package source

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"}, args...)...)
	cmd.Env = GitEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

func TestParseStatusV2(t *testing.T) {
	oid := strings.Repeat("ab", 20)
	in := strings.Join([]string{
		"# branch.oid " + oid, "# branch.head main",
		"1 .M N... 100644 100644 100644 " + oid + " " + oid + " dir/a file.txt",
		"2 R. N... 100644 100644 100644 " + oid + " " + oid + " R100 new name", "old name",
		"u UU N... 100644 100644 100644 100644 " + oid + " " + oid + " " + oid + " conflict.txt",
		"1 .M S.M. 160000 160000 160000 " + oid + " " + oid + " sub",
		"? untracked x",
	}, "\x00") + "\x00"
	head, entries, err := parseStatusV2([]byte(in))
	if err != nil || head != oid {
		t.Fatal(head, err)
	}
	want := []manifestEntry{{Path: "dir/a file.txt", Status: ".M"}, {Path: "new name", Status: "R."}, {Path: "conflict.txt", Status: "UU"}, {Path: "sub", Status: ".M S"}, {Path: "untracked x", Status: "??"}}
	if len(entries) != len(want) {
		t.Fatalf("entries %+v", entries)
	}
	for i := range want {
		if entries[i] != want[i] {
			t.Fatalf("entry %d %+v, want %+v", i, entries[i], want[i])
		}
	}
	if head, _, err := parseStatusV2([]byte("# branch.oid (initial)\x00")); err != nil || head != "" {
		t.Fatalf("unborn: %q %v", head, err)
	}
	for _, bad := range []string{"1 .M\x00", "# branch.oid zz\x00", "x y\x00", "?\x00"} {
		if _, _, err := parseStatusV2([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestCaptureSource(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	git(t, dir, "init", "-q")
	// Unborn HEAD with an untracked file: dirty, no head.
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("one\n"), 0o644)
	sb, err := CaptureSource(ctx, dir)
	if err != nil || sb.Head != "" || !sb.Dirty || !sb.Partial || sb.ManifestDigest == "" {
		t.Fatalf("unborn: %+v, %v", sb, err)
	}
	git(t, dir, "add", "a.txt")
	git(t, dir, "commit", "-q", "-m", "one")
	clean, err := CaptureSource(ctx, dir)
	if err != nil || len(clean.Head) != 40 || len(clean.Tree) != 40 || clean.Dirty || clean.Partial || clean.ManifestDigest != "" {
		t.Fatalf("clean: %+v, %v", clean, err)
	}
	// Ignored files are outside the captured scope.
	os.WriteFile(filepath.Join(dir, ".git", "info", "exclude"), []byte("*.log\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "x.log"), []byte("noise"), 0o644)
	if again, _ := CaptureSource(ctx, dir); *again != *clean {
		t.Fatalf("an ignored file changed the binding: %+v", again)
	}
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("two\n"), 0o644)
	d1, err := CaptureSource(ctx, dir)
	if err != nil || !d1.Dirty || d1.Head != clean.Head || d1.ManifestDigest == "" {
		t.Fatalf("dirty: %+v, %v", d1, err)
	}
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("three\n"), 0o644)
	d2, _ := CaptureSource(ctx, dir)
	if d2.ManifestDigest == d1.ManifestDigest || Drift(d1, d2) != "changed" || Drift(d2, d2) != "none_observed" || Drift(nil, d2) != "unknown" {
		t.Fatalf("content change not seen: %+v %+v", d1, d2)
	}
	// A symlink is recorded by target, never followed; a deleted file as
	// deleted.
	os.Symlink("/etc/passwd", filepath.Join(dir, "link"))
	os.Remove(filepath.Join(dir, "a.txt"))
	if d3, err := CaptureSource(ctx, dir); err != nil || d3.ManifestDigest == d2.ManifestDigest {
		t.Fatalf("symlink/delete: %+v, %v", d3, err)
	}
	// The tree cache answers for a known HEAD and learns a new one; a
	// malformed cache is ignored.
	cache := filepath.Join(t.TempDir(), "trees")
	c1, err := Capture(ctx, dir, Options{TreeCache: cache})
	if err != nil || c1.Tree != clean.Tree {
		t.Fatalf("cached capture %+v, %v; want tree %s", c1, err, clean.Tree)
	}
	if b, _ := os.ReadFile(cache); string(b) != clean.Head+" "+clean.Tree+"\n" {
		t.Fatalf("tree cache %q", b)
	}
	os.WriteFile(cache, []byte(clean.Head+" "+strings.Repeat("f", 40)+"\ngarbage\n"), 0o600)
	if c2, _ := Capture(ctx, dir, Options{TreeCache: cache}); c2.Tree != clean.Tree {
		t.Fatalf("a malformed cache was believed: %+v", c2)
	}
	if c3, _ := Capture(ctx, dir, Options{NoTree: true}); c3.Tree != "" || c3.Head != clean.Head {
		t.Fatalf("drift capture %+v", c3)
	}
	// Not a repository: an error, and the action starts unbound.
	if _, err := CaptureSource(ctx, t.TempDir()); err == nil {
		t.Fatal("a directory outside Git bound a source")
	}
}

// BenchmarkCaptureSource binds the source of a clean repository of 1000
// small files (two concurrent git processes), next to `git status` alone.
func BenchmarkCaptureSource(b *testing.B) {
	dir := b.TempDir()
	for i := range 1000 {
		p := filepath.Join(dir, "pkg"+strconv.Itoa(i%50), "f"+strconv.Itoa(i)+".go")
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte("package p\n"), 0o644)
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "."}, {"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "x"}} {
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		cmd.Env = GitEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v %s", err, out)
		}
	}
	ctx := context.Background()
	b.Run("CaptureSource", func(b *testing.B) {
		for b.Loop() {
			if sb, err := CaptureSource(ctx, dir); err != nil || sb.Dirty {
				b.Fatal(sb, err)
			}
		}
	})
	b.Run("captureSource-tree-cached", func(b *testing.B) {
		cache := filepath.Join(b.TempDir(), "trees")
		for b.Loop() {
			if sb, err := Capture(ctx, dir, Options{TreeCache: cache}); err != nil || sb.Dirty || sb.Tree == "" {
				b.Fatal(sb, err)
			}
		}
	})
	b.Run("git-rev-parse", func(b *testing.B) {
		for b.Loop() {
			if _, err := RunGit(ctx, dir, 4096, "rev-parse", "HEAD", "HEAD^{tree}"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("git-status-v2-branch", func(b *testing.B) {
		for b.Loop() {
			if _, err := RunGit(ctx, dir, maxSourceStatus, "status", "--porcelain=v2", "--branch", "-z", "--untracked-files=all"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("git-status-ref", func(b *testing.B) {
		for b.Loop() {
			if _, err := RunGit(ctx, dir, maxSourceStatus, "status", "--porcelain=v1", "-z"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
