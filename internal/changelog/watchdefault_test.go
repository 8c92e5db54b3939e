package changelog

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/watch"
)

// serveWatch hosts the watch server of the changelog directory dir in this
// process (as agentscm changelog watch-serve would) until the test ends.
func serveWatch(t *testing.T, dir string, roots []string) {
	t.Helper()
	wd := filepath.Join(dir, WatchDir)
	if err := fsutil.MkdirPrivate(wd); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	up := make(chan struct{})
	go func() { done <- watch.Serve(ctx, wd, roots, watch.ServeOptions{Ready: func() { close(up) }}) }()
	select {
	case <-up:
	case err := <-done:
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// The hook's default watcher (HookWatch) is used: once the server holds a
// token, each tool call's capture lists only what it reports, and every
// fallback lists every directory and still stores the right increment.
func TestHookUsesTheDefaultWatcher(t *testing.T) {
	cfg, root, dir := hookFixture(t)
	for i := range 20 {
		os.MkdirAll(filepath.Join(root, fmt.Sprintf("d%02d", i)), 0o755)
		os.WriteFile(filepath.Join(root, fmt.Sprintf("d%02d/f", i)), []byte("x"), 0o644)
	}
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	call := func(file string) *Increment {
		t.Helper()
		os.WriteFile(filepath.Join(root, file), []byte(file+time.Now().String()), 0o644)
		p := `{"session_id":"s","cwd":"` + root + `","hook_event_name":"PostToolUse","tool_name":"Write","tool_use_id":"t"}`
		res, err := HandleClaudeHookWith(context.Background(), cfg, strings.NewReader(p), time.Now(), HookOptions{Watch: HookWatch(getenv, "")})
		if err != nil || res.Increment == nil || res.Increment.Warning != "" {
			t.Fatalf("hook: %+v %v", res, err)
		}
		found := res.Increment.Position == 0 // the first increment stores every path
		for _, c := range append(res.Increment.Meta.Changes.Created, res.Increment.Meta.Changes.Modified...) {
			found = found || strings.HasSuffix(c, file)
		}
		if !found {
			t.Fatalf("increment %d does not hold %s: %+v", res.Increment.Position, file, res.Increment.Meta.Changes)
		}
		return res.Increment
	}
	// No server (and none started: no binary given): the walk.
	call("d00/f")
	if inc := call("d01/f"); inc.Watched {
		t.Fatal("watched without a server")
	}
	serveWatch(t, dir, []string{root})
	deadline := time.Now().Add(10 * time.Second)
	for {
		// The first answer gives the state a token; the next vouches once
		// the root's watches are set up.
		if inc := call("d02/f"); inc.Watched {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the default watcher never vouched")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if inc := call("d03/f"); !inc.Watched {
		t.Fatal("a call after a vouched one was not watched")
	}
	c, err := Open(dir, Options{Roots: []Root{{Name: "checkout", Path: root}}})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := c.WatchStatus(context.Background(), getenv); err != nil || !rep.Running || !rep.Vouches || rep.PID != os.Getpid() {
		t.Fatalf("status = %+v, %v", rep, err)
	}
	// Fallbacks: the environment turns it off; the setting does; a token
	// from another server instance (a restart) is not vouched for.
	env[WatchEnv] = "0"
	if inc := call("d04/f"); inc.Watched {
		t.Fatal("watched with " + WatchEnv + "=0")
	}
	if rep, _ := c.WatchStatus(context.Background(), getenv); rep.Vouches || !strings.Contains(rep.Reason, WatchEnv) {
		t.Fatalf("status with the env off = %+v", rep)
	}
	delete(env, WatchEnv)
	if err := SetWatch(context.Background(), dir, false); err != nil {
		t.Fatal(err)
	}
	// SetWatch off stopped the in-process server; a new one is another
	// instance whose tokens differ.
	if inc := call("d05/f"); inc.Watched {
		t.Fatal("watched with the setting off")
	}
	if WatchEnabled(dir) {
		t.Fatal("the setting did not stick")
	}
	if err := SetWatch(context.Background(), dir, true); err != nil {
		t.Fatal(err)
	}
	serveWatch(t, dir, []string{root})
	if inc := call("d06/f"); inc.Watched {
		t.Fatal("a restarted server vouched for the old server's token")
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		if inc := call("d07/f"); inc.Watched {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the restarted watcher never vouched")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A new directory with files: listed in full below it.
	os.MkdirAll(filepath.Join(root, "new/deep"), 0o755)
	os.WriteFile(filepath.Join(root, "new/deep/g"), []byte("g"), 0o644)
	if inc := call("new/deep/h"); !inc.Watched || !strings.Contains(strings.Join(inc.Meta.Changes.Created, " "), "new/deep/g") {
		t.Fatalf("new tree: watched %v, created %v", inc.Watched, inc.Meta.Changes.Created)
	}
	// The server stopped: the walk, and the right increment.
	if _, err := StopWatch(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	if inc := call("d08/f"); inc.Watched {
		t.Fatal("watched after the server stopped")
	}
}
