package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentscm/agentscm/internal/hub/api"
)

// Handler serves the /v1/ HTTP routes of a Service.
type Handler struct {
	svc *Service
	mux *http.ServeMux
	log *log.Logger
}

// Route describes one HTTP route for documentation and the authorization
// matrix: Write routes need a read-write token, Admin routes a Hub admin.
type Route struct {
	Method  string
	Pattern string
	Write   bool
	Admin   bool
}

// Routes lists every authenticated route.
func Routes() []Route {
	return []Route{
		{"GET", "/v1/hub/whoami", false, false},
		{"POST", "/v1/repositories/{repo}/resolve", true, false},
		{"POST", "/v1/repositories/{repo}/envelopes", true, false},
		{"GET", "/v1/repositories/{repo}/works", false, false},
		{"POST", "/v1/repositories/{repo}/works", true, false},
		{"GET", "/v1/repositories/{repo}/works/{work}", false, false},
		{"POST", "/v1/repositories/{repo}/works/{work}/checkpoints", true, false},
		{"GET", "/v1/repositories/{repo}/works/{work}/record", false, false},
		{"GET", "/v1/repositories/{repo}/worktrees/{worktree}", false, false},
		{"PUT", "/v1/repositories/{repo}/worktrees/{worktree}/changelog/{position}", true, false},
		{"GET", "/v1/repositories/{repo}/works/{work}/changelog", false, false},
		{"GET", "/v1/repositories/{repo}/works/{work}/changelog/{position}", false, false},
		{"POST", "/v1/repositories/{repo}/works/{work}/grant", true, false},
		{"GET", "/v1/repositories/{repo}/works/{work}/bodies", false, false},
		{"POST", "/v1/repositories/{repo}/works/{work}/bodies", true, false},
		{"PUT", "/v1/repositories/{repo}/works/{work}/bodies/{digest}", true, false},
		{"GET", "/v1/repositories/{repo}/works/{work}/bodies/{digest}", false, false},
		{"DELETE", "/v1/repositories/{repo}/works/{work}/bodies/{digest}", true, false},
		{"GET", "/v1/admin/humans", false, true},
		{"POST", "/v1/admin/humans", true, true},
		{"GET", "/v1/admin/repositories", false, true},
		{"POST", "/v1/admin/repositories", true, true},
		{"GET", "/v1/admin/tokens", false, true},
		{"POST", "/v1/admin/tokens", true, true},
	}
}

type handlerFunc func(r *http.Request, p Principal) (any, error)

// NewHandler returns the HTTP handler of svc; errors that are not the
// caller's fault are logged to logger (nil: discarded).
func NewHandler(svc *Service, logger *log.Logger) *Handler {
	if logger == nil {
		logger = log.New(io.Discard, "", 0)
	}
	h := &Handler{svc: svc, mux: http.NewServeMux(), log: logger}
	fns := map[string]handlerFunc{
		"GET /v1/hub/whoami": func(r *http.Request, p Principal) (any, error) { return svc.Whoami(r.Context(), p) },
		"POST /v1/repositories/{repo}/resolve": func(r *http.Request, p Principal) (any, error) {
			var req api.ResolveRequest
			if err := api.DecodeStrict(r.Body, api.MaxRequestBytes, &req); err != nil {
				return nil, err
			}
			return svc.Resolve(r.Context(), p, r.PathValue("repo"), req)
		},
		"POST /v1/repositories/{repo}/envelopes": func(r *http.Request, p Principal) (any, error) {
			var env api.Envelope
			if err := api.DecodeStrict(r.Body, api.MaxEnvelopeBytes, &env); err != nil {
				return nil, err
			}
			return svc.Ingest(r.Context(), p, r.PathValue("repo"), &env)
		},
		"GET /v1/repositories/{repo}/works": func(r *http.Request, p Principal) (any, error) {
			return svc.ListWorks(r.Context(), p, r.PathValue("repo"))
		},
		"POST /v1/repositories/{repo}/works": func(r *http.Request, p Principal) (any, error) {
			var req api.StartWorkRequest
			if err := api.DecodeStrict(r.Body, api.MaxRequestBytes, &req); err != nil {
				return nil, err
			}
			return svc.StartWork(r.Context(), p, r.PathValue("repo"), req)
		},
		"GET /v1/repositories/{repo}/works/{work}": func(r *http.Request, p Principal) (any, error) {
			return svc.GetWork(r.Context(), p, r.PathValue("repo"), r.PathValue("work"))
		},
		"POST /v1/repositories/{repo}/works/{work}/checkpoints": func(r *http.Request, p Principal) (any, error) {
			var req api.CheckpointRequest
			if err := api.DecodeStrict(r.Body, api.MaxRequestBytes, &req); err != nil {
				return nil, err
			}
			return svc.Checkpoint(r.Context(), p, r.PathValue("repo"), r.PathValue("work"), req)
		},
		"GET /v1/repositories/{repo}/works/{work}/record": func(r *http.Request, p Principal) (any, error) {
			return svc.Record(r.Context(), p, r.PathValue("repo"), r.PathValue("work"))
		},
		"GET /v1/repositories/{repo}/worktrees/{worktree}": func(r *http.Request, p Principal) (any, error) {
			return svc.CurrentWork(r.Context(), p, r.PathValue("repo"), r.PathValue("worktree"))
		},
		"PUT /v1/repositories/{repo}/worktrees/{worktree}/changelog/{position}": func(r *http.Request, p Principal) (any, error) {
			pos, err := api.ParsePosition(r.PathValue("position"))
			if err != nil {
				return nil, err
			}
			q := r.URL.Query()
			up := api.IncrementUpload{Position: pos, Digest: q.Get("digest"), Session: q.Get("session"), Size: r.ContentLength}
			if m := q.Get("merged"); m != "" {
				n, err := strconv.Atoi(m)
				if err != nil || strconv.Itoa(n) != m || n < 0 {
					return nil, api.Errorf(http.StatusBadRequest, api.CodeBadRequest, "merged %q must be a count of positions", m)
				}
				up.Merged = n
			}
			return svc.UploadIncrement(r.Context(), p, r.PathValue("repo"), r.PathValue("worktree"), up, r.Body)
		},
		"GET /v1/repositories/{repo}/works/{work}/changelog": func(r *http.Request, p Principal) (any, error) {
			return svc.ListIncrements(r.Context(), p, r.PathValue("repo"), r.PathValue("work"), r.URL.Query().Get("worktree"))
		},
		"GET /v1/repositories/{repo}/works/{work}/changelog/{position}": func(r *http.Request, p Principal) (any, error) {
			pos, err := api.ParsePosition(r.PathValue("position"))
			if err != nil {
				return nil, err
			}
			info, b, err := svc.GetIncrement(r.Context(), p, r.PathValue("repo"), r.PathValue("work"), r.URL.Query().Get("worktree"), pos)
			if err != nil {
				return nil, err
			}
			return rawBody{contentType: api.IncrementContentType, digest: info.Digest, b: b}, nil
		},
		"POST /v1/repositories/{repo}/works/{work}/grant": func(r *http.Request, p Principal) (any, error) {
			var req api.GrantRequest
			if err := api.DecodeStrict(r.Body, api.MaxRequestBytes, &req); err != nil {
				return nil, err
			}
			return svc.SetGrant(r.Context(), p, r.PathValue("repo"), r.PathValue("work"), req)
		},
		"GET /v1/repositories/{repo}/works/{work}/bodies": func(r *http.Request, p Principal) (any, error) {
			return svc.ListBodies(r.Context(), p, r.PathValue("repo"), r.PathValue("work"))
		},
		"POST /v1/repositories/{repo}/works/{work}/bodies": func(r *http.Request, p Principal) (any, error) {
			var req api.MissingBodiesRequest
			if err := api.DecodeStrict(r.Body, api.MaxRequestBytes, &req); err != nil {
				return nil, err
			}
			return svc.MissingBodies(r.Context(), p, r.PathValue("repo"), r.PathValue("work"), req)
		},
		"PUT /v1/repositories/{repo}/works/{work}/bodies/{digest}": func(r *http.Request, p Principal) (any, error) {
			return svc.UploadBody(r.Context(), p, r.PathValue("repo"), r.PathValue("work"), r.PathValue("digest"), r.ContentLength, r.Body)
		},
		"GET /v1/repositories/{repo}/works/{work}/bodies/{digest}": func(r *http.Request, p Principal) (any, error) {
			_, b, err := svc.GetBody(r.Context(), p, r.PathValue("repo"), r.PathValue("work"), r.PathValue("digest"))
			if err != nil {
				return nil, err
			}
			return rawBody{contentType: api.BodyContentType, digest: r.PathValue("digest"), b: b, untrusted: true}, nil
		},
		"DELETE /v1/repositories/{repo}/works/{work}/bodies/{digest}": func(r *http.Request, p Principal) (any, error) {
			return svc.DeleteBody(r.Context(), p, r.PathValue("repo"), r.PathValue("work"), r.PathValue("digest"))
		},
		"GET /v1/admin/humans":       adminList(svc, "humans"),
		"GET /v1/admin/repositories": adminList(svc, "repositories"),
		"GET /v1/admin/tokens":       adminList(svc, "tokens"),
		"POST /v1/admin/humans": func(r *http.Request, p Principal) (any, error) {
			if err := requireAdmin(p, true); err != nil {
				return nil, err
			}
			var req api.CreateHumanRequest
			if err := api.DecodeStrict(r.Body, api.MaxRequestBytes, &req); err != nil {
				return nil, err
			}
			return svc.CreateHuman(r.Context(), p, req)
		},
		"POST /v1/admin/repositories": func(r *http.Request, p Principal) (any, error) {
			if err := requireAdmin(p, true); err != nil {
				return nil, err
			}
			var req api.CreateRepositoryRequest
			if err := api.DecodeStrict(r.Body, api.MaxRequestBytes, &req); err != nil {
				return nil, err
			}
			return svc.CreateRepository(r.Context(), p, req)
		},
		"POST /v1/admin/tokens": func(r *http.Request, p Principal) (any, error) {
			if err := requireAdmin(p, true); err != nil {
				return nil, err
			}
			var req api.CreateTokenRequest
			if err := api.DecodeStrict(r.Body, api.MaxRequestBytes, &req); err != nil {
				return nil, err
			}
			return svc.CreateToken(r.Context(), p, req)
		},
	}
	paths := map[string]bool{}
	for _, rt := range Routes() {
		key := rt.Method + " " + rt.Pattern
		fn, ok := fns[key]
		if !ok {
			panic("hub: route without handler: " + key)
		}
		limit := int64(api.MaxEnvelopeBytes)
		if rt.Method == "PUT" {
			limit = api.MaxIncrementBytes // increment uploads; each checks its own Content-Length
		}
		h.mux.Handle(key, h.wrap(fn, limit))
		paths[rt.Pattern] = true
	}
	for p := range paths {
		// The same path with another method: a JSON 405, not the mux's text.
		h.mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			writeError(w, api.Errorf(http.StatusMethodNotAllowed, api.CodeMethod, "method %s is not allowed here", r.Method))
		})
	}
	h.mux.HandleFunc("GET /v1/hub/health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	})
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, api.Errorf(http.StatusNotFound, api.CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
	})
	return h
}

func adminList(svc *Service, what string) handlerFunc {
	return func(r *http.Request, p Principal) (any, error) { return svc.AdminList(r.Context(), p, what) }
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// rawBody is a handler result written as it is rather than as JSON: an
// increment's bytes.
type rawBody struct {
	contentType string
	digest      string
	b           []byte
	// untrusted marks agent output (a conversation body).
	untrusted bool
}

func (h *Handler) wrap(fn handlerFunc, limit int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A shallow copy carries the bounded body: the server's own request
		// keeps its Expect: 100-continue reader, so a refusal written before
		// the body is read closes the connection instead of receiving it.
		r = r.WithContext(r.Context())
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		secret, ok := bearer(r.Header.Get("Authorization"))
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="agentscm"`)
			writeError(w, errUnauthenticated)
			return
		}
		p, err := h.svc.Authenticate(r.Context(), secret)
		if err != nil {
			if e, ok := api.AsError(err); ok && e.Status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="agentscm", error="invalid_token"`)
			}
			h.fail(w, r, err)
			return
		}
		out, err := fn(r, p)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		if raw, ok := out.(rawBody); ok {
			w.Header().Set("Content-Type", raw.contentType)
			w.Header().Set("Content-Length", fmt.Sprint(len(raw.b)))
			if raw.digest != "" {
				w.Header().Set(api.IncrementDigestHeader, raw.digest)
			}
			if raw.untrusted {
				w.Header().Set(api.UntrustedHeader, "agent-output")
				w.Header().Set("X-Content-Type-Options", "nosniff")
			}
			w.WriteHeader(http.StatusOK)
			w.Write(raw.b)
			return
		}
		writeJSON(w, http.StatusOK, out)
	})
}

func bearer(h string) (string, bool) {
	const prefix = "Bearer "
	if len(h) <= len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", false
	}
	return strings.TrimSpace(h[len(prefix):]), true
}

func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	if e, ok := api.AsError(err); ok {
		writeError(w, e)
		return
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		writeError(w, api.Errorf(http.StatusServiceUnavailable, api.CodeUnavailable, "request cancelled"))
		return
	}
	h.log.Printf("%s %s: %v", r.Method, r.URL.Path, err)
	writeError(w, api.Errorf(http.StatusInternalServerError, api.CodeInternal, "internal error"))
}

func writeError(w http.ResponseWriter, e *api.Error) {
	writeJSON(w, e.Status, api.ErrorBody{Error: e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"encode response"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(b)+1))
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// ShutdownTimeout bounds how long Serve waits for in-flight requests after
// its context ends.
const ShutdownTimeout = 30 * time.Second

// Serve serves h on ln until ctx ends, then stops accepting and waits for
// in-flight requests to finish (at most ShutdownTimeout).
func Serve(ctx context.Context, ln net.Listener, h http.Handler, logger *log.Logger) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          logger,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shut down: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
