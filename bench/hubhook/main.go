// Command hubhook measures, as whole processes, what the capture hook pays to
// reach the Hub on every invocation: reading the connections file, opening
// the embedded SQLite store, and resolving the exact target plus delivering
// one envelope — embedded (in-process SQLite) and over HTTP to a running
// `agentscm hub serve` on loopback. References measured in the same run,
// interleaved: /bin/true and fsyncref (one durable file write).
//
//	go run ./bench/hubhook -n 300
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

type subject struct {
	name  string
	argv  []string
	env   []string
	stdin string
	times []time.Duration
}

func main() {
	n := flag.Int("n", 300, "runs per subject (at least 200 for a p99)")
	baseline := flag.String("baseline", "", "an agentscm binary without the Hub (e.g. built from an older main) to compare the hook's start-up with")
	flag.Parse()
	if err := run(*n, *baseline); err != nil {
		fmt.Fprintln(os.Stderr, "hubhook:", err)
		os.Exit(1)
	}
}

func build(target, pkg string) error {
	if out, err := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", target, pkg).CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %v\n%s", pkg, err, out)
	}
	return nil
}

func sh(env []string, argv ...string) (string, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return string(out), nil
}

func run(n int, baseline string) error {
	work, err := os.MkdirTemp("", "hubhook-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	bin, proc, ref := filepath.Join(work, "agentscm"), filepath.Join(work, "proc"), filepath.Join(work, "fsyncref")
	for target, pkg := range map[string]string{
		bin:  "github.com/agentscm/agentscm/cmd/agentscm",
		proc: "github.com/agentscm/agentscm/bench/hubhook/proc",
		ref:  "github.com/agentscm/agentscm/bench/hookbench/fsyncref",
	} {
		if err := build(target, pkg); err != nil {
			return err
		}
	}
	// An embedded checkout and a served one, each with a current Work.
	localRoot, teamRoot := filepath.Join(work, "solo"), filepath.Join(work, "team")
	os.MkdirAll(localRoot, 0o755)
	os.MkdirAll(teamRoot, 0o755)
	cfg := filepath.Join(work, "config")
	env := append(os.Environ(), "XDG_CONFIG_HOME="+cfg)
	if _, err := sh(env, bin, "client", "setup", "--root", localRoot, "--local"); err != nil {
		return err
	}
	if _, err := sh(env, bin, "work", "start", "--root", localRoot); err != nil {
		return err
	}
	data := filepath.Join(work, "hubdata")
	tok := filepath.Join(work, "token")
	for _, a := range [][]string{
		{"hub", "admin", "human", "create", "--data", data, "--name", "dev"},
		{"hub", "admin", "repository", "create", "--data", data, "--name", "team"},
		{"hub", "admin", "token", "create", "--data", data, "--human", "dev", "--repository", "team", "--output", tok},
	} {
		if _, err := sh(env, append([]string{bin}, a...)...); err != nil {
			return err
		}
	}
	srv := exec.Command(bin, "hub", "serve", "--listen", "127.0.0.1:0", "--data", data)
	out, err := srv.StdoutPipe()
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		return err
	}
	defer func() { srv.Process.Signal(syscall.SIGTERM); srv.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return fmt.Errorf("hub serve: %w", err)
	}
	url := strings.TrimSpace(strings.TrimPrefix(line, "listening on "))
	if _, err := sh(env, bin, "client", "setup", "--root", teamRoot, "--hub", url, "--repository", "team", "--token-file", tok); err != nil {
		return err
	}
	if _, err := sh(env, bin, "work", "start", "--root", teamRoot); err != nil {
		return err
	}
	agentDir := filepath.Join(cfg, "agentscm")
	refDir := filepath.Join(work, "ref")
	os.Mkdir(refDir, 0o700)
	subjects := []*subject{
		{name: "/bin/true", argv: []string{"/bin/true"}},
		{name: "fsyncref (one durable write)", argv: []string{ref, refDir}},
		{name: "connections lookup", argv: []string{proc, "lookup", agentDir, localRoot}},
		{name: "embedded: open SQLite", argv: []string{proc, "open", agentDir, localRoot}},
		{name: "embedded: resolve+deliver", argv: []string{proc, "deliver", agentDir, localRoot}},
		{name: "served: resolve+deliver (HTTP)", argv: []string{proc, "deliver", agentDir, teamRoot}},
	}
	// The capture hook of the whole binary with a payload outside any
	// binding: process start, package init (SQLite's included) and the
	// capture config read.
	noBinding := `{"session_id":"s","cwd":"/","hook_event_name":"Stop"}`
	subjects = append(subjects, &subject{name: "agentscm hook, no binding", argv: []string{bin, "change-capture", "hook-claude"}, env: env, stdin: noBinding})
	if baseline != "" {
		subjects = append(subjects, &subject{name: "baseline hook, no binding", argv: []string{baseline, "change-capture", "hook-claude"}, env: env, stdin: noBinding})
	}
	for i := 0; i < n; i++ {
		for _, s := range subjects {
			d, err := once(s)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			s.times = append(s.times, d)
		}
	}
	fmt.Printf("%-34s %6s %9s %9s %9s\n", "subject", "runs", "p50 ms", "p90 ms", "p99 ms")
	for _, s := range subjects {
		slices.Sort(s.times)
		fmt.Printf("%-34s %6d %9.2f %9.2f %9.2f\n", s.name, len(s.times), ms(pct(s.times, 50)), ms(pct(s.times, 90)), ms(pct(s.times, 99)))
	}
	return nil
}

func once(s *subject) (time.Duration, error) {
	cmd := exec.Command(s.argv[0], s.argv[1:]...)
	cmd.Env = s.env
	cmd.Stdin = bytes.NewReader([]byte(s.stdin))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("%v: %s", err, stderr.String())
	}
	return d, nil
}

func pct(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
