//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/test/e2e/scriptedapi"
)

// waitCmd is a shell command that takes n seconds (Claude Code's Bash tool
// refuses a plain long sleep).
func waitCmd(n int) string { return fmt.Sprintf("timeout %d tail -f /dev/null", n) }

// bgClaude is a Claude Code session running in the background.
type bgClaude struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	done           chan error
	api            *scriptedapi.Server
}

// startClaude starts `claude -p PROMPT` in the checkout against its own
// scripted API running turn, without waiting for it.
func (c *checkout) startClaude(turn scriptedapi.Turn) *bgClaude {
	c.t.Helper()
	api, err := scriptedapi.Start(turn)
	if err != nil {
		c.t.Fatal(err)
	}
	b := &bgClaude{api: api, done: make(chan error, 1)}
	b.cmd = exec.Command(h.claude, "--output-format", "json", "--allowedTools", "Write,Edit,Bash,Read", "-p", "Run "+turn.Marker+".")
	b.cmd.Dir = c.root
	b.cmd.Env = append(c.env(),
		"ANTHROPIC_BASE_URL="+api.URL,
		"ANTHROPIC_API_KEY=sk-ant-e2e-dummy-key",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_AUTOUPDATER=1",
		"DISABLE_TELEMETRY=1",
	)
	b.cmd.Stdout, b.cmd.Stderr = &b.stdout, &b.stderr
	if err := b.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() { b.done <- b.cmd.Wait() }()
	c.t.Cleanup(func() {
		b.cmd.Process.Kill()
		<-b.done
		api.Close()
	})
	return b
}

// wait waits for the session to exit (within 3 minutes) and returns its
// result, failing on an error.
func (b *bgClaude) wait(t *testing.T) claudeResult {
	t.Helper()
	select {
	case err := <-b.done:
		b.done <- err // for the cleanup
		if err != nil {
			t.Fatalf("claude: %v\nstdout: %s\nstderr: %s", err, b.stdout.String(), b.stderr.String())
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("claude did not finish\nstdout: %s\nstderr: %s", b.stdout.String(), b.stderr.String())
	}
	var res claudeResult
	if err := json.Unmarshal(b.stdout.Bytes(), &res); err != nil {
		t.Fatalf("claude output is not JSON: %v\n%s\nstderr: %s", err, b.stdout.String(), b.stderr.String())
	}
	return res
}

// turnsStatus is what `changelog status --format json` says of the turns.
func (c *checkout) turnsStatus() []changelog.TurnStatus {
	c.t.Helper()
	var out struct {
		Turns []changelog.TurnStatus `json:"turns"`
	}
	if err := json.Unmarshal([]byte(c.agentscm("changelog", "status", "--root", c.root, "--format", "json")), &out); err != nil {
		c.t.Fatal(err)
	}
	return out.Turns
}

// waitRunningCall waits until b's turn is running in the checkout and its
// first tool call has been handed out (the model's reply with the call was
// sent), and returns the turn.
func (c *checkout) waitRunningCall(b *bgClaude, session string) changelog.TurnStatus {
	c.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		main := 0
		for _, r := range b.api.Requests() {
			if r.Main {
				main++
			}
		}
		if main >= 1 {
			for _, tn := range c.turnsStatus() {
				if tn.Running && tn.SessionID != session {
					time.Sleep(2 * time.Second) // the call starts running
					return tn
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.t.Fatalf("no running turn with a tool call\nstdout: %s\nstderr: %s", b.stdout.String(), b.stderr.String())
	return changelog.TurnStatus{}
}

// Two sessions in one checkout, one at a time (the default): while session
// A is inside a long Bash call, a rewind is refused naming A, and session
// B's prompt waits for A's turn, then is refused by its UserPromptSubmit
// hook: B's prompt never reaches the model, B writes nothing, and the
// sequence holds A's calls only.
func TestChangelogSecondSessionRefused(t *testing.T) {
	c := newCheckout(t)
	c.agentscm("changelog", "enable", "--root", c.root)
	c.runTurn([]scriptedapi.ToolCall{write(filepath.Join(c.root, "one.txt"), "1\n")})
	a := c.startClaude(scriptedapi.Turn{Marker: "SCENARIO-A", Steps: [][]scriptedapi.ToolCall{{bash(waitCmd(28) + "; echo a > a.txt")}}, FinalText: "ok"})
	ta := c.waitRunningCall(a, "")
	if ta.Agent != "claude-code" || ta.Host == nil || ta.Host.PID != a.cmd.Process.Pid {
		t.Fatalf("A's turn %+v: want the claude process %d as its host", ta, a.cmd.Process.Pid)
	}
	code, stdout, stderr := c.agentscmExit("rewind", "--root", c.root, "--to", "0")
	if code != 5 || !strings.Contains(stderr, "an agent turn is running: session "+ta.SessionID+" (claude-code, pid "+strconv.Itoa(ta.Host.PID)) {
		t.Fatalf("rewind during A's call: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !exists(t, filepath.Join(c.root, "one.txt")) {
		t.Fatal("the refused rewind changed the checkout")
	}

	start := time.Now()
	b := c.startClaude(scriptedapi.Turn{Marker: "SCENARIO-B", Steps: [][]scriptedapi.ToolCall{{write(filepath.Join(c.root, "bee.txt"), "b\n")}}, FinalText: "ok"})
	select {
	case err := <-b.done:
		b.done <- err // for the cleanup
	case <-time.After(2 * time.Minute):
		t.Fatal("session B did not end")
	}
	waited := time.Since(start)
	out := b.stdout.String() + b.stderr.String()
	t.Logf("session B after %s: %s", waited, out)
	if waited < changelog.TurnWait {
		t.Fatalf("B ended after %s, before the wait for A's turn", waited)
	}
	for _, r := range b.api.Requests() {
		if r.Main {
			t.Fatalf("B's prompt reached the model: %s", r.Body)
		}
	}
	if exists(t, filepath.Join(c.root, "bee.txt")) {
		t.Fatal("B wrote bee.txt")
	}
	if !strings.Contains(out, "session "+ta.SessionID+" (claude-code) is running a turn in "+c.root) || !strings.Contains(out, "git worktree add") {
		t.Fatalf("B's output does not carry the refusal naming A and a worktree:\n%s", out)
	}

	a.wait(t)
	c.waitDelivered()
	if !exists(t, filepath.Join(c.root, "a.txt")) {
		t.Fatal("A's call did not finish")
	}
	list := c.changelogList()
	checkPositions(t, list, []string{"Write", "Bash"}, -1)
	if list[1].Session != ta.SessionID {
		t.Fatalf("position 1 belongs to %s, want A %s", list[1].Session, ta.SessionID)
	}
	if ts := c.turnsStatus(); len(ts) != 0 {
		t.Fatalf("turns left after both sessions: %+v", ts)
	}
	c.agentscm("rewind", "--root", c.root, "--to", "0")
}

// With --parallel-sessions both sessions run: B's position, taken while A's
// turn ran, names A; a rewind during A's tool call is refused naming A; once
// A is done, a rewind to B's position warns that A's writes are mixed in.
func TestChangelogParallelSessions(t *testing.T) {
	c := newCheckout(t)
	out := c.agentscm("changelog", "enable", "--root", c.root, "--parallel-sessions")
	if !strings.Contains(out, "sessions:   parallel") {
		t.Fatalf("enable output:\n%s", out)
	}
	a := c.startClaude(scriptedapi.Turn{Marker: "SCENARIO-A", Steps: [][]scriptedapi.ToolCall{{bash(waitCmd(25) + "; echo a > a.txt")}}, FinalText: "ok"})
	ta := c.waitRunningCall(a, "")
	bres := c.startClaude(scriptedapi.Turn{Marker: "SCENARIO-B", Steps: [][]scriptedapi.ToolCall{{write(filepath.Join(c.root, "bee.txt"), "b\n")}}, FinalText: "ok"}).wait(t)
	if !exists(t, filepath.Join(c.root, "bee.txt")) {
		t.Fatal("B did not run beside A")
	}
	code, stdout, stderr := c.agentscmExit("rewind", "--root", c.root, "--to", "0")
	if code != 5 || !strings.Contains(stderr, "session "+ta.SessionID+" (claude-code, pid "+strconv.Itoa(ta.Host.PID)) {
		t.Fatalf("rewind during A's call: exit %d\n%s\n%s", code, stdout, stderr)
	}
	a.wait(t)
	c.waitDelivered()
	list := c.changelogList()
	checkPositions(t, list, []string{"Write", "Bash"}, -1)
	if list[0].Session != bres.SessionID || len(list[0].Concurrent) != 1 || list[0].Concurrent[0] != ta.SessionID {
		t.Fatalf("B's position %+v: want session %s beside %s", list[0], bres.SessionID, ta.SessionID)
	}
	if list[1].Session != ta.SessionID || len(list[1].Concurrent) != 0 {
		t.Fatalf("A's position %+v", list[1])
	}
	text := c.agentscm("changelog", "list", "--root", c.root)
	if !strings.Contains(text, "session "+bres.SessionID) || !strings.Contains(text, "taken while the turn of session "+ta.SessionID+" ran") {
		t.Fatalf("list:\n%s", text)
	}
	code, stdout, stderr = c.agentscmExit("rewind", "--root", c.root, "--to", "0")
	if code != 0 || !strings.Contains(stderr, "was taken while the turn of session "+ta.SessionID+" was running") {
		t.Fatalf("rewind to B's position: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if exists(t, filepath.Join(c.root, "a.txt")) || !exists(t, filepath.Join(c.root, "bee.txt")) {
		t.Fatal("the rewind to B's position")
	}
}

// A host killed mid-turn (kill -9 of the claude process while its Bash call
// runs) leaves a turn that `changelog status` shows as stale; the next
// rewind proceeds and names the turn it set aside.
func TestChangelogKilledHostTurnSetAside(t *testing.T) {
	c := newCheckout(t)
	c.agentscm("changelog", "enable", "--root", c.root)
	c.runTurn([]scriptedapi.ToolCall{write(filepath.Join(c.root, "one.txt"), "1\n")})
	// The call writes nothing: only the turn is left behind.
	a := c.startClaude(scriptedapi.Turn{Marker: "SCENARIO-A", Steps: [][]scriptedapi.ToolCall{{bash(waitCmd(60))}}, FinalText: "ok"})
	ta := c.waitRunningCall(a, "")
	if code, _, stderr := c.agentscmExit("rewind", "--root", c.root, "--to", "0"); code != 5 {
		t.Fatalf("rewind during the turn: exit %d %s", code, stderr)
	}
	if err := a.cmd.Process.Signal(os.Kill); err != nil {
		t.Fatal(err)
	}
	<-a.done // reaped: no zombie is left either
	a.done <- nil
	ts := c.turnsStatus()
	if len(ts) != 1 || ts[0].Running || ts[0].SessionID != ta.SessionID || !strings.Contains(ts[0].Stale, "is gone") {
		t.Fatalf("turns after kill -9: %+v", ts)
	}
	text := c.agentscm("changelog", "status", "--root", c.root)
	if !strings.Contains(text, "turn stale:    session "+ta.SessionID) {
		t.Fatalf("status:\n%s", text)
	}
	code, stdout, stderr := c.agentscmExit("rewind", "--root", c.root, "--to", "0")
	if code != 0 || !strings.Contains(stderr, "set aside the stale turn of session "+ta.SessionID+" (claude-code, pid "+strconv.Itoa(ta.Host.PID)) || !strings.Contains(stderr, "is gone") {
		t.Fatalf("rewind after kill -9: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !exists(t, filepath.Join(c.root, "one.txt")) {
		t.Fatal("the rewind did not restore position 0")
	}
	if ts := c.turnsStatus(); len(ts) != 0 {
		t.Fatalf("turns after the rewind: %+v", ts)
	}
}
