//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// serveProc starts cmd (an `agentscm hub serve` command line), waits for its
// "listening on URL" line and returns the URL with a stop function that is
// also run at cleanup. stop continues a stopped process before terminating it,
// so tests may SIGSTOP it in between.
func serveProc(t testing.TB, cmd *exec.Cmd) (string, func()) {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cmd.Process.Signal(syscall.SIGCONT)
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
		})
	}
	t.Cleanup(stop)
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		for sc.Scan() {
		}
	}()
	select {
	case line := <-lines:
		if !strings.HasPrefix(line, "listening on ") {
			stop()
			t.Fatalf("hub serve: %q", line)
		}
		return strings.TrimPrefix(line, "listening on "), stop
	case <-time.After(30 * time.Second):
		stop()
		t.Fatal("hub serve did not start")
	}
	return "", stop
}

// checkRewinds checks the checkout's state after the session (states[3]) and
// after rewinds to positions 0, 2, 3 and 1, each against states[position].
func checkRewinds(t *testing.T, c *checkout, states []string) {
	t.Helper()
	if got := codexState(t, c.root); got != states[3] {
		t.Fatalf("after the session: %s", got)
	}
	for _, to := range []int{0, 2, 3, 1} {
		c.agentscm("rewind", "--root", c.root, "--to", fmt.Sprint(to))
		if got := codexState(t, c.root); got != states[to] {
			t.Fatalf("after rewind to %d: %s, want %s", to, got, states[to])
		}
	}
}

// resumedSession is what `rewind --resume-conversation --format json` says
// of the session it made.
type resumedSession struct {
	SessionID      string `json:"session_id"`
	FromSession    string `json:"from_session"`
	IncludesResult bool   `json:"includes_result"`
	Command        string `json:"command"`
}

// resumeAt1 rewinds to position 1 with the conversation and checks that a
// fresh session cut after the call's result was made from session, resumed
// by resumeCmd followed by its id.
func resumeAt1(t *testing.T, c *checkout, session, resumeCmd string) resumedSession {
	t.Helper()
	var out struct {
		Resumed resumedSession `json:"resumed"`
	}
	if err := json.Unmarshal([]byte(c.agentscm("rewind", "--root", c.root, "--to", "1", "--resume-conversation", "--format", "json")), &out); err != nil {
		t.Fatal(err)
	}
	r := out.Resumed
	if r.FromSession != session || !r.IncludesResult || r.Command != resumeCmd+" "+r.SessionID || r.SessionID == session {
		t.Fatalf("resumed %+v", r)
	}
	return r
}
