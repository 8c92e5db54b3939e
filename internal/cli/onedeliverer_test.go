package cli

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/hookrun"
	hubsvc "github.com/agentscm/agentscm/internal/hub"
	"github.com/agentscm/agentscm/internal/hub/api"
)

// slowProxy delays every response of the real Hub behind it by delay
// while slow is set: a Hub that answers, slowly.
type slowProxy struct {
	h     http.Handler
	slow  atomic.Bool
	delay time.Duration
}

func (p *slowProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.slow.Load() {
		time.Sleep(p.delay)
	}
	p.h.ServeHTTP(w, r)
}

// TestOneDelivererSlowHub: with the installed hook's detached deliverer
// (hookrun.ClaudeHook with Exe: here the test binary under the name
// agentscm, whose `change-capture deliver-spool` is the real deliverer
// process), a Hub on loopback that delays every response 3 s adds nothing
// to any hook's time, for events and increments alike: the hook stores
// the increment and kicks the one deliverer, which uploads it with the
// spool's envelopes. A deliverer killed after an upload (before the queue
// says so) while increments wait is recovered by the next kick: every
// position ends on the Hub. On main the PostToolUse hook uploaded its
// increment inline and waited for the slow Hub (3 s and more).
func TestOneDelivererSlowHub(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	xdg := filepath.Join(base, "xdg")
	cfg := filepath.Join(xdg, "agentscm")
	root := filepath.Join(base, "repo")
	os.MkdirAll(root, 0o755)
	root, _ = filepath.EvalSymlinks(root)
	if out, err := exec.Command("git", "-C", root, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	exe := filepath.Join(base, "bin", "agentscm")
	os.MkdirAll(filepath.Dir(exe), 0o755)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, exe); err != nil {
		t.Fatal(err)
	}
	svc, err := hubsvc.Open(ctx, filepath.Join(base, "hub"), hubsvc.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	op := hubsvc.Operator()
	if _, err := svc.CreateHuman(ctx, op, api.CreateHumanRequest{Name: "alice"}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreateRepository(ctx, op, api.CreateRepositoryRequest{Name: "demo"}); err != nil {
		t.Fatal(err)
	}
	tok, err := svc.CreateToken(ctx, op, api.CreateTokenRequest{Human: "alice", Repository: "demo", Scope: api.ScopeReadWrite})
	if err != nil {
		t.Fatal(err)
	}
	proxy := &slowProxy{h: hubsvc.NewHandler(svc, nil), delay: 3 * time.Second}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	if _, _, err := client.SetupHub(ctx, cfg, root, srv.URL, "demo", tok.Secret, time.Now()); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"XDG_CONFIG_HOME": xdg, "HOME": filepath.Join(base, "home"), changelog.WatchEnv: "0"}
	mustRun(t, vars, "work", "start", "--root", root)
	mustRun(t, vars, "changelog", "enable", "--root", root)
	mustRun(t, vars, "change-capture", "enable", "--root", root)
	store := capture.StateDir{Dir: cfg}
	cldir, _, ok := changelog.FindDir(cfg, root)
	if !ok {
		t.Fatal("no changelog directory")
	}
	getenv := func(k string) string { return vars[k] }
	hook := func(ev, extra string) time.Duration {
		t.Helper()
		pl := `{"session_id":"native-1","cwd":"` + root + `","hook_event_name":"` + ev + `"` + extra + `}`
		var out, errb bytes.Buffer
		start := time.Now()
		hookrun.ClaudeHook(ctx, strings.NewReader(pl), &out, &errb, getenv, time.Now(),
			hookrun.Options{Parts: hookrun.Parts{Capture: true, Changelog: true}, Exe: exe, TurnWait: time.Second})
		d := time.Since(start)
		if strings.Contains(errb.String(), "failed") {
			t.Fatalf("%s: %s", ev, errb.String())
		}
		return d
	}
	call := func(id, file string) []time.Duration {
		t.Helper()
		tool := `,"tool_name":"Write","tool_use_id":"` + id + `","tool_input":{"file_path":"` + filepath.Join(root, file) + `","content":"x"}`
		a := hook("PreToolUse", tool)
		if err := os.WriteFile(filepath.Join(root, file), []byte("written by "+id), 0o644); err != nil {
			t.Fatal(err)
		}
		return []time.Duration{a, hook("PostToolUse", tool+`,"tool_response":{"success":true}`)}
	}
	wait := func() {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		if err := store.WaitDeliverers(wctx); err != nil {
			t.Fatal(err)
		}
		if err := changelog.WaitUploads(wctx, cldir); err != nil {
			t.Fatal(err)
		}
	}
	states := func() map[string]int {
		t.Helper()
		c, _, err := changelog.OpenForUpload(cfg, cldir)
		if err != nil {
			t.Fatal(err)
		}
		list, err := c.List()
		if err != nil {
			t.Fatal(err)
		}
		n := map[string]int{}
		for _, in := range list {
			if in.Hub != nil {
				n[in.Hub.State]++
			} else {
				n["none"]++
			}
		}
		return n
	}
	hook("SessionStart", `,"source":"startup"`)
	hook("UserPromptSubmit", `,"prompt":"write two files"`)
	wait()

	proxy.slow.Store(true)
	var times []time.Duration
	times = append(times, hook("UserPromptSubmit", `,"prompt":"and one more"`))
	times = append(times, call("toolu_1", "a.txt")...)
	times = append(times, call("toolu_2", "b.txt")...)
	proxy.slow.Store(false)
	for i, d := range times {
		if d > 2*time.Second {
			t.Fatalf("hook %d took %s with a Hub that answers in 3 s: %v", i, d, times)
		}
	}
	wait()
	if n := states(); n["pending"] != 0 || n["uploaded"] == 0 {
		t.Fatalf("after the deliverers: increments %v, want every one uploaded", n)
	}

	// A deliverer killed after an upload, before its queue says so.
	t.Setenv(changelog.FailpointEnv, "deliver.uploaded")
	call("toolu_3", "c.txt")
	wait()
	if n := states(); n["pending"] == 0 {
		t.Fatalf("the killed deliverer left nothing pending: %v", n)
	}
	os.Unsetenv(changelog.FailpointEnv)
	call("toolu_4", "d.txt") // the next kick
	wait()
	if n := states(); n["pending"] != 0 {
		t.Fatalf("after the next kick: increments %v, want every one uploaded", n)
	}
	// The events too.
	if ins, err := capture.ListDeferred(mustSpool(t, store, root), 1); err != nil || ins.Total != 0 {
		t.Fatalf("deferred facts %+v %v", ins, err)
	}
}

func mustSpool(t *testing.T, store capture.StateDir, root string) string {
	t.Helper()
	cfg, err := store.Bindings().Load()
	if err != nil {
		t.Fatal(err)
	}
	b := cfg.Find(root)
	if b == nil {
		t.Fatal("no binding")
	}
	return b.Spool
}
