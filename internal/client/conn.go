package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/hub"
	"github.com/agentscm/agentscm/internal/hub/api"
)

// Conn is a connection to a Hub for one repository. Errors the Hub returned
// are *api.Error (branch on Status, Code and Reason); any other error is a
// transport or local failure and may be retried.
type Conn interface {
	Whoami(ctx context.Context) (api.Whoami, error)
	// Resolve returns the exact current target of a native session, or a
	// target refusal (api.IsRefusal).
	Resolve(ctx context.Context, req api.ResolveRequest) (api.Target, error)
	// Deliver sends one envelope. Only a nil error acknowledges it:
	// accepted or duplicate.
	Deliver(ctx context.Context, env *api.Envelope) (api.IngestResult, error)
	StartWork(ctx context.Context, req api.StartWorkRequest) (api.Work, error)
	ListWorks(ctx context.Context) (api.WorkList, error)
	GetWork(ctx context.Context, id string) (api.Work, error)
	Checkpoint(ctx context.Context, id string, req api.CheckpointRequest) (api.Work, error)
	Record(ctx context.Context, id string) (api.ChangeRecord, error)
	// CurrentWork returns the worktree's current Work.
	CurrentWork(ctx context.Context, worktreeID string) (api.CurrentWork, error)
	Close() error
}

// Options tune Open.
type Options struct {
	// HTTPClient overrides the HTTP client of a Hub connection.
	HTTPClient *http.Client
}

// Open opens a connection: the embedded Hub in-process, or HTTP.
func Open(ctx context.Context, c Connection, opts Options) (Conn, error) {
	switch c.Kind {
	case KindLocal:
		return OpenLocal(ctx, c)
	case KindHub:
		return NewHTTP(c.Hub, c.Repository, c.Token, opts.HTTPClient)
	}
	return nil, fmt.Errorf("connection for %s has unknown kind %q", c.Root, c.Kind)
}

// Local is the embedded connection: the Hub service in this process on the
// SQLite store under the user's config directory.
type Local struct {
	svc  *hub.Service
	p    hub.Principal
	repo string
}

// OpenLocal opens the embedded Hub of an embedded connection.
func OpenLocal(ctx context.Context, c Connection) (*Local, error) {
	svc, err := hub.Open(ctx, c.Data, hub.Config{})
	if err != nil {
		return nil, err
	}
	p, err := svc.LocalPrincipal(ctx, c.Human, c.Repository)
	if err != nil {
		svc.Close()
		return nil, err
	}
	return &Local{svc: svc, p: p, repo: c.Repository}, nil
}

// NewLocal wraps a service as an in-process connection acting as p on
// repository.
func NewLocal(svc *hub.Service, p hub.Principal, repository string) *Local {
	return &Local{svc: svc, p: p, repo: repository}
}

func (l *Local) Whoami(ctx context.Context) (api.Whoami, error) { return l.svc.Whoami(ctx, l.p) }
func (l *Local) Resolve(ctx context.Context, req api.ResolveRequest) (api.Target, error) {
	return l.svc.Resolve(ctx, l.p, l.repo, req)
}
func (l *Local) Deliver(ctx context.Context, env *api.Envelope) (api.IngestResult, error) {
	return l.svc.Ingest(ctx, l.p, l.repo, env)
}
func (l *Local) StartWork(ctx context.Context, req api.StartWorkRequest) (api.Work, error) {
	return l.svc.StartWork(ctx, l.p, l.repo, req)
}
func (l *Local) ListWorks(ctx context.Context) (api.WorkList, error) {
	return l.svc.ListWorks(ctx, l.p, l.repo)
}
func (l *Local) GetWork(ctx context.Context, id string) (api.Work, error) {
	return l.svc.GetWork(ctx, l.p, l.repo, id)
}
func (l *Local) Checkpoint(ctx context.Context, id string, req api.CheckpointRequest) (api.Work, error) {
	return l.svc.Checkpoint(ctx, l.p, l.repo, id, req)
}
func (l *Local) Record(ctx context.Context, id string) (api.ChangeRecord, error) {
	return l.svc.Record(ctx, l.p, l.repo, id)
}

func (l *Local) CurrentWork(ctx context.Context, worktreeID string) (api.CurrentWork, error) {
	return l.svc.CurrentWork(ctx, l.p, l.repo, worktreeID)
}

// Close closes the embedded store.
func (l *Local) Close() error { return l.svc.Close() }

// HTTP is a connection to a Hub over HTTP with a bearer token.
type HTTP struct {
	base  string
	repo  string
	token string
	c     *http.Client
}

// maxResponseBytes bounds a Hub answer read by the client.
const maxResponseBytes = 64 << 20

// NewHTTP returns an HTTP connection; hc nil means a client with sane
// timeouts (the caller's context still bounds each request).
func NewHTTP(baseURL, repository, token string, hc *http.Client) (*HTTP, error) {
	base, err := NormalizeHubURL(baseURL)
	if err != nil {
		return nil, err
	}
	if hc == nil {
		hc = &http.Client{
			Timeout: 60 * time.Second,
			Transport: &http.Transport{
				Proxy:               http.ProxyFromEnvironment,
				DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
				MaxIdleConnsPerHost: 16,
				IdleConnTimeout:     90 * time.Second,
				TLSHandshakeTimeout: 5 * time.Second,
			},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return &HTTP{base: base, repo: repository, token: token, c: hc}, nil
}

func (h *HTTP) repoPath(parts ...string) string {
	p := "/v1/repositories/" + url.PathEscape(h.repo)
	for _, s := range parts {
		p += "/" + url.PathEscape(s)
	}
	return p
}

func (h *HTTP) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, h.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+h.token)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := h.c.Do(req)
	if err != nil {
		return fmt.Errorf("hub %s: %w", h.base, err)
	}
	defer resp.Body.Close()
	b, err := fsutil.ReadBounded(resp.Body, maxResponseBytes)
	if err != nil {
		return fmt.Errorf("hub %s: read answer: %w", h.base, err)
	}
	if resp.StatusCode != http.StatusOK {
		var eb api.ErrorBody
		if json.Unmarshal(b, &eb) == nil && eb.Error != nil && eb.Error.Code != "" {
			eb.Error.Status = resp.StatusCode
			return eb.Error
		}
		return &api.Error{Status: resp.StatusCode, Code: fmt.Sprintf("http_%d", resp.StatusCode),
			Message: fmt.Sprintf("hub answered %s", resp.Status)}
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("hub %s: bad answer to %s %s: %w", h.base, method, path, err)
	}
	return nil
}

func (h *HTTP) Whoami(ctx context.Context) (api.Whoami, error) {
	var out api.Whoami
	return out, h.do(ctx, "GET", "/v1/hub/whoami", nil, &out)
}
func (h *HTTP) Resolve(ctx context.Context, req api.ResolveRequest) (api.Target, error) {
	var out api.Target
	return out, h.do(ctx, "POST", h.repoPath("resolve"), req, &out)
}
func (h *HTTP) Deliver(ctx context.Context, env *api.Envelope) (api.IngestResult, error) {
	var out api.IngestResult
	return out, h.do(ctx, "POST", h.repoPath("envelopes"), env, &out)
}
func (h *HTTP) StartWork(ctx context.Context, req api.StartWorkRequest) (api.Work, error) {
	var out api.Work
	return out, h.do(ctx, "POST", h.repoPath("works"), req, &out)
}
func (h *HTTP) ListWorks(ctx context.Context) (api.WorkList, error) {
	var out api.WorkList
	return out, h.do(ctx, "GET", h.repoPath("works"), nil, &out)
}
func (h *HTTP) GetWork(ctx context.Context, id string) (api.Work, error) {
	var out api.Work
	return out, h.do(ctx, "GET", h.repoPath("works", id), nil, &out)
}
func (h *HTTP) Checkpoint(ctx context.Context, id string, req api.CheckpointRequest) (api.Work, error) {
	var out api.Work
	return out, h.do(ctx, "POST", h.repoPath("works", id, "checkpoints"), req, &out)
}
func (h *HTTP) Record(ctx context.Context, id string) (api.ChangeRecord, error) {
	var out api.ChangeRecord
	return out, h.do(ctx, "GET", h.repoPath("works", id, "record"), nil, &out)
}

func (h *HTTP) CurrentWork(ctx context.Context, worktreeID string) (api.CurrentWork, error) {
	var out api.CurrentWork
	return out, h.do(ctx, "GET", h.repoPath("worktrees", worktreeID), nil, &out)
}

// Close releases idle HTTP connections.
func (h *HTTP) Close() error {
	h.c.CloseIdleConnections()
	return nil
}

// LocalHuman is the human an embedded connection acts as.
const LocalHuman = "local"

// SetupLocal connects a checkout to the embedded Hub under configDir,
// creating the local human and the repository (named repository) when
// missing. It keeps the checkout's worktree id when the checkout was already
// connected to the same Hub and repository.
func SetupLocal(ctx context.Context, configDir, root, repository string, now time.Time) (Connection, *Connection, error) {
	data := filepath.Join(configDir, LocalHubDir)
	svc, err := hub.Open(ctx, data, hub.Config{})
	if err != nil {
		return Connection{}, nil, err
	}
	defer svc.Close()
	if _, err := svc.EnsureLocal(ctx, LocalHuman, repository); err != nil {
		return Connection{}, nil, err
	}
	c := Connection{Root: root, Kind: KindLocal, Hub: LocalHub, Repository: repository, Human: LocalHuman, Data: data, CreatedAt: now.UTC()}
	return install(configDir, c)
}

// SetupHub connects a checkout to a Hub over HTTP after checking the token
// with whoami: the token must be valid and bound to repository.
func SetupHub(ctx context.Context, configDir, root, hubURL, repository, token string, now time.Time) (Connection, *Connection, error) {
	base, err := NormalizeHubURL(hubURL)
	if err != nil {
		return Connection{}, nil, err
	}
	h, err := NewHTTP(base, repository, token, nil)
	if err != nil {
		return Connection{}, nil, err
	}
	defer h.Close()
	who, err := h.Whoami(ctx)
	if err != nil {
		return Connection{}, nil, fmt.Errorf("check the token with %s: %w", base, err)
	}
	if who.Repository != repository && !who.Admin {
		return Connection{}, nil, fmt.Errorf("the token is for repository %q, not %q", who.Repository, repository)
	}
	c := Connection{Root: root, Kind: KindHub, Hub: base, Repository: repository, Token: token, CreatedAt: now.UTC()}
	return install(configDir, c)
}

func install(configDir string, c Connection) (Connection, *Connection, error) {
	var prev *Connection
	err := Update(configDir, func(f *File) error {
		c.WorktreeID = NewWorktreeID()
		for i, old := range f.Connections {
			if old.Root != c.Root {
				continue
			}
			o := old
			prev = &o
			if old.Hub == c.Hub && old.Repository == c.Repository {
				c.WorktreeID = old.WorktreeID
			}
			f.Connections[i] = c
			return nil
		}
		f.Connections = append(f.Connections, c)
		return nil
	})
	return c, prev, err
}

// ReadToken reads a bearer token from a file: the first line, trimmed,
// bounded and refusing a symlink.
func ReadToken(path string) (string, error) {
	b, err := fsutil.ReadFileNoFollow(path, 4096)
	if err != nil {
		return "", fmt.Errorf("read token file: %w", err)
	}
	tok := strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
	if tok == "" {
		return "", errors.New("token file is empty")
	}
	if !strings.HasPrefix(tok, hub.TokenPrefix) || len(tok) > 128 || strings.ContainsAny(tok, " \t\r") {
		return "", fmt.Errorf("token file does not hold an agentscm token (%s...)", hub.TokenPrefix)
	}
	return tok, nil
}

// Outcome classifies a delivery attempt for the spool's bookkeeping.
type Outcome int

// Delivery outcomes. Only Acknowledged may write an acknowledgement; every
// other outcome leaves the envelope retained and unacknowledged.
const (
	// Acknowledged: HTTP 200 (accepted or duplicate).
	Acknowledged Outcome = iota
	// Rejected: the Hub answered and refused this envelope as it is (bad
	// request, conflict, target refusal, forbidden); retrying the same bytes
	// gets the same answer until something changes on the Hub.
	Rejected
	// Transient: no answer, a timeout, an authentication problem or a Hub
	// error (5xx); the next attempt may succeed.
	Transient
)

func (o Outcome) String() string {
	switch o {
	case Acknowledged:
		return "acknowledged"
	case Rejected:
		return "rejected"
	}
	return "transient"
}

// Classify maps Deliver's error to an Outcome.
func Classify(err error) Outcome {
	if err == nil {
		return Acknowledged
	}
	e, ok := api.AsError(err)
	if !ok {
		return Transient
	}
	switch {
	case e.Status == http.StatusUnauthorized || e.Status == http.StatusRequestTimeout || e.Status == http.StatusTooManyRequests:
		return Transient
	case e.Status >= 400 && e.Status < 500:
		return Rejected
	}
	return Transient
}
