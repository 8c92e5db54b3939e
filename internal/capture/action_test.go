package capture

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestActionResultMapping(t *testing.T) {
	const none = -1 << 40
	bash := DefaultActionRule
	write := ActionRule{Tool: "Write", Kind: "execution", Coverage: "unknown", ResultSource: "unverified"}
	cases := []struct {
		name   string
		rule   ActionRule
		hook   string
		resp   string
		field  string
		code   int // none: no code
		result string
	}{
		{"exit_code 0", bash, "PostToolUse", `{"stdout":"","exit_code":0}`, "integer", 0, "succeeded"},
		{"exit_code 3", bash, "PostToolUse", `{"exit_code":3}`, "integer", 3, "failed"},
		{"exitCode 0", bash, "PostToolUse", `{"exitCode":0}`, "integer", 0, "succeeded"},
		{"exitCode 127", bash, "PostToolUse", `{"exitCode":127}`, "integer", 127, "failed"},
		{"negative exitCode", bash, "PostToolUse", `{"exitCode":-1}`, "integer", -1, "failed"},
		{"both keys agree", bash, "PostToolUse", `{"exit_code":2,"exitCode":2}`, "integer", 2, "failed"},
		{"both keys disagree", bash, "PostToolUse", `{"exit_code":0,"exitCode":2}`, "malformed", none, "unknown"},
		{"string 3", bash, "PostToolUse", `{"exit_code":"3"}`, "malformed", none, "unknown"},
		{"float 3.0", bash, "PostToolUse", `{"exit_code":3.0}`, "malformed", none, "unknown"},
		{"exponent", bash, "PostToolUse", `{"exit_code":3e0}`, "malformed", none, "unknown"},
		{"float 0.5", bash, "PostToolUse", `{"exitCode":0.5}`, "malformed", none, "unknown"},
		{"null", bash, "PostToolUse", `{"exit_code":null}`, "malformed", none, "unknown"},
		{"bool", bash, "PostToolUse", `{"exit_code":false}`, "malformed", none, "unknown"},
		{"out of int32", bash, "PostToolUse", `{"exit_code":4294967296}`, "malformed", none, "unknown"},
		{"leading zero", bash, "PostToolUse", `{"exit_code":03}`, "absent", none, "unknown"}, // not JSON at all
		{"missing (Claude Code 2.1.x success)", bash, "PostToolUse", `{"stdout":"ok","stderr":"","interrupted":false,"isImage":false}`, "absent", none, "unknown"},
		{"no tool_response", bash, "PostToolUse", ``, "absent", none, "unknown"},
		{"response not an object", bash, "PostToolUse", `"Exit code 0"`, "absent", none, "unknown"},
		{"failure hook", bash, "PostToolUseFailure", ``, "absent", none, "failed"},
		{"failure hook with exit_code 0", bash, "PostToolUseFailure", `{"exit_code":0}`, "integer", 0, "failed"},
		{"unverified returned", write, "PostToolUse", `{"exit_code":0}`, "integer", 0, "unknown"},
		{"unverified failed", write, "PostToolUseFailure", ``, "absent", none, "failed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, field := ExplicitExitCode(json.RawMessage(tc.resp))
			if field != tc.field || (code == nil) != (tc.code == none) || (code != nil && *code != tc.code) {
				t.Fatalf("ExplicitExitCode(%s) = %v, %q; want %d, %q", tc.resp, code, field, tc.code, tc.field)
			}
			result, verification := ActionResult(tc.rule, tc.hook, code)
			if result != tc.result || verification != "unknown" {
				t.Fatalf("ActionResult = %q, %q; want %q, unknown", result, verification, tc.result)
			}
		})
	}
}

func TestActionIDIgnoresTargetAndCommand(t *testing.T) {
	a := ActionID("claude-code", "native-1", "toolu_1")
	if a != ActionID("claude-code", "native-1", "toolu_1") || a == ActionID("claude-code", "native-2", "toolu_1") || a == ActionID("claude-code", "native-1", "toolu_2") {
		t.Fatal("action id must derive from the native session and tool_use_id exactly")
	}
	if len(a) != 36 {
		t.Fatalf("action id %q", a)
	}
}

func TestCanonicalInputDigest(t *testing.T) {
	if canonicalInputDigest(json.RawMessage(`{"b":1,"a":"x"}`)) != canonicalInputDigest(json.RawMessage(` {"a":"x", "b":1}`)) {
		t.Fatal("key order or whitespace changed the canonical input")
	}
	if canonicalInputDigest(json.RawMessage(`{"a":1}`)) == canonicalInputDigest(json.RawMessage(`{"a":1.0}`)) {
		t.Fatal("a different number literal is a different input")
	}
	if canonicalInputDigest(nil) != canonicalInputDigest(json.RawMessage(`null`)) {
		t.Fatal("absent input must hash as null")
	}
}

func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"}, args...)...)
	cmd.Env = gitEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
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
	if d2.ManifestDigest == d1.ManifestDigest || sourceDrift(d1, d2) != "changed" || sourceDrift(d2, d2) != "none_observed" || sourceDrift(nil, d2) != "unknown" {
		t.Fatalf("content change not seen: %+v %+v", d1, d2)
	}
	// A symlink is recorded by target, never followed; a deleted file as
	// deleted.
	os.Symlink("/etc/passwd", filepath.Join(dir, "link"))
	os.Remove(filepath.Join(dir, "a.txt"))
	if d3, err := CaptureSource(ctx, dir); err != nil || d3.ManifestDigest == d2.ManifestDigest {
		t.Fatalf("symlink/delete: %+v, %v", d3, err)
	}
	// Not a repository: an error, and the action starts unbound.
	if _, err := CaptureSource(ctx, t.TempDir()); err == nil {
		t.Fatal("a directory outside Git bound a source")
	}
}
