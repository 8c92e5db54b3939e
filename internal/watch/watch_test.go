package watch

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

func mk(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(p), 0o644); err != nil {
		t.Fatal(err)
	}
}

func privateDir(t *testing.T) string {
	d := filepath.Join(t.TempDir(), "w")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

// ready returns a tracker watching root and a token it vouches for.
func ready(t *testing.T, root string, opts Options) (*Tracker, string) {
	t.Helper()
	tr, err := New(privateDir(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tok, ch, err := tr.Since(ctx, []string{root}, "")
		if err != nil {
			t.Fatal(err)
		}
		if ch[0] != nil {
			t.Fatal("a first call vouched")
		}
		if _, ok, derr := tr.Status(root); ok || derr != nil {
			if derr != nil {
				return tr, ""
			}
			tok, _, err = tr.Since(ctx, []string{root}, "")
			if err != nil {
				t.Fatal(err)
			}
			return tr, tok
		}
		if time.Now().After(deadline) {
			t.Fatal("root never ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func since(t *testing.T, tr *Tracker, root, tok string) (string, *Changes) {
	t.Helper()
	next, ch, err := tr.Since(context.Background(), []string{root}, tok)
	if err != nil {
		t.Fatal(err)
	}
	return next, ch[0]
}

func TestSinceReportsWhatChanged(t *testing.T) {
	root := t.TempDir()
	mk(t, filepath.Join(root, "a/b/f"))
	mk(t, filepath.Join(root, "c/g"))
	mk(t, filepath.Join(root, ".git/index"))
	tr, tok := ready(t, root, Options{})

	tok, ch := since(t, tr, root, tok)
	if ch == nil || len(ch.Dirs)+len(ch.Trees) != 0 {
		t.Fatalf("nothing changed: %+v", ch)
	}
	os.WriteFile(filepath.Join(root, "a/b/f"), []byte("x"), 0o644)
	mk(t, filepath.Join(root, "n/m/h"))                         // a new tree, filled before its watch
	os.WriteFile(filepath.Join(root, ".git/index"), nil, 0o644) // not watched
	os.Chmod(filepath.Join(root, "c"), 0o700)
	tok, ch = since(t, tr, root, tok)
	if ch == nil || !slices.Contains(ch.Dirs, "a/b") || !slices.Contains(ch.Dirs, "") || !slices.Contains(ch.Trees, "n") {
		t.Fatalf("changes = %+v", ch)
	}
	if slices.Contains(ch.Dirs, ".git") || slices.Contains(ch.Dirs, "c") {
		t.Fatalf("changes name .git or c's contents: %+v", ch)
	}
	// The new tree is watched now.
	mk(t, filepath.Join(root, "n/m/h2"))
	// A renamed directory is reported where it is now.
	if err := os.Rename(filepath.Join(root, "a"), filepath.Join(root, "z")); err != nil {
		t.Fatal(err)
	}
	tok, ch = since(t, tr, root, tok)
	if ch == nil || !slices.Contains(ch.Dirs, "n/m") || !slices.Contains(ch.Trees, "z") {
		t.Fatalf("changes = %+v", ch)
	}
	os.WriteFile(filepath.Join(root, "z/b/f"), []byte("y"), 0o644)
	_, ch = since(t, tr, root, tok)
	if ch == nil || !slices.Equal(ch.Dirs, []string{"z/b"}) {
		t.Fatalf("after the rename: %+v", ch)
	}
}

// An event lost by the kernel queue (IN_Q_OVERFLOW, which fsnotify reports
// as ErrEventOverflow on its Errors channel) makes every older token
// unanswerable; a token taken after it is answered again.
func TestOverflowCannotVouch(t *testing.T) {
	root := t.TempDir()
	mk(t, filepath.Join(root, "a/f"))
	tr, tok := ready(t, root, Options{})
	tr.fail(fsnotify.ErrEventOverflow)
	tok2, ch := since(t, tr, root, tok)
	if ch != nil {
		t.Fatalf("vouched across an overflow: %+v", ch)
	}
	mk(t, filepath.Join(root, "a/g"))
	if _, ch := since(t, tr, root, tok2); ch == nil || !slices.Equal(ch.Dirs, []string{"a"}) {
		t.Fatalf("after the overflow: %+v", ch)
	}
}

func TestRestartAndBoundsCannotVouch(t *testing.T) {
	root := t.TempDir()
	mk(t, filepath.Join(root, "a/f"))
	_, tok := ready(t, root, Options{})
	tr2, _ := ready(t, root, Options{})
	if _, ch := since(t, tr2, root, tok); ch != nil {
		t.Fatal("another instance's token was answered")
	}
	// Too many changed directories remembered: forgotten, not answered.
	tr3, tok3 := ready(t, root, Options{MaxDirs: 3})
	for _, d := range []string{"p", "q", "r", "s"} {
		mk(t, filepath.Join(root, d, "f"))
	}
	if _, ch := since(t, tr3, root, tok3); ch != nil {
		t.Fatalf("vouched past MaxDirs: %+v", ch)
	}
	// A watch limit: the root is never vouched for.
	tr4, tok4 := ready(t, root, Options{MaxWatches: 2})
	if _, _, err := tr4.Status(root); err == nil {
		t.Fatal("no watch-limit error")
	}
	if _, ch := since(t, tr4, root, tok4); ch != nil {
		t.Fatal("a root over the watch limit was vouched for")
	}
}

func TestServerAndClient(t *testing.T) {
	root := t.TempDir()
	mk(t, filepath.Join(root, "a/f"))
	dir := privateDir(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	up := make(chan struct{})
	go func() { done <- Serve(ctx, dir, []string{root}, ServeOptions{Ready: func() { close(up) }}) }()
	select {
	case <-up:
	case err := <-done:
		t.Fatal(err)
	}
	if err := Serve(ctx, dir, nil, ServeOptions{}); err != ErrRunning {
		t.Fatalf("second server: %v", err)
	}
	c := &Client{Dir: dir, Timeout: 3 * time.Second}
	var tok string
	deadline := time.Now().Add(10 * time.Second)
	for {
		next, ch, err := c.Since(ctx, []string{root}, tok)
		if err != nil {
			t.Fatal(err)
		}
		if ch[0] != nil {
			break
		}
		tok = next
		if time.Now().After(deadline) {
			t.Fatal("never vouched")
		}
		time.Sleep(20 * time.Millisecond)
	}
	next, _, _ := c.Since(ctx, []string{root}, tok)
	mk(t, filepath.Join(root, "a/g"))
	_, ch, err := c.Since(ctx, []string{root}, next)
	if err != nil || ch[0] == nil || !slices.Equal(ch[0].Dirs, []string{"a"}) {
		t.Fatalf("changes = %+v, %v", ch, err)
	}
	// Refusals: a relative root; a directory that is not private.
	if _, _, err := c.Since(ctx, []string{"rel"}, ""); err == nil {
		t.Fatal("a relative root was accepted")
	}
	os.Chmod(dir, 0o755)
	if _, _, err := c.Since(ctx, []string{root}, ""); err == nil {
		t.Fatal("a client used a directory others can enter")
	}
	os.Chmod(dir, 0o700)
	// The server ends when its socket is removed or on cancel.
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// No server: an error (the capture walks), never an answer.
	if _, _, err := (&Client{Dir: dir, Timeout: 200 * time.Millisecond}).Since(context.Background(), []string{root}, next); err == nil {
		t.Fatal("an answer without a server")
	}
}

// serve starts a server on a fresh private directory and waits until it
// listens.
func serve(t *testing.T, roots []string, opts ServeOptions) (string, chan error) {
	t.Helper()
	dir := privateDir(t)
	done := make(chan error, 1)
	up := make(chan struct{})
	opts.Ready = func() { close(up) }
	go func() { done <- Serve(context.Background(), dir, roots, opts) }()
	select {
	case <-up:
	case err := <-done:
		t.Fatal(err)
	}
	return dir, done
}

func TestStatusAndStop(t *testing.T) {
	root := t.TempDir()
	mk(t, filepath.Join(root, "a/f"))
	dir, done := serve(t, []string{root}, ServeOptions{})
	c := &Client{Dir: dir, Timeout: 3 * time.Second}
	ctx := context.Background()
	st, err := c.Status(ctx, []string{root}, "")
	if err != nil || st.PID != os.Getpid() || st.Roots[0].Vouches || st.Roots[0].Reason == "" {
		t.Fatalf("status without a token = %+v, %v", st, err)
	}
	var tok string
	deadline := time.Now().Add(10 * time.Second)
	for {
		next, ch, err := c.Since(ctx, []string{root}, tok)
		if err != nil {
			t.Fatal(err)
		}
		if ch[0] != nil {
			tok = next
			break
		}
		tok = next
		if time.Now().After(deadline) {
			t.Fatal("never vouched")
		}
		time.Sleep(20 * time.Millisecond)
	}
	mk(t, filepath.Join(root, "a/g"))
	// Status does not sync with the kernel's queue: wait for the event.
	for {
		st, err = c.Status(ctx, []string{root}, tok)
		if err != nil || !st.Roots[0].Vouches {
			t.Fatalf("status = %+v, %v", st, err)
		}
		if st.Roots[0].Changed == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never saw the change: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st, err := c.Status(ctx, []string{root}, "0123456789abcdef.1"); err != nil || st.Roots[0].Vouches {
		t.Fatalf("status for another instance's token = %+v, %v", st, err)
	}
	pid, err := c.Stop(ctx)
	if err != nil || pid != os.Getpid() {
		t.Fatalf("Stop = %d, %v", pid, err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the server did not stop")
	}
	if pid, err := c.Stop(ctx); pid != 0 || err != nil {
		t.Fatalf("Stop without a server = %d, %v", pid, err)
	}
	if _, err := c.Status(ctx, []string{root}, tok); !errors.Is(err, ErrNoServer) {
		t.Fatalf("Status without a server: %v", err)
	}
}

// A server whose private directory is removed (a test's temporary
// directory, a deleted changelog) exits at once, not at its idle time.
func TestServerExitsWhenItsDirectoryGoes(t *testing.T) {
	root := t.TempDir()
	dir, done := serve(t, []string{root}, ServeOptions{Idle: time.Hour})
	start := time.Now()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("exited after %v", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the server outlived its directory")
	}
}

// A private directory whose socket path is too long for sun_path is
// reached through a short /proc/self/fd path (Linux).
func TestLongSocketPath(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("linux only")
	}
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	up := make(chan struct{})
	go func() { done <- Serve(ctx, dir, []string{root}, ServeOptions{Ready: func() { close(up) }}) }()
	select {
	case <-up:
	case err := <-done:
		t.Fatal(err)
	}
	c := &Client{Dir: dir, Timeout: 3 * time.Second}
	if _, err := c.Status(ctx, []string{root}, ""); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, SocketName)); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("no socket in the directory: %v", err)
	}
	if pid, err := c.Stop(ctx); err != nil || pid == 0 {
		t.Fatal(pid, err)
	}
	<-done
}

// TestMain lets a test start this test binary as a detached server, as the
// hook starts agentscm changelog watch-serve: ARGV is DIR ROOT...
func TestMain(m *testing.M) {
	if os.Getenv("AGENTSCM_WATCH_TEST_SERVE") == "1" && len(os.Args) > 2 {
		err := Serve(context.Background(), os.Args[1], os.Args[2:], ServeOptions{Idle: time.Minute})
		if err != nil && !errors.Is(err, ErrRunning) {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The call that finds no server starts one and waits for its first answer,
// given once the roots are watched: its token already vouches for the
// next call, so only one call after a (re)start lists everything.
func TestStartedServerVouchesForTheNextCall(t *testing.T) {
	t.Setenv("AGENTSCM_WATCH_TEST_SERVE", "1")
	root := t.TempDir()
	mk(t, filepath.Join(root, "a/b/f"))
	dir := privateDir(t)
	c := &Client{Dir: dir, Command: []string{os.Args[0], dir}, Timeout: 5 * time.Second}
	ctx := context.Background()
	t.Cleanup(func() { c.Stop(ctx) })
	tok, ch, err := c.Since(ctx, []string{root}, "")
	if err != nil {
		t.Fatalf("the call that started the server: %v", err)
	}
	if ch[0] != nil {
		t.Fatal("a first call vouched")
	}
	mk(t, filepath.Join(root, "a/b/g"))
	_, ch, err = c.Since(ctx, []string{root}, tok)
	if err != nil || ch[0] == nil || !slices.Equal(ch[0].Dirs, []string{"a/b"}) {
		t.Fatalf("the next call: %+v, %v", ch, err)
	}
	st, err := c.Status(ctx, []string{root}, tok)
	if err != nil || st.PID == os.Getpid() || st.PID <= 0 {
		t.Fatalf("status of the detached server: %+v, %v", st, err)
	}
	if pid, err := c.Stop(ctx); err != nil || pid != st.PID {
		t.Fatalf("Stop = %d, %v", pid, err)
	}
}

// An operation of ServeOptions.Ops: answered with its body; an unknown
// operation or the handler's error is ErrOp (nothing done); a client that
// stops waiting is seen by the handler as gone; the built-in operations
// cannot be replaced.
func TestServerOps(t *testing.T) {
	root := t.TempDir()
	gone := make(chan bool, 1)
	release := make(chan struct{})
	ops := map[string]Handler{
		"echo": func(ctx context.Context, tr *Tracker, body json.RawMessage, g func() bool) (json.RawMessage, error) {
			if tr == nil || g() {
				return nil, errors.New("no tracker, or gone while waited for")
			}
			return body, nil
		},
		"fail": func(context.Context, *Tracker, json.RawMessage, func() bool) (json.RawMessage, error) {
			return nil, errors.New("refused")
		},
		"slow": func(ctx context.Context, _ *Tracker, _ json.RawMessage, g func() bool) (json.RawMessage, error) {
			<-release
			gone <- g()
			return json.RawMessage(`{}`), nil
		},
		"stop": func(context.Context, *Tracker, json.RawMessage, func() bool) (json.RawMessage, error) {
			return json.RawMessage(`"replaced"`), nil
		},
	}
	dir, _ := serve(t, []string{root}, ServeOptions{Ops: ops})
	c := &Client{Dir: dir}
	ctx := context.Background()
	if b, err := c.Do(ctx, "echo", map[string]int{"n": 7}, time.Second); err != nil || string(b) != `{"n":7}` {
		t.Fatalf("echo: %s %v", b, err)
	}
	for _, op := range []string{"fail", "unknown"} {
		if _, err := c.Do(ctx, op, nil, time.Second); !errors.Is(err, ErrOp) {
			t.Fatalf("%s: %v, want ErrOp", op, err)
		}
	}
	_, err := c.Do(ctx, "slow", nil, 100*time.Millisecond)
	if err == nil || errors.Is(err, ErrOp) || errors.Is(err, ErrNoServer) {
		t.Fatalf("slow: %v, want a timeout that leaves the outcome open", err)
	}
	close(release)
	if g := <-gone; !g {
		t.Fatal("the handler did not see the client gone")
	}
	if _, err := (&Client{Dir: filepath.Join(t.TempDir(), "none")}).Do(ctx, "echo", nil, time.Second); !errors.Is(err, ErrNoServer) {
		t.Fatalf("no server: %v", err)
	}
	// "stop" is still the built-in stop.
	if pid, err := c.Stop(ctx); err != nil || pid != os.Getpid() {
		t.Fatalf("stop: %d %v", pid, err)
	}
}
