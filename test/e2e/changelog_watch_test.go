//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

type watchStatus struct {
	Next  int `json:"next_position"`
	Watch struct {
		Enabled bool   `json:"enabled"`
		Running bool   `json:"running"`
		PID     int    `json:"pid"`
		Vouches bool   `json:"vouches"`
		Reason  string `json:"reason"`
	} `json:"watch"`
}

func (c *checkout) watchStatus() watchStatus {
	c.t.Helper()
	var st watchStatus
	if err := json.Unmarshal([]byte(c.agentscm("changelog", "status", "--root", c.root, "--format", "json")), &st); err != nil {
		c.t.Fatal(err)
	}
	return st
}

// changelogHook runs the installed changelog hook the way Claude Code does
// (a PostToolUse payload on stdin) and fails on any output.
func (c *checkout) changelogHook(env []string, n int) {
	c.t.Helper()
	cmd := exec.Command(h.agentscm, "changelog", "hook-claude")
	cmd.Env = append(c.env(), env...)
	cmd.Stdin = strings.NewReader(fmt.Sprintf(`{"session_id":"s","cwd":%q,"hook_event_name":"PostToolUse","tool_name":"Write","tool_use_id":"toolu_%d"}`, c.root, n))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil || out.Len() > 0 {
		c.t.Fatalf("hook %d: %v: %s", n, err, out.String())
	}
}

func alive(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil }

// The changelog watcher is on by default: the hook starts a watch server,
// which then vouches for each capture (changelog status says so, with its
// pid), every increment stays right across a stopped server and the
// opt-outs, and the server exits once the test's directory is removed.
func TestChangelogWatcherOnByDefault(t *testing.T) {
	var pids []int
	// Registered before the checkout's TempDir: runs after its removal.
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for _, pid := range pids {
			for alive(pid) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if alive(pid) {
				t.Errorf("watch server %d outlived the test's directory", pid)
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	c := newCheckout(t)
	c.agentscm("changelog", "enable", "--root", c.root)
	if st := c.watchStatus(); st.Watch.Running || st.Watch.Vouches || !st.Watch.Enabled {
		t.Fatalf("status before any call: %+v", st)
	}
	n := 0
	edit := func(env ...string) {
		n++
		c.write(fmt.Sprintf("f%d.txt", n), fmt.Sprintf("call %d\n", n))
		c.changelogHook(env, n)
	}
	vouched := func() watchStatus {
		deadline := time.Now().Add(20 * time.Second)
		for {
			edit()
			st := c.watchStatus()
			if st.Watch.Vouches {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("the watcher never vouched: %+v", st)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	st := vouched()
	if !alive(st.Watch.PID) {
		t.Fatalf("status names pid %d, which does not run", st.Watch.PID)
	}
	pids = append(pids, st.Watch.PID)
	edit() // a watched capture
	// Stopped: the next call walks and starts a new server.
	if out := c.agentscm("changelog", "watch", "--root", c.root, "stop"); !strings.Contains(out, "stopped") {
		t.Fatalf("watch stop: %s", out)
	}
	if st := c.watchStatus(); st.Watch.Running || st.Watch.Reason == "" {
		t.Fatalf("status after stop: %+v", st)
	}
	st = vouched()
	pids = append(pids, st.Watch.PID)
	// The environment's opt-out: no server asked (status says why).
	edit("AGENTSCM_CHANGELOG_WATCH=0")
	cmd := exec.Command(h.agentscm, "changelog", "status", "--root", c.root)
	cmd.Env = append(c.env(), "AGENTSCM_CHANGELOG_WATCH=0")
	if out, err := cmd.Output(); err != nil || !strings.Contains(string(out), "AGENTSCM_CHANGELOG_WATCH=0") {
		t.Fatalf("status with the env opt-out: %v: %s", err, out)
	}
	// The setting's opt-out stops the server and starts none.
	c.agentscm("changelog", "watch", "--root", c.root, "off")
	edit()
	edit()
	if st := c.watchStatus(); st.Watch.Running || st.Watch.Enabled {
		t.Fatalf("status with the watcher off: %+v", st)
	}
	c.agentscm("changelog", "watch", "--root", c.root, "on")
	st = vouched()
	pids = append(pids, st.Watch.PID)
	// The server takes the captures (issue 33 item 1). Wedged (stopped),
	// it makes the hook wait AGENTSCM_CHANGELOG_WARM_WAIT and capture
	// itself; continued, it finds the request's deadline passed and
	// stores nothing for it (the count below would show a second
	// increment), and takes the next call's capture.
	if err := syscall.Kill(st.Watch.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	edit("AGENTSCM_CHANGELOG_WARM_WAIT=500ms")
	waited := time.Since(start)
	syscall.Kill(st.Watch.PID, syscall.SIGCONT)
	if waited < 500*time.Millisecond {
		t.Fatalf("the hook answered after %v with the server stopped: it did not ask it", waited)
	}
	edit()
	edit()
	// Every call is one increment holding its file; a replay of the whole
	// sequence gives the checkout as it is.
	list := c.changelogList()
	if len(list) != n {
		t.Fatalf("%d increments for %d calls", len(list), n)
	}
	for i, in := range list[1:] {
		want := fmt.Sprintf("f%d.txt", i+2)
		if in.Changes == nil || !strings.Contains(strings.Join(in.Changes.Created, " "), want) {
			t.Fatalf("increment %d does not create %s: %+v", in.Position, want, in.Changes)
		}
	}
	os.Remove(filepath.Join(c.root, "f1.txt"))
	c.agentscm("changelog", "apply", "--root", c.root, "--to", fmt.Sprint(n-1), "--force")
	for i := 1; i <= n; i++ {
		if _, err := os.Stat(filepath.Join(c.root, fmt.Sprintf("f%d.txt", i))); err != nil {
			t.Fatalf("after the replay: %v", err)
		}
	}
}
