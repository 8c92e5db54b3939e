package main

import (
	"encoding/json"
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
