package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// newCgroup makes a cpuacct cgroup (cgroup v1) for one checkout's
// sessions; an error when the hierarchy is not there or not writable.
func newCgroup(name string) (string, error) {
	d := filepath.Join("/sys/fs/cgroup/cpuacct", name)
	if err := os.Mkdir(d, 0o755); err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(d, "cpuacct.usage")); err != nil {
		os.Remove(d)
		return "", err
	}
	return d, nil
}

// removeCgroup ends the processes the benchmark's sessions left in the
// cgroup (the checkout's idle watcher) and removes it.
func removeCgroup(d string) {
	for i := range 20 {
		b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		pids := strings.Fields(string(b))
		if len(pids) == 0 {
			break
		}
		sig := syscall.SIGTERM
		if i > 5 {
			sig = syscall.SIGKILL
		}
		for _, p := range pids {
			if n, err := strconv.Atoi(p); err == nil {
				syscall.Kill(n, sig)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	os.Remove(d)
}

// proc is one traced process.
type proc struct {
	pid, parent int
	start, exit float64 // seconds of the day; exit 0 while running
	argv        []string
	execs       [][]string
}

// traceLog is a parsed `strace -f -tt -e trace=execve,clone,...` log.
type traceLog struct {
	procs      map[int]*proc
	first      int
	t0, agentT float64 // the agent's start and exit
}

var (
	lineRE  = regexp.MustCompile(`^(\d+)\s+(\d\d):(\d\d):(\d\d\.\d+)\s+(.*)$`)
	childRE = regexp.MustCompile(`= (\d+)$`)
	argRE   = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)
)

func parseTrace(r io.Reader) *traceLog {
	tl := &traceLog{procs: map[int]*proc{}}
	get := func(pid int, t float64) *proc {
		p := tl.procs[pid]
		if p == nil {
			p = &proc{pid: pid, start: t}
			tl.procs[pid] = p
		}
		return p
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		m := lineRE.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[1])
		h, _ := strconv.Atoi(m[2])
		mi, _ := strconv.Atoi(m[3])
		s, _ := strconv.ParseFloat(m[4], 64)
		t := float64(h*3600+mi*60) + s
		rest := m[5]
		if tl.first == 0 {
			tl.first, tl.t0 = pid, t
		}
		p := get(pid, t)
		switch {
		case strings.HasPrefix(rest, "execve("):
			if strings.Contains(rest, "= -1") {
				continue
			}
			i := strings.Index(rest, ", [")
			j := strings.Index(rest, "]")
			if i < 0 || j < i {
				continue
			}
			var argv []string
			for _, a := range argRE.FindAllStringSubmatch(rest[i:j], -1) {
				argv = append(argv, a[1])
			}
			if len(p.execs) == 0 {
				p.start = t
			}
			p.execs = append(p.execs, argv)
			p.argv = argv
		case strings.HasPrefix(rest, "+++ exited") || strings.HasPrefix(rest, "+++ killed"):
			p.exit = t
			if pid == tl.first {
				tl.agentT = t
			}
		case strings.Contains(rest, "clone") || strings.Contains(rest, "fork"):
			if cm := childRE.FindStringSubmatch(rest); cm != nil {
				child, _ := strconv.Atoi(cm[1])
				c := get(child, t)
				c.parent = pid
				if len(c.execs) == 0 && c.start > t {
					c.start = t
				}
			}
		}
	}
	return tl
}

// tracedSession runs one session under strace (execve, clone and exits of
// every process, followed into the detached ones) and parses the log once
// the agent exited and its deliverers finished; strace then detaches from
// what still runs (the watcher).
func tracedSession(a *agent, c *checkout, marker string, calls int, file string) (*traceLog, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := a.command(ctx, c, marker)
	cmd.Dir = c.root
	cmd.Args = append([]string{"strace", "-f", "-tt", "-q", "--seccomp-bpf", "-e", "trace=execve,clone,clone3,fork,vfork", "-s", "300", "-o", file, "--"}, cmd.Args...)
	sp, err := exec.LookPath("strace")
	if err != nil {
		return nil, err
	}
	cmd.Path = sp
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var tl *traceLog
	exited := false
	for tl == nil {
		select {
		case <-done:
			exited = true
			f, _ := os.Open(file)
			tl = parseTrace(f)
			f.Close()
		case <-time.After(100 * time.Millisecond):
			f, err := os.Open(file)
			if err != nil {
				continue
			}
			l := parseTrace(f)
			f.Close()
			if l.agentT > 0 {
				tl = l
			}
		case <-ctx.Done():
			cmd.Process.Kill()
			return nil, fmt.Errorf("traced %s: %v", c.label(), ctx.Err())
		}
	}
	var s sample
	if err := drain(c, &s); err != nil {
		return nil, err
	}
	if !exited {
		time.Sleep(300 * time.Millisecond)
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tl = parseTrace(f)
	if tl.agentT == 0 {
		return nil, fmt.Errorf("traced %s: the agent's exit is not in %s", c.label(), file)
	}
	return tl, checkRan(c, marker, calls)
}

// command is how the log names a process: a shell's -c command, or its
// argv, with the binaries' directory left out.
func (p *proc) command(bin string) string {
	argv := p.argv
	if len(p.execs) > 0 {
		argv = p.execs[0]
	}
	s := strings.Join(argv, " ")
	if len(argv) >= 3 && strings.HasSuffix(argv[0], "sh") && argv[1] == "-c" {
		s = argv[2]
	}
	return strings.ReplaceAll(s, bin+string(filepath.Separator), "")
}

func (tl *traceLog) hookish(p *proc, bin string) bool {
	for _, argv := range p.execs {
		j := strings.Join(argv, " ")
		if strings.Contains(j, bin+string(filepath.Separator)) || (len(argv) > 0 && argv[0] == "/bin/true") || strings.HasSuffix(j, "-c /bin/true") {
			return true
		}
	}
	return false
}

// event is one host hook event: the entries that ran together.
type event struct {
	start, end float64
	entries    []*proc
}

// report writes the hook entries per event (grouped by overlap, in order),
// the processes the hooks spawned, and the totals.
func (tl *traceLog) report(w io.Writer, an, variant, bin string, calls int) {
	var roots, spawned []*proc
	for _, p := range tl.procs {
		if !tl.hookish(p, bin) {
			continue
		}
		root := true
		var top *proc
		for q := tl.procs[p.parent]; q != nil; q = tl.procs[q.parent] {
			if tl.hookish(q, bin) {
				root, top = false, q
			}
		}
		if root {
			roots = append(roots, p)
		} else if p.command(bin) != top.command(bin) {
			spawned = append(spawned, p)
		}
	}
	slices.SortFunc(roots, func(a, b *proc) int { return cmpF(a.start, b.start) })
	evs, labels := groupEvents(roots, eventSeq(an, calls), tl.agentT)
	wall := tl.agentT - tl.t0
	var hookSum float64
	type agg struct {
		n     int
		walls []float64
		ents  map[string][]float64
	}
	byLabel := map[string]*agg{}
	var order []string
	for i, e := range evs {
		l := labels[i]
		a := byLabel[l]
		if a == nil {
			a = &agg{ents: map[string][]float64{}}
			byLabel[l] = a
			order = append(order, l)
		}
		a.n++
		a.walls = append(a.walls, (e.end-e.start)*1000)
		hookSum += e.end - e.start
		for _, p := range e.entries {
			end := p.exit
			if end == 0 {
				end = tl.agentT
			}
			a.ents[p.command(bin)] = append(a.ents[p.command(bin)], (end-p.start)*1000)
		}
	}
	fmt.Fprintf(w, "trace %s/%s: session %.2f s under strace, %d hook events, %d entries, %.2f s inside hook events (%.0f%%)\n",
		an, variant, wall, len(evs), len(roots), hookSum, 100*hookSum/wall)
	for _, l := range order {
		a := byLabel[l]
		fmt.Fprintf(w, "  %-20s x%-3d event p50 %6.1f ms, sum %7.1f ms", l, a.n, median(a.walls), sum(a.walls))
		var keys []string
		for k := range a.ents {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "; %q p50 %.1f ms", k, median(a.ents[k]))
		}
		fmt.Fprintln(w)
	}
	sp := map[string][]float64{}
	running := map[string]int{}
	for _, p := range spawned {
		k := p.command(bin)
		if f := strings.Fields(k); len(f) > 3 {
			k = strings.Join(f[:3], " ")
			// Which parts a deliverer carries: the spool's, the
			// changelog's increment uploads, or both.
			for _, a := range f[3:] {
				if a == "--spool" || a == "--changelog" {
					k += " " + a
				}
			}
		}
		if p.exit == 0 {
			running[k]++
			continue
		}
		sp[k] = append(sp[k], (p.exit-p.start)*1000)
	}
	var keys []string
	for k := range sp {
		keys = append(keys, k)
	}
	for k := range running {
		if _, ok := sp[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "  spawned %q: %d exited (p50 %.1f ms alive, sum %.1f ms), %d still running at the end\n", k, len(sp[k]), median(sp[k]), sum(sp[k]), running[k])
	}
}

// step is one hook event a host fires and the number of entries it runs
// (the hook file's groups for that event).
type step struct {
	name    string
	entries int
}

// eventSeq is the events each host fires, in order, for one prompt of
// calls tool calls with the hook files enable writes (observed with the
// pinned CLIs: Claude Code fires MessageDisplay before every assistant
// message; Codex and Gemini run the capture and the changelog entry of an
// event side by side).
func eventSeq(an string, calls int) []step {
	var seq []step
	switch an {
	case "claude":
		seq = []step{{"SessionStart", 1}, {"UserPromptSubmit", 1}}
		for range calls {
			seq = append(seq, step{"MessageDisplay", 1}, step{"PreToolUse", 1}, step{"PostToolUse", 1})
		}
		seq = append(seq, step{"MessageDisplay", 1}, step{"Stop", 1}, step{"SessionEnd", 1})
	case "codex":
		seq = []step{{"SessionStart", 1}, {"UserPromptSubmit", 2}}
		for range calls {
			seq = append(seq, step{"PreToolUse", 2}, step{"PostToolUse", 2})
		}
		seq = append(seq, step{"Stop", 2}, step{"SessionEnd", 2})
	case "gemini":
		seq = []step{{"SessionStart", 1}, {"BeforeAgent", 2}}
		for range calls {
			seq = append(seq, step{"BeforeTool", 2}, step{"AfterTool", 2})
		}
		seq = append(seq, step{"AfterAgent", 2}, step{"SessionEnd", 2})
	}
	return seq
}

// groupEvents splits the hook entries (in start order) into events: by
// the expected sequence when the number of entries is the expected one (a
// host runs one event's entries before the next event), else by overlap,
// named by index.
func groupEvents(roots []*proc, seq []step, agentExit float64) ([]*event, []string) {
	endOf := func(p *proc) float64 {
		if p.exit == 0 {
			return agentExit
		}
		return p.exit
	}
	total := 0
	for _, st := range seq {
		total += st.entries
	}
	var evs []*event
	var labels []string
	if total == len(roots) {
		k := 0
		for _, st := range seq {
			e := &event{start: roots[k].start}
			for range st.entries {
				e.entries = append(e.entries, roots[k])
				e.end = max(e.end, endOf(roots[k]))
				k++
			}
			evs, labels = append(evs, e), append(labels, st.name)
		}
		return evs, labels
	}
	for _, p := range roots {
		if len(evs) == 0 || p.start > evs[len(evs)-1].end {
			evs = append(evs, &event{start: p.start})
			labels = append(labels, fmt.Sprintf("event%02d", len(evs)-1))
		}
		e := evs[len(evs)-1]
		e.entries = append(e.entries, p)
		e.end = max(e.end, endOf(p))
	}
	return evs, labels
}

func cmpF(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func sum(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s
}
