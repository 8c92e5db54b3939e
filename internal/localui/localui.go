// Package localui is the local page of agentscm ui: a loopback-only HTTP
// server for the person at this computer that lists each checkout's capture
// setting (GET /v1/local/capture and an HTML page at /) and switches
// conversation sharing on only through a confirmation panel bound to what it
// displayed.
//
// Safety: the server answers only requests whose Host header is exactly the
// loopback address:port it bound (DNS rebinding); the URL it prints carries a
// one-time secret that the first visit exchanges for an HttpOnly,
// SameSite=Strict session cookie before redirecting to a URL without it;
// sessions expire; every state-changing request carries the session's
// same-origin token and is refused when Origin or Sec-Fetch-Site name
// another site. Pages are html/template (everything agent- or
// repository-controlled is escaped) with embedded assets.
//
// Turning sharing on calls binding.EnableCapture and turning it off
// binding.SetCaptureMode: the library functions of change-capture enable and
// set-mode, never a second implementation.
package localui

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/capture"
)

// Defaults of the server's bounds.
const (
	// PanelLifetime is how long a confirmation panel stays valid.
	PanelLifetime = 2 * time.Minute
	// DefaultSessionIdle ends a session not used for this long.
	DefaultSessionIdle = time.Hour
	// DefaultSessionMax ends a session this long after sign-in.
	DefaultSessionMax = 12 * time.Hour
	// RetentionReuse is how long a Hub's retention answer is reused.
	RetentionReuse = time.Minute
	// RetentionTimeout bounds one retention lookup (a slow Hub is unknown).
	RetentionTimeout = 3 * time.Second
	// maxForm bounds a state-changing request's body.
	maxForm = 64 << 10
	// maxPanels bounds the open confirmation panels of a session.
	maxPanels = 256
)

// Config is what the server reads and calls.
type Config struct {
	// Store and Conns are the capture config and the client connections,
	// as change-capture enable and set-mode use them.
	Store capture.StateDir
	Conns binding.Connections
	// Connected lists the canonical roots of the checkouts that have a
	// client connection (a connected checkout without a binding is Not set
	// up).
	Connected func() ([]string, error)
	// Retention asks the Hub of root's connection, with the checkout's own
	// agent token, how many days it keeps a shared conversation body (0:
	// not reported).
	Retention func(ctx context.Context, root string) (int, error)
	// Agent names the agent whose hooks a new binding installs (empty:
	// Claude Code); nil asks for the default.
	Agent func(root string) string
	// Resume, when set, is called (in its own goroutine, so the page never
	// waits for it) for each enabled checkout the page lists: it starts a
	// deliverer when deliverable work waits in the checkout's spool and
	// none runs (capture.ResumeDelivery), as a hook would.
	Resume func(root string)
	// Executable is the agentscm binary the installed hooks call.
	Executable string
	// Now is the server's clock (tests inject one).
	Now func() time.Time
	// SessionIdle and SessionMax override the session expiry.
	SessionIdle, SessionMax time.Duration
}

// Server is one agentscm ui server bound to one loopback address.
type Server struct {
	cfg    Config
	addr   string // the host:port the Host header must be
	cookie string

	mu         sync.Mutex
	secret     string
	secretUsed bool
	sess       *session
	retention  map[string]retained
}

type session struct {
	id, csrf      string
	created, last time.Time
	panels        map[string]*panel // by panel id
	flashes       []flash
}

type flash struct {
	Error bool
	Text  string
}

type retained struct {
	days int
	at   time.Time
}

// CheckAddr validates a listen address: a loopback IP address (127.0.0.1,
// ::1, ...) and a port; port 0 picks a free one.
func CheckAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--addr %q: %w", addr, err)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.IsLoopback() || ip.Zone() != "" {
		return fmt.Errorf("--addr %q: the host must be a loopback IP address such as 127.0.0.1 or ::1 (the page is for this computer only)", addr)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("--addr %q: bad port: %w", addr, err)
	}
	return nil
}

// Listen binds addr (checked with CheckAddr).
func Listen(addr string) (net.Listener, error) {
	if err := CheckAddr(addr); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	return ln, nil
}

// New returns a server for the bound address addr (the listener's
// Addr().String(), e.g. 127.0.0.1:41234 or [::1]:41234) with a fresh
// one-time sign-in secret.
func New(cfg Config, addr string) (*Server, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().IsLoopback() || ap.Port() == 0 {
		return nil, fmt.Errorf("localui: %q is not a bound loopback address", addr)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.SessionIdle <= 0 {
		cfg.SessionIdle = DefaultSessionIdle
	}
	if cfg.SessionMax <= 0 {
		cfg.SessionMax = DefaultSessionMax
	}
	if cfg.Connected == nil || cfg.Conns == nil {
		return nil, errors.New("localui: Config needs Conns and Connected")
	}
	return &Server{
		cfg:       cfg,
		addr:      ap.String(),
		cookie:    fmt.Sprintf("agentscm_ui_%d", ap.Port()), // cookies ignore ports: one name per server
		secret:    randomHex(32),
		retention: map[string]retained{},
	}, nil
}

// URL is the sign-in URL with the one-time secret.
func (s *Server) URL() string { return "http://" + s.addr + "/signin?secret=" + s.secret }

// Addr is the bound address the Host header must name.
func (s *Server) Addr() string { return s.addr }

// Serve serves on ln until ctx ends, then shuts down (in-flight requests
// get at most 5 s).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 60 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Handler is the server's routes behind the Host check.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /signin", s.signin)
	mux.HandleFunc("GET /{$}", s.authed(s.page))
	mux.HandleFunc("GET /v1/local/capture", s.authed(s.listJSON))
	mux.HandleFunc("POST /v1/local/capture/share", s.posted(s.share))
	mux.HandleFunc("POST /v1/local/capture/confirm", s.posted(s.confirm))
	mux.HandleFunc("POST /v1/local/capture/cancel", s.posted(s.cancel))
	mux.HandleFunc("POST /v1/local/capture/off", s.posted(s.off))
	mux.HandleFunc("GET /assets/{name}", s.asset)
	return s.guard(mux)
}

// guard refuses any Host but the bound address (a DNS-rebound name reaches
// this socket with its own Host) and sets the headers of every answer.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		// same-origin, not no-referrer: under no-referrer Chromium sends
		// "Origin: null" on its own form posts, which the Origin check refuses.
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		if r.Host != s.addr {
			http.Error(w, fmt.Sprintf("refused: this server answers only for Host %s", s.addr), http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// signin exchanges the one-time secret for the session cookie.
func (s *Server) signin(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		// A HEAD (a link preview, a prefetch) never consumes the secret.
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "sign in with GET", http.StatusMethodNotAllowed)
		return
	}
	now := s.cfg.Now()
	if s.session(r, now) != nil {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	got := r.URL.Query().Get("secret")
	s.mu.Lock()
	if s.secretUsed {
		s.mu.Unlock()
		s.refuse(w, http.StatusForbidden, "This sign-in link was already used: it works once. Stop agentscm ui (Ctrl-C) and start it again for a new link.")
		return
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(s.secret)) != 1 {
		s.mu.Unlock()
		s.refuse(w, http.StatusForbidden, "Wrong sign-in secret: open the exact link agentscm ui printed.")
		return
	}
	s.secretUsed = true
	s.sess = &session{id: randomHex(32), csrf: randomHex(32), created: now, last: now, panels: map[string]*panel{}}
	id := s.sess.id
	s.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: s.cookie, Value: id, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		MaxAge: int(s.cfg.SessionMax / time.Second)})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// session returns the request's live session (touching it), or nil.
func (s *Server) session(r *http.Request, now time.Time) *session {
	c, err := r.Cookie(s.cookie)
	if err != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.sess
	if ss == nil || subtle.ConstantTimeCompare([]byte(c.Value), []byte(ss.id)) != 1 {
		return nil
	}
	if now.Sub(ss.last) >= s.cfg.SessionIdle || now.Sub(ss.created) >= s.cfg.SessionMax {
		s.sess = nil // expired for good: the secret was used
		return nil
	}
	ss.last = now
	return ss
}

type handler func(w http.ResponseWriter, r *http.Request, ss *session)

// authed runs h for a signed-in request.
func (s *Server) authed(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ss := s.session(r, s.cfg.Now())
		if ss == nil {
			s.refuse(w, http.StatusUnauthorized, "Not signed in, or the session expired. Open the link agentscm ui printed (it works once); for a new link stop agentscm ui (Ctrl-C) and start it again.")
			return
		}
		h(w, r, ss)
	}
}

// posted runs h for a signed-in, same-origin form post carrying the
// session's token.
func (s *Server) posted(h handler) http.HandlerFunc {
	return s.authed(func(w http.ResponseWriter, r *http.Request, ss *session) {
		if o := r.Header.Get("Origin"); o != "" && o != "http://"+s.addr {
			s.refuse(w, http.StatusForbidden, "Refused: the request came from another origin.")
			return
		}
		if f := r.Header.Get("Sec-Fetch-Site"); f != "" && f != "same-origin" {
			s.refuse(w, http.StatusForbidden, "Refused: the request came from another site ("+f+").")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if err := r.ParseForm(); err != nil {
			s.refuse(w, http.StatusBadRequest, "Refused: unreadable form.")
			return
		}
		s.mu.Lock()
		want := ss.csrf
		s.mu.Unlock()
		if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(want)) != 1 {
			s.refuse(w, http.StatusForbidden, "Refused: the form's token is missing or stale. Reload the page and try again.")
			return
		}
		h(w, r, ss)
	})
}

// addFlash queues a message for the next page of the session.
func (s *Server) addFlash(ss *session, isErr bool, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(ss.flashes) < 32 {
		ss.flashes = append(ss.flashes, flash{Error: isErr, Text: text})
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}
