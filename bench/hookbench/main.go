// Command hookbench measures the agentscm Claude Code hook as the agent runs
// it: a fresh process per event, a recorded payload on stdin, a durable
// append to a real spool. It reports p50/p90/p99 per payload, next to the
// reference processes /bin/true and fsyncref (one durable file write), all
// measured in the same run with interleaved order. The checkout is connected
// to the embedded Hub with a current Work, so every hook resolves its target,
// appends and delivers through SQLite, as a solo user's hook does.
//
//	go run ./bench/hookbench -n 300
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

type subject struct {
	name  string
	argv  []string
	stdin func(i int) []byte
	env   []string
	times []time.Duration
}

func main() {
	n := flag.Int("n", 300, "runs per subject (at least 200 for a p99)")
	out := flag.String("json", "", "also write the results as JSON to this file")
	base := flag.String("base", "", "also measure this agentscm binary (e.g. built from main), with its own config and spool, in the same interleaved run")
	actionFiles := flag.Int("action-files", 0, "also measure PreToolUse/PostToolUse with a Bash execution rule on a clean Git checkout of this many files (0: not measured)")
	flag.Parse()
	if err := run(*n, *out, *base, *actionFiles); err != nil {
		fmt.Fprintln(os.Stderr, "hookbench:", err)
		os.Exit(1)
	}
}

func run(n int, jsonOut, baseBin string, actionFiles int) error {
	work, err := os.MkdirTemp("", "hookbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	bin := filepath.Join(work, "agentscm")
	ref := filepath.Join(work, "fsyncref")
	for target, pkg := range map[string]string{bin: "github.com/agentscm/agentscm/cmd/agentscm", ref: "github.com/agentscm/agentscm/bench/hookbench/fsyncref"} {
		if out, err := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", target, pkg).CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %v\n%s", pkg, err, out)
		}
	}
	root, env, err := setupHub(bin, filepath.Join(work, "new"))
	if err != nil {
		return err
	}
	// Every run is a new tool call: a fresh tool_use_id, as the host sends.
	payload := func(ev string, extra string) func(int) []byte {
		return func(i int) []byte {
			x := strings.ReplaceAll(extra, "TOOLID", fmt.Sprintf("toolu_bench_%06d", i))
			return []byte(`{"session_id":"bench-session","transcript_path":"/tmp/t.jsonl","cwd":"` + root + `","permission_mode":"default","hook_event_name":"` + ev + `"` + x + `}`)
		}
	}
	refDir := filepath.Join(work, "ref")
	os.Mkdir(refDir, 0o700)
	subjects := []*subject{
		{name: "/bin/true", argv: []string{"/bin/true"}, stdin: func(int) []byte { return nil }},
		{name: "fsyncref (one durable write)", argv: []string{ref, refDir}, stdin: payload("PreToolUse", "")},
		{name: "hook SessionStart", argv: []string{bin, "change-capture", "hook-claude"}, env: env, stdin: payload("SessionStart", `,"source":"startup","model":"claude"`)},
		{name: "hook UserPromptSubmit", argv: []string{bin, "change-capture", "hook-claude"}, env: env, stdin: payload("UserPromptSubmit", `,"prompt":"please fix the failing test in parser.go"`)},
		{name: "hook PreToolUse", argv: []string{bin, "change-capture", "hook-claude"}, env: env, stdin: payload("PreToolUse", `,"tool_name":"Bash","tool_use_id":"TOOLID","tool_input":{"command":"go test ./...","description":"run tests"}`)},
		{name: "hook PostToolUse", argv: []string{bin, "change-capture", "hook-claude"}, env: env, stdin: payload("PostToolUse", `,"tool_name":"Bash","tool_use_id":"TOOLID","tool_input":{"command":"go test ./..."},"tool_response":{"stdout":"ok","stderr":"","interrupted":false}`)},
	}
	if baseBin != "" {
		broot, benv, err := setupHub(baseBin, filepath.Join(work, "base"))
		if err != nil {
			return fmt.Errorf("base: %w", err)
		}
		for _, s := range subjects[2:6] {
			b := *s
			b.name = "base " + s.name
			b.argv = []string{baseBin, "change-capture", "hook-claude"}
			b.env = benv
			in := s.stdin
			b.stdin = func(i int) []byte { return bytes.ReplaceAll(in(i), []byte(root), []byte(broot)) }
			subjects = append(subjects, &b)
		}
	}
	if actionFiles > 0 {
		as, err := actionSubjects(bin, filepath.Join(work, "actions"), actionFiles)
		if err != nil {
			return fmt.Errorf("actions: %w", err)
		}
		subjects = append(subjects, as...)
	}
	ctx := context.Background()
	for i := 0; i < n; i++ {
		for _, s := range subjects { // interleaved, so drift hits every subject alike
			d, err := once(ctx, s, i)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			s.times = append(s.times, d)
		}
	}
	type row struct {
		Name string  `json:"name"`
		Runs int     `json:"runs"`
		P50  float64 `json:"p50_ms"`
		P90  float64 `json:"p90_ms"`
		P99  float64 `json:"p99_ms"`
	}
	var rows []row
	fmt.Printf("%-32s %6s %9s %9s %9s\n", "subject", "runs", "p50 ms", "p90 ms", "p99 ms")
	for _, s := range subjects {
		slices.Sort(s.times)
		r := row{s.name, len(s.times), ms(pct(s.times, 50)), ms(pct(s.times, 90)), ms(pct(s.times, 99))}
		rows = append(rows, r)
		fmt.Printf("%-32s %6d %9.2f %9.2f %9.2f\n", r.Name, r.Runs, r.P50, r.P90, r.P99)
	}
	if jsonOut != "" {
		b, _ := json.MarshalIndent(rows, "", "  ")
		return os.WriteFile(jsonOut, append(b, '\n'), 0o644)
	}
	return nil
}

func once(ctx context.Context, s *subject, i int) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, s.argv[0], s.argv[1:]...)
	cmd.Env = s.env
	cmd.Stdin = bytes.NewReader(s.stdin(i))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("%v: %s", err, stderr.String())
	}
	if stdout.Len() != 0 || stderr.Len() != 0 {
		return 0, fmt.Errorf("unexpected output: stdout %q stderr %q", stdout.String(), stderr.String())
	}
	return d, nil
}

func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// setupHub connects a fresh checkout under dir to the embedded Hub of its
// own config directory, binds it to a spool and starts a Work.
func setupHub(bin, dir string) (string, []string, error) {
	root := filepath.Join(dir, "repo")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", nil, err
	}
	cfg := filepath.Join(dir, "config")
	env := append(os.Environ(), "XDG_CONFIG_HOME="+cfg)
	setup := exec.Command(bin, "client", "setup", "--root", root, "--local")
	setup.Env = env
	if out, err := setup.CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("client setup: %v\n%s", err, out)
	}
	for _, args := range [][]string{
		{"change-capture", "configure", "--root", root, "--spool", filepath.Join(dir, "spool")},
		{"work", "start", "--root", root, "--title", "hook benchmark"},
	} {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", nil, fmt.Errorf("%v: %v\n%s", args, err, out)
		}
	}
	return root, env, nil
}
