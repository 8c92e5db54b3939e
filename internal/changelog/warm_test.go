package changelog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/agent"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/watch"
)

// serveMain runs in a child process (AGENTSCM_CHANGELOG_HELPER=watch-serve)
// as `agentscm changelog watch-serve` does: the watch server of the
// changelog HELPER_DIR over HELPER_ROOT, answering the hooks' captures,
// with FailpointEnv from its environment.
func serveMain() int {
	dir, root := os.Getenv("HELPER_DIR"), os.Getenv("HELPER_ROOT")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	wd := filepath.Join(dir, WatchDir)
	err := watch.Serve(ctx, wd, []string{root}, watch.ServeOptions{Idle: time.Minute, Ops: CaptureOps(wd, os.Getenv(FailpointEnv))})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// startServer starts the watch server of the changelog dir as a real
// process (failpoint in its environment) and waits for its first answer.
func startServer(t *testing.T, dir, root, failpoint string) *exec.Cmd {
	t.Helper()
	wd := filepath.Join(dir, WatchDir)
	if err := fsutil.MkdirPrivate(wd); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "AGENTSCM_CHANGELOG_HELPER=watch-serve", "HELPER_DIR="+dir, "HELPER_ROOT="+root, FailpointEnv+"="+failpoint)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGKILL)
		<-exited
	})
	cl := &watch.Client{Dir: wd, Timeout: time.Second}
	for deadline := time.Now().Add(20 * time.Second); ; {
		if _, err := cl.Status(context.Background(), []string{root}, ""); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the watch server did not answer")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cmd
}

// warmHook runs one PostToolUse hook of the call id with the default
// watcher (no server started by it) and the warm capture's wait.
func warmHook(t *testing.T, cfg, root, id string, env map[string]string) (*Increment, error) {
	t.Helper()
	p, err := agent.DecodePayload([]byte(`{"session_id":"s","cwd":"` + root + `","hook_event_name":"PostToolUse","tool_name":"Write","tool_use_id":"` + id + `"}`))
	if err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string { return env[k] }
	res, err := HandlePayload(context.Background(), cfg, p, time.Now(), HookOptions{Watch: HookWatch(getenv, ""), FindHost: func(string) (Host, bool) { return Host{}, false }})
	if err != nil {
		return nil, err
	}
	return res.Increment, nil
}

// checkSequence checks the changelog dir after the calls ids: positions
// 0..len(ids)-1 each hold exactly one increment, the i-th holds call
// ids[i] (no position lost, none doubled), and the increments replay to
// the tree at root.
func checkSequence(t *testing.T, dir, root string, ids []string) {
	t.Helper()
	c, err := Open(dir, Options{Roots: []Root{{Name: "checkout", Path: root}}})
	if err != nil {
		t.Fatal(err)
	}
	pos, err := c.positions()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var paths []string
	for _, p := range pos {
		m, err := ReadMeta(c.incrementPath(p))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d:%s", p, m.ToolUseID))
		paths = append(paths, c.incrementPath(p))
	}
	var want []string
	for i, id := range ids {
		want = append(want, fmt.Sprintf("%d:%s", i, id))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("increments %v, want %v", got, want)
	}
	out := filepath.Join(t.TempDir(), "out")
	if err := Replay(context.Background(), paths, []Root{{Name: "checkout", Path: out}}); err != nil {
		t.Fatal(err)
	}
	if d := diffTrees(snapshot(t, root, false, nil), snapshot(t, out, false, nil)); d != "" {
		t.Fatalf("the increments replay to another tree:\n%s", d)
	}
}

// holds reports whether inc created or modified a path ending in name.
func holds(inc *Increment, name string) bool {
	return slices.ContainsFunc(append(slices.Clone(inc.Meta.Changes.Created), inc.Meta.Changes.Modified...), func(p string) bool { return strings.HasSuffix(p, name) })
}

// A running watch server takes the hook's capture: the increment is the
// server's (Warm), holds exactly the call's writes, and interleaves with
// captures the hooks take themselves (the same lock, one sequence).
func TestWarmCaptureByTheServer(t *testing.T) {
	cfg, root, dir := hookFixture(t)
	writeFile(t, filepath.Join(root, "base"), "b")
	startServer(t, dir, root, "")
	env := map[string]string{}
	var ids []string
	for i := range 6 {
		name := fmt.Sprintf("f%d", i)
		writeFile(t, filepath.Join(root, "sub", name), name)
		env[WarmEnv] = map[bool]string{true: "0", false: ""}[i == 3]
		id := "toolu_" + name
		inc, err := warmHook(t, cfg, root, id, env)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		if inc.Position != i || inc.Warm != (i != 3) || !holds(inc, name) || inc.Meta.ToolUseID != id {
			t.Fatalf("call %d: position %d, warm %v, changes %+v", i, inc.Position, inc.Warm, inc.Meta.Changes)
		}
		if i > 0 && inc.Meta.Files != 1 {
			t.Fatalf("call %d stored %d files, want 1", i, inc.Meta.Files)
		}
	}
	checkSequence(t, dir, root, ids)
}

// The fallbacks of the warm capture: the watch server is killed or stalled
// at its capture request, before, during and after its fsync; the hook
// then captures itself or recognises the server's increment, and the
// sequence has every call exactly once, and the next capture (by a healthy
// server) is right.
func TestWarmCaptureFallbacks(t *testing.T) {
	const wait = 700 * time.Millisecond
	const stall = 2500 // ms, well past wait
	// Where the server's increment of the call is durable when the hook
	// falls back (linked, advanced, answer; a stall at synced holds the
	// lock until it is) the hook must recognise it; before, it must not
	// be stored later (received).
	for _, tc := range []struct{ failpoint string }{
		{""}, // no server at all
		{"kill:received"},
		{"kill:synced"},
		{"kill:linked"},
		{"kill:advanced"},
		{"kill:answer"},
		{fmt.Sprint("stall:received:", stall)},
		{fmt.Sprint("stall:synced:", stall)},
		{fmt.Sprint("stall:advanced:", stall)},
		{fmt.Sprint("stall:answer:", stall)},
	} {
		name := tc.failpoint
		if name == "" {
			name = "no server"
		}
		t.Run(name, func(t *testing.T) {
			cfg, root, dir := hookFixture(t)
			env := map[string]string{WarmWaitEnv: wait.String()}
			writeFile(t, filepath.Join(root, "a"), "a")
			// Call 0: no server yet, the hook captures itself.
			if inc, err := warmHook(t, cfg, root, "toolu_0", env); err != nil || inc.Position != 0 || inc.Warm {
				t.Fatalf("call 0: %+v %v", inc, err)
			}
			var srv *exec.Cmd
			if tc.failpoint != "" {
				srv = startServer(t, dir, root, tc.failpoint)
			}
			writeFile(t, filepath.Join(root, "sub", "b"), "b")
			start := time.Now()
			inc, err := warmHook(t, cfg, root, "toolu_1", env)
			if err != nil {
				t.Fatal(err)
			}
			if inc.Position != 1 || inc.Warm || !holds(inc, "b") || inc.Meta.ToolUseID != "toolu_1" {
				t.Fatalf("call 1: position %d, warm %v, changes %+v", inc.Position, inc.Warm, inc.Meta.Changes)
			}
			if tc.failpoint != "" && (inc.Meta.CaptureID == "") {
				t.Fatal("call 1 carries no capture id")
			}
			if strings.HasPrefix(tc.failpoint, "stall:") {
				if d := time.Since(start); d < wait {
					t.Fatalf("the hook answered after %v, before its wait ended", d)
				}
				// Let the stalled server finish with call 1 (a second
				// increment of it would show below), then end it.
				time.Sleep(time.Duration(stall)*time.Millisecond - time.Since(start) + 500*time.Millisecond)
				srv.Process.Signal(syscall.SIGTERM)
			}
			if srv != nil {
				for range 100 {
					if errors.Is(srv.Process.Signal(syscall.Signal(0)), os.ErrProcessDone) {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			checkSequence(t, dir, root, []string{"toolu_0", "toolu_1"})
			// The next capture, by a healthy server.
			startServer(t, dir, root, "")
			writeFile(t, filepath.Join(root, "sub", "c"), "c")
			inc, err = warmHook(t, cfg, root, "toolu_2", map[string]string{})
			if err != nil {
				t.Fatal(err)
			}
			if inc.Position != 2 || !inc.Warm || !holds(inc, "c") || holds(inc, "b") && !inc.Meta.Full {
				t.Fatalf("call 2: position %d, warm %v, full %v, changes %+v", inc.Position, inc.Warm, inc.Meta.Full, inc.Meta.Changes)
			}
			checkSequence(t, dir, root, []string{"toolu_0", "toolu_1", "toolu_2"})
		})
	}
}

// BenchmarkWarmCapture compares, in one process and alternating call by
// call, a PostToolUse hook whose capture the watch server (a real child
// process) takes with one that captures itself, asking the same server
// only what changed; 2,000 files in 100 directories.
func BenchmarkWarmCapture(b *testing.B) {
	base := b.TempDir()
	cfg, root := filepath.Join(base, "cfg"), filepath.Join(base, "repo")
	for i := range 2000 {
		p := filepath.Join(root, fmt.Sprintf("d%02d/f%03d", i%100, i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(fmt.Sprint(i)), 0o644)
	}
	os.MkdirAll(filepath.Join(cfg, "changelog"), 0o700)
	dir := DefaultDir(cfg, root)
	c, err := Open(dir, Options{Roots: []Root{{Name: "checkout", Path: root}}})
	if err != nil {
		b.Fatal(err)
	}
	if err := c.SaveRoots(); err != nil {
		b.Fatal(err)
	}
	wd := filepath.Join(dir, WatchDir)
	fsutil.MkdirPrivate(wd)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "AGENTSCM_CHANGELOG_HELPER=watch-serve", "HELPER_DIR="+dir, "HELPER_ROOT="+root)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	cl := &watch.Client{Dir: wd, Timeout: time.Second}
	for range 500 {
		if _, err := cl.Status(context.Background(), []string{root}, ""); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	k := 0
	hook := func(b *testing.B, env map[string]string) *Increment {
		k++
		os.WriteFile(filepath.Join(root, fmt.Sprintf("d%02d/f%03d", k%100, k%2000)), []byte(fmt.Sprint("e", k)), 0o644)
		p, _ := agent.DecodePayload([]byte(fmt.Sprintf(`{"session_id":"s","cwd":%q,"hook_event_name":"PostToolUse","tool_name":"Write","tool_use_id":"toolu_%d"}`, root, k)))
		getenv := func(k string) string { return env[k] }
		res, err := HandlePayload(context.Background(), cfg, p, time.Now(), HookOptions{Watch: HookWatch(getenv, ""), FindHost: func(string) (Host, bool) { return Host{}, false }})
		if err != nil {
			b.Fatal(err)
		}
		return res.Increment
	}
	warm, cold := map[string]string{}, map[string]string{WarmEnv: "0"}
	for range 3 { // the full first increment; tokens
		hook(b, warm)
		hook(b, cold)
	}
	var dw, dc []time.Duration
	b.ResetTimer()
	for range b.N {
		s := time.Now()
		if inc := hook(b, warm); !inc.Warm || !inc.Watched {
			b.Fatalf("not a watched warm capture: %+v", inc)
		}
		dw = append(dw, time.Since(s))
		s = time.Now()
		if inc := hook(b, cold); inc.Warm || !inc.Watched {
			b.Fatalf("not a watched hook capture: %+v", inc)
		}
		dc = append(dc, time.Since(s))
	}
	b.StopTimer()
	slices.Sort(dw)
	slices.Sort(dc)
	b.ReportMetric(float64(dw[len(dw)/2].Microseconds()), "warm-p50-us")
	b.ReportMetric(float64(dc[len(dc)/2].Microseconds()), "hook-p50-us")
	b.ReportMetric(float64(dw[len(dw)/2])/float64(dc[len(dc)/2]), "warm/hook")
}
