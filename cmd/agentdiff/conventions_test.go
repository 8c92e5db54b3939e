package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestConventions: flags after RUN_ID, "--", relative --root, the project
// root found from a subdirectory, one-line usage errors, --version and
// completion (issue 19).
func TestConventions(t *testing.T) {
	root := tree(t)
	if out, err := exec.Command("git", "init", "-q", root).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	sub := filepath.Join(root, "deep", "er")
	os.MkdirAll(sub, 0o755)
	r := agentdiff(t, root, "run", "--format", "json", "--", "sh", "-c", "echo b > b.txt")
	if r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	var res struct {
		RunID string `json:"run_id"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || res.RunID == "" {
		t.Fatalf("run output %q: %v", r.stdout, err)
	}
	// From a subdirectory the runs of the project are found (walk up to .agentdiff).
	if r := agentdiff(t, sub, "runs"); r.code != 0 || !strings.Contains(r.stdout, res.RunID) {
		t.Fatalf("runs from a subdirectory: %+v", r)
	}
	// Flags after RUN_ID, and a relative --root.
	if r := agentdiff(t, sub, "verify", res.RunID, "--root", "../..", "--format", "json"); r.code != 0 || !strings.Contains(r.stdout, `"ok": true`) {
		t.Fatalf("verify RUN_ID --root: %+v", r)
	}
	if r := agentdiff(t, sub, "verify", "--", res.RunID); r.code != 0 {
		t.Fatalf("verify -- RUN_ID: %+v", r)
	}
	// A bad flag: one line plus the pointer at --help, exit 2.
	r = agentdiff(t, root, "verify", res.RunID, "--bogus")
	if r.code != exitUsage || r.stderr != "agentdiff verify: flag provided but not defined: -bogus\nRun 'agentdiff verify --help' for usage.\n" {
		t.Fatalf("bad flag: %+v", r)
	}
	// run keeps the wrapped command's flags: its argv starts at the first positional.
	if r := agentdiff(t, root, "run", "--format", "json", "sh", "-c", "echo --root > c.txt"); r.code != 0 {
		t.Fatalf("run without --: %+v", r)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "c.txt")); string(b) != "--root\n" {
		t.Fatalf("c.txt = %q", b)
	}
	if r := agentdiff(t, root, "--version"); r.code != 0 || !strings.HasPrefix(r.stdout, "agentdiff ") {
		t.Fatalf("--version: %+v", r)
	}
	if r := agentdiff(t, root, "completion", "bash"); r.code != 0 || !strings.Contains(r.stdout, `"agentdiff verify") echo "--format --help --root"`) {
		t.Fatalf("completion: %+v", r)
	}
	if r := agentdiff(t, root, "completion", "csh"); r.code != exitUsage {
		t.Fatalf("completion csh: %+v", r)
	}
}

// TestRootDefaultsForEveryCommand: every agentdiff command that takes
// --root (read from the command list itself) defaults it to the project
// enclosing the working directory: the nearest .agentdiff, else the git
// worktree's top. Outside both, run and doctor use the working directory and
// every other command refuses with one usage line naming --root (exit 2).
func TestRootDefaultsForEveryCommand(t *testing.T) {
	repo := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", repo).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	deep := filepath.Join(repo, "a", "b")
	project := filepath.Join(repo, "tools") // holds .agentdiff below the git top
	projectSub := filepath.Join(project, "x")
	plain := t.TempDir()
	for _, d := range []string{deep, filepath.Join(project, ".agentdiff"), projectSub} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n, withRoot := 0, map[string]bool{}
	for _, c := range commands() {
		for _, tc := range []struct{ wd, want string }{
			{deep, repo}, {repo, repo}, {projectSub, project}, {plain, ""},
		} {
			var sets []*flag.FlagSet
			var out, errb bytes.Buffer
			e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb,
				environ: []string{"AGENTDIFF_CONFIG_DIR=" + t.TempDir()}, wd: tc.wd,
				onFlags: func(fs *flag.FlagSet) { sets = append(sets, fs) }}
			// No RUN_ID and no ARGV: each command stops after parsing
			// (runs and doctor only read).
			code := run(context.Background(), e, []string{c.name, "--format", "json"})
			var f *flag.Flag
			for _, fs := range sets {
				if f = fs.Lookup("root"); f != nil {
					break
				}
			}
			if f == nil {
				break // the command takes no --root
			}
			withRoot[c.name] = true
			want := tc.want
			if want == "" && (c.name == "run" || c.name == "doctor") {
				want = tc.wd
			}
			if want == "" {
				if code != exitUsage || !strings.Contains(errb.String(), "not inside a checkout") || !strings.Contains(errb.String(), "pass --root PATH") {
					t.Errorf("%s outside any project: exit %d stderr %q", c.name, code, errb.String())
				}
				continue
			}
			if got := f.Value.String(); got != want {
				t.Errorf("%s from %s: --root = %q, want %q (exit %d %s)", c.name, tc.wd, got, want, code, errb.String())
			}
			n++
		}
	}
	// Three defaulted roots per command, plus run and doctor outside.
	if len(withRoot) < 7 || n != 3*len(withRoot)+2 {
		t.Errorf("%d defaulted roots checked for %d commands with --root (%v)", n, len(withRoot), withRoot)
	}
}
