//go:build e2e

package e2e

import (
	"bufio"
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
