package client_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// clockTick is the kernel's USER_HZ, the unit of /proc's CPU times (100 on
// every Linux architecture Go supports; sysconf is not in the standard
// library).
const clockTick = 100

// procStat returns a process's parent pid, its own CPU time (utime+stime)
// and its reaped children's (cutime+cstime), in clock ticks.
func procStat(pid int) (ppid int, self, children int64, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, 0, false
	}
	// The command name is parenthesised and may hold spaces; fields count
	// from the state (field 3) after the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return 0, 0, 0, false
	}
	num := func(k int) int64 { n, _ := strconv.ParseInt(f[k], 10, 64); return n }
	return int(num(1)), num(11) + num(12), num(13) + num(14), true
}

// cpuGroup is a set of processes whose CPU time is summed: roots and,
// with tree, every child of a root (a PostgreSQL postmaster's backends).
type cpuGroup struct {
	roots []int
	tree  bool
}

// sample is each process's CPU ticks; a root also carries its reaped
// children's, so a backend that exited during the run is still counted.
func (g cpuGroup) sample() map[int]int64 {
	out := map[int]int64{}
	isRoot := map[int]bool{}
	for _, r := range g.roots {
		isRoot[r] = true
		if _, self, ch, ok := procStat(r); ok {
			out[r] = self
			if g.tree {
				out[r] += ch
			}
		}
	}
	if !g.tree {
		return out
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || isRoot[pid] {
			continue
		}
		if ppid, self, ch, ok := procStat(pid); ok && isRoot[ppid] {
			out[pid] = self + ch
		}
	}
	return out
}

// cpuSeconds is the CPU time the group used between two samples; a process
// that appeared in between counts from zero.
func cpuSeconds(before, after map[int]int64) float64 {
	var t int64
	for pid, a := range after {
		t += a - before[pid]
	}
	return float64(t) / clockTick
}

// machineBusy returns the machine's non-idle CPU time in ticks
// (/proc/stat's first line without idle and iowait): with the groups'
// sum it shows how much of the machine other work took during a run.
func machineBusy(tb testing.TB) int64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		tb.Fatal(err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var t int64
	for k, s := range f[1:] {
		if k == 3 || k == 4 || k >= 7 { // idle, iowait, steal; guest time is in user already
			continue
		}
		n, _ := strconv.ParseInt(s, 10, 64)
		t += n
	}
	return t
}
