package changelog

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Host is the agent CLI process a turn runs in: its pid and its start time
// (clock ticks since boot, /proc/PID/stat field 22), so that a pid the
// kernel reused for another process is not taken for the agent.
type Host struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
	Name  string `json:"name,omitempty"`
}

// maxHostDepth bounds the walk from the hook up the process tree.
const maxHostDepth = 32

// hostKeys are the names an agent's CLI process goes by: its executable's
// (or script's) base name starts with the first; the second is its npm
// package, found in the script path of a `node …/cli.js` process.
var hostKeys = map[string][2]string{
	"claude-code": {"claude", "/@anthropic-ai/claude-code/"},
	"codex":       {"codex", "/@openai/codex/"},
	"gemini":      {"gemini", "/@google/gemini-cli/"},
}

// procInfo is what /proc says of one process.
type procInfo struct {
	ppid   int
	start  uint64
	state  byte
	comm   string
	argv   []string
	exists bool
}

// readProc reads /proc/PID/stat and cmdline under procRoot. exists is false
// when the process is gone; an error means procfs could not say.
func readProc(procRoot string, pid int) (procInfo, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(filepath.Join(procRoot, "self", "stat")); serr != nil {
			return procInfo{}, fmt.Errorf("no procfs at %s: %w", procRoot, serr)
		}
		return procInfo{}, nil
	}
	if err != nil {
		return procInfo{}, err
	}
	// pid (comm) state ppid ... ; comm may hold spaces and parentheses.
	open, closing := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open {
		return procInfo{}, fmt.Errorf("unreadable stat of pid %d", pid)
	}
	f := strings.Fields(string(b[closing+1:]))
	// f[0] is field 3 (state), f[1] field 4 (ppid), f[19] field 22 (starttime).
	if len(f) < 20 || len(f[0]) != 1 {
		return procInfo{}, fmt.Errorf("unreadable stat of pid %d", pid)
	}
	ppid, err1 := strconv.Atoi(f[1])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil {
		return procInfo{}, fmt.Errorf("unreadable stat of pid %d", pid)
	}
	pi := procInfo{ppid: ppid, start: start, state: f[0][0], comm: string(b[open+1 : closing]), exists: true}
	if cl, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "cmdline")); err == nil {
		pi.argv = strings.Split(strings.TrimRight(string(cl), "\x00"), "\x00")
	}
	return pi, nil
}

// isHost reports whether a process is agent's CLI.
func isHost(agent string, pi procInfo) bool {
	k, ok := hostKeys[agent]
	if !ok {
		k = hostKeys["claude-code"]
	}
	names := []string{pi.comm}
	for i, a := range pi.argv {
		if i > 2 {
			break
		}
		if strings.Contains(a, k[1]) {
			return true
		}
		names = append(names, filepath.Base(a))
	}
	for _, n := range names {
		if n == k[0] || strings.HasPrefix(n, k[0]+"-") || strings.HasPrefix(n, k[0]+".") {
			return true
		}
	}
	return false
}

// FindHost walks up the process tree from pid (the hook's parent) to the
// first process that is agent's CLI (claude-code, codex or gemini) and
// returns it; ok is false when there is none within reach (no procfs, or
// the hook does not run under the agent), and the turn then lives on a
// lease.
func FindHost(agent string, pid int) (Host, bool) {
	return findHost("/proc", agent, pid)
}

func findHost(procRoot, agent string, pid int) (Host, bool) {
	for range maxHostDepth {
		if pid <= 1 {
			return Host{}, false
		}
		pi, err := readProc(procRoot, pid)
		if err != nil || !pi.exists {
			return Host{}, false
		}
		if isHost(agent, pi) {
			return Host{PID: pid, Start: pi.start, Name: pi.comm}, true
		}
		pid = pi.ppid
	}
	return Host{}, false
}

// hostState says whether h still runs: alive, or gone with the reason;
// known is false when procfs cannot tell (the lease decides then).
func hostState(procRoot string, h Host) (alive, known bool, reason string) {
	pi, err := readProc(procRoot, h.PID)
	switch {
	case err != nil:
		return false, false, ""
	case !pi.exists || pi.state == 'Z' || pi.state == 'X':
		return false, true, fmt.Sprintf("its agent process %d (%s) is gone", h.PID, h.Name)
	case pi.start != h.Start:
		return false, true, fmt.Sprintf("its agent process %d (%s) is gone (the pid now belongs to %s, started later)", h.PID, h.Name, pi.comm)
	}
	return true, true, ""
}
