//go:build agentscm_bench

// Command intakebench measures the capture hook as the agent runs it (a
// fresh agentscm-hook process per event, built with CGO_ENABLED=0, on a
// checkout set up with one-step `change-capture enable --local` and a
// current Work) for two budgets of issue 12, each against its reference in
// the same run:
//
//   - history: hook p50 of a NEW PreToolUse (new tool_use_id) on a spool
//     holding H retained acknowledged envelopes (built in-process with the
//     spool API, then measured through the real hook process) next to the
//     same hook on a fresh spool and the one-fsync reference process
//     (bench/hookbench/fsyncref), interleaved;
//
//   - streams: wall-clock throughput of S concurrent hook streams against S
//     concurrent streams of the one-fsync reference process (the mean of
//     its rate just before the hooks and just after the drain), then the
//     time the intake backlog took to drain.
//
// Run it with the bench tag (the spool's benchmark-only helpers):
// go run -tags agentscm_bench ./bench/intakebench -n 60 -runs 5.
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
	"sync"
	"time"

	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

type options struct {
	n, runs, history, streams, perStream int
	tool                                 string
	// dirty budget (dirty.go)
	baseSrc           string
	files, dirtyFiles int
}

func main() {
	var o options
	flag.IntVar(&o.n, "n", 60, "hook runs per subject per run (history budget)")
	flag.IntVar(&o.runs, "runs", 3, "independent runs; medians are reported")
	flag.IntVar(&o.history, "history", 20000, "retained acknowledged envelopes in the large spool")
	flag.IntVar(&o.streams, "streams", 8, "concurrent streams (throughput budget)")
	flag.IntVar(&o.perStream, "per-stream", 25, "hook invocations per stream")
	flag.StringVar(&o.tool, "tool", "Read", "tool of the PreToolUse payloads (Bash also runs the default execution rule)")
	flag.StringVar(&o.baseSrc, "base-src", "", "dirty budget: also build the binaries from this source tree (e.g. a worktree of main) and measure them in the same run")
	flag.IntVar(&o.files, "files", 1000, "dirty budget: tracked files of each checkout")
	flag.IntVar(&o.dirtyFiles, "dirty-files", 10, "dirty budget: modified tracked files (plus one untracked file) of the dirty checkouts")
	only := flag.String("only", "history,streams", "which budgets to measure: history, streams, dirty")
	flag.BoolVar(&keep, "keep", false, "keep the work directory (debugging)")
	bin := flag.String("bin", "installed", "hook executable: installed (the one enable puts on PreToolUse) or full (agentscm-hook)")
	flag.Parse()
	switch *bin {
	case "installed":
	case "full":
		fullHook = true
	default:
		fmt.Fprintln(os.Stderr, "intakebench: -bin is installed or full")
		os.Exit(2)
	}
	if err := run(o, *only); err != nil {
		fmt.Fprintln(os.Stderr, "intakebench:", err)
		os.Exit(1)
	}
}

var keep, fullHook bool

type env struct {
	work, hook, admin, ref, refDir string
}

func build(work string) (*env, error) {
	e := &env{work: work, ref: filepath.Join(work, "fsyncref"), refDir: filepath.Join(work, "ref")}
	bin := filepath.Join(work, "bin")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin+string(filepath.Separator),
		"github.com/agentscm/agentscm/cmd/agentscm", "github.com/agentscm/agentscm/cmd/agentscm-hook", "github.com/agentscm/agentscm/cmd/agentscm-hook-intake")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build: %v\n%s", err, out)
	}
	if out, err := exec.Command("go", "build", "-trimpath", "-o", e.ref, "github.com/agentscm/agentscm/bench/hookbench/fsyncref").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build fsyncref: %v\n%s", err, out)
	}
	e.hook, e.admin = filepath.Join(bin, "agentscm-hook"), filepath.Join(bin, "agentscm")
	return e, os.MkdirAll(e.refDir, 0o700)
}

type checkout struct {
	root, spool, config string
	env                 []string
	// hook is the executable enable installed on PreToolUse (the intake
	// binary next to agentscm-hook), or agentscm-hook with -bin full.
	hook string
}

// setup makes a checkout the one-step way: enable --local, then a current
// Work.
func (e *env) setup(name string) (*checkout, error) {
	dir := filepath.Join(e.work, name)
	c := &checkout{root: filepath.Join(dir, "repo"), config: filepath.Join(dir, "config"), env: append(os.Environ(), "XDG_CONFIG_HOME="+filepath.Join(dir, "config"))}
	if err := os.MkdirAll(c.root, 0o755); err != nil {
		return nil, err
	}
	out, err := e.sh(c, "change-capture", "enable", "--root", c.root, "--local", "--format", "json")
	if err != nil {
		return nil, err
	}
	var res struct {
		Spool string `json:"spool"`
	}
	if i := bytes.IndexByte(out, '{'); i < 0 || json.Unmarshal(out[i:], &res) != nil || res.Spool == "" {
		return nil, fmt.Errorf("enable output: %s", out)
	}
	c.spool = res.Spool
	if c.hook, err = installedHook(c.root); err != nil {
		return nil, err
	}
	if fullHook {
		c.hook = e.hook
	}
	if _, err := e.sh(c, "work", "start", "--root", c.root, "--title", "intakebench"); err != nil {
		return nil, err
	}
	return c, nil
}

// installedHook returns the executable of the PreToolUse entry enable
// installed in root's Claude Code settings.
func installedHook(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, ".claude", "settings.local.json"))
	if err != nil {
		return "", err
	}
	var st struct {
		Hooks map[string][]struct {
			Hooks []struct {
				Command string `json:"command"`
			} `json:"hooks"`
		} `json:"hooks"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return "", err
	}
	for _, g := range st.Hooks["PreToolUse"] {
		for _, h := range g.Hooks {
			if f := strings.Fields(h.Command); len(f) == 3 && f[1] == "change-capture" && f[2] == "hook-claude" {
				return f[0], nil
			}
		}
	}
	return "", fmt.Errorf("no capture hook on PreToolUse in %s", root)
}

func (e *env) sh(c *checkout, args ...string) ([]byte, error) {
	cmd := exec.Command(e.admin, args...)
	cmd.Env = c.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("agentscm %v: %v\n%s", args, err, out)
	}
	return out, nil
}

// populate retains n acknowledged envelopes in c's spool in-process (the
// spool API's own append and ack, without fsync while filling), after
// raising its limits so that they fit.
func populate(c *checkout, n int) error {
	sp, err := spool.OpenAppender(c.spool)
	if err != nil {
		return err
	}
	ctx := context.Background()
	if err := sp.BenchSetLimits(ctx, spool.Limits{Records: int64(4*n + 4096), Bytes: 1 << 30}); err != nil {
		return err
	}
	sp.BenchNoSync(true)
	ss, err := sp.Begin(ctx)
	if err != nil {
		return err
	}
	defer ss.Close()
	for i := range n {
		r := &event.Record{Agent: "claude-code", SessionID: fmt.Sprintf("history-%d", i/50), Kind: event.ToolStart,
			HookEvent: "PreToolUse", ToolName: "Read", ToolUseID: fmt.Sprintf("toolu_history_%06d", i),
			ObservedAt: time.Now().UTC(), CaptureMode: event.ModeMetadataOnly}
		if _, err := ss.Append(r); err != nil {
			return fmt.Errorf("append %d: %w", i, err)
		}
		pend, err := ss.Pending(10)
		if err != nil {
			return err
		}
		for _, p := range pend {
			if err := ss.Ack(p.Record.Seq, p.Digest); err != nil {
				return err
			}
		}
	}
	return nil
}

func pre(c *checkout, tool, tag string, i int) []byte {
	return []byte(fmt.Sprintf(`{"session_id":"bench-%s","transcript_path":"/tmp/bench.jsonl","cwd":"%s","permission_mode":"default","hook_event_name":"PreToolUse","tool_name":"%s","tool_use_id":"toolu_%s_%07d","tool_input":{"file_path":"/etc/hostname","command":"go test ./..."}}`,
		tag, c.root, tool, tag, i))
}

func once(argv []string, envv []string, stdin []byte) (time.Duration, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = envv
	cmd.Stdin = bytes.NewReader(stdin)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	t0 := time.Now()
	err := cmd.Run()
	d := time.Since(t0)
	if err != nil {
		return d, fmt.Errorf("%v: %v %s", argv, err, errb.String())
	}
	if errb.Len() > 0 && !strings.Contains(errb.String(), "deliver") {
		return d, fmt.Errorf("%v warned: %s", argv, errb.String())
	}
	return d, nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func run(o options, only string) error {
	work, err := os.MkdirTemp("", "intakebench-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Println("work directory:", work)
	} else {
		defer os.RemoveAll(work)
	}
	e, err := build(work)
	if err != nil {
		return err
	}
	which := "installed"
	if fullHook {
		which = "full"
	}
	fmt.Printf("# go run -tags agentscm_bench ./bench/intakebench -n %d -runs %d -history %d -streams %d -per-stream %d -tool %s -bin %s\n",
		o.n, o.runs, o.history, o.streams, o.perStream, o.tool, which)
	var fresh, big, ref []float64
	var tput, tref, drain []float64
	var dirtyRes []map[string]float64
	var base *env
	if strings.Contains(only, "dirty") && o.baseSrc != "" {
		if base, err = buildFrom(o.baseSrc, filepath.Join(work, "base")); err != nil {
			return err
		}
	}
	for r := 1; r <= o.runs; r++ {
		fmt.Printf("== run %d of %d, %s\n", r, o.runs, time.Now().UTC().Format("2006-01-02 15:04:05 UTC"))
		if strings.Contains(only, "history") {
			f, b, x, err := history(e, o, r)
			if err != nil {
				return err
			}
			fresh, big, ref = append(fresh, f), append(big, b), append(ref, x)
		}
		if strings.Contains(only, "streams") {
			h, x, d, err := streams(e, o, r)
			if err != nil {
				return err
			}
			tput, tref, drain = append(tput, h), append(tref, x), append(drain, d)
		}
		if strings.Contains(only, "dirty") {
			m, err := dirty(e, base, o, r)
			if err != nil {
				return err
			}
			dirtyRes = append(dirtyRes, m)
		}
	}
	fmt.Println("== medians over runs")
	if len(fresh) > 0 {
		fmt.Printf("history: hook p50 fresh %.2f ms, %d retained %.2f ms (ratio %.2fx, budget <= 1.2x), fsyncref p50 %.2f ms\n",
			median(fresh), o.history, median(big), median(big)/median(fresh), median(ref))
	}
	if len(dirtyRes) > 0 {
		printDirty(dirtyRes)
	}
	if len(tput) > 0 {
		fmt.Printf("streams: %d hook streams %.1f hooks/s, %d fsyncref streams %.1f processes/s (ratio %.2fx, budget >= 0.5x); intake admitted and delivered %.2f s after the streams\n",
			o.streams, median(tput), o.streams, median(tref), median(tput)/median(tref), median(drain))
	}
	return nil
}

func history(e *env, o options, r int) (float64, float64, float64, error) {
	fc, err := e.setup(fmt.Sprintf("fresh-%d", r))
	if err != nil {
		return 0, 0, 0, err
	}
	bc, err := e.setup(fmt.Sprintf("big-%d", r))
	if err != nil {
		return 0, 0, 0, err
	}
	t0 := time.Now()
	if err := populate(bc, o.history); err != nil {
		return 0, 0, 0, err
	}
	fmt.Printf("populated %d acknowledged envelopes in %.1f s\n", o.history, time.Since(t0).Seconds())
	// Warm-up: the first hook on each spool builds its summary (one full
	// scan) and the ledger.
	for i := range 3 {
		for _, c := range []*checkout{fc, bc} {
			if _, err := once([]string{c.hook, "change-capture", "hook-claude"}, c.env, pre(c, o.tool, fmt.Sprintf("warm%d", r), i)); err != nil {
				return 0, 0, 0, err
			}
		}
	}
	var tf, tb, tr []time.Duration
	for i := range o.n {
		d, err := once([]string{e.ref, e.refDir}, os.Environ(), pre(fc, o.tool, "ref", i))
		if err != nil {
			return 0, 0, 0, err
		}
		tr = append(tr, d)
		if d, err = once([]string{fc.hook, "change-capture", "hook-claude"}, fc.env, pre(fc, o.tool, fmt.Sprintf("f%d", r), i)); err != nil {
			return 0, 0, 0, err
		}
		tf = append(tf, d)
		if d, err = once([]string{bc.hook, "change-capture", "hook-claude"}, bc.env, pre(bc, o.tool, fmt.Sprintf("b%d", r), i)); err != nil {
			return 0, 0, 0, err
		}
		tb = append(tb, d)
	}
	p50 := func(ts []time.Duration) float64 {
		s := slices.Clone(ts)
		slices.Sort(s)
		return ms(s[len(s)/2])
	}
	for _, c := range []*checkout{fc, bc} { // no deliverer left running
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err := capture.StateDir{Dir: filepath.Join(c.config, "agentscm")}.WaitDeliverer(ctx, c.spool)
		cancel()
		if err != nil {
			return 0, 0, 0, err
		}
	}
	f, b, x := p50(tf), p50(tb), p50(tr)
	fmt.Printf("fsyncref p50 %.2f ms | hook fresh p50 %.2f ms | hook %d retained p50 %.2f ms | ratio %.2fx\n", x, f, o.history, b, b/f)
	return f, b, x, nil
}

// streams runs S concurrent streams of P invocations each, hooks and the
// reference alternately, and reports invocations per second.
func streams(e *env, o options, r int) (float64, float64, float64, error) {
	c, err := e.setup(fmt.Sprintf("streams-%d", r))
	if err != nil {
		return 0, 0, 0, err
	}
	for i := range 3 { // warm-up
		if _, err := once([]string{c.hook, "change-capture", "hook-claude"}, c.env, pre(c, o.tool, fmt.Sprintf("sw%d", r), i)); err != nil {
			return 0, 0, 0, err
		}
	}
	par := func(argv []string, envv []string, tag string) (float64, error) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var ds []time.Duration
		errs := make(chan error, o.streams)
		t0 := time.Now()
		for s := range o.streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range o.perStream {
					d, err := once(argv, envv, pre(c, o.tool, fmt.Sprintf("%s%d_%d", tag, r, s), i))
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					ds = append(ds, d)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return 0, err
		}
		el := time.Since(t0)
		slices.Sort(ds)
		fmt.Printf("  %s: %d invocations in %.2f s, per invocation p50 %.1f ms p90 %.1f ms max %.1f ms\n", filepath.Base(argv[0]), len(ds), el.Seconds(),
			ms(ds[len(ds)/2]), ms(ds[len(ds)*9/10]), ms(ds[len(ds)-1]))
		return float64(o.streams*o.perStream) / el.Seconds(), nil
	}
	x, err := par([]string{e.ref, e.refDir}, os.Environ(), "r")
	if err != nil {
		return 0, 0, 0, err
	}
	h, err := par([]string{c.hook, "change-capture", "hook-claude"}, c.env, "s")
	if err != nil {
		return 0, 0, 0, err
	}
	// Drain: the background deliverer admits what the streams left in the
	// intake and delivers it; a later hook starts one when none runs. The
	// drain ends when no deliverer runs, the intake is empty and nothing
	// deliverable is pending (every stream event is on the Hub).
	t0 := time.Now()
	store := capture.StateDir{Dir: filepath.Join(c.config, "agentscm")}
	left, pending := 0, 0
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err := store.WaitDeliverer(ctx, c.spool)
		cancel()
		if err != nil {
			return 0, 0, 0, err
		}
		rep, err := spool.Inspect(c.spool, 1)
		if err != nil {
			return 0, 0, 0, err
		}
		left, pending = rep.Intake, rep.Pending.Total+rep.Deferred.Total
		if (left == 0 && pending == 0) || i > 200 {
			break
		}
		if _, err := once([]string{c.hook, "change-capture", "hook-claude"}, c.env, pre(c, o.tool, fmt.Sprintf("d%d", r), i)); err != nil {
			return 0, 0, 0, err
		}
	}
	d := time.Since(t0).Seconds()
	// The reference again, after the drain (nothing of the hooks' runs
	// any more): the streams are compared with the mean of the two.
	x2, err := par([]string{e.ref, e.refDir}, os.Environ(), "q")
	if err != nil {
		return 0, 0, 0, err
	}
	fmt.Printf("  fsyncref before the hooks %.1f/s, after the drain %.1f/s\n", x, x2)
	x = (x + x2) / 2
	// Every stream event is in the spool.
	sp, err := spool.OpenReadOnly(c.spool)
	if err != nil {
		return 0, 0, 0, err
	}
	evs, err := sp.Events()
	if err != nil {
		return 0, 0, 0, err
	}
	got := 0
	for _, ev := range evs {
		if ev.Kind == event.ToolStart && strings.HasPrefix(ev.ToolUseID, fmt.Sprintf("toolu_s%d_", r)) {
			got++
		}
	}
	fmt.Printf("%d fsyncref streams %.1f/s | %d hook streams %.1f/s | ratio %.2fx | admitted and delivered in %.2f s more, %d of %d stream events retained, %d left in intake, %d pending\n",
		o.streams, x, o.streams, h, h/x, d, got, o.streams*o.perStream, left, pending)
	if got != o.streams*o.perStream {
		return 0, 0, 0, fmt.Errorf("lost stream events: %d of %d retained", got, o.streams*o.perStream)
	}
	return h, x, d, nil
}
