// Package hubpage is the Hub page: the server-rendered HTML pages that
// agentscm hub serve answers at / beside the /v1 JSON API. A person signs
// in with a Hub token (form POST; the page then keeps an HttpOnly,
// SameSite=Strict session cookie, Secure over TLS, and the token only in
// this process's memory) and reads the Works of the token's repository, a
// Work's timeline (internal/timeline) and Settings -> Conversation sharing.
// Shared conversation bodies are never on a Work page; they open only
// through their own view, which calls the Hub's access-checked GetBody.
//
// Every page is html/template output (agent-controlled names are escaped),
// readable without JavaScript, with embedded assets and no build step.
// State-changing requests are POSTs that must come from the page's own
// origin and carry the session's CSRF token. A read-only token sees a
// read-only page.
package hubpage

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentscm/agentscm/internal/hub"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/timeline"
)

//go:embed templates/*.html assets/*
var files embed.FS

// Defaults and bounds.
const (
	// DefaultSessionTTL is how long a sign-in lasts.
	DefaultSessionTTL = 8 * time.Hour
	// MaxSignedOut bounds the signed-out cookies one process remembers
	// until they expire; past it the list is emptied (a copied cookie is
	// then valid again until its expiry, never past it).
	MaxSignedOut = 100000
	// MaxListedWorks bounds the Works whose sessions and last activity
	// the Works page reads (each is a record read); the rest are listed
	// with their state only.
	MaxListedWorks = 100
	// CookieName is the session cookie.
	CookieName   = "agentscm_session"
	maxFormBytes = 8 << 10
)

// Options configure a page server.
type Options struct {
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// SessionTTL is how long a sign-in lasts (0: DefaultSessionTTL).
	SessionTTL time.Duration
	// Log receives errors that are not the caller's fault (nil: discarded).
	Log *log.Logger
	// SessionKey seals the session cookies (KeyBytes bytes, DeriveKey of a
	// key file). Instances that share it accept each other's sessions;
	// nil picks a random one, so a restart signs everybody out.
	SessionKey []byte
	// MaxMetaReadBytes bounds the increment bytes one request reads for
	// file names (0: MaxMetaReadBytes).
	MaxMetaReadBytes int64
	// Local, when set, lists the checkouts of the computer the Hub runs on
	// whose own connection is to this Hub as the signed-in human and
	// repository (hub serve reads its user's capture config): Settings ->
	// Conversation sharing then shows each one's setting.
	Local func(ctx context.Context, p hub.Principal) ([]LocalCheckout, error)
}

// LocalCheckout is one checkout's capture setting as capture_setting
// reads it, for the settings page.
type LocalCheckout struct {
	Root string
	// State is one of the five states (Not set up, Off, Metadata only,
	// Local only, Shared with Hub).
	State string
	// Hub and Repository are what the binding was saved for;
	// ConnectedHub and ConnectedRepository the checkout's connection now.
	Hub, Repository                   string
	ConnectedHub, ConnectedRepository string
	LineageMismatch                   bool
}

// Server serves the Hub page of one Service.
type Server struct {
	svc  *hub.Service
	opts Options
	tmpl map[string]*template.Template
	mux  *http.ServeMux

	seal *sealer

	mu        sync.Mutex
	signedOut map[string]time.Time // cookieID -> expiry, this process's sign-outs

	metas *metaCache
}

type session struct {
	// secret is the token the person signed in with: kept here only, so
	// each request re-authenticates it (a revoked token ends the session).
	secret  string
	csrf    string
	expires time.Time
}

// New returns the page server of svc.
func New(svc *hub.Service, opts Options) (*Server, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.SessionTTL <= 0 {
		opts.SessionTTL = DefaultSessionTTL
	}
	if opts.Log == nil {
		opts.Log = log.New(discard{}, "", 0)
	}
	if opts.MaxMetaReadBytes <= 0 {
		opts.MaxMetaReadBytes = MaxMetaReadBytes
	}
	if opts.SessionKey == nil {
		opts.SessionKey = randomKey()
	}
	seal, err := newSealer(opts.SessionKey)
	if err != nil {
		return nil, err
	}
	s := &Server{svc: svc, opts: opts, tmpl: map[string]*template.Template{}, seal: seal, signedOut: map[string]time.Time{}, mux: http.NewServeMux(), metas: newMetaCache(4096)}
	funcs := template.FuncMap{
		"time":  timeline.Time,
		"short": short,
		"pos": func(p *int) string {
			if p == nil {
				return "–"
			}
			return fmt.Sprint(*p)
		},
		"join": strings.Join,
		"plural": func(n int64, one, many string) string {
			return fmt.Sprintf("%d %s", n, map[bool]string{true: one, false: many}[n == 1])
		},
		"path":  url.PathEscape,
		"int64": func(n int) int64 { return int64(n) },
	}
	pages := []string{"signin", "works", "work", "settings", "body", "error"}
	for _, p := range pages {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(files, "templates/layout.html", "templates/"+p+".html")
		if err != nil {
			return nil, fmt.Errorf("hubpage: template %s: %w", p, err)
		}
		s.tmpl[p] = t
	}
	assets, err := fs.Sub(files, "assets")
	if err != nil {
		return nil, err
	}
	static := http.StripPrefix("/assets/", http.FileServerFS(assets))
	s.mux.HandleFunc("GET /assets/{name}", func(w http.ResponseWriter, r *http.Request) { static.ServeHTTP(w, r) })
	s.mux.HandleFunc("GET /{$}", s.home)
	s.mux.HandleFunc("POST /signin", s.signin)
	s.mux.HandleFunc("POST /signout", s.authed(s.signout))
	s.mux.HandleFunc("GET /works", s.authed(s.works))
	s.mux.HandleFunc("GET /works/{work}", s.authed(s.work))
	s.mux.HandleFunc("GET /works/{work}/agent-trace.json", s.authed(s.agentTrace))
	s.mux.HandleFunc("GET /settings", s.authed(s.settings))
	s.mux.HandleFunc("GET /works/{work}/bodies/{digest}", s.authed(s.body))
	s.mux.HandleFunc("POST /works/{work}/bodies/{digest}/delete", s.authed(s.deleteBody))
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, nil, http.StatusNotFound, "There is no page at this address.")
	})
	return s, nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// Mount returns the handler of hub serve: /v1/... goes to the JSON API
// exactly as before, everything else to the page.
func Mount(apiHandler http.Handler, page *Server) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1" || strings.HasPrefix(r.URL.Path, "/v1/") {
			apiHandler.ServeHTTP(w, r)
			return
		}
		page.ServeHTTP(w, r)
	})
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	if r.Method == http.MethodPost && !sameOrigin(r) {
		s.fail(w, r, nil, http.StatusForbidden, "This request did not come from this page (cross-origin POST refused).")
		return
	}
	s.mux.ServeHTTP(w, r)
}

// sameOrigin reports whether a POST came from this origin: the browser's
// Sec-Fetch-Site when it sends one, else its Origin header, which must
// name this host. A request with neither is refused: every browser the page
// supports sends one of them on a POST, so a request without both did not
// come from the page (the CSRF token is the second guard, not the only one).
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		return true
	case "":
	default:
		return false
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return false
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

func randomToken() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return hex.EncodeToString(b[:])
}

// view is what every page template gets.
type view struct {
	Title    string
	SignedIn bool
	Human    string
	Repo     string
	ReadOnly bool
	Admin    bool
	CSRF     string
	Hub      string
	Data     any
	Status   int
	Message  string
}

func (s *Server) render(w http.ResponseWriter, page string, status int, v view) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	var b strings.Builder
	if err := s.tmpl[page].ExecuteTemplate(&b, "layout.html", v); err != nil {
		s.opts.Log.Printf("hubpage: render %s: %v", page, err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(status)
	fmt.Fprint(w, b.String())
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, c *caller, status int, msg string) {
	v := view{Title: http.StatusText(status), Status: status, Message: msg, Hub: r.Host}
	if c != nil {
		c.fill(&v)
	}
	s.render(w, "error", status, v)
}

// failErr renders an error of the Hub service with its status.
func (s *Server) failErr(w http.ResponseWriter, r *http.Request, c *caller, err error) {
	if e, ok := api.AsError(err); ok {
		s.fail(w, r, c, e.Status, e.Message)
		return
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		s.fail(w, r, c, http.StatusServiceUnavailable, "The request was cancelled.")
		return
	}
	s.opts.Log.Printf("hubpage: %s %s: %v", r.Method, r.URL.Path, err)
	s.fail(w, r, c, http.StatusInternalServerError, "Internal error.")
}

// caller is a signed-in request's principal and session.
type caller struct {
	p    hub.Principal
	sess *session
	id   string
}

func (c *caller) fill(v *view) {
	v.SignedIn, v.Human, v.Repo, v.Admin, v.CSRF = true, c.p.HumanName, c.p.RepositoryName, c.p.Admin, c.sess.csrf
	v.ReadOnly = c.p.Scope != api.ScopeReadWrite
}

func (c *caller) view(r *http.Request, title string, data any) view {
	v := view{Title: title, Data: data, Hub: r.Host}
	c.fill(&v)
	return v
}

// lookup returns the live session of the request's cookie and the
// cookie's id.
func (s *Server) lookup(r *http.Request) (string, *session) {
	ck, err := r.Cookie(CookieName)
	if err != nil {
		return "", nil
	}
	sess, err := s.seal.open(ck.Value)
	if err != nil || !s.opts.Now().Before(sess.expires) {
		return "", nil
	}
	id := cookieID(ck.Value)
	s.mu.Lock()
	_, out := s.signedOut[id]
	s.mu.Unlock()
	if out {
		return "", nil
	}
	return id, sess
}

// authed wraps a page that needs a signed-in session; POSTs also need the
// session's CSRF token.
func (s *Server) authed(fn func(w http.ResponseWriter, r *http.Request, c *caller)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, sess := s.lookup(r)
		if sess == nil {
			if r.Method == http.MethodGet {
				http.Redirect(w, r, "/?expired=1", http.StatusSeeOther)
				return
			}
			s.fail(w, r, nil, http.StatusUnauthorized, "Your session ended; sign in again.")
			return
		}
		p, err := s.svc.Authenticate(r.Context(), sess.secret)
		if err != nil {
			s.drop(id, sess.expires)
			s.fail(w, r, nil, http.StatusUnauthorized, "The token of this session is no longer valid; sign in again.")
			return
		}
		c := &caller{p: p, sess: sess, id: id}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
			if err := r.ParseForm(); err != nil {
				s.fail(w, r, c, http.StatusBadRequest, "The form could not be read.")
				return
			}
			if got := r.PostForm.Get("csrf"); subtle.ConstantTimeCompare([]byte(got), []byte(sess.csrf)) != 1 {
				s.fail(w, r, c, http.StatusForbidden, "This form is not from your current session (CSRF token missing or wrong); reload the page and try again.")
				return
			}
		}
		fn(w, r, c)
	}
}

// drop remembers a signed-out cookie until its expiry.
func (s *Server) drop(id string, expires time.Time) {
	now := s.opts.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, exp := range s.signedOut {
		if !now.Before(exp) {
			delete(s.signedOut, k)
		}
	}
	if len(s.signedOut) >= MaxSignedOut {
		clear(s.signedOut)
	}
	s.signedOut[id] = expires
}

func (s *Server) home(w http.ResponseWriter, r *http.Request) {
	if _, sess := s.lookup(r); sess != nil {
		http.Redirect(w, r, "/works", http.StatusSeeOther)
		return
	}
	msg := ""
	if r.URL.Query().Get("expired") != "" {
		msg = "Sign in to continue (your session ended or you were not signed in)."
	}
	s.render(w, "signin", http.StatusOK, view{Title: "Sign in", Hub: r.Host, Message: msg})
}

func (s *Server) signin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		s.fail(w, r, nil, http.StatusBadRequest, "The form could not be read.")
		return
	}
	secret := strings.TrimSpace(r.PostForm.Get("token"))
	if _, err := s.svc.Authenticate(r.Context(), secret); err != nil {
		s.render(w, "signin", http.StatusUnauthorized, view{Title: "Sign in", Hub: r.Host, Message: "That token is not valid on this Hub."})
		return
	}
	sess := &session{secret: secret, csrf: randomToken(), expires: s.opts.Now().Add(s.opts.SessionTTL)}
	value := s.seal.seal(sess)
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: value, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil, MaxAge: int(s.opts.SessionTTL / time.Second)})
	http.Redirect(w, r, "/works", http.StatusSeeOther)
}

func (s *Server) signout(w http.ResponseWriter, r *http.Request, c *caller) {
	s.drop(c.id, c.sess.expires)
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: -1})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// workRow is one line of the Works page.
type workRow struct {
	api.Work
	Sessions int
	// Agents are the agents the Hub stored for the Work's sessions, in
	// session order, each once.
	Agents       []string
	LastActivity int64
	Coverage     string
	Read         bool
}

func (s *Server) works(w http.ResponseWriter, r *http.Request, c *caller) {
	list, err := s.svc.ListWorks(r.Context(), c.p, c.p.RepositoryName)
	if err != nil {
		s.failErr(w, r, c, err)
		return
	}
	rows := make([]workRow, 0, len(list.Works))
	for i, wk := range list.Works {
		row := workRow{Work: wk, LastActivity: wk.UpdatedAt}
		if i < MaxListedWorks {
			rec, err := s.svc.Record(r.Context(), c.p, c.p.RepositoryName, wk.ID)
			if err != nil {
				s.failErr(w, r, c, err)
				return
			}
			row.Read, row.Coverage = true, rec.Coverage.State
			for _, se := range rec.Sessions {
				// The alias session a Work starts with counts once a
				// native session joined it.
				if se.Events > 0 || len(se.NativeSessionIDs) > 0 {
					row.Sessions++
				}
				if se.Agent != "" && !slices.Contains(row.Agents, se.Agent) {
					row.Agents = append(row.Agents, se.Agent)
				}
			}
			for _, e := range rec.Events {
				row.LastActivity = max(row.LastActivity, e.ReceivedAt)
			}
			for _, g := range rec.Gaps {
				row.LastActivity = max(row.LastActivity, g.ReceivedAt)
			}
		}
		rows = append(rows, row)
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].LastActivity > rows[j].LastActivity })
	s.render(w, "works", http.StatusOK, c.view(r, "Works", map[string]any{"Works": rows, "Omitted": list.Omitted, "Unread": max(0, len(rows)-MaxListedWorks)}))
}

func (s *Server) work(w http.ResponseWriter, r *http.Request, c *caller) {
	id := r.PathValue("work")
	rec, err := s.svc.Record(r.Context(), c.p, c.p.RepositoryName, id)
	if err != nil {
		s.failErr(w, r, c, err)
		return
	}
	incs, src := s.hubIncrements(r.Context(), c.p, id)
	tl := timeline.Build(rec, incs, src)
	s.render(w, "work", http.StatusOK, c.view(r, "Work "+tl.Work.Title, tl))
}

// settingsWork is one Work's shared bodies on the settings page.
type settingsWork struct {
	api.Work
	Bodies  []api.BodyEntry
	Omitted int
}

func (s *Server) settings(w http.ResponseWriter, r *http.Request, c *caller) {
	list, err := s.svc.ListWorks(r.Context(), c.p, c.p.RepositoryName)
	if err != nil {
		s.failErr(w, r, c, err)
		return
	}
	var shared []settingsWork
	for i, wk := range list.Works {
		if i >= MaxListedWorks {
			break
		}
		bl, err := s.svc.ListBodies(r.Context(), c.p, c.p.RepositoryName, wk.ID)
		if err != nil {
			s.failErr(w, r, c, err)
			return
		}
		if len(bl.Bodies) > 0 {
			shared = append(shared, settingsWork{Work: wk, Bodies: bl.Bodies, Omitted: bl.Omitted})
		}
	}
	data := map[string]any{"RetentionDays": s.svc.RetentionDays(), "Shared": shared, "States": captureStates}
	if s.opts.Local != nil {
		local, err := s.opts.Local(r.Context(), c.p)
		if err != nil {
			s.opts.Log.Printf("hubpage: this computer's checkouts: %v", err)
			data["LocalError"] = "This computer's capture settings could not be read."
		}
		data["Local"], data["HasLocal"] = local, true
	}
	s.render(w, "settings", http.StatusOK, c.view(r, "Settings", data))
}

// captureStates are the five states a checkout's capture setting shows, as
// seed 000 names them, with what each means.
var captureStates = []struct{ Name, Meaning string }{
	{"Not set up", "no capture binding: nothing is captured in this checkout"},
	{"Off", "a disabled binding: capture is off; its spool and its repository and Hub are kept"},
	{"Metadata only", "typed facts only (which tool ran, when, how it ended); no prompt, tool input, output or error text is stored anywhere"},
	{"Local only", "conversation bodies are kept in the private spool on that computer only; nothing of them leaves it"},
	{"Shared with Hub", "conversation bodies are redacted and uploaded to this Hub after it accepted each event; readable only by you and Hub admins"},
}

func (s *Server) body(w http.ResponseWriter, r *http.Request, c *caller) {
	work, digest := r.PathValue("work"), r.PathValue("digest")
	entry, b, err := s.svc.GetBody(r.Context(), c.p, c.p.RepositoryName, work, digest)
	if err != nil {
		s.failErr(w, r, c, err)
		return
	}
	s.render(w, "body", http.StatusOK, c.view(r, "Shared conversation body", map[string]any{
		"Work": work, "Entry": entry, "Text": string(b), "RetentionDays": s.svc.RetentionDays(),
	}))
}

func (s *Server) deleteBody(w http.ResponseWriter, r *http.Request, c *caller) {
	work, digest := r.PathValue("work"), r.PathValue("digest")
	if _, err := s.svc.DeleteBody(r.Context(), c.p, c.p.RepositoryName, work, digest); err != nil {
		s.failErr(w, r, c, err)
		return
	}
	http.Redirect(w, r, "/settings", http.StatusSeeOther)
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}
