package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/connections"
	"github.com/agentscm/agentscm/internal/hub"
	"github.com/agentscm/agentscm/internal/hub/api"
)

func gitRepo(t *testing.T, name string) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("git", "init", "-q", root).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	r, _ := filepath.EvalSymlinks(root)
	return r
}

func mustRun(t *testing.T, env map[string]string, args ...string) run {
	t.Helper()
	r := runMain(t, env, "", args...)
	if r.code != 0 {
		t.Fatalf("%s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

func decode[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
	return v
}

func runShow(t *testing.T, env map[string]string, args ...string) run {
	t.Helper()
	var out, errb bytes.Buffer
	e := &Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }, Now: time.Now}
	err := changeCaptureShowCommand().Run(context.Background(), e, args)
	return run{report(e, "agentscm change-capture show", err), out.String(), errb.String()}
}

// TestSoloFlow is the solo user's path: one setup command, work start, a
// captured session, the change record, checkpoints, status and remove.
func TestSoloFlow(t *testing.T) {
	cfg := t.TempDir()
	env := map[string]string{"XDG_CONFIG_HOME": cfg}
	root := gitRepo(t, "myrepo")

	setup := decode[connectionView](t, mustRun(t, env, "client", "setup", "--root", root, "--local", "--format", "json").stdout)
	if setup.Kind != connections.KindLocal || setup.Repository != "myrepo" || setup.Hub != connections.LocalHub {
		t.Fatalf("setup = %+v", setup)
	}
	w := decode[api.Work](t, mustRun(t, env, "work", "start", "--root", root, "--title", "fix parser", "--format", "json").stdout)
	if w.State != api.StateActive || w.Generation != 1 {
		t.Fatalf("work = %+v", w)
	}
	if out := mustRun(t, env, "work", "list", "--root", root).stdout; !strings.Contains(out, "* "+w.ID) || !strings.Contains(out, "fix parser") {
		t.Fatalf("work list:\n%s", out)
	}

	// What the hook does: look up the connection, resolve, deliver.
	ctx := context.Background()
	c, err := connections.Lookup(filepath.Join(cfg, "agentscm"), root)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := client.Open(ctx, c, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tg, err := conn.Resolve(ctx, api.ResolveRequest{WorktreeID: c.WorktreeID, NativeSessionID: "sess-1"})
	if err != nil || tg.WorkID != w.ID {
		t.Fatalf("resolve = %+v, %v", tg, err)
	}
	env1 := &api.Envelope{Identity: strings.Repeat("1", 64), Type: api.TypeEvents, WorkID: tg.WorkID, Generation: tg.Generation, Session: tg.Session,
		Events: []api.Event{{Seq: 1, Kind: "session_start", Source: "startup"}, {Seq: 2, Kind: "tool_start", ToolName: "Bash", ToolUseID: "toolu_1"}}}
	if _, err := conn.Deliver(ctx, env1); err != nil {
		t.Fatal(err)
	}
	conn.Close()

	text := runShow(t, env, "--root", root, "--work-id", w.ID, "--verbose")
	// The session has not ended (and its tool call has no finish yet), so the
	// record stays partial.
	if text.code != 0 || !strings.Contains(text.stdout, "coverage: partial") || !strings.Contains(text.stdout, "has not ended") || !strings.Contains(text.stdout, "#2    Bash       unknown   position -") || !strings.Contains(text.stdout, "native sess-1") {
		t.Fatalf("show:\n%s\n%s", text.stdout, text.stderr)
	}
	rec := decode[api.ChangeRecord](t, runShow(t, env, "--root", root, "--work-id", w.ID, "--record").stdout)
	if len(rec.Events) != 2 || rec.Sessions[0].Session != "default" {
		t.Fatalf("record = %+v", rec)
	}
	// Without --work-id, show reads the checkout's current Work.
	if r := runShow(t, env, "--root", root, "--verbose"); r.code != 0 || !strings.Contains(r.stdout, w.ID) {
		t.Fatalf("show without --work-id: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	mustRun(t, env, "work", "pause", "--root", root)
	if r := runMain(t, env, "", "work", "pause", "--root", root); r.code != 1 || !strings.Contains(r.stderr, "is paused") {
		t.Fatalf("second pause: %+v", r)
	}
	if out := mustRun(t, env, "work", "show", "--root", root).stdout; !strings.Contains(out, "state:      paused") || !strings.Contains(out, "(this checkout)") {
		t.Fatalf("work show:\n%s", out)
	}

	st := decode[struct{ Connections []connectionView }](t, mustRun(t, env, "client", "status", "--check", "--format", "json").stdout)
	if len(st.Connections) != 1 || st.Connections[0].HubCheck == nil || !st.Connections[0].HubCheck.Valid || st.Connections[0].HubCheck.SharedConversationRetentionDays != 30 {
		t.Fatalf("status = %+v", st)
	}
	mustRun(t, env, "client", "remove", "--root", root)
	if r := runMain(t, env, "", "work", "list", "--root", root); r.code != 1 || !strings.Contains(r.stderr, "no client connection for this checkout") {
		t.Fatalf("after remove: %+v", r)
	}
	if r := runMain(t, env, "", "client", "remove", "--root", root); r.code != 1 {
		t.Fatalf("second remove: %+v", r)
	}
}

func TestUsageErrors(t *testing.T) {
	env := map[string]string{"XDG_CONFIG_HOME": t.TempDir()}
	root := t.TempDir()
	for _, args := range [][]string{
		{"client", "setup", "--root", root, "--local", "--hub", "http://h"},
		{"client", "setup", "--root", root, "--hub", "http://h"},
		{"client", "setup", "--root", root, "--local", "--format", "yaml"},
		{"hub", "serve", "--data", root, "--shared-conversation-retention-days", "0"},
		{"hub", "serve", "--data", root, "--shared-conversation-retention-days", "3651"},
		{"hub", "serve", "--data", root, "--listen"},
		{"hub", "admin", "human", "create", "--data", root},
		{"work", "takeover", "--root", root},
		{"work", "start", "stray"},
	} {
		if r := runMain(t, env, "", args...); r.code != ExitUsage {
			t.Errorf("%s: exit %d, want 2 (%s)", strings.Join(args, " "), r.code, r.stderr)
		}
	}
}

// TestTeamFlow administers a Hub data directory, serves it over HTTP and
// connects checkouts with read-write and read-only tokens.
func TestTeamFlow(t *testing.T) {
	data := filepath.Join(t.TempDir(), "hub")
	cfg := t.TempDir()
	env := map[string]string{"XDG_CONFIG_HOME": cfg}
	mustRun(t, env, "hub", "admin", "human", "create", "--data", data, "--name", "alice")
	mustRun(t, env, "hub", "admin", "repository", "create", "--data", data, "--name", "proj")
	if r := runMain(t, env, "", "hub", "admin", "repository", "create", "--data", data, "--name", "proj"); r.code != 1 || !strings.Contains(r.stderr, "already exists") {
		t.Fatalf("duplicate repository: %+v", r)
	}
	printed := mustRun(t, env, "hub", "admin", "token", "create", "--data", data, "--human", "alice", "--repository", "proj")
	secret := strings.TrimSpace(printed.stdout)
	if !strings.HasPrefix(secret, hub.TokenPrefix) || strings.Count(printed.stdout, "\n") != 1 || !strings.Contains(printed.stderr, "shown once") {
		t.Fatalf("token create printed %q / %q", printed.stdout, printed.stderr)
	}
	roFile := filepath.Join(t.TempDir(), "ro-token")
	mustRun(t, env, "hub", "admin", "token", "create", "--data", data, "--human", "alice", "--repository", "proj", "--read-only", "--output", roFile)
	if fi, err := os.Stat(roFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", fi, err)
	}
	if r := runMain(t, env, "", "hub", "admin", "token", "create", "--data", data, "--human", "alice", "--repository", "proj", "--output", roFile); r.code != 1 {
		t.Fatalf("token create over an existing file: %+v", r)
	}
	list := mustRun(t, env, "hub", "admin", "list", "--data", data, "--format", "json").stdout
	if strings.Contains(list, secret) || strings.Contains(list, "secret") {
		t.Fatal("admin list shows a token secret")
	}

	svc, err := hub.Open(context.Background(), data, hub.Config{RetentionDays: 12})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	srv := httptest.NewServer(hub.NewHandler(svc, nil))
	defer srv.Close()

	rwFile := filepath.Join(t.TempDir(), "rw-token")
	os.WriteFile(rwFile, []byte(secret+"\n"), 0o600)
	rootA, rootB := gitRepo(t, "a"), gitRepo(t, "b")
	mustRun(t, env, "client", "setup", "--root", rootA, "--hub", srv.URL, "--repository", "proj", "--token-file", rwFile)
	mustRun(t, env, "client", "setup", "--root", rootB, "--hub", srv.URL, "--repository", "proj", "--token-file", roFile)
	if r := runMain(t, env, "", "client", "setup", "--root", rootB, "--hub", srv.URL, "--repository", "other", "--token-file", roFile); r.code != 1 {
		t.Fatalf("setup with a token for another repository: %+v", r)
	}
	st := decode[struct{ Connections []connectionView }](t, mustRun(t, env, "client", "status", "--root", rootA, "--check", "--format", "json").stdout)
	if hc := st.Connections[0].HubCheck; hc == nil || !hc.Valid || hc.SharedConversationRetentionDays != 12 || hc.Scope != api.ScopeReadWrite {
		t.Fatalf("hub_check = %+v", hc)
	}
	if strings.Contains(mustRun(t, env, "client", "status").stdout, secret) {
		t.Fatal("status shows the token")
	}
	w := decode[api.Work](t, mustRun(t, env, "work", "start", "--root", rootA, "--format", "json").stdout)
	if r := runMain(t, env, "", "work", "start", "--root", rootB); r.code != 1 || !strings.Contains(r.stderr, "read-only") {
		t.Fatalf("read-only start: %+v", r)
	}
	if r := runShow(t, env, "--root", rootB, "--work-id", w.ID, "--verbose"); r.code != 0 || !strings.Contains(r.stdout, w.ID) {
		t.Fatalf("a teammate's read of the change record: %+v", r)
	}
	mustRun(t, env, "work", "handover", "--root", rootA, "--note", "over to you")
	// The holder of the read-write token takes it over into checkout B.
	mustRun(t, env, "client", "setup", "--root", rootB, "--hub", srv.URL, "--repository", "proj", "--token-file", rwFile)
	tw := decode[api.Work](t, mustRun(t, env, "work", "takeover", "--root", rootB, "--work-id", w.ID, "--format", "json").stdout)
	if tw.Generation != 2 || tw.State != api.StateActive {
		t.Fatalf("takeover = %+v", tw)
	}
	if out := mustRun(t, env, "work", "show", "--root", rootA, "--work-id", w.ID).stdout; !strings.Contains(out, "stale: capture there is refused") {
		t.Fatalf("work show after takeover:\n%s", out)
	}
	// A server gone away: the check fails and says so.
	srv.Close()
	if r := runMain(t, env, "", "client", "status", "--root", rootA, "--check", "--format", "json"); r.code != 1 || !strings.Contains(r.stdout, `"valid": false`) {
		t.Fatalf("check against a stopped hub: %+v", r)
	}
}

// TestWorkFromSubdirectory: without --root, work commands find the checkout
// that contains the working directory.
func TestWorkFromSubdirectory(t *testing.T) {
	env := map[string]string{"XDG_CONFIG_HOME": t.TempDir()}
	root := gitRepo(t, "sub")
	mustRun(t, env, "client", "setup", "--root", root, "--local")
	sub := filepath.Join(root, "pkg", "deep")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(sub)
	// The issue's own words: a relative --root works too.
	t.Chdir(root)
	mustRun(t, env, "client", "setup", "--root", ".", "--local")
	t.Chdir(sub)
	w := decode[api.Work](t, mustRun(t, env, "work", "start", "--format", "json").stdout)
	if out := mustRun(t, env, "work", "show").stdout; !strings.Contains(out, w.ID) {
		t.Fatalf("work show from a subdirectory:\n%s", out)
	}
	// An explicit --root must be the checkout root itself.
	if r := runMain(t, env, "", "work", "list", "--root", sub); r.code != 1 || !strings.Contains(r.stderr, "no client connection") {
		t.Fatalf("--root of a subdirectory: %+v", r)
	}
}

func TestServeRefusesSharedDataDir(t *testing.T) {
	data := filepath.Join(t.TempDir(), "hub")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(data, 0o755)
	r := runMain(t, map[string]string{}, "", "hub", "serve", "--listen", "127.0.0.1:0", "--data", data)
	if r.code != 1 || !strings.Contains(r.stderr, "no group or other access") || r.stdout != "" {
		t.Fatalf("serve on a 0755 data directory: %+v", r)
	}
}

func TestIsLoopback(t *testing.T) {
	for host, want := range map[string]bool{"127.0.0.1": true, "::1": true, "localhost": true, "hub.example": false, "10.0.0.1": false} {
		if isLoopback(host) != want {
			t.Errorf("isLoopback(%q) = %v", host, !want)
		}
	}
}
