package changelog

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// selfHost is this test process as a turn's agent process.
func selfHost(t *testing.T) Host {
	t.Helper()
	pi, err := readProc("/proc", os.Getpid())
	if err != nil || !pi.exists {
		t.Skipf("no procfs: %v", err)
	}
	return Host{PID: os.Getpid(), Start: pi.start, Name: pi.comm}
}

// exitedHost is a process that ran and was reaped: its pid is gone.
func exitedHost(t *testing.T) Host {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return Host{PID: cmd.Process.Pid, Start: 1, Name: "true"}
}

// zombieHost is a process that exited but was not reaped yet (as an agent
// killed with SIGKILL is until its parent waits).
func zombieHost(t *testing.T) Host {
	t.Helper()
	cmd := exec.Command("sh", "-c", "exit 0")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Wait() })
	for range 200 {
		pi, err := readProc("/proc", cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if pi.state == 'Z' {
			return Host{PID: cmd.Process.Pid, Start: pi.start, Name: "sh"}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the child never became a zombie")
	return Host{}
}

func TestJudgeTurn(t *testing.T) {
	now := time.Now()
	self := selfHost(t)
	reused := self
	reused.Start++ // the pid is ours, the start time another process's
	cases := []struct {
		name    string
		turn    Turn
		running bool
		stale   string
	}{
		{"live agent process", Turn{Host: &self}, true, ""},
		{"agent process gone", Turn{Host: ptr(exitedHost(t))}, false, "is gone"},
		{"agent process a zombie", Turn{Host: ptr(zombieHost(t))}, false, "is gone"},
		{"pid reused", Turn{Host: &reused}, false, "the pid now belongs to"},
		{"lease renewed recently", Turn{RenewedAt: now.Add(-TurnLease + time.Minute)}, true, ""},
		{"lease expired", Turn{RenewedAt: now.Add(-TurnLease - time.Second)}, false, "renewed its lease since"},
		{"legacy marker, recent", Turn{}, true, ""},
		{"legacy marker, old", Turn{StartedAt: now.Add(-2 * TurnLease)}, false, "renewed its lease"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.turn.SessionID = "s"
			if c.turn.StartedAt.IsZero() {
				c.turn.StartedAt = now.Add(-time.Hour)
				if c.turn.Host == nil && c.turn.RenewedAt.IsZero() {
					c.turn.StartedAt = now.Add(-time.Minute)
				}
			}
			got := judgeTurn("/proc", c.turn, now)
			if got.Running != c.running || !strings.Contains(got.Stale, c.stale) || (c.stale == "") != (got.Stale == "") {
				t.Fatalf("running=%v stale=%q, want running=%v stale containing %q", got.Running, got.Stale, c.running, c.stale)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// HoldTurns refuses while a live turn runs, naming each; it sets stale
// turns aside (their markers go) and passes.
func TestHoldTurnsSetsStaleAside(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	self := selfHost(t)
	gone := exitedHost(t)
	if err := BeginTurn(dir, Turn{SessionID: "live", Agent: "claude-code", StartedAt: now, Host: &self}); err != nil {
		t.Fatal(err)
	}
	if err := BeginTurn(dir, Turn{SessionID: "crashed", Agent: "codex", StartedAt: now, Host: &gone}); err != nil {
		t.Fatal(err)
	}
	// A marker of the older format (one per checkout) of an old turn.
	os.WriteFile(filepath.Join(dir, legacyTurnFile), []byte(`{"session_id":"old","started_at":"2020-01-01T00:00:00Z"}`+"\n"), 0o600)
	ts, err := Turns(dir, now)
	if err != nil || len(ts) != 3 || !ts[0].Running || ts[0].SessionID != "live" || ts[1].Running || ts[2].Running {
		t.Fatalf("turns %+v %v", ts, err)
	}
	_, err = HoldTurns(dir, now)
	var tr *TurnsRunningError
	if !errors.As(err, &tr) || !errors.Is(err, ErrTurnRunning) || len(tr.Running) != 1 || !strings.Contains(err.Error(), "session live (claude-code, pid "+strconv.Itoa(self.PID)) {
		t.Fatalf("err = %v", err)
	}
	if err := EndTurn(dir, "live"); err != nil {
		t.Fatal(err)
	}
	g, err := HoldTurns(dir, now)
	if err != nil {
		t.Fatal(err)
	}
	g.Release()
	if len(g.SetAside) != 2 || g.SetAside[0].SessionID != "old" || g.SetAside[1].SessionID != "crashed" || !strings.Contains(g.SetAside[1].Stale, "is gone") {
		t.Fatalf("set aside %+v", g.SetAside)
	}
	if ts, _ := Turns(dir, now); len(ts) != 0 {
		t.Fatalf("markers left: %+v", ts)
	}
}

// A lease-only turn is renewed by the hooks of its session only.
func TestRenewTurn(t *testing.T) {
	dir := t.TempDir()
	start := time.Now().Add(-TurnLease + time.Second)
	BeginTurn(dir, Turn{SessionID: "s", StartedAt: start})
	if err := RenewTurn(dir, "other", time.Now()); err != nil {
		t.Fatal(err)
	}
	if ts, _ := Turns(dir, time.Now().Add(2*time.Second)); len(ts) != 1 || ts[0].Running {
		t.Fatalf("unrenewed turn %+v", ts)
	}
	if err := RenewTurn(dir, "s", time.Now()); err != nil {
		t.Fatal(err)
	}
	if ts, _ := Turns(dir, time.Now().Add(2*time.Second)); len(ts) != 1 || !ts[0].Running {
		t.Fatalf("renewed turn %+v", ts)
	}
}

// A session id that is not a plain name gets a hashed marker name.
func TestTurnNames(t *testing.T) {
	for _, s := range []string{"../x", "a/b", ".hidden", strings.Repeat("x", 200), "ß"} {
		n := turnName(s)
		if strings.ContainsAny(n, "/") || strings.HasPrefix(n, ".") || !strings.HasPrefix(n, "h-") {
			t.Fatalf("turnName(%q) = %q", s, n)
		}
	}
	if turnName("4f1c-a_b") != "4f1c-a_b.json" {
		t.Fatal(turnName("4f1c-a_b"))
	}
}

// FindHost walks up from a process to the agent CLI above it.
func TestFindHost(t *testing.T) {
	selfHost(t)
	bin := filepath.Join(t.TempDir(), "claude")
	sh, err := os.ReadFile("/bin/sh")
	if err != nil {
		t.Skip(err)
	}
	if err := os.WriteFile(bin, sh, 0o755); err != nil {
		t.Fatal(err)
	}
	// "claude" runs a shell command whose child is the walk's start, as
	// Claude Code runs a hook.
	cmd := exec.Command(bin, "-c", "sleep 30; true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var child int
	for range 200 {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/task/" + strconv.Itoa(cmd.Process.Pid) + "/children")
		if f := strings.Fields(string(b)); len(f) > 0 {
			// Once it runs sleep (before, the fork is still "claude").
			if comm, _ := os.ReadFile("/proc/" + f[0] + "/comm"); string(comm) == "sleep\n" {
				child, _ = strconv.Atoi(f[0])
				break
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if child == 0 {
		t.Fatal("no child")
	}
	h, ok := FindHost("claude-code", child)
	if !ok || h.PID != cmd.Process.Pid {
		t.Fatalf("FindHost = %+v %v, want pid %d", h, ok, cmd.Process.Pid)
	}
	if alive, known, _ := hostState("/proc", h); !alive || !known {
		t.Fatal("the found host is not alive")
	}
	if h, ok := FindHost("gemini", child); ok {
		t.Fatalf("found a gemini host %+v", h)
	}
	// npm's node script form.
	if !isHost("gemini", procInfo{comm: "node", argv: []string{"node", "/usr/lib/node_modules/@google/gemini-cli/dist/index.js"}}) ||
		!isHost("codex", procInfo{comm: "codex", argv: []string{"/x/vendor/codex/codex", "exec"}}) ||
		isHost("claude-code", procInfo{comm: "bash", argv: []string{"bash", "-c", "cd /home/claude && x"}}) {
		t.Fatal("isHost")
	}
}

// SetTurnAside ends one named session's turn on the user's word.
func TestSetTurnAside(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	self := selfHost(t)
	BeginTurn(dir, Turn{SessionID: "interrupted", StartedAt: now, Host: &self})
	BeginTurn(dir, Turn{SessionID: "other", StartedAt: now, Host: &self})
	if _, err := SetTurnAside(dir, "nobody", now); !errors.Is(err, ErrNoTurn) {
		t.Fatalf("err = %v", err)
	}
	got, err := SetTurnAside(dir, "interrupted", now)
	if err != nil || !got.Running || got.SessionID != "interrupted" {
		t.Fatalf("%+v %v", got, err)
	}
	if ts, _ := Turns(dir, now); len(ts) != 1 || ts[0].SessionID != "other" {
		t.Fatalf("turns %+v", ts)
	}
}

// BenchmarkToolCallTurnWork is what the turns add to each tool call's hook:
// renewing the session's lease and naming the other running turns, with
// two sessions' markers (one on a live agent process, one on a lease).
func BenchmarkToolCallTurnWork(b *testing.B) {
	dir := b.TempDir()
	pi, err := readProc("/proc", os.Getpid())
	if err != nil || !pi.exists {
		b.Skip("no procfs")
	}
	now := time.Now()
	BeginTurn(dir, Turn{SessionID: "a", StartedAt: now, Host: &Host{PID: os.Getpid(), Start: pi.start}})
	BeginTurn(dir, Turn{SessionID: "b", StartedAt: now})
	b.ResetTimer()
	for range b.N {
		if err := RenewTurn(dir, "a", now); err != nil {
			b.Fatal(err)
		}
		if got := otherRunningTurns(dir, "a", now); len(got) != 1 {
			b.Fatal(got)
		}
	}
}
