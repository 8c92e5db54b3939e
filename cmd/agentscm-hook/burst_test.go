package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/cli"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

// envAsHook makes the test binary run as the hook process itself (the same
// run() the installed agentscm-hook runs), so the burst tests start real
// hook processes without a separate build.
const envAsHook = "AGENTSCM_HOOK_TEST_AS_HOOK"

// envDetached makes that hook hand delivery to a detached deliverer: the
// test binary again, run as `change-capture deliver-spool` (the arguments
// the hook gives it), exactly as the installed agentscm-hook does.
const envDetached = "AGENTSCM_HOOK_TEST_DETACHED"

func TestMain(m *testing.M) {
	if os.Getenv(envAsHook) == "1" {
		args, exe := os.Args[1:], ""
		if len(args) == 0 {
			args = []string{"change-capture", "hook-claude"}
		}
		if os.Getenv(envDetached) == "1" {
			exe = os.Args[0]
		}
		os.Exit(run(context.Background(), args, os.Stdin, os.Stdout, os.Stderr, os.Getenv, time.Now, exe))
	}
	os.Exit(m.Run())
}

type burstFixture struct {
	dir, root, spool string
	vars             map[string]string
	// detached hooks start the background deliverer (envDetached).
	detached bool
}

func newBurstFixture(t *testing.T) *burstFixture {
	dir := t.TempDir()
	f := &burstFixture{dir: dir, root: filepath.Join(dir, "repo"), spool: filepath.Join(dir, "spool"),
		vars: map[string]string{"XDG_CONFIG_HOME": filepath.Join(dir, "config")}}
	if err := os.MkdirAll(f.root, 0o755); err != nil {
		t.Fatal(err)
	}
	f.agentscm(t, "client", "setup", "--root", f.root, "--local")
	f.agentscm(t, "change-capture", "configure", "--root", f.root, "--spool", f.spool)
	f.agentscm(t, "work", "start", "--root", f.root, "--title", "burst")
	return f
}

func (f *burstFixture) agentscm(t *testing.T, args ...string) string {
	t.Helper()
	return f.agentscmAs(t, filepath.Join(f.dir, "bin", "agentscm"), args...)
}

// agentscmAs is agentscm with exe as the running agentscm executable.
func (f *burstFixture) agentscmAs(t *testing.T, exe string, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	env := &cli.Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return f.vars[k] },
		Now: time.Now, Executable: exe}
	if code := cli.Main(context.Background(), env, args); code != 0 {
		t.Fatalf("agentscm %v: exit %d: %s", args, code, errb.String())
	}
	return out.String()
}

func (f *burstFixture) hookCmd(payload string) *exec.Cmd {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envAsHook+"=1", "XDG_CONFIG_HOME="+f.vars["XDG_CONFIG_HOME"])
	if f.detached {
		cmd.Env = append(cmd.Env, envDetached+"=1")
	}
	cmd.Stdin = strings.NewReader(payload)
	return cmd
}

func (f *burstFixture) pre(session, id string) string {
	return `{"session_id":"` + session + `","cwd":"` + f.root + `","hook_event_name":"PreToolUse","tool_name":"Read","tool_use_id":"` + id + `","tool_input":{"file_path":"/etc/hostname"}}`
}

// drain runs hooks until the intake is empty (each admits a bounded share).
func (f *burstFixture) drain(t *testing.T, session string) {
	t.Helper()
	for i := range 40 {
		out, err := f.hookCmd(`{"session_id":"` + session + `","cwd":"` + f.root + `","hook_event_name":"Stop"}`).CombinedOutput()
		if err != nil {
			t.Fatalf("drain hook: %v %s", err, out)
		}
		names, _ := os.ReadDir(filepath.Join(f.spool, "intake"))
		waiting := 0
		for _, n := range names {
			// A killed writer's temporary stays until it is old enough to
			// be known dead; its hook did not exit 0.
			if strings.HasSuffix(n.Name(), ".in") {
				waiting++
			}
		}
		if waiting == 0 {
			return
		}
		_ = i
	}
	t.Fatal("the intake never drained")
}

// toolStarts returns how often each tool_use_id's PreToolUse is retained.
func (f *burstFixture) toolStarts(t *testing.T) map[string]int {
	t.Helper()
	sp, err := spool.OpenReadOnly(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := sp.Events()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range evs {
		if e.Kind == event.ToolStart {
			out[e.ToolUseID]++
		}
	}
	return out
}

// A burst of concurrent hook processes, some killed with SIGKILL at random
// moments: every hook that exited 0 has its event in the spool exactly
// once, whether it appended it itself or left it in the intake for a later
// lock holder (which may itself have been killed mid-admission).
func TestBurstWithKillsLosesNothing(t *testing.T) {
	n := 200
	if testing.Short() {
		n = 60
	}
	burst(t, n, true)
}

// Without kills, a burst no larger than one hook's admission budget leaves
// nothing waiting in the intake once it is over: the hooks' follow-up
// admits what a holder that was letting go left behind (a larger burst
// drains over later hooks, within their bounded budgets).
func TestBurstLeavesNothingWaiting(t *testing.T) {
	f := newBurstFixture(t)
	f.drain(t, "burst-setup")
	for round := range 4 {
		burstOn(t, f, 6, false, fmt.Sprintf("r%d", round))
	}
}

func burst(t *testing.T, n int, kills bool) {
	f := newBurstFixture(t)
	f.drain(t, "burst-setup")
	burstOn(t, f, n, kills, "")
	f.drain(t, "burst-drain")
	got := f.toolStarts(t)
	for id, c := range got {
		if c > 1 {
			t.Errorf("event %s retained %d times", id, c)
		}
	}
}

func burstOn(t *testing.T, f *burstFixture, n int, kills bool, tag string) {
	var mu sync.Mutex
	exited0 := map[string]bool{}
	killed := 0
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		id := fmt.Sprintf("toolu_burst_%s%04d", tag, i)
		kill := kills && rand.IntN(5) == 0 // about one in five
		delay := time.Duration(rand.IntN(40)) * time.Millisecond
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := f.hookCmd(f.pre(fmt.Sprintf("burst-%d", i%8), id))
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			<-start
			if err := cmd.Start(); err != nil {
				t.Error(err)
				return
			}
			if kill {
				time.AfterFunc(delay, func() { cmd.Process.Signal(syscall.SIGKILL) })
			}
			err := cmd.Wait()
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				exited0[id] = true
				if out.Len() != 0 && strings.Contains(out.String(), "warning") && !strings.Contains(out.String(), "deliver") {
					t.Logf("hook %s warned: %s", id, out.String())
				}
			} else {
				killed++
			}
		}()
	}
	close(start)
	wg.Wait()
	if !kills && !f.detached { // detached: the deliverer admits, later (waitDelivered)
		names, _ := os.ReadDir(filepath.Join(f.spool, "intake"))
		for _, nm := range names {
			if strings.HasSuffix(nm.Name(), ".in") {
				t.Errorf("intake file %s still waits after the burst", nm.Name())
			}
		}
	}
	if !kills && len(exited0) != n {
		t.Fatalf("%d of %d hooks exited 0 without kills", len(exited0), n)
	}
	if f.detached {
		f.waitDeliverer(t) // no later hook: the deliverer admits what waits
	} else if kills {
		f.drain(t, "burst-drain")
	}
	got := f.toolStarts(t)
	for id := range exited0 {
		if got[id] == 0 {
			t.Errorf("hook %s exited 0 but its event is not in the spool", id)
		}
	}
	t.Logf("%d hooks: %d exited 0, %d killed", n, len(exited0), killed)
	if len(exited0) < n/2 {
		t.Fatalf("only %d of %d hooks exited 0", len(exited0), n)
	}
}
