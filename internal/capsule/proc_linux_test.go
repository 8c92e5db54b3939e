package capsule

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestGroupGone checks the fast path of the process-group cleanup: a group
// with a live member (or a zombie) is not gone, an empty one is.
func TestGroupGone(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if groupGone(pgid) {
		t.Fatal("a group with a running member reported gone")
	}
	if got := groupProcesses(pgid); len(got) != 1 || got[0].PID != pgid {
		t.Fatalf("groupProcesses = %v, want the sleep", got)
	}
	cmd.Process.Kill()
	time.Sleep(50 * time.Millisecond) // dead now, not yet reaped
	if groupGone(pgid) {
		t.Fatal("a group whose member is an unreaped zombie reported gone")
	}
	cmd.Wait()
	if !groupGone(pgid) {
		t.Fatal("an empty group not reported gone")
	}
	if got := groupMembers(pgid, -1); len(got) != 0 {
		t.Fatalf("groupMembers of an empty group = %v", got)
	}
}
