package capsule

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cleanupProcesses signals a recorded process only while its pid still has
// the recorded start time: a reused pid (another start time) is left alone.
func TestCleanupChecksIdentity(t *testing.T) {
	start := func(t *testing.T, script string) (*exec.Cmd, Descendant) {
		ready := filepath.Join(t.TempDir(), "ready")
		cmd := exec.Command("sh", "-c", script)
		cmd.Env = append(os.Environ(), "READY="+ready)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(script, "READY") { // the trap is set once the file exists
			for i := 0; i < 500; i++ {
				if _, err := os.Stat(ready); err == nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		waited := make(chan struct{})
		go func() { cmd.Wait(); close(waited) }() // reap, so an exit is seen as gone
		t.Cleanup(func() { cmd.Process.Kill(); <-waited })
		var ticks uint64
		for i := 0; i < 100; i++ {
			if v, ok := procIdentity(cmd.Process.Pid); ok {
				ticks = v
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if ticks == 0 {
			t.Fatal("no start time")
		}
		return cmd, Descendant{PID: cmd.Process.Pid, Comm: "sh", StartTicks: ticks}
	}
	for _, tc := range []struct {
		name   string
		script string
		mutate func(*Descendant)
		want   string
		alive  bool
	}{
		{"terminated", "sleep 60", nil, CleanupTerminated, false},
		{"killed after ignoring SIGTERM", "trap '' TERM; touch \"$READY\"; while :; do sleep 0.05; done", nil, CleanupKilled, false},
		{"pid reused", "sleep 60", func(d *Descendant) { d.StartTicks++ }, CleanupPIDReused, true},
		{"no identity", "sleep 60", func(d *Descendant) { d.StartTicks = 0 }, CleanupNoIdentity, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd, d := start(t, tc.script)
			if tc.mutate != nil {
				tc.mutate(&d)
			}
			got := cleanupProcesses(context.Background(), []Descendant{d}, 200*time.Millisecond)
			if len(got) != 1 || got[0].Outcome != tc.want {
				t.Fatalf("outcome %+v, want %s", got, tc.want)
			}
			if _, ok := procIdentity(cmd.Process.Pid); ok != tc.alive {
				t.Fatalf("alive %v, want %v", ok, tc.alive)
			}
		})
	}
	if got := cleanupProcesses(context.Background(), []Descendant{{PID: 1 << 22, StartTicks: 5}}, 0); got[0].Outcome != CleanupGone {
		t.Fatalf("a pid no process has: %+v", got)
	}
}
