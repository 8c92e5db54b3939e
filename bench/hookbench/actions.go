package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// actionSubjects adds PreToolUse and PostToolUse hooks on a second checkout
// that has an execution rule for Bash, so every PreToolUse binds the source
// (git rev-parse + git status + manifest) and appends an action start, and
// every PostToolUse checks source drift and appends the finish. The
// checkout is a clean Git repository of small files (as a
// mid-sized project's worktree).
func actionSubjects(bin, dir string, files int) ([]*subject, error) {
	root := filepath.Join(dir, "repo")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	for i := range files {
		p := filepath.Join(root, fmt.Sprintf("pkg%02d", i%50), fmt.Sprintf("file%04d.go", i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(fmt.Sprintf("package pkg%02d\n\n// file %d\nconst X%d = %d\n", i%50, i, i, i)), 0o644); err != nil {
			return nil, err
		}
	}
	gitEnv := append(os.Environ(), "GIT_AUTHOR_NAME=b", "GIT_AUTHOR_EMAIL=b@example.invalid", "GIT_COMMITTER_NAME=b", "GIT_COMMITTER_EMAIL=b@example.invalid")
	for _, args := range [][]string{{"init", "-q"}, {"add", "."}, {"commit", "-qm", "init"}} {
		cmd := exec.Command("git", append([]string{"-C", root}, args...)...)
		cmd.Env = gitEnv
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("git %v: %v\n%s", args, err, out)
		}
	}
	// The hook settings configure writes stay out of the source.
	if err := os.WriteFile(filepath.Join(root, ".git", "info", "exclude"), []byte(".claude/\n"), 0o644); err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "config")
	env := append(os.Environ(), "XDG_CONFIG_HOME="+cfg)
	for _, args := range [][]string{
		{"client", "setup", "--root", root, "--local"},
		{"change-capture", "configure", "--root", root, "--spool", filepath.Join(dir, "spool"),
			"--setup-digest", strings.Repeat("5e", 32), "--action-rule", "Bash=execution:partial:process_exit_code"},
		{"work", "start", "--root", root, "--title", "hook benchmark (actions)"},
	} {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%v: %v\n%s", args, err, out)
		}
	}
	payload := func(ev, extra string) func(int) []byte {
		return func(i int) []byte {
			x := strings.ReplaceAll(extra, "TOOLID", fmt.Sprintf("toolu_bench_%06d", i))
			return []byte(`{"session_id":"bench-session","transcript_path":"/tmp/t.jsonl","cwd":"` + root + `","permission_mode":"default","hook_event_name":"` + ev + `"` + x + `}`)
		}
	}
	hook := []string{bin, "change-capture", "hook-claude"}
	return []*subject{
		{name: "hook PreToolUse +rule", argv: hook, env: env, stdin: payload("PreToolUse", `,"tool_name":"Bash","tool_use_id":"TOOLID","tool_input":{"command":"go test ./...","description":"run tests"}`)},
		{name: "hook PostToolUse +rule", argv: hook, env: env, stdin: payload("PostToolUse", `,"tool_name":"Bash","tool_use_id":"TOOLID","tool_input":{"command":"go test ./...","description":"run tests"},"tool_response":{"stdout":"ok","stderr":"","interrupted":false}`)},
	}, nil
}
