package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/changelog"
)

// A running turn refuses rewind, snapshot load and changelog enable with
// exit status 5 naming it, and --force does not get past it; changelog
// status lists it; end-turn declares it over. A turn whose agent process
// is gone is set aside by the next rewind, which names it.
func TestTurnsRefuseAndSetAside(t *testing.T) {
	base := t.TempDir()
	home, repo := filepath.Join(base, "home"), filepath.Join(base, "repo")
	os.MkdirAll(repo, 0o755)
	if out, err := exec.Command("git", "-C", repo, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	env := map[string]string{"HOME": home}
	must := func(args ...string) run {
		t.Helper()
		r := runMain(t, env, "", args...)
		if r.code != 0 {
			t.Fatalf("%v: %d %s %s", args, r.code, r.stdout, r.stderr)
		}
		return r
	}
	os.WriteFile(filepath.Join(repo, "one.txt"), []byte("1"), 0o644)
	must("changelog", "capture", "--root", repo, "--tool", "Write", "--session", "s-live")
	os.WriteFile(filepath.Join(repo, "two.txt"), []byte("2"), 0o644)
	must("changelog", "capture", "--root", repo, "--tool", "Write", "--session", "s-live")

	// The prompt hook of a session (run here: no agent process above it,
	// the turn lives on its lease, unless the test itself runs under one).
	if r := runMain(t, env, `{"session_id":"s-live","cwd":"`+repo+`","hook_event_name":"UserPromptSubmit","prompt":"x"}`, "changelog", "hook-claude"); r.code != 0 || r.stdout != "" || r.stderr != "" {
		t.Fatalf("prompt hook: %+v", r)
	}
	for _, args := range [][]string{
		{"rewind", "--root", repo, "--to", "0", "--force"},
		{"snapshot", "load", "--root", repo, "--file", filepath.Join(base, "none.tgz"), "--force"},
		{"changelog", "enable", "--root", repo, "--force"},
	} {
		r := runMain(t, env, "", args...)
		if r.code != ExitTurnRunning || !strings.Contains(r.stderr, "an agent turn is running: session s-live (claude-code, ") {
			t.Fatalf("%v during the turn: %d %s %s", args, r.code, r.stdout, r.stderr)
		}
	}
	if !fileExists(filepath.Join(repo, "two.txt")) {
		t.Fatal("a refused command changed the checkout")
	}
	out := must("changelog", "status", "--root", repo).stdout
	if !strings.Contains(out, "turn running:  session s-live (claude-code, ") || !strings.Contains(out, "sessions:      one at a time") {
		t.Fatalf("status:\n%s", out)
	}
	var st struct {
		Turns []changelog.TurnStatus `json:"turns"`
	}
	if err := json.Unmarshal([]byte(must("changelog", "status", "--root", repo, "--format", "json").stdout), &st); err != nil || len(st.Turns) != 1 || !st.Turns[0].Running {
		t.Fatalf("status json: %+v %v", st, err)
	}
	if r := runMain(t, env, "", "changelog", "end-turn", "--root", repo, "--session", "nobody"); r.code == 0 {
		t.Fatalf("end-turn of no turn: %+v", r)
	}
	if out := must("changelog", "end-turn", "--root", repo, "--session", "s-live").stdout; !strings.Contains(out, "ended the turn of session s-live") {
		t.Fatal(out)
	}

	// A turn whose agent process is gone: set aside and named (procfs
	// tells).
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no procfs: a recorded agent process cannot be checked here")
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(home, ".config", "agentscm")
	dir := changelog.DefaultDir(cfg, repo)
	if err := changelog.BeginTurn(dir, changelog.Turn{SessionID: "s-dead", Agent: "gemini", StartedAt: time.Now(), Host: &changelog.Host{PID: dead.Process.Pid, Start: 1, Name: "gemini"}}); err != nil {
		t.Fatal(err)
	}
	if out := must("changelog", "status", "--root", repo).stdout; !strings.Contains(out, "turn stale:    session s-dead (gemini, pid") {
		t.Fatalf("status:\n%s", out)
	}
	r := must("rewind", "--root", repo, "--to", "0")
	if !strings.Contains(r.stderr, "set aside the stale turn of session s-dead (gemini, pid") || !strings.Contains(r.stderr, "is gone") || fileExists(filepath.Join(repo, "two.txt")) {
		t.Fatalf("rewind past a stale turn: %+v", r)
	}
	if out := must("changelog", "status", "--root", repo).stdout; !strings.Contains(out, "turns:         none running") {
		t.Fatalf("status:\n%s", out)
	}
}

func fileExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// --parallel-sessions is recorded in the changelog, kept by an enable
// without the flag, and turned off by --parallel-sessions=false.
func TestEnableParallelSessions(t *testing.T) {
	base := t.TempDir()
	home, repo := filepath.Join(base, "home"), filepath.Join(base, "repo")
	os.MkdirAll(repo, 0o755)
	if out, err := exec.Command("git", "-C", repo, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	env := map[string]string{"HOME": home}
	parallel := func(args ...string) bool {
		t.Helper()
		r := runMain(t, env, "", append([]string{"changelog", "enable", "--root", repo, "--agent", "claude-code", "--format", "json"}, args...)...)
		if r.code != 0 {
			t.Fatalf("enable %v: %d %s", args, r.code, r.stderr)
		}
		var out struct {
			Parallel bool `json:"parallel_sessions"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatal(err)
		}
		r = runMain(t, env, "", "changelog", "status", "--root", repo, "--format", "json")
		var st struct {
			Parallel bool `json:"parallel_sessions"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.Parallel != out.Parallel {
			t.Fatalf("status %s %v, enable said %v", r.stdout, err, out.Parallel)
		}
		return out.Parallel
	}
	for _, step := range []struct {
		args []string
		want bool
	}{{nil, false}, {[]string{"--parallel-sessions"}, true}, {nil, true}, {[]string{"--parallel-sessions=false"}, false}} {
		if got := parallel(step.args...); got != step.want {
			t.Fatalf("enable %v: parallel %v, want %v", step.args, got, step.want)
		}
	}
}
