package localui

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentscm/agentscm/internal/browsertest"
)

// The browser tests drive the real agentscm ui process, built here, against
// a temp HOME whose checkouts were set up by the real agentscm client setup
// and change-capture enable, connected to a real agentscm hub serve on
// 127.0.0.1, in Debian's headless Chromium.

var buildOnce struct {
	sync.Once
	bin string
	err error
}

// TestMain removes the binary the browser tests built, if any.
func TestMain(m *testing.M) {
	code := m.Run()
	if buildOnce.bin != "" {
		os.RemoveAll(filepath.Dir(buildOnce.bin))
	}
	os.Exit(code)
}

func agentscmBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "agentscm-localui-test-")
		if err != nil {
			buildOnce.err = err
			return
		}
		buildOnce.bin = filepath.Join(dir, "agentscm")
		out, err := exec.Command("go", "build", "-o", buildOnce.bin, "github.com/agentscm/agentscm/cmd/agentscm").CombinedOutput()
		if err != nil {
			buildOnce.err = fmt.Errorf("build agentscm: %v\n%s", err, out)
		}
	})
	if buildOnce.err != nil {
		t.Fatal(buildOnce.err)
	}
	return buildOnce.bin
}

// home is a temp HOME with the real binary.
type home struct {
	t   *testing.T
	bin string
	dir string
	env []string
}

func newHome(t *testing.T) *home {
	if _, err := browsertest.Chromium(); err != nil && os.Getenv("AGENTSCM_REQUIRE_CHROMIUM") == "" {
		t.Skip(err) // skip before building when no browser can run
	}
	h := &home{t: t, bin: agentscmBinary(t), dir: t.TempDir()}
	if err := os.MkdirAll(filepath.Join(h.dir, "home"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k == "HOME" || k == "XDG_CONFIG_HOME" || strings.HasPrefix(k, "AGENTSCM_") || strings.HasPrefix(k, "GIT_") {
			continue
		}
		h.env = append(h.env, kv)
	}
	h.env = append(h.env, "HOME="+filepath.Join(h.dir, "home"), "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid")
	return h
}

// run runs agentscm and returns its stdout; it fails the test on error.
func (h *home) run(args ...string) string {
	h.t.Helper()
	cmd := exec.Command(h.bin, args...)
	cmd.Env = h.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		h.t.Fatalf("agentscm %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// checkout makes a git checkout with one commit.
func (h *home) checkout(name string) string {
	h.t.Helper()
	root := filepath.Join(h.dir, name)
	for _, args := range [][]string{{"init", "-q", root}, {"-C", root, "commit", "-q", "--allow-empty", "-m", "init"}} {
		cmd := exec.Command("git", args...)
		cmd.Env = h.env
		if out, err := cmd.CombinedOutput(); err != nil {
			h.t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	r, _ := filepath.EvalSymlinks(root)
	return r
}

// proc is a long-running agentscm process whose first stdout line was read.
type proc struct {
	cmd   *exec.Cmd
	first string
	errb  *bytes.Buffer
	mu    *sync.Mutex
}

func (h *home) start(extraEnv []string, args ...string) *proc {
	h.t.Helper()
	cmd := exec.Command(h.bin, args...)
	cmd.Env = append(append([]string{}, h.env...), extraEnv...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		h.t.Fatal(err)
	}
	p := &proc{cmd: cmd, errb: &bytes.Buffer{}, mu: &sync.Mutex{}}
	cmd.Stderr = lockedBuf{p}
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		for sc.Scan() {
		}
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	h.t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGINT)
		select {
		case err := <-done:
			if err != nil {
				h.t.Errorf("agentscm %s exited with %v; stderr: %s", args[0], err, p.stderr())
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			h.t.Errorf("agentscm %s did not stop on SIGINT", args[0])
		}
	})
	select {
	case l, ok := <-lines:
		if !ok {
			h.t.Fatalf("agentscm %s printed nothing; stderr: %s", strings.Join(args, " "), p.stderr())
		}
		p.first = l
	case <-time.After(30 * time.Second):
		h.t.Fatalf("agentscm %s did not start; stderr: %s", strings.Join(args, " "), p.stderr())
	}
	return p
}

type lockedBuf struct{ p *proc }

func (b lockedBuf) Write(x []byte) (int, error) {
	b.p.mu.Lock()
	defer b.p.mu.Unlock()
	return b.p.errb.Write(x)
}

func (p *proc) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.errb.String()
}

// hub starts a real hub serve with one human, one repository and a token
// file for it.
func (h *home) hub(name, repo string, days int) (url, tokenFile string) {
	h.t.Helper()
	data := filepath.Join(h.dir, "hub-"+name)
	h.run("hub", "admin", "human", "create", "--data", data, "--name", "alice")
	h.run("hub", "admin", "repository", "create", "--data", data, "--name", repo)
	tokenFile = filepath.Join(h.dir, "token-"+name)
	h.run("hub", "admin", "token", "create", "--data", data, "--human", "alice", "--repository", repo, "--output", tokenFile)
	p := h.start(nil, "hub", "serve", "--listen", "127.0.0.1:0", "--data", data, "--shared-conversation-retention-days", fmt.Sprint(days))
	if !strings.HasPrefix(p.first, "listening on ") {
		h.t.Fatalf("hub serve: %q", p.first)
	}
	return strings.TrimPrefix(p.first, "listening on "), tokenFile
}

func (h *home) mode(root string) string {
	h.t.Helper()
	var s struct {
		State string `json:"state"`
	}
	if err := json.Unmarshal([]byte(h.run("change-capture", "status", "--root", root, "--format", "json")), &s); err != nil {
		h.t.Fatal(err)
	}
	return s.State
}

func sel(root, rest string) chromedp.CSS {
	return chromedp.CSS(fmt.Sprintf(`section[data-root=%q] %s`, root, rest))
}

func TestBrowserLocalPage(t *testing.T) {
	h := newHome(t)
	hub1, tok1 := h.hub("one", "proj", 7)
	roots := map[string]string{}
	for _, n := range []string{"meta", "notsetup", "off", "local", "shared"} {
		roots[n] = h.checkout(n)
		h.run("client", "setup", "--root", roots[n], "--hub", hub1, "--repository", "proj", "--token-file", tok1)
	}
	h.run("change-capture", "enable", "--root", roots["meta"])
	h.run("change-capture", "enable", "--root", roots["off"])
	h.run("change-capture", "unconfigure", "--root", roots["off"])
	h.run("change-capture", "enable", "--root", roots["local"], "--mode", "local-conversation")
	h.run("change-capture", "enable", "--root", roots["shared"], "--mode", "shared-conversation")

	clockFile := filepath.Join(h.dir, "ui-clock")
	if err := os.WriteFile(clockFile, []byte("0"), 0o600); err != nil {
		t.Fatal(err)
	}
	ui := h.start([]string{"AGENTSCM_UI_TEST_CLOCK_FILE=" + clockFile}, "ui", "--format", "json")
	var printed struct{ URL, Addr string }
	if err := json.Unmarshal([]byte(ui.first), &printed); err != nil || printed.URL == "" {
		t.Fatalf("agentscm ui --format json printed %q: %v", ui.first, err)
	}
	base := "http://" + printed.Addr

	ctx := browsertest.New(t, 3*time.Minute)
	run := func(t *testing.T, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("browser: %v; ui stderr: %s", err, ui.stderr())
		}
	}
	// submit clicks a button that posts a form and waits for the new page
	// to show then (a selector): the old page is marked first, so an
	// element of the page being left never satisfies the wait.
	submitWith := func(t *testing.T, act chromedp.Action[chromedp.Void], then string) {
		t.Helper()
		run(t, chromedp.Evaluate[chromedp.Void](`document.body.setAttribute("data-stale", "1")`),
			act, chromedp.WaitVisible(chromedp.CSS("body:not([data-stale]) "+then)))
	}
	submit := func(t *testing.T, button chromedp.CSS, then string) {
		t.Helper()
		submitWith(t, chromedp.Click(button), then)
	}
	text := func(t *testing.T, q chromedp.CSS) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(q))
		if err != nil {
			t.Fatalf("browser: text of %s: %v", q, err)
		}
		return s
	}

	t.Run("sign-in and the five states", func(t *testing.T) {
		run(t, chromedp.Navigate(printed.URL), chromedp.WaitVisible(chromedp.CSS("main")))
		loc, err := chromedp.Run(ctx, chromedp.Location())
		if err != nil {
			t.Fatal(err)
		}
		cookies, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.cookie`))
		if err != nil {
			t.Fatal(err)
		}
		if loc != base+"/" {
			t.Errorf("after sign-in the browser is at %q, want %q (no secret in the URL)", loc, base+"/")
		}
		if cookies != "" {
			t.Errorf("the session cookie is readable by scripts: %q", cookies)
		}
		for n, want := range map[string]string{"meta": "Metadata only", "notsetup": "Not set up", "off": "Off", "local": "Local only", "shared": "Shared with Hub"} {
			if got := text(t, sel(roots[n], ".state")); got != want {
				t.Errorf("%s: state %q, want %q", n, got, want)
			}
		}
		if got := text(t, sel(roots["meta"], ".retention")); got != "kept 7 days on "+hub1 {
			t.Errorf("retention wording %q", got)
		}
		browsertest.Screenshot(t, ctx, "states")
		// The link works once: a second visit from a fresh browser is refused.
		ctx2 := browsertest.New(t, time.Minute)
		if err := chromedp.Do(ctx2, chromedp.Navigate(printed.URL)); err != nil {
			t.Fatal(err)
		}
		body, err := chromedp.Run(ctx2, chromedp.Text(chromedp.CSS("body")))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(body, "already used") {
			t.Errorf("second use of the link: %q", body)
		}
		browsertest.Screenshot(t, ctx2, "link-reused")
	})

	t.Run("confirmation turns sharing on, off needs none", func(t *testing.T) {
		root := roots["meta"]
		submit(t, sel(root, `form[action="/v1/local/capture/share"] button`), string(sel(root, ".panel")))
		if got, want := text(t, sel(root, ".confirm-button")), "Confirm: share conversations with proj on "+hub1; got != want {
			t.Errorf("confirm button %q, want %q", got, want)
		}
		if got := text(t, sel(root, ".consequences")); !strings.Contains(got, "kept 7 days on "+hub1) || !strings.Contains(got, "best effort") {
			t.Errorf("consequences: %q", got)
		}
		browsertest.Screenshot(t, ctx, "panel")
		if got := h.mode(root); got != "Metadata only" {
			t.Fatalf("opening the panel changed the state to %s", got)
		}
		submit(t, sel(root, ".confirm-button"), ".flash-ok")
		if got := text(t, chromedp.CSS(".flash-ok")); !strings.Contains(got, "Sharing is on for "+root) {
			t.Errorf("flash %q", got)
		}
		if got := h.mode(root); got != "Shared with Hub" {
			t.Fatalf("after Confirm: %s", got)
		}
		browsertest.Screenshot(t, ctx, "shared")
		submit(t, sel(root, `form[action="/v1/local/capture/off"] button`), ".flash-ok")
		if got := h.mode(root); got != "Metadata only" {
			t.Fatalf("after Off: %s", got)
		}
		// Sharing a checkout that is not set up sets it up, as enable does.
		nr := roots["notsetup"]
		submit(t, sel(nr, `form[action="/v1/local/capture/share"] button`), string(sel(nr, ".panel")))
		submit(t, sel(nr, ".confirm-button"), ".flash-ok")
		if got := h.mode(nr); got != "Shared with Hub" {
			t.Fatalf("not-set-up checkout after Confirm: %s", got)
		}
	})

	t.Run("the panel expires after two minutes", func(t *testing.T) {
		root := roots["meta"]
		run(t, chromedp.Navigate(base+"/"))
		submit(t, sel(root, `form[action="/v1/local/capture/share"] button`), string(sel(root, ".panel")))
		// 110 s later the page still shows the panel with 10 s left; its
		// script counts them down and disables Confirm.
		if err := os.WriteFile(clockFile, []byte("110"), 0o600); err != nil {
			t.Fatal(err)
		}
		run(t, chromedp.Navigate(base+"/"), chromedp.WaitVisible(sel(root, ".panel")))
		if got := text(t, sel(root, ".countdown")); !strings.HasSuffix(got, " s left.") {
			t.Errorf("countdown %q", got)
		}
		run(t, chromedp.WaitVisible(sel(root, ".confirm-button[disabled]")))
		if got := text(t, sel(root, ".countdown")); !strings.Contains(got, "Expired") {
			t.Errorf("countdown after the two minutes %q", got)
		}
		browsertest.Screenshot(t, ctx, "countdown-expired")
		// The server decides anyway: the form submitted past the two minutes
		// is refused.
		if err := os.WriteFile(clockFile, []byte("121"), 0o600); err != nil {
			t.Fatal(err)
		}
		submitWith(t, chromedp.Submit(sel(root, "form.confirm")), ".flash-error")
		if got := text(t, chromedp.CSS(".flash-error")); !strings.Contains(got, "expired after two minutes") {
			t.Errorf("flash %q", got)
		}
		browsertest.Screenshot(t, ctx, "expired")
		if got := h.mode(root); got != "Metadata only" {
			t.Fatalf("an expired confirmation changed the state to %s", got)
		}
	})

	t.Run("a reconnect between the panel and Confirm is refused", func(t *testing.T) {
		hub2, tok2 := h.hub("two", "other", 9)
		root := roots["meta"]
		run(t, chromedp.Navigate(base+"/"))
		submit(t, sel(root, `form[action="/v1/local/capture/share"] button`), string(sel(root, ".panel")))
		h.run("client", "setup", "--root", root, "--hub", hub2, "--repository", "other", "--token-file", tok2)
		submit(t, sel(root, ".confirm-button"), ".flash-error")
		if got, want := text(t, chromedp.CSS(".flash-error")), "this checkout is now connected to other on "+hub2+"; refresh and confirm again"; !strings.Contains(got, want) {
			t.Errorf("flash %q lacks %q", got, want)
		}
		if got := h.mode(root); got != "Metadata only" {
			t.Fatalf("a reconnected checkout was changed to %s", got)
		}
		if got, want := text(t, sel(root, ".notice")), "Sharing was set for proj on "+hub1+"; this checkout is now connected to other on "+hub2; got != want {
			t.Errorf("notice %q, want %q", got, want)
		}
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, sel(root, `form[action="/v1/local/capture/share"]`))))
		if err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Error("the reconnected checkout still offers Share")
		}
		browsertest.Screenshot(t, ctx, "reconnected")
	})
}
