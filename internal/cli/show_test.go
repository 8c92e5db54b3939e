package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestShowAnotherCheckoutsWork: show of a Work this checkout's changelog
// does not hold (checkout B reading checkout A's Work in the same
// repository) takes the file names from the increments on the Hub.
func TestShowAnotherCheckoutsWork(t *testing.T) {
	cfg := t.TempDir()
	env := map[string]string{"XDG_CONFIG_HOME": cfg, "HOME": t.TempDir(), "GIT_CONFIG_NOSYSTEM": "1"}
	a, b := gitRepo(t, "a"), gitRepo(t, "b")
	mustRun(t, env, "client", "setup", "--root", a, "--local", "--repository", "proj")
	mustRun(t, env, "change-capture", "configure", "--root", a, "--spool", filepath.Join(t.TempDir(), "spool"))
	mustRun(t, env, "work", "start", "--root", a, "--title", "A's work")
	mustRun(t, env, "changelog", "enable", "--root", a, "--no-transcript-root")
	hook := func(cmd, event, tool, use string) {
		t.Helper()
		p := fmt.Sprintf(`{"session_id":"s1","cwd":%q,"hook_event_name":%q,"tool_name":%q,"tool_use_id":%q,"tool_input":{},"tool_response":{},"source":"startup"}`, a, event, tool, use)
		if r := runMain(t, env, p, cmd, "hook-claude"); r.code != 0 || r.stderr != "" {
			t.Fatalf("%s hook %s: %d %s", cmd, event, r.code, r.stderr)
		}
	}
	hook("change-capture", "SessionStart", "", "")
	hook("change-capture", "PreToolUse", "Write", "toolu_1")
	if err := os.WriteFile(filepath.Join(a, "made.txt"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hook("changelog", "PostToolUse", "Write", "toolu_1")
	hook("change-capture", "PostToolUse", "Write", "toolu_1")
	var cur struct {
		Work struct{ ID string } `json:"work"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, env, "work", "show", "--root", a, "--format", "json").stdout), &cur.Work); err != nil || cur.Work.ID == "" {
		t.Fatalf("work show: %v", err)
	}
	mustRun(t, env, "client", "setup", "--root", b, "--local", "--repository", "proj")
	out := mustRun(t, env, "change-capture", "show", "--root", b, "--work-id", cur.Work.ID, "--verbose").stdout
	if !strings.Contains(out, "Write      succeeded position 0  +made.txt") || !strings.HasSuffix(out, "1 call, 0 failed; 1 created, 0 modified, 0 deleted\n") {
		t.Fatalf("show from B:\n%s", out)
	}
	// A itself reads its local changelog.
	var tl struct {
		Changes string `json:"changes_source"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, env, "change-capture", "show", "--root", a, "--format", "json").stdout), &tl); err != nil || tl.Changes != "local changelog" {
		t.Fatalf("show from A: %q %v", tl.Changes, err)
	}
	if err := json.Unmarshal([]byte(mustRun(t, env, "change-capture", "show", "--root", b, "--work-id", cur.Work.ID, "--format", "json").stdout), &tl); err != nil || tl.Changes != "hub" {
		t.Fatalf("show from B: %q %v", tl.Changes, err)
	}
}
