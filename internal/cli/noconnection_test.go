package cli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/hookrun"
)

// TestNoConnectionStartsNoDeliverer: a checkout whose changelog is on but
// which has no Hub connection stores its increments and starts no
// deliverer process for them (the hook's deliverer binary here is a script
// that records every start); `client setup` then connects it and `work
// start` gives the increments a destination and kicks the queue, so every
// increment stored before the connection ends on the Hub without waiting
// for another hook. On main every increment started a
// deliverer, and the queue waited for the next hook after setup.
func TestNoConnectionStartsNoDeliverer(t *testing.T) {
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
	starts := filepath.Join(base, "starts.log")
	recorder := filepath.Join(base, "bin", "recorder")
	os.MkdirAll(filepath.Dir(recorder), 0o755)
	if err := os.WriteFile(recorder, []byte("#!/bin/sh\necho \"$@\" >> "+starts+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"XDG_CONFIG_HOME": xdg, "HOME": filepath.Join(base, "home"), changelog.WatchEnv: "0"}
	mustRun(t, vars, "changelog", "enable", "--root", root)
	cldir, _, ok := changelog.FindDir(cfg, root)
	if !ok {
		t.Fatal("no changelog directory")
	}
	getenv := func(k string) string { return vars[k] }
	hook := func(ev, extra string) {
		t.Helper()
		pl := `{"session_id":"native-1","cwd":"` + root + `","hook_event_name":"` + ev + `"` + extra + `}`
		var out, errb bytes.Buffer
		hookrun.ClaudeHook(ctx, strings.NewReader(pl), &out, &errb, getenv, time.Now(),
			hookrun.Options{Parts: hookrun.Parts{Changelog: true}, Exe: recorder, TurnWait: time.Second})
		if errb.Len() != 0 {
			t.Fatalf("%s: %s", ev, errb.String())
		}
	}
	hook("UserPromptSubmit", `,"prompt":"write two files"`)
	for _, f := range []string{"a.txt", "b.txt"} {
		tool := `,"tool_name":"Write","tool_use_id":"` + f + `","tool_input":{"file_path":"` + filepath.Join(root, f) + `","content":"x"}`
		hook("PreToolUse", tool)
		if err := os.WriteFile(filepath.Join(root, f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
		hook("PostToolUse", tool+`,"tool_response":{"success":true}`)
	}
	pending, err := changelog.PendingUploads(cfg, cldir)
	if err != nil || pending == 0 {
		t.Fatalf("pending increments %d %v, want some", pending, err)
	}
	if b, err := os.ReadFile(starts); err == nil {
		t.Fatalf("deliverers started without a connection: %q", b)
	}

	// Connect: the setup uploads what waited (the real deliverer: this
	// test binary as agentscm).
	exe := filepath.Join(base, "bin", "agentscm")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, exe); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	env := &Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: getenv, Now: time.Now, Executable: exe}
	if code := Main(ctx, env, []string{"client", "setup", "--root", root, "--local"}); code != 0 {
		t.Fatalf("client setup: %d %s", code, errb.String())
	}
	env.Stdout, env.Stderr = &out, &errb
	if code := Main(ctx, env, []string{"work", "start", "--root", root}); code != 0 {
		t.Fatalf("work start: %d %s", code, errb.String())
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		if err := changelog.WaitUploads(wctx, cldir); err != nil {
			t.Fatal(err)
		}
		n, err := changelog.PendingUploads(cfg, cldir)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if wctx.Err() != nil {
			t.Fatalf("%d increments still pending after client setup", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
