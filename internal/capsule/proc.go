package capsule

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Descendant is a process found in the command's process group after the
// command itself exited or was killed.
type Descendant struct {
	PID    int    `json:"pid"`
	PPID   int    `json:"ppid"`
	Comm   string `json:"comm"`
	Reaped bool   `json:"reaped"` // gone after the group was killed
	// StartTicks is the process's start time (clock ticks after boot,
	// /proc/PID/stat field 22): with the pid, its identity, so a later
	// cleanup never signals a process that reused the pid.
	StartTicks uint64 `json:"start_ticks,omitempty"`
}

// ProcessCleanup reports what happened to the command's process group.
type ProcessCleanup struct {
	ProcessGroup int          `json:"process_group"`
	Signal       string       `json:"signal,omitempty"` // signal sent to the group, if any
	Descendants  []Descendant `json:"descendants"`
	Remaining    int          `json:"remaining"` // descendants still alive after cleanup
	Note         string       `json:"note"`
}

// ExitState is the command's end state.
type ExitState struct {
	Exited   bool   `json:"exited"`
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	TimedOut bool   `json:"timed_out"`
}

// PortObservation is a machine-wide point-in-time comparison of listening TCP
// sockets, not causal attribution.
type PortObservation struct {
	Source string   `json:"source"`
	Before []string `json:"before"`
	After  []string `json:"after"`
	// During lists the listening sockets that samples taken while the
	// command ran (and once more before its process group was cleaned up)
	// saw and that were not listening before: machine-wide, like After.
	During []string `json:"during"`
	// GroupListeners are the sampled listening sockets held open by a
	// process of the command's process group (a socket inode among its fds).
	GroupListeners []GroupListener `json:"group_listeners"`
	Samples        int             `json:"samples"`
	// Opened: listening after the run or held by the group at a sample, and not before.
	Opened  []string `json:"opened"`
	Closed  []string `json:"closed"`
	Error   string   `json:"error,omitempty"`
	Caveats string   `json:"caveats"`
}

// GroupListener is a listening socket found among the fds of a process of
// the command's process group.
type GroupListener struct {
	Addr string `json:"addr"`
	PID  int    `json:"pid"`
	Comm string `json:"comm"`
}

// Runtime is runtime.json.
type Runtime struct {
	SchemaVersion int             `json:"schema_version"`
	RunID         string          `json:"run_id"`
	Backend       string          `json:"backend"`
	Argv          []string        `json:"argv"` // redacted
	Executable    string          `json:"executable,omitempty"`
	Dir           string          `json:"dir"`
	Launched      bool            `json:"launched"`
	PID           int             `json:"pid,omitempty"`
	StartedAt     *time.Time      `json:"started_at,omitempty"`
	EndedAt       *time.Time      `json:"ended_at,omitempty"`
	DurationMS    int64           `json:"duration_ms"`
	Timeout       string          `json:"timeout,omitempty"`
	Exit          *ExitState      `json:"exit"`
	Cleanup       *ProcessCleanup `json:"process_cleanup"`
	Ports         PortObservation `json:"ports"`
	LaunchError   string          `json:"launch_error,omitempty"`
	Cancelled     bool            `json:"cancelled,omitempty"` // agentdiff was interrupted and killed the group
	// AfterListing says how the after manifest was taken: "watched: N of M
	// directories re-listed" or "full: <why the watch could not vouch>".
	AfterListing string `json:"after_listing,omitempty"`
	// PhaseMS is agentdiff's own time per phase (milliseconds), for overhead accounting.
	PhaseMS map[string]int64 `json:"phase_ms"`
}

// Backend names the execution backend in runtime.json.
const Backend = "local-process (not sandboxed)"

// launchSpec is what runCommand needs.
type launchSpec struct {
	path    string
	argv    []string
	dir     string
	env     []string
	stdin   io.Reader
	stdout  io.Writer
	stderr  io.Writer
	timeout time.Duration
	ports   *portSampler // sampled while the command runs and once before cleanup; nil: not sampled
}

// runCommand starts the command in its own process group, waits for it (up to
// the timeout, then SIGTERM and after a grace period SIGKILL to the whole
// group), and afterwards kills and accounts for every process left in the group.
func runCommand(ctx context.Context, s launchSpec, rt *Runtime) error {
	cmd := exec.Command(s.path)
	cmd.Args = s.argv
	cmd.Dir = s.dir
	cmd.Env = s.env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = s.stdin, s.stdout, s.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Children inherit pipes; do not wait forever for a descendant holding them.
	cmd.WaitDelay = 2 * time.Second
	start := time.Now().UTC()
	if err := cmd.Start(); err != nil {
		return err
	}
	rt.Launched = true
	rt.PID = cmd.Process.Pid
	rt.StartedAt = &start
	pgid := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stopSampling := s.ports.start(pgid)
	var timer <-chan time.Time
	if s.timeout > 0 {
		t := time.NewTimer(s.timeout)
		defer t.Stop()
		timer = t.C
	}
	cleanup := &ProcessCleanup{ProcessGroup: pgid, Descendants: []Descendant{},
		Note: "processes that left the process group (setsid, double fork into another group) are not tracked"}
	rt.Cleanup = cleanup
	timedOut, cancelled := false, false
	var waitErr error
	select {
	case waitErr = <-done:
	case <-timer:
		timedOut = true
	case <-ctx.Done():
		cancelled = true
	}
	// The group's listeners are observed once more before it is cleaned up
	// (a `server &` the command left behind is still listening now).
	stopSampling()
	s.ports.sample(pgid)
	if timedOut || cancelled {
		// Snapshot the group before signalling so the report names everyone.
		members := groupMembers(pgid, rt.PID)
		cleanup.Signal = "SIGTERM"
		_ = unix.Kill(-pgid, unix.SIGTERM)
		select {
		case waitErr = <-done:
		case <-time.After(time.Second):
			cleanup.Signal = "SIGTERM,SIGKILL"
			_ = unix.Kill(-pgid, unix.SIGKILL)
			waitErr = <-done
		}
		cleanup.Descendants = append(cleanup.Descendants, members...)
	}
	end := time.Now().UTC()
	rt.EndedAt = &end
	rt.DurationMS = end.Sub(start).Milliseconds()
	// Anything still in the group outlived the command: kill it.
	left := groupMembers(pgid, rt.PID)
	if len(left) > 0 {
		if cleanup.Signal == "" {
			cleanup.Signal = "SIGKILL"
		} else if !strings.HasSuffix(cleanup.Signal, "SIGKILL") {
			cleanup.Signal += ",SIGKILL"
		}
		_ = unix.Kill(-pgid, unix.SIGKILL)
		for _, d := range left {
			if !slices.ContainsFunc(cleanup.Descendants, func(x Descendant) bool { return x.PID == d.PID }) {
				cleanup.Descendants = append(cleanup.Descendants, d)
			}
		}
	}
	// Wait (bounded) for the group to disappear; reap our own children.
	deadline := time.Now().Add(3 * time.Second)
	for {
		for _, d := range groupMembers(pgid, rt.PID) {
			if d.PPID == os.Getpid() {
				var ws unix.WaitStatus
				_, _ = unix.Wait4(d.PID, &ws, unix.WNOHANG, nil)
			}
		}
		if len(groupMembers(pgid, rt.PID)) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	still := groupMembers(pgid, rt.PID)
	cleanup.Remaining = len(still)
	for i := range cleanup.Descendants {
		d := &cleanup.Descendants[i]
		d.Reaped = !slices.ContainsFunc(still, func(x Descendant) bool { return x.PID == d.PID })
	}
	st := &ExitState{TimedOut: timedOut}
	rt.Exit = st
	if ps := cmd.ProcessState; ps != nil {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
			if ws.Signaled() {
				st.Signal = unix.SignalName(ws.Signal())
				st.ExitCode = -1
			} else {
				st.Exited = true
				st.ExitCode = ws.ExitStatus()
			}
		}
	}
	rt.Cancelled = cancelled
	var ee *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &ee) && !errors.Is(waitErr, exec.ErrWaitDelay) {
		return waitErr
	}
	return nil
}

// groupMembers lists live (non-zombie counted too) processes whose process
// group is pgid, excluding the command itself (pid self).
func groupMembers(pgid, self int) []Descendant { return scanGroup(pgid, self, true) }

// scanGroup lists the live processes of group pgid except self; with reap set
// it reaps the group's zombies that are agentdiff's children.
func scanGroup(pgid, self int, reap bool) []Descendant {
	if groupGone(pgid) {
		return nil
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []Descendant
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...
		s := string(b)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < open {
			continue
		}
		f := strings.Fields(s[close+1:])
		if len(f) < 3 {
			continue
		}
		pg, _ := strconv.Atoi(f[2])
		if pg != pgid {
			continue
		}
		if f[0] == "Z" || f[0] == "X" {
			// A zombie is dead; reap it if it is ours, otherwise its parent will.
			ppid, _ := strconv.Atoi(f[1])
			if reap && ppid == os.Getpid() {
				var ws unix.WaitStatus
				_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
			}
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		start, _ := statStartTicks(f)
		out = append(out, Descendant{PID: pid, PPID: ppid, Comm: s[open+1 : close], StartTicks: start})
	}
	return out
}

// groupGone reports whether no process (zombies included) is left in group
// pgid: kill(-pgid, 0) fails with ESRCH. It spares the /proc scans of the
// process-group cleanup in the common case of a command that left nothing
// behind (five scans of every process on the machine, a read of
// /proc/PID/stat each). Any other answer (a member exists, or one we may not
// signal) means scanning.
func groupGone(pgid int) bool { return pgid > 0 && unix.Kill(-pgid, 0) == unix.ESRCH }

// listeningPorts reads /proc/net/tcp and /proc/net/tcp6 and returns the
// listening sockets as "tcp4 127.0.0.1:8080" / "tcp6 [::1]:8080", sorted.
func listeningPorts() ([]string, error) {
	ls, err := listeningSockets()
	out := make([]string, 0, len(ls))
	for _, l := range ls {
		out = append(out, l.addr)
	}
	slices.Sort(out)
	return slices.Compact(out), err
}

// decodeProcAddr decodes "0100007F:1F90" (little-endian 32-bit words) to "127.0.0.1:8080".
func decodeProcAddr(s, fam string) (string, error) {
	hexIP, hexPort, ok := strings.Cut(s, ":")
	if !ok {
		return "", fmt.Errorf("bad address %q", s)
	}
	port, err := strconv.ParseUint(hexPort, 16, 16)
	if err != nil {
		return "", fmt.Errorf("bad port %q", hexPort)
	}
	if len(hexIP) != 8 && len(hexIP) != 32 {
		return "", fmt.Errorf("bad ip %q", hexIP)
	}
	ip := make([]byte, 0, 16)
	for i := 0; i < len(hexIP); i += 8 {
		w, err := strconv.ParseUint(hexIP[i:i+8], 16, 32)
		if err != nil {
			return "", fmt.Errorf("bad ip %q", hexIP)
		}
		ip = append(ip, byte(w), byte(w>>8), byte(w>>16), byte(w>>24))
	}
	if len(ip) == 4 {
		return fmt.Sprintf("%d.%d.%d.%d:%d", ip[0], ip[1], ip[2], ip[3], port), nil
	}
	var parts []string
	for i := 0; i < 16; i += 2 {
		parts = append(parts, strconv.FormatUint(uint64(ip[i])<<8|uint64(ip[i+1]), 16))
	}
	return "[" + strings.Join(parts, ":") + "]:" + strconv.FormatUint(port, 10), nil
}

func diffSorted(before, after []string) (added, removed []string) {
	added, removed = []string{}, []string{}
	for _, a := range after {
		if !slices.Contains(before, a) {
			added = append(added, a)
		}
	}
	for _, b := range before {
		if !slices.Contains(after, b) {
			removed = append(removed, b)
		}
	}
	return added, removed
}

// statStartTicks reads the start time from the fields of /proc/PID/stat
// after the command name (state is the first; starttime is field 22 of the
// whole line, the 20th after the name).
func statStartTicks(f []string) (uint64, bool) {
	if len(f) < 20 {
		return 0, false
	}
	v, err := strconv.ParseUint(f[19], 10, 64)
	return v, err == nil
}

// procIdentity reads a live process's start time; ok is false when the pid
// names no process (or a zombie).
func procIdentity(pid int) (start uint64, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, false
	}
	s := string(b)
	c := strings.LastIndexByte(s, ')')
	if c < 0 {
		return 0, false
	}
	f := strings.Fields(s[c+1:])
	if len(f) == 0 || f[0] == "Z" || f[0] == "X" {
		return 0, false
	}
	return statStartTicks(f)
}
