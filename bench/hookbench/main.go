// Command hookbench measures the agents' capture hooks as the host runs
// them (Claude Code by default; -agents codex,gemini adds Codex CLI's and
// Gemini CLI's hooks on every one of their capture events, and -shell starts
// every subject, references included, through `sh -c` as the hosts do): a fresh process per event, a recorded payload on stdin, a durable
// append to a real spool, target resolution and delivery to a real Hub. Every
// event kind is measured against two checkouts, each with a current Work:
// one connected to the embedded Hub (in-process SQLite, the solo default)
// and one connected to an `agentscm hub serve` process on loopback (HTTP).
// Each runs through the intake binary agentscm-hook-intake (what configure
// installs on the events whose capture runs without the changelog), the
// lean agentscm-hook binary (the changelog's events, and what the intake
// binary hands the Hub paths to) and, for comparison, the whole agentscm
// binary. The references
// /bin/true and fsyncref (one durable file write: temp file, fsync, rename,
// directory fsync) are measured in the same run, interleaved, so load drift
// hits every subject alike. It reports p50/p90/p99 wall time, the ratio to
// fsyncref and the median minor page faults of each subject.
//
//	go run ./bench/hookbench -n 150 -runs 2
//	go run ./bench/hookbench -shell -agents claude,codex,gemini -bins intake,lean -stores embedded
//	go run ./bench/hookbench -shell -changelog -agents codex,gemini -bins lean -stores embedded -base MAIN/agentscm
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
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
	name   string
	argv   []string
	stdin  func(i int) []byte
	env    []string
	times  []time.Duration
	faults []int64
}

type options struct {
	n       int
	cgo     bool
	bins    string
	stores  string
	kinds   string
	jsonOut string
	base    string
	agents  string
	shell   bool
	enable  bool
	// changelog measures the agents' changelog entries instead of their
	// capture entries.
	changelog bool
}

func main() {
	var o options
	flag.IntVar(&o.n, "n", 150, "runs per subject (at least 100 for a p99)")
	runs := flag.Int("runs", 1, "independent runs, each with fresh checkouts, spools and Hubs")
	flag.BoolVar(&o.cgo, "cgo", false, "build the binaries with cgo (dynamically linked) instead of CGO_ENABLED=0")
	flag.StringVar(&o.bins, "bins", "intake,lean,full", "binaries to measure: intake (agentscm-hook-intake, what configure installs on capture-only events), lean (agentscm-hook), full (agentscm)")
	flag.StringVar(&o.stores, "stores", "embedded,served", "Hub connections to measure")
	flag.StringVar(&o.kinds, "kinds", "SessionStart,UserPromptSubmit,PreToolUse,PostToolUse,PostToolUseFailure,Stop", "hook events to measure, in session order")
	flag.StringVar(&o.jsonOut, "json", "", "also write the results as JSON to this file")
	flag.StringVar(&o.base, "base", "", "also measure this agentscm binary (e.g. built from main) with its own checkouts")
	flag.StringVar(&o.agents, "agents", "claude", "agent hosts whose capture hook to measure: claude (the events of -kinds), codex, gemini (every capture event of the host)")
	flag.BoolVar(&o.enable, "enable", false, "bind each checkout with `change-capture enable --agent A` (what a user gets: the default Bash execution rule, so tool calls also bind the source and record actions) instead of `change-capture configure` (no rules)")
	flag.BoolVar(&o.changelog, "changelog", false, "measure the agents' changelog entries (`changelog hook-AGENT` on the host's changelog events, with `changelog enable --agent A` in each checkout) instead of their capture entries; -bins lean is what enable installs, -base a main build's agentscm")
	flag.BoolVar(&o.shell, "shell", false, "start every subject, the references included, through `sh -c` as the host starts a hook")
	flag.Parse()
	var all [][]row
	for r := 1; r <= *runs; r++ {
		fmt.Printf("== run %d of %d, %s\n", r, *runs, time.Now().UTC().Format("2006-01-02 15:04:05 UTC"))
		rows, err := run(o)
		if err != nil {
			fmt.Fprintln(os.Stderr, "hookbench:", err)
			os.Exit(1)
		}
		all = append(all, rows)
	}
	if o.jsonOut != "" {
		b, _ := json.MarshalIndent(all, "", "  ")
		if err := os.WriteFile(o.jsonOut, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "hookbench:", err)
			os.Exit(1)
		}
	}
}

type row struct {
	Name     string  `json:"name"`
	Runs     int     `json:"runs"`
	P50      float64 `json:"p50_ms"`
	P90      float64 `json:"p90_ms"`
	P99      float64 `json:"p99_ms"`
	P50Ratio float64 `json:"p50_over_fsyncref"`
	P99Ratio float64 `json:"p99_over_fsyncref"`
	Faults   int64   `json:"median_minor_faults"`
}

// payload is a recorded Claude Code hook payload of kind ev for iteration i
// of a session-scoped run: each iteration is a new session and a new tool
// call, as the host sends them.
func payload(ev, cwd, session string) func(int) []byte {
	return func(i int) []byte {
		sid := fmt.Sprintf("%s-%06d", session, i)
		tool := fmt.Sprintf("toolu_%s_%06d", strings.ReplaceAll(session, "-", "_"), i)
		extra := ""
		switch ev {
		case "SessionStart":
			extra = `,"source":"startup","model":"claude-sonnet-4-5"`
		case "UserPromptSubmit":
			extra = `,"prompt":"please fix the failing test in parser.go"`
		case "PreToolUse":
			extra = `,"tool_name":"Bash","tool_use_id":"` + tool + `","tool_input":{"command":"go test ./...","description":"run tests"}`
		case "PostToolUse":
			extra = `,"tool_name":"Bash","tool_use_id":"` + tool + `","tool_input":{"command":"go test ./..."},"tool_response":{"stdout":"ok","stderr":"","interrupted":false}`
		case "PostToolUseFailure":
			extra = `,"tool_name":"Bash","tool_use_id":"` + tool + `_f","tool_input":{"command":"false"},"error":"Exit code 1"`
		case "Stop":
			extra = `,"stop_hook_active":false`
		case "SessionEnd":
			extra = `,"reason":"prompt_input_exit"`
		}
		return []byte(`{"session_id":"` + sid + `","transcript_path":"/tmp/bench.jsonl","cwd":"` + cwd + `","permission_mode":"default","hook_event_name":"` + ev + `"` + extra + `}`)
	}
}

func run(o options) ([]row, error) {
	work, err := os.MkdirTemp("", "hookbench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	bin := filepath.Join(work, "bin")
	ref := filepath.Join(work, "fsyncref")
	build := exec.Command("go", "build", "-trimpath", "-o", bin+string(filepath.Separator),
		"github.com/agentscm/agentscm/cmd/agentscm", "github.com/agentscm/agentscm/cmd/agentscm-hook", "github.com/agentscm/agentscm/cmd/agentscm-hook-intake")
	build.Env = os.Environ()
	if !o.cgo {
		build.Env = append(build.Env, "CGO_ENABLED=0")
	}
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build: %v\n%s", err, out)
	}
	if out, err := exec.Command("go", "build", "-trimpath", "-o", ref, "github.com/agentscm/agentscm/bench/hookbench/fsyncref").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build fsyncref: %v\n%s", err, out)
	}
	full, lean, intake := filepath.Join(bin, "agentscm"), filepath.Join(bin, "agentscm-hook"), filepath.Join(bin, "agentscm-hook-intake")
	refDir := filepath.Join(work, "ref")
	if err := os.Mkdir(refDir, 0o700); err != nil {
		return nil, err
	}
	agents, err := agentsFor(o.agents, strings.Split(o.kinds, ","))
	if err != nil {
		return nil, err
	}
	if o.changelog {
		if agents, err = changelogEntries(agents); err != nil {
			return nil, err
		}
	}
	subjects := []*subject{
		{name: "/bin/true", argv: []string{"/bin/true"}, stdin: func(int) []byte { return nil }},
		{name: "fsyncref (one durable write)", argv: []string{ref, refDir}, stdin: payload("PreToolUse", "/", "ref")},
	}
	type binary struct{ label, exe, admin string }
	var bins []binary
	for _, b := range strings.Split(o.bins, ",") {
		switch b {
		case "intake":
			bins = append(bins, binary{"intake", intake, full})
		case "lean":
			bins = append(bins, binary{"lean", lean, full})
		case "full":
			bins = append(bins, binary{"full", full, full})
		default:
			return nil, fmt.Errorf("unknown binary %q", b)
		}
	}
	if o.base != "" {
		bins = append(bins, binary{"base", o.base, o.base})
	}
	var servers []*exec.Cmd
	defer func() {
		for _, s := range servers {
			s.Process.Signal(syscall.SIGTERM)
			s.Wait()
		}
	}()
	for _, store := range strings.Split(o.stores, ",") {
		for _, b := range bins {
			for _, ag := range agents {
				label := b.label
				if len(agents) > 1 || ag.name != "claude-code" {
					label = ag.name + " " + b.label
				}
				dir := filepath.Join(work, store+"-"+strings.ReplaceAll(label, " ", "-"))
				var enable []string
				if o.enable {
					enable = []string{"--agent", ag.name}
				}
				changelogAgent := ""
				if o.changelog {
					changelogAgent = ag.name
				}
				root, env, srv, err := setup(b.admin, dir, store, enable, changelogAgent)
				if srv != nil {
					servers = append(servers, srv)
				}
				if err != nil {
					return nil, fmt.Errorf("%s %s: %w", store, label, err)
				}
				for _, ev := range ag.kinds {
					subjects = append(subjects, &subject{
						name:  fmt.Sprintf("%s %s %s", label, store, ev),
						argv:  append([]string{b.exe}, ag.args...),
						env:   env,
						stdin: ag.payload(ev, root, "bench-"+store+"-"+strings.ReplaceAll(label, " ", "-"), dir),
					})
				}
			}
		}
	}
	if o.shell {
		for _, s := range subjects {
			s.argv = viaShell(s.argv)
			s.name = "sh -c " + s.name
		}
	}
	for i := 0; i < o.n; i++ {
		for _, s := range subjects { // interleaved
			d, f, err := once(s, i)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.name, err)
			}
			s.times = append(s.times, d)
			s.faults = append(s.faults, f)
		}
	}
	slices.Sort(subjects[1].times)
	ref50, ref99 := ms(pct(subjects[1].times, 50)), ms(pct(subjects[1].times, 99))
	var rows []row
	fmt.Printf("%-46s %5s %8s %8s %8s %9s %9s %7s\n", "subject", "runs", "p50 ms", "p90 ms", "p99 ms", "p50/ref", "p99/ref", "faults")
	for _, s := range subjects {
		slices.Sort(s.times)
		slices.Sort(s.faults)
		r := row{Name: s.name, Runs: len(s.times), P50: ms(pct(s.times, 50)), P90: ms(pct(s.times, 90)), P99: ms(pct(s.times, 99)), Faults: s.faults[len(s.faults)/2]}
		r.P50Ratio, r.P99Ratio = r.P50/ref50, r.P99/ref99
		rows = append(rows, r)
		fmt.Printf("%-46s %5d %8.2f %8.2f %8.2f %8.2fx %8.2fx %7d\n", r.Name, r.Runs, r.P50, r.P90, r.P99, r.P50Ratio, r.P99Ratio, r.Faults)
	}
	return rows, nil
}

// once runs s once and returns its wall time and minor page faults. A hook
// must exit 0 with empty stdout and stderr (a warning would mean it did not
// capture or deliver).
func once(s *subject, i int) (time.Duration, int64, error) {
	cmd := exec.Command(s.argv[0], s.argv[1:]...)
	cmd.Env = s.env
	cmd.Stdin = bytes.NewReader(s.stdin(i))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		return 0, 0, fmt.Errorf("%v: %s", err, stderr.String())
	}
	if stdout.Len() != 0 || stderr.Len() != 0 {
		return 0, 0, fmt.Errorf("unexpected output: stdout %q stderr %q", stdout.String(), stderr.String())
	}
	return d, pageFaults(cmd.ProcessState), nil
}

func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func sh(env []string, argv ...string) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return nil
}

// setup makes a checkout under dir connected to a Hub (embedded, or a new
// `hub serve` on loopback, which it returns to be stopped), binds it to a
// spool with the capture hooks and starts a Work; with changelogAgent the
// changelog is enabled for that agent too (-changelog).
func setup(bin, dir, store string, enable []string, changelogAgent string) (string, []string, *exec.Cmd, error) {
	root := filepath.Join(dir, "repo")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", nil, nil, err
	}
	env := append(os.Environ(), "XDG_CONFIG_HOME="+filepath.Join(dir, "config"))
	var srv *exec.Cmd
	switch store {
	case "embedded":
		if err := sh(env, bin, "client", "setup", "--root", root, "--local"); err != nil {
			return "", nil, nil, err
		}
	case "served":
		data, tok := filepath.Join(dir, "hubdata"), filepath.Join(dir, "token")
		for _, a := range [][]string{
			{"hub", "admin", "human", "create", "--data", data, "--name", "dev"},
			{"hub", "admin", "repository", "create", "--data", data, "--name", "team"},
			{"hub", "admin", "token", "create", "--data", data, "--human", "dev", "--repository", "team", "--output", tok},
		} {
			if err := sh(env, append([]string{bin}, a...)...); err != nil {
				return "", nil, nil, err
			}
		}
		srv = exec.Command(bin, "hub", "serve", "--listen", "127.0.0.1:0", "--data", data)
		srv.Env = env
		out, err := srv.StdoutPipe()
		if err != nil {
			return "", nil, nil, err
		}
		if err := srv.Start(); err != nil {
			return "", nil, nil, err
		}
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil {
			return "", nil, srv, fmt.Errorf("hub serve: %w", err)
		}
		url := strings.TrimSpace(strings.TrimPrefix(line, "listening on "))
		if err := sh(env, bin, "client", "setup", "--root", root, "--hub", url, "--repository", "team", "--token-file", tok); err != nil {
			return "", nil, srv, err
		}
	default:
		return "", nil, nil, fmt.Errorf("unknown store %q", store)
	}
	bind := []string{"change-capture", "configure", "--root", root, "--spool", filepath.Join(dir, "spool")}
	if len(enable) > 0 {
		// What a user gets: the binding of the agent's host, its hooks in
		// its own file, the default rules.
		bind = append([]string{"change-capture", "enable", "--root", root}, enable...)
	}
	for _, args := range [][]string{
		bind,
		{"work", "start", "--root", root, "--title", "hook benchmark"},
	} {
		if changelogAgent != "" && args[0] == "work" {
			if err := sh(env, bin, "changelog", "enable", "--root", root, "--agent", changelogAgent); err != nil {
				return "", nil, srv, err
			}
		}
		if err := sh(env, append([]string{bin}, args...)...); err != nil {
			return "", nil, srv, err
		}
	}
	return root, env, srv, nil
}
