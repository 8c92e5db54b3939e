// Command sessionbench measures whole agent sessions with agentscm's hooks
// against the host's own floor (issue 33 item 3): the real Claude Code,
// Codex and Gemini CLIs (the e2e suite's pinned installs in
// ~/.cache/agentscm-e2e) against the e2e suite's scripted model APIs
// (test/e2e/scriptedapi, scriptedresponses, scriptedgemini), one prompt
// whose turn makes -calls tool calls in a row (a new file written, then read
// back with a shell command, alternately).
//
// Per agent, three checkouts run interleaved in every round (their order
// rotates from round to round):
//
//   - none: the git checkout with no hooks;
//   - true: the hook file the "on" checkout got, every command replaced by
//     /bin/true (the same entries, count and matchers: the host's own cost
//     of running hooks, the floor);
//   - on: set up as a user does with a Hub: client setup against a real
//     `agentscm hub serve` on loopback, a current Work, change-capture
//     enable and changelog enable for the agent.
//
// With -base-src DIR a fourth checkout, "base", is set up like "on" with the
// binaries built from DIR (another worktree): the A/B of a change in the
// same run. The figure is the wall time of the agent process; the "on"
// session's detached deliverers are waited for after it (not counted, but
// reported). When the cpuacct cgroup is writable, each checkout's sessions
// run in their own cgroup, so the CPU of everything a session started
// (hooks, deliverers, the watcher) is counted. With -trace one more session
// of "true" and "on" per agent runs under strace, and the hook entries'
// wall times are reported per event (see trace.go).
//
//	go run ./bench/sessionbench -rounds 5 -calls 20 -agents claude,codex,gemini
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentscm/agentscm/internal/capture"
)

func main() {
	rounds := flag.Int("rounds", 5, "interleaved rounds (at least 5 for the budget); each runs every variant of every agent once")
	calls := flag.Int("calls", 20, "tool calls per session")
	agentsFlag := flag.String("agents", "claude,codex,gemini", "the agents to drive")
	baseSrc := flag.String("base-src", "", "a source tree (another worktree) whose binaries make a fourth checkout, base, set up like on")
	trace := flag.Bool("trace", false, "after the rounds, run one true and one on session per agent under strace and report the hook entries' wall times")
	keep := flag.Bool("keep", false, "keep the checkouts (their path is printed)")
	flag.Parse()
	if err := run(*rounds, *calls, strings.Split(*agentsFlag, ","), *baseSrc, *trace, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "sessionbench:", err)
		os.Exit(1)
	}
}

type checkout struct {
	agent, variant     string
	dir, root, home    string
	config, spool, bin string
	cgroup             string // cpuacct cgroup directory, "" without
}

func (c *checkout) label() string { return c.agent + "/" + c.variant }

// env is the environment of every process of the checkout: a private HOME
// and config dir, nothing that could reach a real provider.
func (c *checkout) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "ANTHROPIC_") || strings.HasPrefix(k, "CLAUDE") || strings.HasPrefix(k, "CODEX") ||
			strings.HasPrefix(k, "GEMINI") || strings.HasPrefix(k, "GOOGLE_") || strings.HasPrefix(k, "OPENAI") ||
			k == "HOME" || k == "XDG_CONFIG_HOME" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME="+c.home, "XDG_CONFIG_HOME="+c.config)
}

func (c *checkout) cmd(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = c.root, c.env()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %v: %v\n%s%s", name, args, err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

func newCheckout(work, agentName, variant string) (*checkout, error) {
	d := filepath.Join(work, agentName+"-"+variant)
	c := &checkout{agent: agentName, variant: variant, dir: d, root: filepath.Join(d, "repo"), home: filepath.Join(d, "home"), config: filepath.Join(d, "config")}
	for _, p := range []string{c.root, c.home} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(c.root, "README.md"), []byte("session benchmark checkout\n"), 0o644); err != nil {
		return nil, err
	}
	for _, a := range [][]string{
		{"init", "-q", "-b", "main"}, {"add", "."},
		{"-c", "user.email=bench@example.invalid", "-c", "user.name=bench", "commit", "-qm", "init"},
	} {
		if _, err := c.cmd("git", a...); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// build builds the three binaries of src into dir.
func build(src, dir string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-o", dir+string(filepath.Separator),
		"./cmd/agentscm", "./cmd/agentscm-hook", "./cmd/agentscm-hook-intake")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %v\n%s", src, err, out)
	}
	return nil
}

// hub is a real `agentscm hub serve` on loopback with one repository and a
// read-write token.
type hub struct {
	url, token string
	cmd        *exec.Cmd
	cgroup     string
}

func startHub(work, agentscm, cgroup string) (*hub, error) {
	data, tok := filepath.Join(work, "hubdata"), filepath.Join(work, "bench.token")
	env := append(os.Environ(), "HOME="+filepath.Join(work, "hubhome"), "XDG_CONFIG_HOME="+filepath.Join(work, "hubconfig"))
	for _, a := range [][]string{
		{"hub", "admin", "human", "create", "--data", data, "--name", "bench"},
		{"hub", "admin", "repository", "create", "--data", data, "--name", "proj"},
		{"hub", "admin", "token", "create", "--data", data, "--human", "bench", "--repository", "proj", "--output", tok},
	} {
		cmd := exec.Command(agentscm, a...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("agentscm %v: %v\n%s", a, err, out)
		}
	}
	cmd := exec.Command(agentscm, "hub", "serve", "--listen", "127.0.0.1:0", "--data", data)
	cmd.Env = env
	wrap(cmd, &checkout{cgroup: cgroup})
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line := make([]byte, 0, 128)
	buf := make([]byte, 1)
	for len(line) < 1024 {
		if _, err := out.Read(buf); err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			return nil, fmt.Errorf("hub serve: %v", err)
		}
		if buf[0] == '\n' {
			break
		}
		line = append(line, buf[0])
	}
	url, ok := strings.CutPrefix(string(line), "listening on ")
	if !ok {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("hub serve: %q", line)
	}
	go func() { // keep the pipe drained
		b := make([]byte, 4096)
		for {
			if _, err := out.Read(b); err != nil {
				return
			}
		}
	}()
	return &hub{url: url, token: tok, cmd: cmd, cgroup: cgroup}, nil
}

func (h *hub) stop() {
	h.cmd.Process.Signal(syscall.SIGTERM)
	h.cmd.Wait()
}

// setupOn sets c up as a user does: the Hub connection, a current Work,
// change-capture enable and changelog enable for the agent.
func setupOn(c *checkout, a *agent, h *hub) error {
	agentscm := filepath.Join(c.bin, "agentscm")
	if _, err := c.cmd(agentscm, "client", "setup", "--root", c.root, "--hub", h.url, "--repository", "proj", "--token-file", h.token); err != nil {
		return err
	}
	if _, err := c.cmd(agentscm, "work", "start", "--root", c.root, "--title", "session benchmark "+c.label()); err != nil {
		return err
	}
	out, err := c.cmd(agentscm, "change-capture", "enable", "--root", c.root, "--agent", a.enableAs, "--format", "json")
	if err != nil {
		return err
	}
	var en struct {
		Spool string `json:"spool"`
	}
	if err := json.Unmarshal([]byte(out), &en); err != nil || en.Spool == "" {
		return fmt.Errorf("change-capture enable: %v: %s", err, out)
	}
	c.spool = en.Spool
	if _, err := c.cmd(agentscm, "changelog", "enable", "--root", c.root, "--agent", a.enableAs); err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(c.root, a.hookFile))
	if err != nil {
		return err
	}
	if !strings.Contains(string(b), "change-capture hook-") || !strings.Contains(string(b), "hook-"+strings.TrimSuffix(a.enableAs, "-code")) {
		return fmt.Errorf("%s lacks the capture hooks:\n%s", a.hookFile, b)
	}
	return nil
}

// setupTrue writes on's hook file into c with every command replaced by
// /bin/true, and checks that the entries (events, matchers, count) are the
// same.
func setupTrue(c, on *checkout, a *agent) error {
	b, err := os.ReadFile(filepath.Join(on.root, a.hookFile))
	if err != nil {
		return err
	}
	var st map[string]any
	if err := json.Unmarshal(b, &st); err != nil {
		return err
	}
	hooks, _ := st["hooks"].(map[string]any)
	for _, groups := range hooks {
		for _, g := range groups.([]any) {
			for _, h := range g.(map[string]any)["hooks"].([]any) {
				h.(map[string]any)["command"] = "/bin/true"
			}
		}
	}
	nb, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if shape(b) != shape(nb) || shape(b) == "" {
		return fmt.Errorf("the /bin/true hooks differ from on's:\n%s\n%s", shape(b), shape(nb))
	}
	p := filepath.Join(c.root, a.hookFile)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, nb, 0o644)
}

// shape describes a hook file's entries without their commands: event,
// group, matcher, entry type, timeout.
func shape(b []byte) string {
	var st struct {
		Hooks map[string][]struct {
			Matcher *string `json:"matcher"`
			Hooks   []struct {
				Type    string `json:"type"`
				Timeout any    `json:"timeout"`
			} `json:"hooks"`
		} `json:"hooks"`
	}
	if json.Unmarshal(b, &st) != nil {
		return ""
	}
	var parts []string
	for ev, groups := range st.Hooks {
		for i, g := range groups {
			m := "(none)"
			if g.Matcher != nil {
				m = *g.Matcher
			}
			for j, h := range g.Hooks {
				parts = append(parts, fmt.Sprintf("%s[%d] matcher %s entry %d %s timeout %v", ev, i, m, j, h.Type, h.Timeout))
			}
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, "\n")
}

// sample is one session's measurement.
type sample struct {
	wall     time.Duration
	agentCPU time.Duration // the agent process and the hooks it waited for
	groupCPU time.Duration // everything the checkout's sessions started (cgroup), -1 without
	drain    time.Duration // deliverers still running after the agent exited
	hubCPU   time.Duration // the loopback Hub's CPU during the session and the drain
}

func cgroupUsage(dir string) time.Duration {
	if dir == "" {
		return -1
	}
	b, err := os.ReadFile(filepath.Join(dir, "cpuacct.usage"))
	if err != nil {
		return -1
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return time.Duration(n)
}

// wrap makes cmd join c's cgroup before it execs the agent.
func wrap(cmd *exec.Cmd, c *checkout) {
	if c.cgroup == "" {
		return
	}
	cmd.Args = append([]string{"sh", "-c", `echo $$ > "$0" && exec "$@"`, filepath.Join(c.cgroup, "cgroup.procs")}, cmd.Args...)
	cmd.Path = "/bin/sh"
}

func session(a *agent, c *checkout, h *hub, marker string, calls int) (sample, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := a.command(ctx, c, marker)
	cmd.Dir = c.root
	wrap(cmd, c)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	g0, h0 := cgroupUsage(c.cgroup), cgroupUsage(h.cgroup)
	t0 := time.Now()
	err := cmd.Run()
	s := sample{wall: time.Since(t0), groupCPU: -1}
	if cmd.ProcessState != nil {
		s.agentCPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	if werr := drain(c, &s); werr != nil {
		return s, werr
	}
	if g0 >= 0 {
		s.groupCPU = cgroupUsage(c.cgroup) - g0
	}
	if h0 >= 0 {
		s.hubCPU = cgroupUsage(h.cgroup) - h0
	}
	if err != nil {
		return s, fmt.Errorf("%s %s: %v\n%s\n%s", c.label(), marker, err, stdout.String(), stderr.String())
	}
	if err := a.check(stdout.Bytes()); err != nil {
		return s, fmt.Errorf("%s %s: %v\n%s\n%s", c.label(), marker, err, stdout.String(), stderr.String())
	}
	return s, checkRan(c, marker, calls)
}

// drain waits for the checkout's background deliverers.
func drain(c *checkout, s *sample) error {
	if c.spool == "" {
		return nil
	}
	t1 := time.Now()
	wctx, wcancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer wcancel()
	err := capture.StateDir{Dir: filepath.Join(c.config, "agentscm")}.WaitDeliverers(wctx)
	s.drain = time.Since(t1)
	return err
}

// checkRan: every call ran, the last file exists in the checkout.
func checkRan(c *checkout, marker string, calls int) error {
	if _, err := os.Stat(filepath.Join(c.root, fileName(marker, calls-1))); err != nil {
		return fmt.Errorf("%s %s did not run its tool calls: %v", c.label(), marker, err)
	}
	return nil
}

// marker is the prompt marker of a session; the X ends it so that no marker
// contains another.
func marker(agentName, variant string, round int) string {
	r := "W"
	if round >= 0 {
		r = strconv.Itoa(round)
	}
	return fmt.Sprintf("SB%s%s%sX", strings.ToUpper(agentName), strings.ToUpper(variant), r)
}

func median[T int64 | float64 | time.Duration](v []T) T {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}

func run(rounds, calls int, agentNames []string, baseSrc string, trace, keep bool) error {
	if rounds < 1 || calls < 2 {
		return errors.New("want -rounds >= 1 and -calls >= 2")
	}
	variants := []string{"none", "true", "on"}
	if baseSrc != "" {
		variants = append(variants, "base")
	}
	work, err := os.MkdirTemp("", "sessionbench-")
	if err != nil {
		return err
	}
	cgroups := map[string]string{}
	defer func() {
		for _, g := range cgroups {
			removeCgroup(g)
		}
		if !keep {
			os.RemoveAll(work)
		}
	}()
	if keep {
		fmt.Printf("# checkouts kept in %s\n", work)
	}
	src, err := os.Getwd()
	if err != nil {
		return err
	}
	bins := map[string]string{"on": filepath.Join(work, "bin")}
	if err := build(src, bins["on"]); err != nil {
		return err
	}
	if baseSrc != "" {
		bins["base"] = filepath.Join(work, "basebin")
		if err := build(baseSrc, bins["base"]); err != nil {
			return err
		}
	}
	hubGroup, _ := newCgroup(filepath.Base(work) + "-hub")
	if hubGroup != "" {
		cgroups["hub"] = hubGroup
	}
	h, err := startHub(work, filepath.Join(bins["on"], "agentscm"), hubGroup)
	if err != nil {
		return err
	}
	defer h.stop()

	checkouts := map[string]*checkout{} // agent/variant
	markers := map[string][]string{}
	markerRoot := map[string]string{}
	for _, an := range agentNames {
		for _, v := range variants {
			c, err := newCheckout(work, an, v)
			if err != nil {
				return err
			}
			c.bin = bins[v]
			if c.bin == "" { // none and true run no agentscm binary
				c.bin = bins["on"]
			}
			if g, err := newCgroup(filepath.Base(work) + "-" + an + "-" + v); err == nil {
				c.cgroup, cgroups[c.label()] = g, g
			}
			checkouts[c.label()] = c
			for r := -1; r < rounds; r++ {
				markers[an] = append(markers[an], marker(an, v, r))
			}
			if trace && (v == "true" || v == "on") {
				markers[an] = append(markers[an], marker(an, v+"TRACE", 0))
			}
			for _, m := range markers[an] {
				if markerRoot[m] == "" {
					markerRoot[m] = c.root
				}
			}
		}
	}
	agents, closeAPIs, err := newAgents(agentNames, markers, func(_, m string) string { return markerRoot[m] }, calls)
	if err != nil {
		return err
	}
	defer closeAPIs()
	for _, a := range agents {
		for _, v := range variants {
			c := checkouts[a.name+"/"+v]
			if err := a.configure(c); err != nil {
				return err
			}
			if v == "on" || v == "base" {
				if err := setupOn(c, a, h); err != nil {
					return err
				}
			}
		}
		if err := setupTrue(checkouts[a.name+"/true"], checkouts[a.name+"/on"], a); err != nil {
			return err
		}
	}
	fmt.Printf("# go run ./bench/sessionbench -rounds %d -calls %d -agents %s%s, %s\n", rounds, calls, strings.Join(agentNames, ","),
		map[bool]string{true: " -base-src " + baseSrc, false: ""}[baseSrc != ""], time.Now().UTC().Format("2006-01-02 15:04:05 UTC"))
	for _, a := range agents {
		fmt.Printf("# %s: %s; hook entries per checkout (on and true):\n", a.name, a.bin)
		b, _ := os.ReadFile(filepath.Join(checkouts[a.name+"/on"].root, a.hookFile))
		for _, l := range strings.Split(shape(b), "\n") {
			fmt.Printf("#   %s\n", l)
		}
	}
	fmt.Printf("# cgroup CPU accounting: %v\n", len(cgroups) > 0)
	fmt.Printf("# load average at start: %s\n", loadavg())

	// One warm-up round (node's and the CLIs' first start, page cache).
	for _, a := range agents {
		for _, v := range variants {
			if _, err := session(a, checkouts[a.name+"/"+v], h, marker(a.name, v, -1), calls); err != nil {
				return err
			}
		}
	}
	res := map[string][]sample{}
	for r := range rounds {
		for ai, a := range agents {
			order := slices.Clone(variants)
			k := (r + ai) % len(order)
			order = append(order[k:], order[:k]...)
			got := map[string]sample{}
			for _, v := range order {
				s, err := session(a, checkouts[a.name+"/"+v], h, marker(a.name, v, r), calls)
				if err != nil {
					return err
				}
				got[v] = s
				res[a.name+"/"+v] = append(res[a.name+"/"+v], s)
			}
			printRound(r, a.name, order, variants, got, calls)
		}
	}
	for _, a := range agents {
		if err := checkSpool(a, checkouts[a.name+"/on"], rounds+1, calls); err != nil {
			return err
		}
		if baseSrc != "" {
			if err := checkSpool(a, checkouts[a.name+"/base"], rounds+1, calls); err != nil {
				return err
			}
		}
	}
	fmt.Printf("# load average after the rounds: %s\n", loadavg())
	for _, a := range agents {
		printSummary(a.name, variants, res, calls)
	}
	if trace {
		for _, a := range agents {
			for _, v := range []string{"true", "on"} {
				c := checkouts[a.name+"/"+v]
				tr, err := tracedSession(a, c, marker(a.name, v+"TRACE", 0), calls, filepath.Join(work, "trace-"+a.name+"-"+v+".txt"))
				if err != nil {
					return err
				}
				tr.report(os.Stdout, a.name, v, c.bin, calls)
			}
		}
	}
	fmt.Printf("# load average at end: %s\n", loadavg())
	return nil
}

func checkSpool(a *agent, c *checkout, sessions, calls int) error {
	out, err := c.cmd(filepath.Join(c.bin, "agentscm"), "change-capture", "events", "--spool", c.spool, "--format", "json")
	if err != nil {
		return err
	}
	var rep struct {
		Events int `json:"events"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		return fmt.Errorf("change-capture events: %w", err)
	}
	if want := sessions * calls; rep.Events < want {
		return fmt.Errorf("%s: the spool holds %d events, want at least %d: the hooks did not run", c.label(), rep.Events, want)
	}
	fmt.Printf("# %s spool: %d events over %d sessions\n", c.label(), rep.Events, sessions)
	return nil
}

func ratio(a, b time.Duration) float64 { return a.Seconds() / b.Seconds() }

func cpuText(s sample) string {
	if s.groupCPU < 0 {
		return fmt.Sprintf("%.2f", s.agentCPU.Seconds())
	}
	return fmt.Sprintf("%.2f (+%.2f detached, Hub %.2f)", s.groupCPU.Seconds(), max(0, (s.groupCPU-s.agentCPU).Seconds()), s.hubCPU.Seconds())
}

func printRound(r int, an string, order, variants []string, got map[string]sample, calls int) {
	var walls, cpus []string
	for _, v := range variants {
		s := got[v]
		w := fmt.Sprintf("%s %.2f s", v, s.wall.Seconds())
		if s.drain > 0 {
			w += fmt.Sprintf(" (deliverers +%.2f s)", s.drain.Seconds())
		}
		walls = append(walls, w)
		cpus = append(cpus, v+" "+cpuText(s))
	}
	line := fmt.Sprintf("round %d %s [%s]: %s; on/true %.3fx, true/none %.3fx, on-true %+.0f ms/call",
		r+1, an, strings.Join(order, ","), strings.Join(walls, ", "),
		ratio(got["on"].wall, got["true"].wall), ratio(got["true"].wall, got["none"].wall),
		float64((got["on"].wall-got["true"].wall).Milliseconds())/float64(calls))
	if b, ok := got["base"]; ok {
		line += fmt.Sprintf(", on/base %.3fx, base/true %.3fx", ratio(got["on"].wall, b.wall), ratio(b.wall, got["true"].wall))
	}
	if got["on"].groupCPU > 0 && got["true"].groupCPU > 0 {
		line += fmt.Sprintf("; CPU on/true %.3fx", ratio(got["on"].groupCPU, got["true"].groupCPU))
	}
	fmt.Println(line + "; CPU s: " + strings.Join(cpus, ", "))
}

// perCall is the per-round CPU difference a-b per tool call, in ms.
func perCall(a, b []sample, calls int) []float64 {
	var out []float64
	for i := range min(len(a), len(b)) {
		out = append(out, float64((a[i].groupCPU-b[i].groupCPU).Milliseconds())/float64(calls))
	}
	return out
}

func printSummary(an string, variants []string, res map[string][]sample, calls int) {
	n := len(res[an+"/none"])
	pick := func(v string, f func(sample) time.Duration) []time.Duration {
		var out []time.Duration
		for _, s := range res[an+"/"+v] {
			out = append(out, f(s))
		}
		return out
	}
	ratios := func(num, den string) []float64 {
		var out []float64
		for i := range n {
			out = append(out, ratio(res[an+"/"+num][i].wall, res[an+"/"+den][i].wall))
		}
		return out
	}
	wall := func(s sample) time.Duration { return s.wall }
	var parts []string
	for _, v := range variants {
		p := fmt.Sprintf("%s %.2f s", v, median(pick(v, wall)).Seconds())
		if g := pick(v, func(s sample) time.Duration { return s.groupCPU }); len(g) > 0 && g[0] >= 0 {
			p += fmt.Sprintf(" (CPU %.2f s, detached %.2f s, Hub %.2f s)", median(g).Seconds(),
				median(pick(v, func(s sample) time.Duration { return max(0, s.groupCPU-s.agentCPU) })).Seconds(),
				median(pick(v, func(s sample) time.Duration { return s.hubCPU })).Seconds())
		} else {
			p += fmt.Sprintf(" (CPU %.2f s)", median(pick(v, func(s sample) time.Duration { return s.agentCPU })).Seconds())
		}
		parts = append(parts, p)
	}
	fmt.Printf("median %s over %d rounds: %s\n", an, n, strings.Join(parts, ", "))
	var per []float64
	for i := range n {
		per = append(per, float64((res[an+"/on"][i].wall-res[an+"/true"][i].wall).Milliseconds())/float64(calls))
	}
	line := fmt.Sprintf("median %s: on/true %.3fx (budget <= 1.10x), true/none %.3fx, on/none %.3fx, on-true %+.0f ms per call",
		an, median(ratios("on", "true")), median(ratios("true", "none")), median(ratios("on", "none")), median(per))
	if _, ok := res[an+"/base"]; ok {
		line += fmt.Sprintf("; on/base %.3fx, base/true %.3fx", median(ratios("on", "base")), median(ratios("base", "true")))
	}
	fmt.Println(line)
	cpuRatios := func(num, den string) []float64 {
		var out []float64
		for i := range n {
			a, b := res[an+"/"+num][i].groupCPU, res[an+"/"+den][i].groupCPU
			if a <= 0 || b <= 0 {
				return nil
			}
			out = append(out, ratio(a, b))
		}
		return out
	}
	if r := cpuRatios("on", "true"); r != nil {
		line = fmt.Sprintf("median %s CPU (everything the session started): on/true %.3fx, true/none %.3fx, on-true %+.0f ms CPU per call",
			an, median(r), median(cpuRatios("true", "none")), median(perCall(res[an+"/on"], res[an+"/true"], calls)))
		if _, ok := res[an+"/base"]; ok {
			line += fmt.Sprintf("; on/base %.3fx", median(cpuRatios("on", "base")))
		}
		fmt.Println(line)
	}
}
