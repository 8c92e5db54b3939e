package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agentscm/agentscm/internal/connections"
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
	// UploadIncrement stores one changelog increment (body, whose SHA-256
	// is up.Digest) under the worktree's current Work, within its grant.
	UploadIncrement(ctx context.Context, worktreeID string, up api.IncrementUpload, body []byte) (api.IncrementStoreResult, error)
	// ListIncrements lists a Work's stored increments (every worktree's
	// sequence, by worktree and position) with its grant.
	ListIncrements(ctx context.Context, workID string) (api.IncrementList, error)
	// GetIncrement downloads a Work's increment and verifies its size and
	// digest against want (an entry of ListIncrements): ErrIncrementDigest.
	GetIncrement(ctx context.Context, workID string, want api.IncrementInfo) ([]byte, error)
	// SetGrant sets a Work's changelog grant.
	SetGrant(ctx context.Context, workID string, req api.GrantRequest) (api.GrantView, error)
	Close() error
}

// ErrIncrementDigest reports a downloaded increment whose bytes do not match
// the size and digest the Hub listed for it.
var ErrIncrementDigest = errors.New("downloaded increment does not match its digest")

func verifyIncrement(b []byte, want api.IncrementInfo) error {
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); int64(len(b)) != want.Size || got != want.Digest {
		return fmt.Errorf("%w: position %d: %d bytes hashing to %s, listed as %d bytes hashing to %s", ErrIncrementDigest, want.Position, len(b), got, want.Size, want.Digest)
	}
	return nil
}

// Options tune Open.
type Options struct {
	// HTTPClient overrides the HTTP client of a Hub connection.
	HTTPClient *http.Client
}

// Open opens a connection: the embedded Hub in-process, or HTTP.
func Open(ctx context.Context, c connections.Connection, opts Options) (Conn, error) {
	switch c.Kind {
	case connections.KindLocal:
		return OpenLocal(ctx, c)
	case connections.KindHub:
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
func OpenLocal(ctx context.Context, c connections.Connection) (*Local, error) {
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

func (l *Local) UploadIncrement(ctx context.Context, worktreeID string, up api.IncrementUpload, body []byte) (api.IncrementStoreResult, error) {
	up.Size = int64(len(body))
	return l.svc.UploadIncrement(ctx, l.p, l.repo, worktreeID, up, bytes.NewReader(body))
}

func (l *Local) ListIncrements(ctx context.Context, workID string) (api.IncrementList, error) {
	return l.svc.ListIncrements(ctx, l.p, l.repo, workID, "")
}

func (l *Local) GetIncrement(ctx context.Context, workID string, want api.IncrementInfo) ([]byte, error) {
	_, b, err := l.svc.GetIncrement(ctx, l.p, l.repo, workID, want.WorktreeID, want.Position)
	if err != nil {
		return nil, err
	}
	return b, verifyIncrement(b, want)
}

func (l *Local) SetGrant(ctx context.Context, workID string, req api.GrantRequest) (api.GrantView, error) {
	return l.svc.SetGrant(ctx, l.p, l.repo, workID, req)
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
	base, err := connections.NormalizeHubURL(baseURL)
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
				// Increment uploads send Expect: 100-continue, so a refusal
				// the Hub decides from the headers costs no body transfer.
				ExpectContinueTimeout: time.Second,
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
	var body []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = b
	}
	b, _, err := h.send(ctx, method, path, body, "application/json", maxResponseBytes)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("hub %s: bad answer to %s %s: %w", h.base, method, path, err)
	}
	return nil
}

// send makes one request (body nil: none) and returns the 200 answer's
// bytes (at most limit) and headers, or the Hub's *api.Error.
func (h *HTTP) send(ctx context.Context, method, path string, body []byte, contentType string, limit int64) ([]byte, http.Header, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, h.base+path, rd)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+h.token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", contentType)
		if len(body) > 64<<10 {
			req.Header.Set("Expect", "100-continue")
		}
	}
	resp, err := h.c.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("hub %s: %w", h.base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		limit = maxResponseBytes
	}
	b, err := fsutil.ReadBounded(resp.Body, limit)
	if err != nil {
		return nil, nil, fmt.Errorf("hub %s: read answer: %w", h.base, err)
	}
	if resp.StatusCode != http.StatusOK {
		var eb api.ErrorBody
		if json.Unmarshal(b, &eb) == nil && eb.Error != nil && eb.Error.Code != "" {
			eb.Error.Status = resp.StatusCode
			return nil, nil, eb.Error
		}
		return nil, nil, &api.Error{Status: resp.StatusCode, Code: fmt.Sprintf("http_%d", resp.StatusCode),
			Message: fmt.Sprintf("hub answered %s", resp.Status)}
	}
	return b, resp.Header, nil
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

func (h *HTTP) UploadIncrement(ctx context.Context, worktreeID string, up api.IncrementUpload, body []byte) (api.IncrementStoreResult, error) {
	var out api.IncrementStoreResult
	path := h.repoPath("worktrees", worktreeID, "changelog", strconv.Itoa(up.Position)) + "?" + up.Query()
	b, _, err := h.send(ctx, "PUT", path, body, api.IncrementContentType, maxResponseBytes)
	if err != nil {
		return out, err
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return out, fmt.Errorf("hub %s: bad answer to an increment upload: %w", h.base, err)
	}
	return out, nil
}

func (h *HTTP) ListIncrements(ctx context.Context, workID string) (api.IncrementList, error) {
	var out api.IncrementList
	return out, h.do(ctx, "GET", h.repoPath("works", workID, "changelog"), nil, &out)
}

func (h *HTTP) GetIncrement(ctx context.Context, workID string, want api.IncrementInfo) ([]byte, error) {
	if want.Size < 0 || want.Size > api.MaxIncrementBytes {
		return nil, fmt.Errorf("increment %d is listed with %d bytes, over the %d-byte bound", want.Position, want.Size, int64(api.MaxIncrementBytes))
	}
	path := h.repoPath("works", workID, "changelog", strconv.Itoa(want.Position))
	if want.WorktreeID != "" {
		path += "?worktree=" + url.QueryEscape(want.WorktreeID)
	}
	b, _, err := h.send(ctx, "GET", path, nil, "", want.Size)
	if err != nil {
		if errors.Is(err, fsutil.ErrTooLarge) {
			return nil, fmt.Errorf("%w: position %d: longer than the listed %d bytes", ErrIncrementDigest, want.Position, want.Size)
		}
		return nil, err
	}
	return b, verifyIncrement(b, want)
}

func (h *HTTP) SetGrant(ctx context.Context, workID string, req api.GrantRequest) (api.GrantView, error) {
	var out api.GrantView
	return out, h.do(ctx, "POST", h.repoPath("works", workID, "grant"), req, &out)
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
func SetupLocal(ctx context.Context, configDir, root, repository string, now time.Time) (connections.Connection, *connections.Connection, error) {
	data := filepath.Join(configDir, connections.LocalHubDir)
	svc, err := hub.Open(ctx, data, hub.Config{})
	if err != nil {
		return connections.Connection{}, nil, err
	}
	defer svc.Close()
	if _, err := svc.EnsureLocal(ctx, LocalHuman, repository); err != nil {
		return connections.Connection{}, nil, err
	}
	c := connections.Connection{Root: root, Kind: connections.KindLocal, Hub: connections.LocalHub, Repository: repository, Human: LocalHuman, Data: data, CreatedAt: now.UTC()}
	return install(configDir, c)
}

// SetupHub connects a checkout to a Hub over HTTP after checking the token
// with whoami: the token must be valid and bound to repository.
func SetupHub(ctx context.Context, configDir, root, hubURL, repository, token string, now time.Time) (connections.Connection, *connections.Connection, error) {
	base, err := connections.NormalizeHubURL(hubURL)
	if err != nil {
		return connections.Connection{}, nil, err
	}
	h, err := NewHTTP(base, repository, token, nil)
	if err != nil {
		return connections.Connection{}, nil, err
	}
	defer h.Close()
	c := connections.Connection{Root: root, Kind: connections.KindHub, Hub: base, Repository: repository, Token: token, CreatedAt: now.UTC()}
	who, err := h.Whoami(ctx)
	if err != nil {
		if _, answered := api.AsError(err); !answered {
			// The Hub did not answer: keep the connection, say so.
			c, prev, ierr := install(configDir, c)
			if ierr != nil {
				return c, prev, ierr
			}
			return c, prev, &UncheckedError{Hub: base, Err: err}
		}
		return connections.Connection{}, nil, fmt.Errorf("check the token with %s: %w", base, err)
	}
	if who.Repository != repository && !who.Admin {
		return connections.Connection{}, nil, fmt.Errorf("the token is for repository %q, not %q", who.Repository, repository)
	}
	if err := CheckRepository(ctx, h, base, repository); err != nil {
		return connections.Connection{}, nil, err
	}
	return install(configDir, c)
}

// UncheckedError says SetupHub stored the connection without checking it
// because the Hub did not answer.
type UncheckedError struct {
	Hub string
	Err error
}

func (e *UncheckedError) Error() string {
	return fmt.Sprintf("the connection is stored but not checked: %s did not answer (%v); run agentscm client status --check when it is up", e.Hub, e.Err)
}

func (e *UncheckedError) Unwrap() error { return e.Err }

// ErrNoRepository means the Hub has no repository of the connection's name.
var ErrNoRepository = errors.New("the Hub has no such repository")

// CheckRepository asks the Hub whether repository exists (listing its
// Works; an admin token's whoami does not say).
func CheckRepository(ctx context.Context, c Conn, hub, repository string) error {
	_, err := c.ListWorks(ctx)
	if e, ok := api.AsError(err); ok && e.Code == api.CodeNotFound {
		return fmt.Errorf("%w: repository %q does not exist on %s (create it with agentscm hub admin repository create --name %s)", ErrNoRepository, repository, hub, repository)
	}
	if err != nil {
		return fmt.Errorf("check repository %q on %s: %w", repository, hub, err)
	}
	return nil
}

func install(configDir string, c connections.Connection) (connections.Connection, *connections.Connection, error) {
	var prev *connections.Connection
	err := connections.Update(configDir, func(f *connections.File) error {
		c.WorktreeID = connections.NewWorktreeID()
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
