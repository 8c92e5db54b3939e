// Command spoolbench measures spool append latency as the hook pays it: one
// fresh process per append (open, lock, identity revalidation, recovery scan,
// admission, durable write), on a nearly empty spool and on a spool near its
// default record limit, next to the reference of one process doing one bare
// fsync, all interleaved in the same run. It prints p50/p99 and ratios.
//
//	go run ./bench/spoolbench -n 300 -runs 5
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

func main() {
	n := flag.Int("n", 300, "appends per subject per run (at least 200 for a p99)")
	runs := flag.Int("runs", 5, "independent runs; the report gives each run and the median")
	prefill := flag.Int("prefill", 3700, "records already in the large spool")
	flag.Parse()
	if err := run(*n, *runs, *prefill); err != nil {
		fmt.Fprintln(os.Stderr, "spoolbench:", err)
		os.Exit(1)
	}
}

type subject struct {
	name  string
	argv  []string
	times []time.Duration
}

func pct(ts []time.Duration, p float64) time.Duration {
	s := slices.Clone(ts)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p)]
}

func run(n, runs, prefill int) error {
	work, err := os.MkdirTemp("", "spoolbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	app := filepath.Join(work, "appendone")
	ref := filepath.Join(work, "fsyncone")
	for target, pkg := range map[string]string{app: "./bench/spoolbench/appendone", ref: "./bench/spoolbench/fsyncone"} {
		if out, err := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", target, pkg).CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %v\n%s", pkg, err, out)
		}
	}
	type result struct{ p50, p99 [3]time.Duration }
	var results []result
	for r := range runs {
		small := filepath.Join(work, fmt.Sprintf("small-%d", r))
		large := filepath.Join(work, fmt.Sprintf("large-%d", r))
		refDir := filepath.Join(work, fmt.Sprintf("ref-%d", r))
		os.Mkdir(refDir, 0o700)
		if _, err := spool.Init(small); err != nil {
			return err
		}
		sp, err := spool.Init(large)
		if err != nil {
			return err
		}
		for i := 0; i < prefill; i++ {
			rec := &event.Record{Agent: "claude-code", SessionID: "bench", Kind: event.PromptSubmit, HookEvent: "UserPromptSubmit", ObservedAt: time.Now().UTC(), CaptureMode: event.ModeMetadataOnly}
			if _, err := sp.AppendContext(context.Background(), rec); err != nil {
				return fmt.Errorf("prefill: %w", err)
			}
		}
		subs := []*subject{
			{name: "append, new spool", argv: []string{app, small}},
			{name: fmt.Sprintf("append, %d+ records", prefill), argv: []string{app, large}},
			{name: "one bare fsync", argv: []string{ref, refDir}},
		}
		for i := 0; i < n; i++ {
			for k := range subs {
				s := subs[(i+k)%len(subs)]
				start := time.Now()
				if out, err := exec.Command(s.argv[0], s.argv[1:]...).CombinedOutput(); err != nil {
					return fmt.Errorf("%s: %v: %s", s.name, err, out)
				}
				s.times = append(s.times, time.Since(start))
			}
		}
		var res result
		fmt.Printf("run %d (n=%d per subject, whole process)\n", r+1, n)
		for k, s := range subs {
			res.p50[k], res.p99[k] = pct(s.times, 0.5), pct(s.times, 0.99)
			fmt.Printf("  %-28s p50 %6.2f ms  p99 %6.2f ms\n", s.name, ms(res.p50[k]), ms(res.p99[k]))
		}
		results = append(results, res)
	}
	fmt.Printf("\nmedian of %d runs\n", runs)
	names := []string{"append, new spool", fmt.Sprintf("append, %d+ records", prefill), "one bare fsync"}
	var med [3][2]time.Duration
	for k := range 3 {
		var a, b []time.Duration
		for _, r := range results {
			a, b = append(a, r.p50[k]), append(b, r.p99[k])
		}
		med[k] = [2]time.Duration{pct(a, 0.5), pct(b, 0.5)}
	}
	for k := range 3 {
		fmt.Printf("  %-28s p50 %6.2f ms  p99 %6.2f ms  (ratio to one bare fsync: p50 %.2fx, p99 %.2fx)\n", names[k], ms(med[k][0]), ms(med[k][1]),
			float64(med[k][0])/float64(med[2][0]), float64(med[k][1])/float64(med[2][1]))
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
