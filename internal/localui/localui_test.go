package localui

import (
	"context"
	"encoding/json"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/connections"
	"github.com/agentscm/agentscm/internal/delivery"
	"github.com/agentscm/agentscm/internal/event"
)

// clock is the injected clock of a test server.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// world is a running server over a real capture config and a real
// connections file in a temp dir.
type world struct {
	t         *testing.T
	dir       string
	store     capture.StateDir
	conns     delivery.Connections
	clock     *clock
	srv       *Server
	base      string
	hc        *http.Client // follows redirects, keeps the cookie
	raw       *http.Client // does not follow redirects, shares the cookie jar
	retention atomic.Int32
}

const testHub = "http://127.0.0.1:1"

func newWorld(t *testing.T) *world {
	t.Helper()
	dir := t.TempDir()
	w := &world{t: t, dir: dir, store: capture.StateDir{Dir: filepath.Join(dir, "cfg", "agentscm")}, clock: &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}}
	w.conns = delivery.Connections{ConfigDir: w.store.Dir}
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w.srv, err = New(Config{
		Store: w.store, Conns: w.conns,
		Connected: func() ([]string, error) {
			f, err := connections.Load(w.store.Dir)
			if err != nil {
				return nil, err
			}
			var out []string
			for _, c := range f.Connections {
				out = append(out, c.Root)
			}
			return out, nil
		},
		Retention: func(ctx context.Context, root string) (int, error) {
			w.retention.Add(1)
			return 7, nil
		},
		Executable: "/usr/local/bin/agentscm",
		Now:        w.clock.Now,
	}, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	w.base = "http://" + w.srv.Addr()
	jar, _ := cookiejar.New(nil)
	w.hc = &http.Client{Jar: jar, Timeout: 20 * time.Second}
	w.raw = &http.Client{Jar: jar, Timeout: 20 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return w
}

// checkout makes a git checkout connected to hub/repo through the real
// connections file.
func (w *world) checkout(name, hub, repo string) string {
	w.t.Helper()
	root := filepath.Join(w.dir, name)
	if out, err := exec.Command("git", "init", "-q", root).CombinedOutput(); err != nil {
		w.t.Fatalf("git init: %v %s", err, out)
	}
	root, _ = filepath.EvalSymlinks(root)
	w.connect(root, hub, repo)
	return root
}

func (w *world) connect(root, hub, repo string) {
	w.t.Helper()
	if _, err := connections.Put(w.store.Dir, connections.Connection{Root: root, Kind: connections.KindHub, Hub: hub, Repository: repo, WorktreeID: connections.NewWorktreeID(), CreatedAt: w.clock.Now()}); err != nil {
		w.t.Fatal(err)
	}
}

// enable runs the library function of change-capture enable.
func (w *world) enable(root, mode string) {
	w.t.Helper()
	if _, err := binding.EnableCapture(context.Background(), w.store, w.conns, binding.EnableOptions{Root: root, Mode: mode, ConfigDir: w.store.Dir,
		Executable: "/usr/local/bin/agentscm", Now: w.clock.Now()}); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) setting(root string) *binding.Setting {
	w.t.Helper()
	s, err := binding.CaptureSetting(w.store, w.conns, root)
	if err != nil {
		w.t.Fatal(err)
	}
	return s
}

func (w *world) signin() {
	w.t.Helper()
	resp, err := w.raw.Get(w.srv.URL())
	if err != nil {
		w.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		w.t.Fatalf("sign-in: %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

func (w *world) get(path string) (int, string) {
	w.t.Helper()
	resp, err := w.hc.Get(w.base + path)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)
var panelRE = regexp.MustCompile(`name="panel" value="([0-9a-f]+)"`)

func (w *world) page() string {
	w.t.Helper()
	code, body := w.get("/")
	if code != 200 {
		w.t.Fatalf("GET /: %d %s", code, body)
	}
	return body
}

func (w *world) csrf() string {
	w.t.Helper()
	m := csrfRE.FindStringSubmatch(w.page())
	if m == nil {
		w.t.Fatal("no csrf token on the page")
	}
	return m[1]
}

// post sends a form with the given headers; it follows the redirect.
func (w *world) post(path string, form url.Values, hdr map[string]string) (int, string) {
	w.t.Helper()
	req, _ := http.NewRequest("POST", w.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := w.hc.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, html.UnescapeString(string(b))
}

// openPanel clicks the switch and returns the confirmation form's fields.
func (w *world) openPanel(root string) url.Values {
	w.t.Helper()
	code, body := w.post("/v1/local/capture/share", url.Values{"csrf": {w.csrf()}, "root": {root}}, nil)
	if code != 200 || !strings.Contains(body, "Confirm: share conversations with") {
		w.t.Fatalf("share: %d, no confirmation panel:\n%s", code, body)
	}
	m := panelRE.FindStringSubmatch(body)
	if m == nil {
		w.t.Fatal("no panel id")
	}
	f := url.Values{"csrf": {csrfRE.FindStringSubmatch(body)[1]}, "panel": {m[1]}}
	for _, k := range []string{"root", "hub", "repository", "mode"} {
		re := regexp.MustCompile(`<form method="post" action="/v1/local/capture/confirm"[\s\S]*?name="` + k + `" value="([^"]*)"`)
		mm := re.FindStringSubmatch(body)
		if mm == nil {
			w.t.Fatalf("confirm form has no %s", k)
		}
		f.Set(k, mm[1])
	}
	return f
}

func TestCheckAddr(t *testing.T) {
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:0", true}, {"127.0.0.1:8421", true}, {"[::1]:0", true}, {"127.0.0.2:0", true},
		{"localhost:0", false}, {"0.0.0.0:0", false}, {"[::]:0", false}, {"192.168.1.2:80", false},
		{"127.0.0.1", false}, {"127.0.0.1:http", true}, {"127.0.0.1:99999", false}, {"[fe80::1%lo]:0", false}, {"", false},
	} {
		if err := CheckAddr(tc.addr); (err == nil) != tc.ok {
			t.Errorf("CheckAddr(%q) = %v, want ok=%v", tc.addr, err, tc.ok)
		}
	}
}

func TestHostRefused(t *testing.T) {
	w := newWorld(t)
	_, port, _ := net.SplitHostPort(w.srv.Addr())
	for _, host := range []string{"localhost:" + port, "evil.example", "evil.example:" + port, "127.0.0.1:1", "[::1]:" + port, "127.0.0.1"} {
		for _, path := range []string{"/", "/signin?secret=x", "/v1/local/capture", "/assets/style.css"} {
			req, _ := http.NewRequest("GET", w.base+path, nil)
			req.Host = host
			resp, err := w.raw.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusMisdirectedRequest {
				t.Errorf("Host %q %s: %d, want 421", host, path, resp.StatusCode)
			}
		}
	}
	// A rebinding page can never use the secret either: the sign-in with a
	// foreign Host did not consume it.
	w.signin()
	if code, _ := w.get("/"); code != 200 {
		t.Errorf("GET / after sign-in: %d", code)
	}
}

// TestIPv6Loopback serves on [::1] when the machine has it: the Host it
// accepts is the bracketed address.
func TestIPv6Loopback(t *testing.T) {
	ln, err := Listen("[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	srv, err := New(Config{Conns: delivery.Connections{ConfigDir: t.TempDir()}, Connected: func() ([]string, error) { return nil, nil }}, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	defer func() { cancel(); <-done }()
	if !strings.HasPrefix(srv.URL(), "http://[::1]:") {
		t.Errorf("URL %s", srv.URL())
	}
	raw := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := raw.Get(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Errorf("sign-in on [::1]: %d", resp.StatusCode)
	}
}

func TestSecretOnceAndCookie(t *testing.T) {
	w := newWorld(t)
	if code, _ := w.get("/"); code != http.StatusUnauthorized {
		t.Errorf("GET / before sign-in: %d, want 401", code)
	}
	if code, _ := w.get("/v1/local/capture"); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/local/capture before sign-in: %d, want 401", code)
	}
	// A HEAD (a link preview) does not consume it.
	if resp, err := w.raw.Head(w.srv.URL()); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("HEAD sign-in: %d", resp.StatusCode)
	}
	// A wrong secret does not consume the right one.
	resp, err := w.raw.Get(w.base + "/signin?secret=00")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("wrong secret: %d", resp.StatusCode)
	}
	resp, err = w.raw.Get(w.srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("sign-in: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	sc := resp.Header.Get("Set-Cookie")
	for _, want := range []string{"HttpOnly", "SameSite=Strict", "Path=/"} {
		if !strings.Contains(sc, want) {
			t.Errorf("Set-Cookie %q lacks %s", sc, want)
		}
	}
	if code, _ := w.get("/"); code != 200 {
		t.Errorf("GET / signed in: %d", code)
	}
	// The same browser revisiting the link is just sent to the page.
	if resp, err = w.raw.Get(w.srv.URL()); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Errorf("revisit with the cookie: %d", resp.StatusCode)
	}
	// Anyone else with the link is refused: the secret works once.
	other := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err = other.Get(w.srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "already used") {
		t.Errorf("reused secret: %d %s", resp.StatusCode, b)
	}
	if resp.Header.Get("Set-Cookie") != "" {
		t.Errorf("reused secret set a cookie")
	}
}

func TestSessionExpires(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []time.Duration // time between requests
		ok    bool
	}{
		{"used within the idle hour", []time.Duration{50 * time.Minute, 50 * time.Minute}, true},
		{"idle an hour", []time.Duration{time.Hour}, false},
		{"12 hours after sign-in even when used", []time.Duration{50 * time.Minute, 50 * time.Minute, 50 * time.Minute, 50 * time.Minute, 50 * time.Minute, 50 * time.Minute, 50 * time.Minute, 50 * time.Minute, 50 * time.Minute, 50 * time.Minute, 50 * time.Minute, 50 * time.Minute, 50 * time.Minute, 50 * time.Minute, 50 * time.Minute}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.signin()
			code := 0
			for _, d := range tc.steps {
				w.clock.Add(d)
				code, _ = w.get("/")
			}
			if (code == 200) != tc.ok {
				t.Errorf("last GET /: %d, want ok=%v", code, tc.ok)
			}
			if !tc.ok {
				w.clock.Add(-24 * time.Hour) // an expired session stays gone
				if code, _ := w.get("/"); code != http.StatusUnauthorized {
					t.Errorf("after expiry: %d", code)
				}
			}
		})
	}
}

func TestCSRFRefused(t *testing.T) {
	w := newWorld(t)
	root := w.checkout("repo", testHub, "demo")
	w.enable(root, "")
	w.signin()
	tok := w.csrf()
	for _, tc := range []struct {
		name string
		form url.Values
		hdr  map[string]string
	}{
		{"no token", url.Values{"root": {root}}, nil},
		{"wrong token", url.Values{"root": {root}, "csrf": {strings.Repeat("0", len(tok))}}, nil},
		{"foreign origin", url.Values{"root": {root}, "csrf": {tok}}, map[string]string{"Origin": "http://evil.example"}},
		{"opaque origin", url.Values{"root": {root}, "csrf": {tok}}, map[string]string{"Origin": "null"}},
		{"https origin", url.Values{"root": {root}, "csrf": {tok}}, map[string]string{"Origin": "https://" + w.srv.Addr()}},
		{"other port origin", url.Values{"root": {root}, "csrf": {tok}}, map[string]string{"Origin": "http://127.0.0.1:1"}},
		{"cross-site fetch", url.Values{"root": {root}, "csrf": {tok}}, map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{"same-site fetch", url.Values{"root": {root}, "csrf": {tok}}, map[string]string{"Sec-Fetch-Site": "same-site"}},
	} {
		for _, path := range []string{"/v1/local/capture/share", "/v1/local/capture/off", "/v1/local/capture/confirm"} {
			if code, _ := w.post(path, tc.form, tc.hdr); code != http.StatusForbidden {
				t.Errorf("%s %s: %d, want 403", tc.name, path, code)
			}
		}
	}
	if strings.Contains(w.page(), "Confirm: share") {
		t.Error("a refused request opened a panel")
	}
	// The same request with the token and a same-origin browser's headers.
	code, body := w.post("/v1/local/capture/share", url.Values{"root": {root}, "csrf": {tok}}, map[string]string{"Origin": w.base, "Sec-Fetch-Site": "same-origin"})
	if code != 200 || !strings.Contains(body, "Confirm: share conversations with demo on "+testHub) {
		t.Errorf("same-origin share: %d\n%s", code, body)
	}
	// GET cannot change anything: there is no GET route for it.
	if code, _ := w.get("/v1/local/capture/off?root=" + url.QueryEscape(root)); code != http.StatusMethodNotAllowed {
		t.Errorf("GET off: %d", code)
	}
}

func TestConfirmTurnsSharingOnAndOffNeedsNone(t *testing.T) {
	w := newWorld(t)
	root := w.checkout("repo", testHub, "demo")
	w.enable(root, "")
	w.signin()
	body := w.page()
	for _, want := range []string{"Metadata only", "Share agent conversations with Hub", "kept 7 days on " + testHub} {
		if !strings.Contains(html.UnescapeString(body), want) {
			t.Errorf("page lacks %q", want)
		}
	}
	f := w.openPanel(root)
	if got := w.setting(root).Mode; got != event.ModeMetadataOnly {
		t.Fatalf("opening the panel changed the mode to %s", got)
	}
	if f.Get("hub") != testHub || f.Get("repository") != "demo" || f.Get("mode") != "metadata-only" || f.Get("root") != root {
		t.Errorf("the confirmation passes %v", f)
	}
	page := html.UnescapeString(w.page())
	for _, want := range []string{"Redaction is client-side and best effort", "kept 7 days on " + testHub, "sharing starts with the next session"} {
		if !strings.Contains(page, want) {
			t.Errorf("panel lacks %q", want)
		}
	}
	// Cancel closes it without changing anything.
	w.post("/v1/local/capture/cancel", url.Values{"csrf": {f.Get("csrf")}, "panel": {f.Get("panel")}}, nil)
	if strings.Contains(w.page(), "Confirm: share") || w.setting(root).Mode != event.ModeMetadataOnly {
		t.Fatal("cancel left the panel or changed the mode")
	}
	f = w.openPanel(root)
	code, body := w.post("/v1/local/capture/confirm", f, nil)
	if code != 200 || !strings.Contains(body, "Sharing is on for "+root) {
		t.Fatalf("confirm: %d\n%s", code, body)
	}
	if s := w.setting(root); s.State != binding.StateShared {
		t.Fatalf("after confirm: %s", s.State)
	}
	// The same panel cannot be confirmed twice.
	if _, body := w.post("/v1/local/capture/confirm", f, nil); !strings.Contains(body, "no longer valid") {
		t.Errorf("second confirm: %s", body)
	}
	// Off needs no confirmation.
	code, body = w.post("/v1/local/capture/off", url.Values{"csrf": {f.Get("csrf")}, "root": {root}}, nil)
	if code != 200 || !strings.Contains(body, "Sharing is off for "+root) {
		t.Fatalf("off: %d\n%s", code, body)
	}
	if s := w.setting(root); s.State != binding.StateMetadataOnly {
		t.Fatalf("after off: %s", s.State)
	}
}

func TestConfirmMustPassWhatWasShown(t *testing.T) {
	w := newWorld(t)
	root := w.checkout("repo", testHub, "demo")
	w.enable(root, "")
	w.signin()
	for _, k := range []string{"root", "hub", "repository", "mode"} {
		f := w.openPanel(root)
		f.Set(k, f.Get(k)+"x")
		if _, body := w.post("/v1/local/capture/confirm", f, nil); !strings.Contains(body, "does not match what its panel displayed") {
			t.Errorf("tampered %s: %s", k, body)
		}
		if s := w.setting(root); s.State != binding.StateMetadataOnly {
			t.Fatalf("tampered %s turned sharing on", k)
		}
	}
}

func TestPanelExpiresAfterTwoMinutes(t *testing.T) {
	for _, tc := range []struct {
		wait time.Duration
		ok   bool
	}{{PanelLifetime - time.Second, true}, {PanelLifetime, false}, {10 * time.Minute, false}} {
		t.Run(tc.wait.String(), func(t *testing.T) {
			w := newWorld(t)
			root := w.checkout("repo", testHub, "demo")
			w.enable(root, "")
			w.signin()
			f := w.openPanel(root)
			w.clock.Add(tc.wait)
			_, body := w.post("/v1/local/capture/confirm", f, nil)
			shared := w.setting(root).State == binding.StateShared
			if shared != tc.ok {
				t.Fatalf("after %v: shared=%v\n%s", tc.wait, shared, body)
			}
			if !tc.ok && !strings.Contains(body, "expired after two minutes") {
				t.Errorf("no expiry message:\n%s", body)
			}
		})
	}
	// The page withdraws an expired panel by itself.
	w := newWorld(t)
	root := w.checkout("repo", testHub, "demo")
	w.enable(root, "")
	w.signin()
	w.openPanel(root)
	w.clock.Add(PanelLifetime)
	page := html.UnescapeString(w.page())
	if strings.Contains(page, "Confirm: share") || !strings.Contains(page, "expired after two minutes") {
		t.Errorf("expired panel still shown:\n%s", page)
	}
}

func TestReconnectRefused(t *testing.T) {
	w := newWorld(t)
	root := w.checkout("repo", testHub, "demo")
	w.enable(root, "")
	w.signin()
	f := w.openPanel(root)
	// Meanwhile the checkout is reconnected to another Hub.
	w.connect(root, "http://127.0.0.1:2", "other")
	_, body := w.post("/v1/local/capture/confirm", f, nil)
	if want := "this checkout is now connected to other on http://127.0.0.1:2; refresh and confirm again"; !strings.Contains(body, want) {
		t.Errorf("confirm after reconnect lacks %q:\n%s", want, body)
	}
	s := w.setting(root)
	if s.State != binding.StateMetadataOnly {
		t.Fatalf("shared after a reconnect: %s", s.State)
	}
	// The page now says where sharing was set and offers no switch on.
	page := html.UnescapeString(w.page())
	if want := "Sharing was set for demo on " + testHub + "; this checkout is now connected to other on http://127.0.0.1:2"; !strings.Contains(page, want) {
		t.Errorf("page lacks %q", want)
	}
	if strings.Contains(page, `action="/v1/local/capture/share"`) {
		t.Error("a reconnected checkout still offers Share")
	}
	// A panel open during a reconnect is withdrawn on the next page.
	w.connect(root, testHub, "demo")
	f = w.openPanel(root)
	w.connect(root, "http://127.0.0.1:2", "other")
	page = html.UnescapeString(w.page())
	if strings.Contains(page, "Confirm: share") || !strings.Contains(page, "was withdrawn: this checkout is now connected to other on http://127.0.0.1:2") {
		t.Errorf("panel not withdrawn after reconnect:\n%s", page)
	}
}

func TestModeChangeInvalidatesPanel(t *testing.T) {
	w := newWorld(t)
	root := w.checkout("repo", testHub, "demo")
	w.enable(root, "")
	w.signin()
	f := w.openPanel(root)
	if _, err := binding.SetCaptureMode(context.Background(), w.store, w.conns, root, event.ModeLocalConversation, nil); err != nil {
		t.Fatal(err)
	}
	_, body := w.post("/v1/local/capture/confirm", f, nil)
	if !strings.Contains(body, "capture setting changed to Local only") {
		t.Errorf("confirm after a mode change:\n%s", body)
	}
	if s := w.setting(root); s.State != binding.StateLocalOnly {
		t.Fatalf("after refused confirm: %s", s.State)
	}
	// And the page withdraws a panel whose mode changed.
	w.openPanel(root)
	if _, err := binding.Unconfigure(context.Background(), w.store, root); err != nil {
		t.Fatal(err)
	}
	page := html.UnescapeString(w.page())
	if strings.Contains(page, "Confirm: share") || !strings.Contains(page, "capture setting changed to Off") {
		t.Errorf("panel not withdrawn after unconfigure:\n%s", page)
	}
}

func TestFiveStatesAndSetupThroughConfirm(t *testing.T) {
	w := newWorld(t)
	notSetUp := w.checkout("a-not-set-up", testHub, "demo")
	off := w.checkout("b-off", testHub, "demo")
	meta := w.checkout("c-meta", testHub, "demo")
	local := w.checkout("d-local", testHub, "demo")
	shared := w.checkout("e-shared", testHub, "demo")
	w.enable(off, "")
	if _, err := binding.Unconfigure(context.Background(), w.store, off); err != nil {
		t.Fatal(err)
	}
	w.enable(meta, event.ModeMetadataOnly)
	w.enable(local, event.ModeLocalConversation)
	w.enable(shared, event.ModeSharedConversation)
	w.signin()
	code, body := w.get("/v1/local/capture")
	if code != 200 {
		t.Fatalf("GET /v1/local/capture: %d %s", code, body)
	}
	var list List
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{notSetUp: "Not set up", off: "Off", meta: "Metadata only", local: "Local only", shared: "Shared with Hub"}
	if len(list.Checkouts) != len(want) {
		t.Fatalf("%d checkouts listed: %s", len(list.Checkouts), body)
	}
	for _, c := range list.Checkouts {
		if c.State != want[c.Root] {
			t.Errorf("%s: state %q, want %q", c.Root, c.State, want[c.Root])
		}
		if c.SharedConversationRetention != "kept 7 days on "+testHub || c.SharedConversationRetentionDays != 7 {
			t.Errorf("%s: retention %q (%d)", c.Root, c.SharedConversationRetention, c.SharedConversationRetentionDays)
		}
		if c.CanShare != (c.Root != shared) || c.Sharing != (c.Root == shared) {
			t.Errorf("%s: can_share %v sharing %v", c.Root, c.CanShare, c.Sharing)
		}
	}
	// Sharing on a checkout that is not set up sets it up through enable.
	for _, root := range []string{notSetUp, off} {
		f := w.openPanel(root)
		if _, body := w.post("/v1/local/capture/confirm", f, nil); !strings.Contains(body, "Sharing is on for "+root) {
			t.Errorf("confirm %s:\n%s", root, body)
		}
		if s := w.setting(root); s.State != binding.StateShared {
			t.Errorf("%s after confirm: %s", root, s.State)
		}
		if _, err := os.Stat(filepath.Join(root, ".claude", "settings.local.json")); err != nil {
			t.Errorf("%s: hooks not installed: %v", root, err)
		}
	}
}

func TestRetentionReusedForAMinute(t *testing.T) {
	w := newWorld(t)
	w.checkout("repo", testHub, "demo")
	w.signin()
	w.page()
	w.page()
	if n := w.retention.Load(); n != 1 {
		t.Errorf("%d lookups within a minute, want 1", n)
	}
	w.clock.Add(RetentionReuse)
	w.page()
	if n := w.retention.Load(); n != 2 {
		t.Errorf("%d lookups after a minute, want 2", n)
	}
}

func TestRetentionUnknownWording(t *testing.T) {
	if got := RetentionWording(0, testHub); got != "kept for as long as the Hub operator sets (30 days unless changed)" {
		t.Errorf("unknown: %q", got)
	}
	if got := RetentionWording(45, "https://hub.example"); got != "kept 45 days on https://hub.example" {
		t.Errorf("known: %q", got)
	}
}

func TestHostileNamesEscaped(t *testing.T) {
	w := newWorld(t)
	evil := `x"><script>alert(1)</script><img src=x onerror=alert(2)>`
	root := w.checkout(evil, `http://127.0.0.1:1/"><script>alert(3)</script>`, "demo")
	w.signin()
	w.openPanel(root)
	code, body := w.get("/")
	if code != 200 {
		t.Fatal(code)
	}
	for _, bad := range []string{"<script>alert", "<img src=x", `"><script`} {
		if strings.Contains(body, bad) {
			t.Errorf("page contains unescaped %q", bad)
		}
	}
	if !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Error("escaped root not shown")
	}
}
