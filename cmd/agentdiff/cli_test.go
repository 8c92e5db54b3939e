package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type result struct {
	code           int
	stdout, stderr string
}

func agentdiff(t *testing.T, wd string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	environ := append(os.Environ(), "AGENTDIFF_CONFIG_DIR="+t.TempDir())
	code := run(context.Background(), &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, environ: environ, wd: wd}, args)
	return result{code, out.String(), errb.String()}
}

func tree(t *testing.T) string {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "a.txt"), []byte("a\n"), 0o644)
	os.WriteFile(filepath.Join(root, ".env"), []byte("S=1\n"), 0o644)
	return root
}

func TestRunExitCodes(t *testing.T) {
	dir := t.TempDir()
	allow := filepath.Join(dir, "allow.json")
	if r := agentdiff(t, dir, "policy", "init", allow); r.code != 0 {
		t.Fatalf("init: %+v", r)
	}
	b, _ := os.ReadFile(allow)
	s := strings.Replace(string(b), `"default": "review"`, `"default": "allow"`, 1)
	s = strings.Replace(s, `"rules": []`, `"rules": [{"executable": "touch", "decision": "deny", "reason": "test"}]`, 1)
	os.WriteFile(allow, []byte(s), 0o644)
	tests := []struct {
		name   string
		args   []string
		code   int
		status string
	}{
		{"passed", []string{"--policy", allow, "--", "sh", "-c", "echo x > n"}, exitOK, "passed"},
		{"review default fail-on", []string{"--", "sh", "-c", "echo x > n"}, exitOK, "review"},
		{"review fail-on review", []string{"--fail-on", "review", "--", "sh", "-c", "echo x > n"}, exitReview, "review"},
		{"denied", []string{"--", "sh", "-c", "echo x >> .env"}, exitDenied, "denied"},
		{"denied fail-on never", []string{"--fail-on", "never", "--", "sh", "-c", "echo x >> .env"}, exitOK, "denied"},
		{"blocked", []string{"--policy", allow, "--", "touch", "x"}, exitBlocked, "blocked"},
		{"failed", []string{"--", "false"}, exitFailed, "failed"},
		{"timed_out", []string{"--timeout", "200ms", "--", "sleep", "5"}, exitTimedOut, "timed_out"},
		{"error", []string{"--", "/nonexistent/binary"}, exitLaunchErr, "error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := tree(t)
			args := append([]string{"run", "--format", "json", "--root", root}, tc.args...)
			r := agentdiff(t, root, args...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d: %s %s", r.code, tc.code, r.stdout, r.stderr)
			}
			var res map[string]any
			if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
				t.Fatalf("stdout is not the JSON result: %v\n%s", err, r.stdout)
			}
			if res["status"] != tc.status {
				t.Fatalf("status %v, want %s", res["status"], tc.status)
			}
			id := res["run_id"].(string)
			if v := agentdiff(t, root, "verify", "--root", root, id); v.code != 0 || !strings.Contains(v.stdout, ": ok") {
				t.Fatalf("verify: %+v", v)
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	root := tree(t)
	for _, args := range [][]string{
		{},
		{"nope"},
		{"run"},
		{"run", "--format", "xml", "--", "true"},
		{"run", "--fail-on", "sometimes", "--", "true"},
		{"verify"},
		{"verify", "../../etc"},
		{"rollback", "20260101T000000Z-zzzzzzzz"},
		{"policy"},
		{"policy", "frobnicate", "x"},
		{"runs", "extra"},
	} {
		if r := agentdiff(t, root, args...); r.code != exitUsage {
			t.Errorf("%q: exit %d, want %d (%s)", args, r.code, exitUsage, r.stderr)
		}
	}
	bad := filepath.Join(root, "bad.json")
	os.WriteFile(bad, []byte(`{"version":1,"surprise":true}`), 0o644)
	if r := agentdiff(t, root, "policy", "validate", bad); r.code != exitBadPolicy || !strings.Contains(r.stderr, "unknown field") {
		t.Errorf("validate bad: %+v", r)
	}
	if r := agentdiff(t, root, "run", "--policy", bad, "--", "true"); r.code != exitBadPolicy {
		t.Errorf("run with bad policy: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(root, ".agentdiff")); err == nil {
		t.Error("a refused policy still created state")
	}
}

func TestPolicyCommands(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "p.json")
	if r := agentdiff(t, dir, "policy", "init", p); r.code != 0 {
		t.Fatal(r)
	}
	if r := agentdiff(t, dir, "policy", "init", p); r.code != exitInternal || !strings.Contains(r.stderr, "not replaced") {
		t.Fatalf("init over existing: %+v", r)
	}
	if r := agentdiff(t, dir, "policy", "validate", p); r.code != 0 || !strings.Contains(r.stdout, "valid version-1 policy") {
		t.Fatalf("validate: %+v", r)
	}
	r := agentdiff(t, dir, "policy", "explain", "--path", ".git/config", "--path", "src/main.go", "--command", "rm", p)
	if r.code != 0 || !strings.Contains(r.stdout, `path .git/config: deny (rule 1 ".git/**"`) ||
		!strings.Contains(r.stdout, "path src/main.go: review (default") || !strings.Contains(r.stdout, "command rm: allow (default)") {
		t.Fatalf("explain: %+v", r)
	}
	if r := agentdiff(t, dir, "policy", "explain", "--format", "json", "default"); r.code != 0 || !json.Valid([]byte(r.stdout)) {
		t.Fatalf("explain json: %+v", r)
	}
}

func TestVerifyInspectRunsRollback(t *testing.T) {
	root := tree(t)
	r := agentdiff(t, root, "run", "--task", "PASSWORD=hunter2 cleanup", "--", "sh", "-c", "echo b >> a.txt; echo n > new")
	if r.code != 0 || !strings.Contains(r.stdout, "status=review") {
		t.Fatalf("run: %+v", r)
	}
	id := strings.Fields(strings.SplitN(r.stdout, "run ", 2)[1])[0]
	rs := agentdiff(t, root, "runs", "--limit", "5")
	if rs.code != 0 || !strings.Contains(rs.stdout, id) || strings.Contains(rs.stdout, "hunter2") {
		t.Fatalf("runs: %+v", rs)
	}
	os.WriteFile(filepath.Join(root, "new"), []byte("human edit\n"), 0o644)
	rb := agentdiff(t, root, "rollback", id)
	if rb.code != exitPartial || !strings.Contains(rb.stdout, "conflict") {
		t.Fatalf("rollback: %+v", rb)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "a.txt")); string(b) != "a\n" {
		t.Fatalf("a.txt = %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "new")); string(b) != "human edit\n" {
		t.Fatal("later work overwritten")
	}
	if v := agentdiff(t, root, "verify", id); v.code != 0 {
		t.Fatalf("verify after rollback: %+v", v)
	}
	in := agentdiff(t, root, "inspect", "--format", "json", id)
	if in.code != 0 || !strings.Contains(in.stdout, `"attempts"`) {
		t.Fatalf("inspect: %+v", in)
	}
	// Tamper: verify exits 20 and rollback refuses with 20.
	os.WriteFile(filepath.Join(root, ".agentdiff/runs", id, "after.json"), []byte("{}"), 0o600)
	if v := agentdiff(t, root, "verify", id); v.code != exitUnverified || !strings.Contains(v.stdout, "mismatched: after.json") {
		t.Fatalf("verify tampered: %+v", v)
	}
	if v := agentdiff(t, root, "rollback", id); v.code != exitUnverified {
		t.Fatalf("rollback tampered: %+v", v)
	}
	if d := agentdiff(t, root, "doctor"); d.code != 0 || !strings.Contains(d.stdout, "not sandboxed") || !strings.Contains(d.stdout, "no network enforcement") {
		t.Fatalf("doctor: %+v", d)
	}
}

func TestJSONStdoutIsOnlyTheResult(t *testing.T) {
	root := tree(t)
	r := agentdiff(t, root, "run", "--format", "json", "--", "echo", "hello from the child")
	var res map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || r.code != 0 {
		t.Fatalf("stdout is not only JSON (%v): %q", err, r.stdout)
	}
	if !strings.Contains(r.stderr, "hello from the child") {
		t.Fatalf("child stdout lost: %q", r.stderr)
	}
	r = agentdiff(t, root, "run", "--", "echo", "hello again")
	if !strings.HasPrefix(r.stdout, "hello again\n") {
		t.Fatalf("summary mode: child stdout should pass through first: %q", r.stdout)
	}
}

// A symlinked runs/ or capsule directory is an unverifiable capsule: every
// command that meets one exits 20 (docs/agentdiff.md), never 1.
func TestSymlinkedStateExits20(t *testing.T) {
	root := tree(t)
	r := agentdiff(t, root, "run", "--", "true")
	if r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	id := strings.Fields(strings.SplitN(r.stdout, "run ", 2)[1])[0]
	runs := filepath.Join(root, ".agentdiff", "runs")
	moved := filepath.Join(t.TempDir(), id)
	if err := os.Rename(filepath.Join(runs, id), moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(moved, filepath.Join(runs, id)); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"verify", "inspect", "rollback"} {
		if v := agentdiff(t, root, cmd, id); v.code != exitUnverified || !strings.Contains(v.stderr, "symlinks are refused") {
			t.Errorf("%s of a symlinked capsule: %+v", cmd, v)
		}
	}
	other := tree(t)
	os.MkdirAll(filepath.Join(other, ".agentdiff"), 0o700)
	if err := os.Symlink(t.TempDir(), filepath.Join(other, ".agentdiff", "runs")); err != nil {
		t.Fatal(err)
	}
	if v := agentdiff(t, other, "run", "--", "true"); v.code != exitUnverified || !strings.Contains(v.stderr, "symlinks are refused") {
		t.Errorf("run with a symlinked runs/: %+v", v)
	}
}

const yamlPolicy = `# agentdiff policy, version 1, in YAML
version: 1
description: allow edits to a.txt, review the rest
paths:
  default: review
  rules:
    - pattern: a.txt
      decision: allow
      reason: the file this task edits
commands:
  default: allow
  rules: []
limits:
  max_files_changed: 1000
  max_files_deleted: 100
  max_bytes_written: 268435456
  max_duration: 1h
backups:
  max_file_bytes: 8388608
  max_total_bytes: 268435456
  max_files: 100000
`

// agentdiff.yaml at the root is the policy run reads by default; a broken
// one is refused (exit 3), never replaced by the built-in default; and
// rollback --safe-only reverts the review/deny changes, keeping allowed work.
func TestYAMLPolicyAndSafeOnlyRollback(t *testing.T) {
	root := tree(t)
	if err := os.WriteFile(filepath.Join(root, "agentdiff.yaml"), []byte(yamlPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	if v := agentdiff(t, root, "policy", "validate", filepath.Join(root, "agentdiff.yaml")); v.code != 0 || !strings.Contains(v.stdout, "1 path rules") {
		t.Fatalf("validate: %+v", v)
	}
	r := agentdiff(t, root, "run", "--format", "json", "--", "sh", "-c", "echo edited > a.txt; echo n > new.txt")
	if r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	var res struct {
		RunID   string `json:"run_id"`
		Changes []struct {
			Path     string `json:"path"`
			Decision string `json:"decision"`
		} `json:"changes"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatal(err)
	}
	dec := map[string]string{}
	for _, c := range res.Changes {
		dec[c.Path] = c.Decision
	}
	if dec["a.txt"] != "allow" || dec["new.txt"] != "review" {
		t.Fatalf("decisions %v: agentdiff.yaml was not applied", dec)
	}
	pol, err := os.ReadFile(filepath.Join(root, ".agentdiff", "runs", res.RunID, "policy.json"))
	if err != nil || !json.Valid(pol) || !strings.Contains(string(pol), `"a.txt"`) {
		t.Fatalf("policy.json %s %v", pol, err)
	}
	rb := agentdiff(t, root, "rollback", "--safe-only", res.RunID)
	if rb.code != 0 {
		t.Fatalf("rollback --safe-only: %+v", rb)
	}
	if _, err := os.Stat(filepath.Join(root, "new.txt")); !os.IsNotExist(err) {
		t.Fatalf("new.txt (review) kept: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "a.txt")); string(b) != "edited\n" {
		t.Fatalf("a.txt (allow) rolled back: %q", b)
	}
	// A broken agentdiff.yaml is refused, not silently replaced.
	for name, text := range map[string]string{
		"unknown key":   strings.Replace(yamlPolicy, "description:", "descripton:", 1),
		"duplicate key": yamlPolicy + "version: 1\n",
		"two documents": yamlPolicy + "---\nversion: 1\n",
	} {
		os.WriteFile(filepath.Join(root, "agentdiff.yaml"), []byte(text), 0o644)
		if v := agentdiff(t, root, "run", "--", "true"); v.code != exitBadPolicy {
			t.Errorf("%s: %+v", name, v)
		}
	}
}

// cleanup of a run whose process group left nothing behind has nothing to
// do; of a tampered capsule it refuses with 20.
func TestCleanupCommand(t *testing.T) {
	root := tree(t)
	r := agentdiff(t, root, "run", "--", "true")
	id := strings.Fields(strings.SplitN(r.stdout, "run ", 2)[1])[0]
	if c := agentdiff(t, root, "cleanup", id); c.code != 0 || !strings.Contains(c.stdout, "nothing to do") {
		t.Fatalf("cleanup: %+v", c)
	}
	if c := agentdiff(t, root, "cleanup", "--format", "json", id); c.code != 0 || !strings.Contains(c.stdout, `"complete": true`) {
		t.Fatalf("cleanup json: %+v", c)
	}
	os.WriteFile(filepath.Join(root, ".agentdiff", "runs", id, "runtime.json"), []byte("{}"), 0o600)
	if c := agentdiff(t, root, "cleanup", id); c.code != exitUnverified {
		t.Fatalf("cleanup of a tampered capsule: %+v", c)
	}
}
