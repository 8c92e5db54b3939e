package changelog

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/agent"
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

// runningTurns returns the sessions whose turn runs in dir.
func runningTurns(t *testing.T, dir string) []string {
	t.Helper()
	ts, err := Turns(dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tn := range ts {
		if tn.Running {
			out = append(out, tn.SessionID)
		}
	}
	return out
}

// runHookOpts runs one hook with options and no agent process to find
// (the turn lives on its lease).
func runHookOpts(t *testing.T, cfg, cwd, event, session string, opts HookOptions) (*HookResult, error) {
	t.Helper()
	p, err := agent.DecodePayload([]byte(`{"session_id":"` + session + `","cwd":"` + cwd + `","hook_event_name":"` + event + `","tool_name":"Write","tool_use_id":"toolu_x"}`))
	if err != nil {
		t.Fatal(err)
	}
	if opts.FindHost == nil {
		opts.FindHost = func(string) (Host, bool) { return Host{}, false }
	}
	return HandlePayload(context.Background(), cfg, p, time.Now(), opts)
}

func TestTurnsAreSerialized(t *testing.T) {
	cfg, root, dir := hookFixture(t)
	if _, err := runHookOpts(t, cfg, root, "UserPromptSubmit", "s1", HookOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := RefuseDuringTurn(dir); !errors.Is(err, ErrTurnRunning) || !strings.Contains(err.Error(), "session s1 (claude-code, no agent process found") {
		t.Fatalf("err = %v", err)
	}
	// Another session's prompt waits until the first turn ends.
	done := make(chan *HookResult, 1)
	start := time.Now()
	go func() {
		r, err := runHookOpts(t, cfg, root, "UserPromptSubmit", "s2", HookOptions{})
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case r := <-done:
		t.Fatalf("the second turn started while the first ran: %+v", r)
	default:
	}
	if _, err := runHookOpts(t, cfg, root, "Stop", "s1", HookOptions{}); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r == nil || r.Refused != nil {
		t.Fatalf("the second prompt after the first turn ended: %+v", r)
	}
	if time.Since(start) < 300*time.Millisecond {
		t.Fatal("no wait happened")
	}
	if got := runningTurns(t, dir); len(got) != 1 || got[0] != "s2" {
		t.Fatalf("running turns %v, want s2", got)
	}
	// Stop of another session leaves s2's marker alone.
	runHookOpts(t, cfg, root, "Stop", "s1", HookOptions{})
	if got := runningTurns(t, dir); len(got) != 1 {
		t.Fatal("another session's Stop ended s2's turn")
	}
	runHookOpts(t, cfg, root, "SessionEnd", "s2", HookOptions{})
	if got := runningTurns(t, dir); len(got) != 0 {
		t.Fatalf("turns still running: %v", got)
	}
}

// A second session's prompt that waited the whole TurnWait is refused with
// one sentence naming the running session and a separate worktree; it
// starts no turn of its own.
func TestSecondSessionRefused(t *testing.T) {
	cfg, root, dir := hookFixture(t)
	if _, err := runHookOpts(t, cfg, root, "UserPromptSubmit", "s1", HookOptions{Agent: "codex"}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r, err := runHookOpts(t, cfg, root, "UserPromptSubmit", "s2", HookOptions{TurnWait: 400 * time.Millisecond})
	if err != nil || r.Refused == nil {
		t.Fatalf("%+v %v", r, err)
	}
	if time.Since(start) < 400*time.Millisecond {
		t.Fatal("refused without waiting")
	}
	for _, want := range []string{"session s1 (codex)", "git worktree add", root} {
		if !strings.Contains(r.Refused.Reason, want) {
			t.Fatalf("reason %q lacks %q", r.Refused.Reason, want)
		}
	}
	if strings.Count(r.Refused.Reason, ". ") != 0 || !strings.HasSuffix(r.Refused.Reason, ".") {
		t.Fatalf("not one sentence: %q", r.Refused.Reason)
	}
	if got := runningTurns(t, dir); len(got) != 1 || got[0] != "s1" {
		t.Fatalf("running turns %v, want only s1", got)
	}
	// A rewind holding the turns refuses a prompt too, with its own reason.
	runHookOpts(t, cfg, root, "Stop", "s1", HookOptions{})
	g, err := HoldTurns(dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	r, err = runHookOpts(t, cfg, root, "UserPromptSubmit", "s2", HookOptions{TurnWait: 200 * time.Millisecond})
	g.Release()
	if err != nil || r.Refused == nil || !strings.Contains(r.Refused.Reason, "rewind or snapshot load") {
		t.Fatalf("prompt during a held rewind: %+v %v", r, err)
	}
}

// With parallel sessions both turns run, and a position taken while the
// other session's turn ran names it.
func TestParallelSessionsNamePositions(t *testing.T) {
	cfg, root, dir := hookFixture(t)
	if err := SetParallelSessions(dir, true); err != nil || !ParallelSessions(dir) {
		t.Fatal(err)
	}
	for _, s := range []string{"s1", "s2"} {
		r, err := runHookOpts(t, cfg, root, "UserPromptSubmit", s, HookOptions{TurnWait: time.Minute})
		if err != nil || r.Refused != nil {
			t.Fatalf("%s: %+v %v", s, r, err)
		}
	}
	os.WriteFile(filepath.Join(root, "a"), []byte("a"), 0o644)
	r, err := runHookOpts(t, cfg, root, "PostToolUse", "s2", HookOptions{})
	if err != nil || r.Increment == nil {
		t.Fatal(err)
	}
	if m := r.Increment.Meta; m.SessionID != "s2" || len(m.ConcurrentSessions) != 1 || m.ConcurrentSessions[0] != "s1" {
		t.Fatalf("meta %+v", m)
	}
	runHookOpts(t, cfg, root, "Stop", "s1", HookOptions{})
	os.WriteFile(filepath.Join(root, "b"), []byte("b"), 0o644)
	r, _ = runHookOpts(t, cfg, root, "PostToolUse", "s2", HookOptions{})
	if m := r.Increment.Meta; len(m.ConcurrentSessions) != 0 {
		t.Fatalf("alone, the position names %v", m.ConcurrentSessions)
	}
	if err := SetParallelSessions(dir, false); err != nil || ParallelSessions(dir) {
		t.Fatal(err)
	}
}
