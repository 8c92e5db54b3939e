package hubpage_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/agentscm/agentscm/internal/hub"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/hubpage"
)

// Hostile agent-controlled names: a tool name, a path and a Work title.
const (
	hostileTool  = `"><img src=x onerror=alert(1)>`
	hostilePath  = `<script>alert("path")</script>.txt`
	hostileTitle = `<script>alert("title")</script>`
	bodyText     = `{"prompt":"</pre><script>alert('body')</script>"}`
)

type fixture struct {
	svc        *hub.Service
	srv        *httptest.Server
	rw, ro     string // token secrets of alice
	bob        string // another human's read-write token
	work       string
	bodyDigest string
	now        *time.Time
}

func randHex(t *testing.T) string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// increment builds a changelog increment holding only its metadata member.
func increment(t *testing.T, m incmeta.Meta) []byte {
	t.Helper()
	meta, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Name: incmeta.Member, Typeflag: tar.TypeReg, Mode: 0o600, Size: int64(len(meta))}); err != nil {
		t.Fatal(err)
	}
	tw.Write(meta)
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

// newFixture runs a Hub service on SQLite with the page mounted beside the
// API on a real loopback server, and one Work whose session wrote a file
// under a hostile name, ran a tool with a hostile name, failed a Bash call
// and shared one conversation body.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	f := &fixture{now: &now}
	svc, err := hub.Open(ctx, filepath.Join(t.TempDir(), "data"), hub.Config{RetentionDays: 9, Now: func() time.Time { return *f.now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	f.svc = svc
	op := hub.Operator()
	for _, n := range []string{"alice", "bob"} {
		if _, err := svc.CreateHuman(ctx, op, api.CreateHumanRequest{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.CreateRepository(ctx, op, api.CreateRepositoryRequest{Name: "proj"}); err != nil {
		t.Fatal(err)
	}
	tok := func(human, scope string) string {
		k, err := svc.CreateToken(ctx, op, api.CreateTokenRequest{Human: human, Repository: "proj", Scope: scope})
		if err != nil {
			t.Fatal(err)
		}
		return k.Secret
	}
	f.rw, f.ro, f.bob = tok("alice", api.ScopeReadWrite), tok("alice", api.ScopeReadOnly), tok("bob", api.ScopeReadWrite)
	p, err := svc.Authenticate(ctx, f.rw)
	if err != nil {
		t.Fatal(err)
	}
	w, err := svc.StartWork(ctx, p, "proj", api.StartWorkRequest{WorktreeID: "wt1", Title: hostileTitle})
	if err != nil {
		t.Fatal(err)
	}
	f.work = w.ID
	tg, err := svc.Resolve(ctx, p, "proj", api.ResolveRequest{WorktreeID: "wt1", NativeSessionID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	at := now.Unix()
	evs := []api.Event{
		{Seq: 1, Kind: "session_start", ObservedAt: at},
		{Seq: 2, Kind: "tool_start", ToolName: hostileTool, ToolUseID: "toolu_1", ObservedAt: at},
		{Seq: 3, Kind: "tool_finish", ToolName: hostileTool, ToolUseID: "toolu_1", Outcome: "returned", ObservedAt: at + 1},
		{Seq: 4, Kind: "tool_start", ToolName: "Bash", ToolUseID: "toolu_2", ObservedAt: at + 1},
		{Seq: 5, Kind: "tool_finish", ToolName: "Bash", ToolUseID: "toolu_2", Outcome: "failed", ObservedAt: at + 2},
	}
	sum := sha256.Sum256([]byte(bodyText))
	f.bodyDigest = hex.EncodeToString(sum[:])
	env := &api.Envelope{Identity: randHex(t), Type: api.TypeEvents, WorkID: tg.WorkID, Generation: tg.Generation, Session: tg.Session,
		NativeSessionID: "n1", Agent: "claude-code", Events: evs, Body: &api.BodyDeclaration{Digest: f.bodyDigest, Bytes: int64(len(bodyText)), MediaType: api.BodyMediaType,
			Retention: api.RetentionSharedApproved, Availability: api.BodyRetained, CaptureMode: "shared-conversation"}}
	if _, err := svc.Ingest(ctx, p, "proj", env); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.UploadBody(ctx, p, "proj", w.ID, f.bodyDigest, int64(len(bodyText)), strings.NewReader(bodyText)); err != nil {
		t.Fatal(err)
	}
	end := &api.Envelope{Identity: randHex(t), Type: api.TypeEvents, WorkID: tg.WorkID, Generation: tg.Generation, Session: tg.Session,
		NativeSessionID: "n1", Events: []api.Event{{Seq: 6, Kind: "session_end", ObservedAt: at + 3}}}
	if _, err := svc.Ingest(ctx, p, "proj", end); err != nil {
		t.Fatal(err)
	}
	for pos, m := range []incmeta.Meta{
		{Version: 1, Position: 0, SessionID: "n1", ToolUseID: "toolu_1", Tool: hostileTool, Kind: "call", CreatedAt: now,
			Changes: &incmeta.Changes{Created: []string{hostilePath}, Modified: []string{"README.md"}, Deleted: []string{"b.txt"}}},
		{Version: 1, Position: 1, SessionID: "n1", ToolUseID: "toolu_2", Tool: "Bash", Failed: true, Kind: "call", CreatedAt: now,
			Changes: &incmeta.Changes{Created: []string{}, Modified: []string{}, Deleted: []string{}}},
	} {
		b := increment(t, m)
		d := sha256.Sum256(b)
		up := api.IncrementUpload{Position: pos, Session: "n1", Digest: hex.EncodeToString(d[:]), Size: int64(len(b))}
		// The Work is paused by the session end; an upload needs it
		// accepting, so resume it first.
		if pos == 0 {
			if _, err := svc.Checkpoint(ctx, p, "proj", w.ID, api.CheckpointRequest{Action: api.CheckpointResume}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := svc.UploadIncrement(ctx, p, "proj", "wt1", up, bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
	}
	page, err := hubpage.New(svc, hubpage.Options{Now: func() time.Time { return *f.now }, SessionTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(hubpage.Mount(hub.NewHandler(svc, nil), page))
	t.Cleanup(f.srv.Close)
	return f
}

// client is a cookie-keeping HTTP client that does not follow redirects.
func client(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Transport: browserOrigin{}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// browserOrigin sends a POST with the Origin header a browser sends on a
// form submission from the page itself, unless the test set one.
type browserOrigin struct{}

func (browserOrigin) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if r.Method == http.MethodPost && r.Header.Get("Origin") == "" && r.Header.Get("Sec-Fetch-Site") == "" && r.Header.Get("X-Test-No-Origin") == "" {
		r.Header.Set("Origin", r.URL.Scheme+"://"+r.URL.Host)
	}
	r.Header.Del("X-Test-No-Origin")
	return http.DefaultTransport.RoundTrip(r)
}

func get(t *testing.T, c *http.Client, u string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func signIn(t *testing.T, f *fixture, c *http.Client, secret string) *http.Response {
	t.Helper()
	resp, err := c.PostForm(f.srv.URL+"/signin", url.Values{"token": {secret}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

var csrfRE = `name="csrf" value="`

func csrfOf(t *testing.T, page string) string {
	t.Helper()
	i := strings.Index(page, csrfRE)
	if i < 0 {
		t.Fatalf("no csrf token in the page")
	}
	rest := page[i+len(csrfRE):]
	return rest[:strings.IndexByte(rest, '"')]
}

func TestSignInSessionAndHeaders(t *testing.T) {
	f := newFixture(t)
	c := client(t)
	// Not signed in: the pages redirect to the sign-in form; the API is
	// untouched (JSON 401).
	if resp, _ := get(t, c, f.srv.URL+"/works"); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/?expired=1" {
		t.Fatalf("works without a session: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, body := get(t, c, f.srv.URL+"/v1/hub/whoami"); resp.StatusCode != 401 || !strings.Contains(body, `"unauthenticated"`) {
		t.Fatalf("the API changed: %d %s", resp.StatusCode, body)
	}
	if resp, body := get(t, c, f.srv.URL+"/v1/nope"); resp.StatusCode != 404 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("the API's 404 changed: %d %s", resp.StatusCode, body)
	}
	resp, body := get(t, c, f.srv.URL+"/")
	if resp.StatusCode != 200 || !strings.Contains(body, `<form method="post" action="/signin"`) {
		t.Fatalf("sign-in page %d:\n%s", resp.StatusCode, body)
	}
	for k, want := range map[string]string{
		"Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
		"X-Content-Type-Options":  "nosniff",
		"Cache-Control":           "no-store",
	} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	if r := signIn(t, f, c, "ascm_wrong"); r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a wrong token signed in: %d", r.StatusCode)
	}
	r := signIn(t, f, c, f.rw)
	if r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != "/works" {
		t.Fatalf("sign-in: %d %s", r.StatusCode, r.Header.Get("Location"))
	}
	ck := r.Cookies()
	if len(ck) != 1 || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode || ck[0].Secure || strings.Contains(ck[0].Value, f.rw) {
		t.Fatalf("session cookie %+v", ck)
	}
	if strings.Contains(r.Header.Get("Location"), "ascm_") {
		t.Fatal("the token is in a URL")
	}
	resp, body = get(t, c, f.srv.URL+"/works")
	if resp.StatusCode != 200 || !strings.Contains(body, f.work) || !strings.Contains(body, "<td class=\"state state-active\">active</td>\n<td>1</td>\n<td>1<br><small class=\"agents\">claude-code</small></td>") {
		t.Fatalf("works page %d:\n%s", resp.StatusCode, body)
	}
	// The session expires.
	*f.now = f.now.Add(2 * time.Hour)
	if resp, _ := get(t, c, f.srv.URL+"/works"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("an expired session still reads: %d", resp.StatusCode)
	}
}

func TestWorkPageEscapesAndKeepsBodiesOut(t *testing.T) {
	f := newFixture(t)
	c := client(t)
	signIn(t, f, c, f.rw)
	resp, body := get(t, c, f.srv.URL+"/works/"+f.work)
	if resp.StatusCode != 200 {
		t.Fatalf("work page %d:\n%s", resp.StatusCode, body)
	}
	for _, want := range []string{
		"2 calls, 1 failed; 1 created, 1 modified, 1 deleted",
		"&lt;script&gt;alert(&#34;path&#34;)&lt;/script&gt;.txt",
		"&#34;&gt;&lt;img src=x onerror=alert(1)&gt;",
		"&lt;script&gt;alert(&#34;title&#34;)&lt;/script&gt;",
		"Claude Code reported that the tool failed (PostToolUseFailure)",
		`agent <strong class="agent">claude-code</strong>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("work page lacks %q", want)
		}
	}
	if _, list := get(t, c, f.srv.URL+"/works"); !strings.Contains(list, `<small class="agents">claude-code</small>`) {
		t.Errorf("works page does not name the session's agent:\n%s", list)
	}
	for _, bad := range []string{"<script>alert", "<img src=x", bodyText, "alert('body')"} {
		if strings.Contains(body, bad) {
			t.Errorf("work page holds %q", bad)
		}
	}
}

func TestBodiesOnlyThroughTheirAccessCheck(t *testing.T) {
	f := newFixture(t)
	alice, bob := client(t), client(t)
	signIn(t, f, alice, f.rw)
	signIn(t, f, bob, f.bob)
	u := f.srv.URL + "/works/" + f.work + "/bodies/" + f.bodyDigest
	resp, body := get(t, alice, u)
	if resp.StatusCode != 200 || !strings.Contains(body, "&lt;/pre&gt;&lt;script&gt;alert(&#39;body&#39;)&lt;/script&gt;") || strings.Contains(body, "<script>alert") {
		t.Fatalf("alice's body view %d:\n%s", resp.StatusCode, body)
	}
	// Bob is not the author: 403, as for a digest that does not exist.
	if resp, _ := get(t, bob, u); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("bob reads alice's body: %d", resp.StatusCode)
	}
	if resp, _ := get(t, bob, f.srv.URL+"/works/"+f.work+"/bodies/"+strings.Repeat("ab", 32)); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("bob's unknown digest: %d", resp.StatusCode)
	}
	_, settings := get(t, bob, f.srv.URL+"/settings")
	if strings.Contains(settings, f.bodyDigest[:12]) || !strings.Contains(settings, "You have no shared conversation bodies") {
		t.Fatalf("bob's settings list alice's body:\n%s", settings)
	}
	_, settings = get(t, alice, f.srv.URL+"/settings")
	for _, want := range []string{"Share agent conversations with Hub", "kept 9 days on " + strings.TrimPrefix(f.srv.URL, "http://"),
		"Not set up", "Off", "Metadata only", "Local only", "Shared with Hub", f.bodyDigest[:12], "Delete now"} {
		if !strings.Contains(settings, want) {
			t.Errorf("settings lack %q", want)
		}
	}
	// Deleting needs the session's CSRF token and the same origin.
	del := u + "/delete"
	for name, req := range map[string]func() *http.Request{
		"no token": func() *http.Request {
			r, _ := http.NewRequest("POST", del, strings.NewReader(""))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			return r
		},
		"neither Origin nor Sec-Fetch-Site": func() *http.Request {
			r, _ := http.NewRequest("POST", del, strings.NewReader("csrf="+csrfOf(t, settings)))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			r.Header.Set("X-Test-No-Origin", "1")
			return r
		},
		"cross-origin": func() *http.Request {
			r, _ := http.NewRequest("POST", del, strings.NewReader("csrf="+csrfOf(t, settings)))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			r.Header.Set("Origin", "http://evil.example")
			return r
		},
	} {
		resp, err := alice.Do(req())
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("%s: delete answered %d", name, resp.StatusCode)
		}
	}
	resp, err := alice.PostForm(del, url.Values{"csrf": {csrfOf(t, settings)}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("delete with the token: %d", resp.StatusCode)
	}
	if resp, _ := get(t, alice, u); resp.StatusCode != http.StatusGone {
		t.Fatalf("a deleted body answers %d, not 410", resp.StatusCode)
	}
}

func TestReadOnlyTokenReadOnlyPage(t *testing.T) {
	f := newFixture(t)
	c := client(t)
	signIn(t, f, c, f.ro)
	_, settings := get(t, c, f.srv.URL+"/settings")
	if strings.Contains(settings, "Delete now") || !strings.Contains(settings, `id="readonly"`) || !strings.Contains(settings, f.bodyDigest[:12]) {
		t.Fatalf("read-only settings:\n%s", settings)
	}
	// The service refuses even a crafted POST with a valid CSRF token.
	resp, err := c.PostForm(f.srv.URL+"/works/"+f.work+"/bodies/"+f.bodyDigest+"/delete", url.Values{"csrf": {csrfOf(t, settings)}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a read-only delete answered %d", resp.StatusCode)
	}
}

// TestSessionCookieAcrossInstancesAndSignOut: a session is sealed in its
// cookie, so a second page server with the same key (another hub serve
// instance) accepts it and one with another key does not; a tampered
// cookie is refused; signing out ends the cookie on that instance.
func TestSessionCookieAcrossInstancesAndSignOut(t *testing.T) {
	f := newFixture(t)
	key, err := hubpage.DeriveKey([]byte(strings.Repeat("k", 40)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hubpage.DeriveKey([]byte("short")); err == nil {
		t.Fatal("a short key file was accepted")
	}
	serve := func(key []byte) *httptest.Server {
		page, err := hubpage.New(f.svc, hubpage.Options{SessionKey: key})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(hubpage.Mount(hub.NewHandler(f.svc, nil), page))
		t.Cleanup(srv.Close)
		return srv
	}
	a, b, other := serve(key), serve(key), serve(nil)
	c := client(t)
	resp, err := c.PostForm(a.URL+"/signin", url.Values{"token": {f.rw}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ck := resp.Cookies()[0]
	with := func(srv *httptest.Server, value string) int {
		req, _ := http.NewRequest("GET", srv.URL+"/works", nil)
		req.AddCookie(&http.Cookie{Name: hubpage.CookieName, Value: value})
		resp, err := client(t).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := with(b, ck.Value); got != 200 {
		t.Fatalf("the other instance with the same key answered %d", got)
	}
	if got := with(other, ck.Value); got != http.StatusSeeOther {
		t.Fatalf("an instance with another key answered %d", got)
	}
	tampered := []byte(ck.Value)
	tampered[len(tampered)/2] ^= 1
	if got := with(a, string(tampered)); got != http.StatusSeeOther {
		t.Fatalf("a tampered cookie answered %d", got)
	}
	// Sign out on a: the cookie no longer works there.
	_, page := get(t, withCookie(t, a, ck), a.URL+"/works")
	req, _ := http.NewRequest("POST", a.URL+"/signout", strings.NewReader(url.Values{"csrf": {csrfOf(t, page)}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(ck)
	resp, err = client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-out answered %d", resp.StatusCode)
	}
	if got := with(a, ck.Value); got != http.StatusSeeOther {
		t.Fatalf("a signed-out cookie answered %d", got)
	}
}

func withCookie(t *testing.T, srv *httptest.Server, ck *http.Cookie) *http.Client {
	c := client(t)
	u, _ := url.Parse(srv.URL)
	c.Jar.SetCookies(u, []*http.Cookie{ck})
	return c
}

// TestIncrementReadBudget: a request reads at most MaxMetaReadBytes of
// increments for file names; the rest show their position and say why
// their names are missing, and a later request reads them (what was read
// is cached by digest).
func TestIncrementReadBudget(t *testing.T) {
	f := newFixture(t)
	list, err := f.svc.ListIncrements(context.Background(), hub.Operator(), "proj", f.work, "")
	if err != nil || len(list.Increments) != 2 {
		t.Fatalf("increments %+v %v", list, err)
	}
	page, err := hubpage.New(f.svc, hubpage.Options{MaxMetaReadBytes: list.Increments[0].Size})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(hubpage.Mount(hub.NewHandler(f.svc, nil), page))
	defer srv.Close()
	c := client(t)
	resp, err := c.PostForm(srv.URL+"/signin", url.Values{"token": {f.rw}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	_, first := get(t, c, srv.URL+"/works/"+f.work)
	if !strings.Contains(first, "1 large increments were not read on this request") || !strings.Contains(first, "file names not read on this request") ||
		!strings.Contains(first, "&lt;script&gt;alert(&#34;path&#34;)&lt;/script&gt;.txt") {
		t.Fatalf("first read:\n%s", first)
	}
	_, second := get(t, c, srv.URL+"/works/"+f.work)
	if strings.Contains(second, "not read on this request") || !strings.Contains(second, "2 calls, 1 failed; 1 created, 1 modified, 1 deleted") {
		t.Fatalf("second read:\n%s", second)
	}
}

// TestSettingsListLocalCheckouts: with Options.Local (hub serve on the
// person's own computer), Settings -> Conversation sharing shows each
// checkout's state and the "Sharing was set for" sentence of a checkout
// reconnected elsewhere, escaped, and gives Local the signed-in principal.
func TestSettingsListLocalCheckouts(t *testing.T) {
	f := newFixture(t)
	var asked hub.Principal
	page, err := hubpage.New(f.svc, hubpage.Options{Local: func(ctx context.Context, p hub.Principal) ([]hubpage.LocalCheckout, error) {
		asked = p
		return []hubpage.LocalCheckout{
			{Root: "/home/a/<b>repo", State: "Shared with Hub", Hub: "http://h", Repository: "proj", ConnectedHub: "http://h", ConnectedRepository: "proj"},
			{Root: "/home/a/other", State: "Metadata only", Hub: "http://old", Repository: "old", ConnectedHub: "http://h", ConnectedRepository: "proj", LineageMismatch: true},
		}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(hubpage.Mount(hub.NewHandler(f.svc, nil), page))
	defer srv.Close()
	c := client(t)
	resp, err := c.PostForm(srv.URL+"/signin", url.Values{"token": {f.rw}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	_, body := get(t, c, srv.URL+"/settings")
	for _, want := range []string{"/home/a/&lt;b&gt;repo", `disabled checked aria-label="Share agent conversations with Hub"`,
		"Sharing was set for old on http://old; this checkout is now connected to proj on http://h"} {
		if !strings.Contains(body, want) {
			t.Errorf("settings lack %q", want)
		}
	}
	if asked.HumanName != "alice" || asked.RepositoryName != "proj" {
		t.Fatalf("Local was asked for %+v", asked)
	}
}

func TestAssetsAndUnknownPages(t *testing.T) {
	f := newFixture(t)
	c := client(t)
	if resp, body := get(t, c, f.srv.URL+"/assets/style.css"); resp.StatusCode != 200 || !strings.Contains(body, "font-family") || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("style.css %d", resp.StatusCode)
	}
	for _, p := range []string{"/assets/", "/assets/nope.js", "/nope", "/works/../v1x"} {
		if resp, body := get(t, c, f.srv.URL+p); resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusTemporaryRedirect {
			t.Errorf("%s answered %d: %s", p, resp.StatusCode, body)
		}
	}
	// The token in a query string signs nobody in.
	if resp, _ := get(t, c, f.srv.URL+"/?token="+f.rw); resp.StatusCode != 200 {
		t.Fatalf("/?token= answered %d", resp.StatusCode)
	}
	if resp, _ := get(t, c, f.srv.URL+"/works"); resp.StatusCode != http.StatusSeeOther {
		t.Fatal("a token in the address signed in")
	}
}
