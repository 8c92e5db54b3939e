package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSnapshotLoadPartial: a snapshot holding a symlink to outside every
// capture root loads, lists the link as unrestorable, and exits 8
// (partial), into a checkout with a changelog and into a fresh directory
// alike; its dry run says it would be partial.
func TestSnapshotLoadPartial(t *testing.T) {
	base := t.TempDir()
	env := map[string]string{"HOME": filepath.Join(base, "home")}
	repo := filepath.Join(base, "repo")
	os.MkdirAll(repo, 0o755)
	if out, err := exec.Command("git", "-C", repo, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	outside := filepath.Join(base, "outside.txt")
	os.WriteFile(outside, []byte("not captured"), 0o644)
	os.WriteFile(filepath.Join(repo, "a.txt"), []byte("a"), 0o644)
	if err := os.Symlink(outside, filepath.Join(repo, "link")); err != nil {
		t.Fatal(err)
	}
	if r := runMain(t, env, "", "changelog", "capture", "--root", repo); r.code != 0 {
		t.Fatalf("capture: %d %s", r.code, r.stderr)
	}
	snap := filepath.Join(base, "snap.tgz")
	if r := runMain(t, env, "", "snapshot", "save", "--root", repo, "--file", snap); r.code != 0 {
		t.Fatalf("snapshot save: %d %s", r.code, r.stderr)
	}
	// The checkout loses the link (captured), so loading brings it back.
	os.Remove(filepath.Join(repo, "link"))
	if r := runMain(t, env, "", "changelog", "capture", "--root", repo); r.code != 0 {
		t.Fatalf("capture: %d %s", r.code, r.stderr)
	}
	fresh := func(name string) func() string {
		return func() string {
			d := filepath.Join(base, name)
			os.MkdirAll(d, 0o755)
			return d
		}
	}
	checkout := func() string { return repo }
	for _, tc := range []struct {
		name   string
		root   func() string
		args   []string
		code   int
		stdout []string
		stderr []string
	}{
		{name: "dry run into the checkout", root: checkout, args: []string{"--dry-run"}, code: 0,
			stdout: []string{"it would be partial (exit status 8): 1 path cannot be restored:", "outside the capture roots"}},
		{name: "dry run json", root: checkout, args: []string{"--dry-run", "--format", "json"}, code: 0,
			stdout: []string{`"partial": true`, `"path": "link"`}},
		{name: "into the checkout", root: checkout, code: ExitPartial,
			stdout: []string{"loaded " + snap}, stderr: []string{"the rewind is partial: 1 path could not be restored:", filepath.Join(repo, "link") + ": a symlink to " + outside}},
		{name: "into the checkout, json", root: checkout, args: []string{"--format", "json"}, code: ExitPartial,
			stdout: []string{`"partial": true`, `"path": "link"`}, stderr: []string{"the rewind is partial"}},
		{name: "into a fresh directory", root: fresh("fresh1"), code: ExitPartial,
			stdout: []string{"loaded " + snap}, stderr: []string{"link: a symlink to " + outside}},
		{name: "into a fresh directory, json", root: fresh("fresh2"), args: []string{"--format", "json"}, code: ExitPartial,
			stdout: []string{`"changelog_created": true`, `"partial": true`, `"path": "link"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := tc.root()
			r := runMain(t, env, "", append([]string{"snapshot", "load", "--root", root, "--file", snap}, tc.args...)...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, tc.code, r.stdout, r.stderr)
			}
			for _, s := range tc.stdout {
				if !strings.Contains(r.stdout, s) {
					t.Errorf("stdout lacks %q:\n%s", s, r.stdout)
				}
			}
			for _, s := range tc.stderr {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("stderr lacks %q:\n%s", s, r.stderr)
				}
			}
			if strings.Contains(strings.Join(tc.args, " "), "json") && !json.Valid([]byte(r.stdout)) {
				t.Errorf("not JSON: %s", r.stdout)
			}
			if tc.code == ExitPartial {
				if got, err := os.Readlink(filepath.Join(root, "link")); err != nil || got != outside {
					t.Errorf("the link was not restored: %q %v", got, err)
				}
			}
		})
	}
}
