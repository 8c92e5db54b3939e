package changelog

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func hookFixture(t *testing.T) (cfg, root, dir string) {
	t.Helper()
	base := t.TempDir()
	cfg, root = filepath.Join(base, "cfg"), filepath.Join(base, "repo")
	os.MkdirAll(filepath.Join(root, "sub"), 0o755)
	os.MkdirAll(filepath.Join(cfg, "changelog"), 0o700)
	dir = DefaultDir(cfg, root)
	c, err := Open(dir, Options{Roots: []Root{{Name: "checkout", Path: root}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SaveRoots(); err != nil {
		t.Fatal(err)
	}
	return cfg, root, dir
}

func runHook(t *testing.T, cfg, cwd, event, session string) (*HookResult, error) {
	t.Helper()
	p := `{"session_id":"` + session + `","cwd":"` + cwd + `","hook_event_name":"` + event + `","tool_name":"Write","tool_use_id":"toolu_x"}`
	return HandleClaudeHook(context.Background(), cfg, strings.NewReader(p), time.Now())
}

func TestHookCapturesEachToolCall(t *testing.T) {
	cfg, root, _ := hookFixture(t)
	os.WriteFile(filepath.Join(root, "a"), []byte("a"), 0o644)
	r, err := runHook(t, cfg, filepath.Join(root, "sub"), "PostToolUse", "s1")
	if err != nil || r.Increment == nil || r.Increment.Position != 0 {
		t.Fatalf("%+v %v", r, err)
	}
	os.Remove(filepath.Join(root, "a"))
	r, err = runHook(t, cfg, root, "PostToolUseFailure", "s1")
	if err != nil || r.Increment.Position != 1 || !r.Increment.Meta.Failed || r.Increment.Meta.Deleted != 1 || r.Increment.Meta.ToolUseID != "toolu_x" {
		t.Fatalf("%+v %v", r.Increment.Meta, err)
	}
	if r, err := runHook(t, cfg, t.TempDir(), "PostToolUse", "s1"); err != nil || !r.Ignored {
		t.Fatalf("outside any changelog: %+v %v", r, err)
	}
}

func TestTurnsAreSerialized(t *testing.T) {
	cfg, root, dir := hookFixture(t)
	if _, err := runHook(t, cfg, root, "UserPromptSubmit", "s1"); err != nil {
		t.Fatal(err)
	}
	if err := RefuseDuringTurn(dir); !errors.Is(err, ErrTurnRunning) {
		t.Fatalf("err = %v", err)
	}
	// Another session's prompt waits until the first turn ends.
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := runHook(t, cfg, root, "UserPromptSubmit", "s2")
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("the second turn started while the first ran: %v", err)
	default:
	}
	if _, err := runHook(t, cfg, root, "Stop", "s1"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < 300*time.Millisecond {
		t.Fatal("no wait happened")
	}
	tn, _ := RunningTurn(dir)
	if tn == nil || tn.SessionID != "s2" {
		t.Fatalf("running turn %+v, want s2", tn)
	}
	// Stop of another session leaves s2's marker alone.
	runHook(t, cfg, root, "Stop", "s1")
	if tn, _ := RunningTurn(dir); tn == nil {
		t.Fatal("another session's Stop ended s2's turn")
	}
	runHook(t, cfg, root, "SessionEnd", "s2")
	if tn, _ := RunningTurn(dir); tn != nil {
		t.Fatalf("turn still running: %+v", tn)
	}
}
