package capsule

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// Cleanup outcomes, one per recorded process.
const (
	CleanupGone       = "gone"        // no process has that pid any more
	CleanupPIDReused  = "pid_reused"  // the pid names another process now: not signalled
	CleanupNoIdentity = "no_identity" // the capsule recorded no start time: not signalled
	CleanupTerminated = "terminated"  // exited after SIGTERM
	CleanupKilled     = "killed"      // exited after SIGKILL
	CleanupSurvived   = "survived"    // still alive after SIGKILL
	CleanupDenied     = "denied"      // signalling was not permitted
)

// CleanupProcess is what cleanup did to one recorded process.
type CleanupProcess struct {
	PID     int    `json:"pid"`
	Comm    string `json:"comm"`
	Outcome string `json:"outcome"`
}

// CleanupReport is the result of agentdiff cleanup RUN_ID.
type CleanupReport struct {
	RunID     string           `json:"run_id"`
	Processes []CleanupProcess `json:"processes"`
	// Complete is false when a recorded process may still be running
	// (survived, denied or no identity to check).
	Complete bool `json:"complete"`
}

// Cleanup signals the processes a verified run recorded as still alive after
// its own process-group cleanup, each only while its pid still names the
// same process (same start time): SIGTERM, then SIGKILL after grace. It never
// looks for other processes.
func Cleanup(ctx context.Context, root, id string, grace time.Duration) (*CleanupReport, error) {
	dir, err := CapsuleDir(root, id)
	if err != nil {
		return nil, err
	}
	rep, err := verifyCapsule(ctx, dir, id)
	if err != nil {
		return nil, err
	}
	if !rep.OK {
		return nil, fmt.Errorf("%w: refusing to signal processes (run agentdiff verify %s)", ErrUnverified, id)
	}
	var rt Runtime
	if err := readJSON(dir, FileRuntime, &rt); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnverified, err)
	}
	var left []Descendant
	if rt.Cleanup != nil {
		for _, d := range rt.Cleanup.Descendants {
			if !d.Reaped {
				left = append(left, d)
			}
		}
	}
	out := &CleanupReport{RunID: id, Processes: cleanupProcesses(ctx, left, grace), Complete: true}
	for _, p := range out.Processes {
		switch p.Outcome {
		case CleanupSurvived, CleanupDenied, CleanupNoIdentity:
			out.Complete = false
		}
	}
	return out, nil
}

// cleanupProcesses signals each process whose pid still has its recorded
// start time, and reports an outcome for every one.
func cleanupProcesses(ctx context.Context, procs []Descendant, grace time.Duration) []CleanupProcess {
	out := make([]CleanupProcess, 0, len(procs))
	for _, d := range procs {
		out = append(out, CleanupProcess{PID: d.PID, Comm: d.Comm, Outcome: cleanupOne(ctx, d, grace)})
	}
	return out
}

func cleanupOne(ctx context.Context, d Descendant, grace time.Duration) string {
	if d.StartTicks == 0 {
		return CleanupNoIdentity
	}
	same := func() bool {
		start, ok := procIdentity(d.PID)
		return ok && start == d.StartTicks
	}
	if start, ok := procIdentity(d.PID); !ok {
		return CleanupGone
	} else if start != d.StartTicks {
		return CleanupPIDReused
	}
	// waitGone waits up to d for the process to exit.
	waitGone := func(d time.Duration) bool {
		deadline := time.Now().Add(d)
		for same() && time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
		return !same()
	}
	if err := unix.Kill(d.PID, unix.SIGTERM); errors.Is(err, unix.ESRCH) {
		return CleanupGone
	} else if err != nil {
		return CleanupDenied
	}
	if waitGone(grace) {
		return CleanupTerminated
	}
	if err := unix.Kill(d.PID, unix.SIGKILL); errors.Is(err, unix.ESRCH) {
		return CleanupTerminated
	} else if err != nil {
		return CleanupDenied
	}
	if waitGone(time.Second) {
		return CleanupKilled
	}
	return CleanupSurvived
}
