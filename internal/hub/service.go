// Package hub is the Hub service: Works, generations, sessions, event
// ingestion and the change-record projection, with one Go API that both the
// HTTP handlers (agentscm hub serve) and the embedded in-process connection
// call.
package hub

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/hub/objects"
	"github.com/agentscm/agentscm/internal/hub/store"
	"github.com/agentscm/agentscm/internal/hub/store/sqlite"
)

// Retention bounds of shared conversation bodies, in days.
const (
	DefaultRetentionDays = 30
	MinRetentionDays     = 1
	MaxRetentionDays     = 3650
)

// DefaultSessionAlias is the canonical session the first native session on a
// worktree joins after a Work starts or is taken over.
const DefaultSessionAlias = "default"

// CheckpointStart is the checkpoint recorded when a Work starts.
const CheckpointStart = "start"

// MaxRecordEvents bounds the events listed in a change record; the rest are
// counted in events_omitted.
const MaxRecordEvents = 5000

// MaxListedWorks bounds a Work listing; the rest are counted in omitted.
const MaxListedWorks = 1000

// TokenPrefix starts every token secret.
const TokenPrefix = "ascm_"

// Config is the Hub's operator configuration.
type Config struct {
	// RetentionDays is the shared conversation retention (1 to 3650).
	RetentionDays int
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// Service is the Hub. It is safe for concurrent use.
type Service struct {
	st  store.Store
	obj objects.Store
	cfg Config

	authMu    sync.Mutex
	authCache map[string]cachedPrincipal // token hash -> principal

	// instance names this Service as the holder of the sweep's lease.
	instance string

	// agents remembers sessions whose agent is stored (agent.go).
	agents agentKnown
}

// cachedPrincipal is an authentication remembered for AuthCacheTTL.
type cachedPrincipal struct {
	p       Principal
	expires time.Time
}

// AuthCacheTTL is how long a serving process reuses a token's
// authentication; maxAuthCache bounds the remembered tokens.
const (
	AuthCacheTTL = 10 * time.Second
	maxAuthCache = 4096
)

// Principal is an authenticated caller.
type Principal struct {
	TokenID        string
	HumanID        string
	HumanName      string
	Admin          bool
	RepositoryID   string
	RepositoryName string
	Scope          string
}

// Operator is the principal of the local operator (agentscm hub admin on the
// data directory, and the embedded store's owner): an admin with write scope
// and no token.
func Operator() Principal {
	return Principal{HumanName: "operator", Admin: true, Scope: api.ScopeReadWrite}
}

// New returns a Service over a store and an object store (whose objects it
// checks against their digests: objects.Verified).
func New(st store.Store, obj objects.Store, cfg Config) (*Service, error) {
	if cfg.RetentionDays == 0 {
		cfg.RetentionDays = DefaultRetentionDays
	}
	if cfg.RetentionDays < MinRetentionDays || cfg.RetentionDays > MaxRetentionDays {
		return nil, fmt.Errorf("shared conversation retention must be %d to %d days, not %d", MinRetentionDays, MaxRetentionDays, cfg.RetentionDays)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{st: st, obj: objects.Verified(obj), cfg: cfg, authCache: map[string]cachedPrincipal{}, instance: newID("hub_")}, nil
}

// Open opens the Hub in a data directory (created 0700 when missing): the
// SQLite database and the object directory.
func Open(ctx context.Context, dataDir string, cfg Config) (*Service, error) {
	if !filepath.IsAbs(dataDir) {
		return nil, fmt.Errorf("hub data directory %q is not an absolute path", dataDir)
	}
	if err := fsutil.MkdirPrivate(dataDir); err != nil {
		return nil, err
	}
	if err := fsutil.CheckPrivateDir(dataDir); err != nil {
		return nil, fmt.Errorf("hub data directory: %w", err)
	}
	st, err := sqlite.Open(ctx, dataDir)
	if err != nil {
		return nil, err
	}
	obj, err := objects.OpenDir(filepath.Join(dataDir, "objects"))
	if err != nil {
		st.Close()
		return nil, err
	}
	s, err := New(st, obj, cfg)
	if err != nil {
		st.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the store.
func (s *Service) Close() error { return s.st.Close() }

// RetentionDays returns the configured shared conversation retention.
func (s *Service) RetentionDays() int { return s.cfg.RetentionDays }

func (s *Service) now() int64 { return s.cfg.Now().Unix() }

func newID(prefix string) string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // never fails on Linux
	}
	return prefix + hex.EncodeToString(b[:])
}

// HashToken returns the at-rest form of a token secret.
func HashToken(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

func internal(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := api.AsError(err); ok {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("hub: %w", err)
}

var (
	errUnauthenticated = &api.Error{Status: http.StatusUnauthorized, Code: api.CodeUnauthenticated, Message: "missing or unknown bearer token"}
	errReadOnly        = &api.Error{Status: http.StatusForbidden, Code: api.CodeForbidden, Message: "this token is read-only"}
	errNotAdmin        = &api.Error{Status: http.StatusForbidden, Code: api.CodeForbidden, Message: "this route needs a Hub admin"}
)

// Authenticate resolves a bearer token secret to its principal.
func (s *Service) Authenticate(ctx context.Context, secret string) (Principal, error) {
	if !strings.HasPrefix(secret, TokenPrefix) || len(secret) > 128 {
		return Principal{}, errUnauthenticated
	}
	hash := HashToken(secret)
	now := s.cfg.Now()
	s.authMu.Lock()
	c, ok := s.authCache[hash]
	s.authMu.Unlock()
	if ok && now.Before(c.expires) {
		return c.p, nil
	}
	var p Principal
	err := s.st.View(ctx, func(tx store.Tx) error {
		k, h, r, err := tx.TokenPrincipal(hash)
		if err != nil {
			return err
		}
		p = Principal{TokenID: k.ID, HumanID: h.ID, HumanName: h.Name, Admin: h.Admin, RepositoryID: r.ID, RepositoryName: r.Name, Scope: k.Scope}
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return Principal{}, errUnauthenticated
	}
	if err != nil {
		return Principal{}, internal(err)
	}
	s.authMu.Lock()
	if len(s.authCache) >= maxAuthCache {
		clear(s.authCache)
	}
	s.authCache[hash] = cachedPrincipal{p: p, expires: now.Add(AuthCacheTTL)}
	s.authMu.Unlock()
	return p, nil
}

// Whoami reports the caller, its repository, its token scope and the
// shared conversation retention.
func (s *Service) Whoami(ctx context.Context, p Principal) (api.Whoami, error) {
	return api.Whoami{
		Human: p.HumanName, HumanID: p.HumanID, Admin: p.Admin, Repository: p.RepositoryName,
		TokenID: p.TokenID, Scope: p.Scope, SharedConversationRetentionDays: s.cfg.RetentionDays,
		HubVersion: api.APIVersion, Features: api.Features(),
	}, nil
}

// authorize checks that p may read (or write) repository name and returns it.
// A token for another repository gets 403 whether or not name exists.
func authorize(tx store.Tx, p Principal, name string, write bool) (store.Repository, error) {
	if !p.Admin && name != p.RepositoryName {
		return store.Repository{}, api.Errorf(http.StatusForbidden, api.CodeForbidden, "this token is not for repository %q", name)
	}
	if write && p.Scope != api.ScopeReadWrite {
		return store.Repository{}, errReadOnly
	}
	if name == p.RepositoryName && p.RepositoryID != "" {
		// Repositories are never renamed or removed: the token's binding is
		// the repository.
		return store.Repository{ID: p.RepositoryID, Name: name}, nil
	}
	r, err := tx.RepositoryByName(name)
	if errors.Is(err, store.ErrNotFound) {
		return r, api.Errorf(http.StatusNotFound, api.CodeNotFound, "no repository %q", name)
	}
	return r, err
}

// authorizedWork authorizes p on the repository (for writing when write)
// and returns the Work id in it, or a 404 naming both.
func authorizedWork(tx store.Tx, p Principal, repository, id string, write bool) (store.Repository, store.Work, error) {
	repo, err := authorize(tx, p, repository, write)
	if err != nil {
		return repo, store.Work{}, err
	}
	w, err := tx.WorkByID(id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && w.RepositoryID != repo.ID) {
		return repo, w, api.Errorf(http.StatusNotFound, api.CodeNotFound, "no work %q in repository %q", id, repo.Name)
	}
	return repo, w, err
}

func accepting(state string) bool {
	return state == api.StateActive || state == api.StatePaused || state == api.StateBlocked
}

func badf(format string, a ...any) error {
	return api.Errorf(http.StatusBadRequest, api.CodeBadRequest, format, a...)
}

// Resolve returns the exact current Work, generation and canonical session
// for a native session on a worktree, or a target refusal. The first native
// session on a worktree joins the unbound alias session ("default"); later
// ones get a canonical session named after themselves.
func (s *Service) Resolve(ctx context.Context, p Principal, repository string, req api.ResolveRequest) (api.Target, error) {
	if !api.ValidName(req.WorktreeID) {
		return api.Target{}, badf("worktree_id and native_session_id are required")
	}
	if e := api.CheckSessionID("native_session_id", req.NativeSessionID); e != nil {
		return api.Target{}, e
	}
	var t api.Target
	bound := false
	// Fast path: an already bound session needs no write transaction.
	err := s.st.View(ctx, func(tx store.Tx) error {
		repo, w, err := resolveWork(tx, p, repository, req.WorktreeID)
		if err != nil {
			return err
		}
		sess, err := tx.SessionByNative(w.ID, w.Generation, req.NativeSessionID)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if sess.WorktreeID != req.WorktreeID {
			return worktreeMismatch(req, sess)
		}
		t = target(repo, w, sess.Canonical, req)
		bound = true
		return nil
	})
	if err != nil || bound {
		return t, internal(err)
	}
	err = s.st.Update(ctx, func(tx store.Tx) error {
		repo, w, err := resolveWork(tx, p, repository, req.WorktreeID)
		if err != nil {
			return err
		}
		if !canWrite(p) {
			return errReadOnly
		}
		sess, err := tx.SessionByNative(w.ID, w.Generation, req.NativeSessionID)
		if err == nil {
			if sess.WorktreeID != req.WorktreeID {
				return worktreeMismatch(req, sess)
			}
			t = target(repo, w, sess.Canonical, req)
			return nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		now := s.now()
		canonical := req.NativeSessionID
		alias, err := tx.UnboundAlias(w.ID, w.Generation, req.WorktreeID)
		switch {
		case err == nil:
			canonical = alias.Canonical
		case errors.Is(err, store.ErrNotFound):
			err = tx.InsertSession(store.Session{WorkID: w.ID, Generation: w.Generation, Canonical: canonical, WorktreeID: req.WorktreeID, CreatedAt: now})
			if errors.Is(err, store.ErrExists) {
				return &api.Error{Status: http.StatusConflict, Code: api.CodeConflict, Reason: "session_name_taken",
					Message: fmt.Sprintf("work %s already has a session named %q", w.ID, canonical)}
			}
			if err != nil {
				return err
			}
		default:
			return err
		}
		if err := tx.BindNative(w.ID, w.Generation, canonical, req.NativeSessionID, now); err != nil {
			return err
		}
		t = target(repo, w, canonical, req)
		return nil
	})
	return t, internal(err)
}

func canWrite(p Principal) bool { return p.Scope == api.ScopeReadWrite }

func worktreeMismatch(req api.ResolveRequest, sess store.Session) error {
	return api.Refusef(api.ReasonWorktreeMismatch, "native session %s is bound to worktree %s, not %s", req.NativeSessionID, sess.WorktreeID, req.WorktreeID)
}

func target(repo store.Repository, w store.Work, canonical string, req api.ResolveRequest) api.Target {
	return api.Target{Repository: repo.Name, WorkID: w.ID, Generation: w.Generation, Session: canonical,
		NativeSessionID: req.NativeSessionID, WorktreeID: req.WorktreeID, State: w.State}
}

// resolveWork finds the worktree's current Work and checks that it accepts
// capture at the worktree's generation. Resolution needs write scope: it
// binds sessions and precedes delivery.
func resolveWork(tx store.Tx, p Principal, repository, worktree string) (store.Repository, store.Work, error) {
	repo, err := authorize(tx, p, repository, true)
	if err != nil {
		return repo, store.Work{}, err
	}
	cur, err := tx.Current(repo.ID, worktree)
	if errors.Is(err, store.ErrNotFound) {
		return repo, store.Work{}, api.Refusef(api.ReasonNoCurrentWork, "worktree %s has no current work in repository %q; run agentscm work start", worktree, repo.Name)
	}
	if err != nil {
		return repo, store.Work{}, err
	}
	w, err := tx.WorkByID(cur.WorkID)
	if err != nil {
		return repo, w, err
	}
	if !accepting(w.State) {
		return repo, w, api.Refusef(api.ReasonWorkNotAccepting, "work %s is %s and accepts no capture", w.ID, w.State)
	}
	if cur.Generation != w.Generation {
		return repo, w, api.Refusef(api.ReasonStaleGeneration, "work %s was taken over: generation %d is current, this worktree is at %d", w.ID, w.Generation, cur.Generation)
	}
	return repo, w, nil
}

// Ingest accepts one envelope idempotently. An exact replay of an accepted
// envelope is a duplicate (whatever the Work's state now); a different body
// under the same identity is a conflict. Otherwise the target must be
// accepting at its current generation. A session_end event pauses an active
// Work.
func (s *Service) Ingest(ctx context.Context, p Principal, repository string, env *api.Envelope) (api.IngestResult, error) {
	if err := env.Validate(); err != nil {
		return api.IngestResult{}, err
	}
	digest := env.Digest()
	fast := plainEvents(env) && s.fastPathAgent(env) // agent.go
	if fast {
		if res, ok, err := s.ingestCommitted(ctx, p, repository, env, digest); ok { // ingestfast.go
			return res, err
		}
	}
	res := api.IngestResult{Identity: env.Identity, Digest: digest}
	agentStored := false
	err := s.st.Update(ctx, func(tx store.Tx) error {
		agentStored = false // the transaction may run again
		repo, err := authorize(tx, p, repository, true)
		if err != nil {
			return err
		}
		now := s.now()
		// The identity is claimed first, by the insert of the envelope's
		// row (kept only if this transaction commits): on PostgreSQL a
		// lookup that finds nothing locks the index page it searched, and
		// concurrent ingests inserting there would fail each other's
		// SERIALIZABLE transactions; an insert conflicts only with the same
		// identity. Only a taken identity is read.
		row := store.Envelope{RepositoryID: repo.ID, Identity: env.Identity, Digest: digest, Type: env.Type,
			WorkID: env.WorkID, Generation: env.Generation, Session: env.Session, ReceivedAt: now}
		taken := func() error {
			prev, err := tx.EnvelopeByIdentity(repo.ID, env.Identity)
			if err != nil {
				return err
			}
			if prev.Digest != digest {
				return &api.Error{Status: http.StatusConflict, Code: api.CodeConflict, Reason: "identity_reused",
					Message: fmt.Sprintf("a different %s envelope was already accepted under identity %s", prev.Type, env.Identity)}
			}
			res.Status = api.StatusDuplicate
			return nil
		}
		if ing, ok := tx.(store.EventsIngester); ok && fast {
			return ingestEventsFast(ing, repo, row, env, &res, taken) // ingestfast.go
		}
		err = tx.InsertEnvelope(row)
		if errors.Is(err, store.ErrExists) {
			return taken()
		}
		if err != nil {
			return err
		}
		w, err := tx.WorkByID(env.WorkID)
		if errors.Is(err, store.ErrNotFound) || (err == nil && w.RepositoryID != repo.ID) {
			return api.Refusef(api.ReasonUnknownWork, "no work %q in repository %q", env.WorkID, repo.Name)
		}
		if err != nil {
			return err
		}
		if !accepting(w.State) {
			return api.Refusef(api.ReasonWorkNotAccepting, "work %s is %s and accepts no capture", w.ID, w.State)
		}
		if env.Generation != w.Generation && !gapHistory(env, w) {
			return api.Refusef(api.ReasonStaleGeneration, "work %s is at generation %d, not %d", w.ID, w.Generation, env.Generation)
		}
		sess, err := tx.Session(w.ID, env.Generation, env.Session)
		if errors.Is(err, store.ErrNotFound) {
			return api.Refusef(api.ReasonUnknownSession, "work %s has no session %q at generation %d", w.ID, env.Session, env.Generation)
		} else if err != nil {
			return err
		}
		if agentStored, err = claimAgent(tx, sess, env); err != nil { // agent.go
			return err
		}
		sc := store.Scope{WorkID: w.ID, Generation: env.Generation, Session: env.Session, Stream: env.Stream, Identity: env.Identity, ReceivedAt: now}
		if err := s.apply(tx, p, &w, sc, env, &res); err != nil {
			return err
		}
		res.Body = ""
		if env.Body != nil {
			if res.Body, err = s.declareBody(tx, p, &w, sc, env.Body); err != nil {
				return err
			}
		}
		res.Status = api.StatusAccepted
		return nil
	})
	if err != nil {
		return api.IngestResult{}, internal(err)
	}
	if agentStored {
		s.agents.add(keyOf(env))
	}
	return res, nil
}

// gapHistory reports whether env is a gap of an older generation of w:
// history of a session that existed then (for example an outage published
// after a takeover). It is kept on that generation's stream, where the hole
// is; it adds no event, so it cannot make the old generation look more
// complete. Every other envelope of an older generation is refused
// (stale_generation).
func gapHistory(env *api.Envelope, w store.Work) bool {
	return env.Type == api.TypeGap && env.Generation >= 1 && env.Generation < w.Generation
}

// checkStale refuses a start/finish pair whose finish calls itself stale
// when the setups agree, or fresh when they differ: stale means exactly that
// the completion setup differs from the setup bound at start.
func checkStale(st *api.ActionStart, f *api.ActionFinish) error {
	if (st.SetupDigest != f.SetupDigest) != f.Stale {
		return &api.Error{Status: http.StatusBadRequest, Code: api.CodeBadRequest, Reason: "stale_mismatch",
			Message: fmt.Sprintf("action %s: the finish says stale=%v, but its setup digest %q and the start's %q say otherwise", f.ActionID, f.Stale, f.SetupDigest, st.SetupDigest)}
	}
	return nil
}

func conflict(reason, format string, a ...any) error {
	return &api.Error{Status: http.StatusConflict, Code: api.CodeConflict, Reason: reason, Message: fmt.Sprintf(format, a...)}
}

func (s *Service) apply(tx store.Tx, p Principal, w *store.Work, sc store.Scope, env *api.Envelope, res *api.IngestResult) error {
	switch env.Type {
	case api.TypeEvents:
		err := tx.InsertEvents(sc, env.Events)
		if errors.Is(err, store.ErrExists) {
			return conflict("sequence_taken", "session %q of work %s already has an event at one of these sequence numbers", sc.Session, w.ID)
		}
		if err != nil {
			return err
		}
		for _, ev := range env.Events {
			if ev.Setup != nil {
				if err := tx.InsertSetup(sc, ev.Setup); err != nil {
					return err
				}
			}
			if ev.Kind == api.KindSessionEnd && w.State == api.StateActive {
				from := w.State
				w.State = api.StatePaused
				w.UpdatedAt = sc.ReceivedAt
				if err := tx.UpdateWork(*w); err != nil {
					return err
				}
				if _, err := tx.AppendCheckpoint(store.Checkpoint{WorkID: w.ID, Action: api.CheckpointSessionEnd, From: from, To: w.State,
					Generation: w.Generation, HumanID: p.HumanID, Note: "session " + sc.Session + " ended", At: sc.ReceivedAt}); err != nil {
					return err
				}
				res.Paused = true
			}
		}
	case api.TypeActionStart:
		a, err := tx.Action(w.ID, env.ActionStart.ActionID)
		if err == nil && a.Start != nil {
			return conflict("action_started", "action %s of work %s already has a different start", a.ActionID, w.ID)
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if err == nil && a.Finish != nil {
			if err := checkStale(env.ActionStart, a.Finish); err != nil {
				return err
			}
		}
		return tx.InsertActionStart(sc, env.ActionStart)
	case api.TypeActionFinish:
		a, err := tx.Action(w.ID, env.ActionFinish.ActionID)
		if err == nil && a.Finish != nil {
			return conflict("action_finished", "action %s of work %s already has a different finish", a.ActionID, w.ID)
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if err == nil && a.Start != nil {
			if err := checkStale(a.Start, env.ActionFinish); err != nil {
				return err
			}
		}
		return tx.SetActionFinish(sc, env.ActionFinish)
	case api.TypeUsage:
		return tx.InsertUsage(sc, env.Usage)
	case api.TypeGap:
		return tx.InsertGap(sc, env.Gap)
	}
	return nil
}

// StartWork creates a Work (active, generation 1) with its alias session and
// makes it current for the worktree.
func (s *Service) StartWork(ctx context.Context, p Principal, repository string, req api.StartWorkRequest) (api.Work, error) {
	if !api.ValidName(req.WorktreeID) {
		return api.Work{}, badf("worktree_id is required")
	}
	if len(req.Title) > api.MaxTextLen || strings.ContainsAny(req.Title, "\x00\n\r") {
		return api.Work{}, badf("title is too long or has control characters")
	}
	alias := req.SessionAlias
	if alias == "" {
		alias = DefaultSessionAlias
	}
	if !api.ValidName(alias) {
		return api.Work{}, badf("session_alias is not valid")
	}
	if req.ChangelogGrant != nil {
		if err := req.ChangelogGrant.Validate(); err != nil {
			return api.Work{}, err
		}
	}
	var out api.Work
	err := s.st.Update(ctx, func(tx store.Tx) error {
		repo, err := authorize(tx, p, repository, true)
		if err != nil {
			return err
		}
		now := s.now()
		w := store.Work{ID: newID("wrk_"), RepositoryID: repo.ID, Title: req.Title, State: api.StateActive, Generation: 1,
			CreatedBy: p.HumanID, CreatedAt: now, UpdatedAt: now}
		if err := tx.InsertWork(w); err != nil {
			return err
		}
		if err := tx.InsertSession(store.Session{WorkID: w.ID, Generation: 1, Canonical: alias, WorktreeID: req.WorktreeID, Alias: true, CreatedAt: now}); err != nil {
			return err
		}
		if err := tx.SetCurrent(store.Current{RepositoryID: repo.ID, WorktreeID: req.WorktreeID, WorkID: w.ID, Generation: 1, UpdatedAt: now}); err != nil {
			return err
		}
		if req.ChangelogGrant != nil {
			if err := tx.SetChangelogGrant(w.ID, *req.ChangelogGrant, now); err != nil {
				return err
			}
		}
		if _, err := tx.AppendCheckpoint(store.Checkpoint{WorkID: w.ID, Action: CheckpointStart, To: api.StateActive, Generation: 1,
			HumanID: p.HumanID, WorktreeID: req.WorktreeID, At: now}); err != nil {
			return err
		}
		out, err = workView(tx, repo, w)
		return err
	})
	return out, internal(err)
}

func workView(tx store.Tx, repo store.Repository, w store.Work) (api.Work, error) {
	out := api.Work{ID: w.ID, Repository: repo.Name, Title: w.Title, State: w.State, Generation: w.Generation,
		CreatedBy: humanName(tx, w.CreatedBy), CreatedAt: w.CreatedAt, UpdatedAt: w.UpdatedAt}
	cps, err := tx.Checkpoints(w.ID)
	if err != nil {
		return out, err
	}
	for _, c := range cps {
		out.Checkpoints = append(out.Checkpoints, api.Checkpoint{Seq: c.Seq, Action: c.Action, From: c.From, To: c.To, Generation: c.Generation,
			Human: humanName(tx, c.HumanID), WorktreeID: c.WorktreeID, Note: c.Note, At: c.At})
	}
	curs, err := tx.CurrentsForWork(w.ID)
	if err != nil {
		return out, err
	}
	for _, c := range curs {
		out.Worktrees = append(out.Worktrees, api.WorktreeCurrent{WorktreeID: c.WorktreeID, WorkID: c.WorkID, Generation: c.Generation})
	}
	return out, nil
}

func humanName(tx store.Tx, id string) string {
	if id == "" {
		return "operator"
	}
	h, err := tx.HumanByID(id)
	if err != nil {
		return id
	}
	return h.Name
}

// ListWorks lists a repository's Works, newest first.
func (s *Service) ListWorks(ctx context.Context, p Principal, repository string) (api.WorkList, error) {
	var out api.WorkList
	err := s.st.View(ctx, func(tx store.Tx) error {
		repo, err := authorize(tx, p, repository, false)
		if err != nil {
			return err
		}
		ws, total, err := tx.ListWorks(repo.ID, MaxListedWorks)
		if err != nil {
			return err
		}
		out.Works = []api.Work{}
		for _, w := range ws {
			out.Works = append(out.Works, api.Work{ID: w.ID, Repository: repo.Name, Title: w.Title, State: w.State, Generation: w.Generation,
				CreatedBy: humanName(tx, w.CreatedBy), CreatedAt: w.CreatedAt, UpdatedAt: w.UpdatedAt})
		}
		out.Omitted = total - len(ws)
		return nil
	})
	return out, internal(err)
}

// GetWork returns one Work with its checkpoints and current worktrees.
func (s *Service) GetWork(ctx context.Context, p Principal, repository, id string) (api.Work, error) {
	var out api.Work
	err := s.st.View(ctx, func(tx store.Tx) error {
		repo, w, err := authorizedWork(tx, p, repository, id, false)
		if err != nil {
			return err
		}
		out, err = workView(tx, repo, w)
		return err
	})
	return out, internal(err)
}

// transitions maps a checkpoint action to the states it leaves from and the
// state it reaches.
var transitions = map[string]struct {
	from []string
	to   string
}{
	api.CheckpointPause:    {[]string{api.StateActive, api.StateBlocked}, api.StatePaused},
	api.CheckpointResume:   {[]string{api.StatePaused, api.StateBlocked}, api.StateActive},
	api.CheckpointBlock:    {[]string{api.StateActive, api.StatePaused}, api.StateBlocked},
	api.CheckpointFinish:   {[]string{api.StateActive, api.StatePaused, api.StateBlocked}, api.StateFinished},
	api.CheckpointHandover: {[]string{api.StateActive, api.StatePaused, api.StateBlocked}, api.StateHandover},
	api.CheckpointTakeover: {[]string{api.StateHandover, api.StateActive, api.StatePaused, api.StateBlocked}, api.StateActive},
}

// Checkpoint changes a Work's state. A takeover also increments the
// generation, makes the Work current for the taker's worktree with a fresh
// alias session, and so fences every older generation.
func (s *Service) Checkpoint(ctx context.Context, p Principal, repository, id string, req api.CheckpointRequest) (api.Work, error) {
	tr, ok := transitions[req.Action]
	if !ok {
		return api.Work{}, badf("unknown checkpoint action %q (pause, resume, block, finish, handover, takeover)", req.Action)
	}
	if req.Action == api.CheckpointTakeover && !api.ValidName(req.WorktreeID) {
		return api.Work{}, badf("takeover needs the taker's worktree_id")
	}
	if req.WorktreeID != "" && !api.ValidName(req.WorktreeID) {
		return api.Work{}, badf("worktree_id is not valid")
	}
	if err := req.Validate(); err != nil {
		return api.Work{}, err
	}
	var out api.Work
	err := s.st.Update(ctx, func(tx store.Tx) error {
		repo, w, err := authorizedWork(tx, p, repository, id, true)
		if err != nil {
			return err
		}
		// Compare and swap: the generation the caller saw is checked in the
		// same write transaction that applies the checkpoint.
		if req.ExpectGeneration != nil && *req.ExpectGeneration != w.Generation {
			why := ""
			if *req.ExpectGeneration < w.Generation {
				why = ": it was taken over meanwhile"
			}
			return &api.Error{Status: http.StatusConflict, Code: api.CodeConflict, Reason: api.ReasonGenerationChanged,
				Message: fmt.Sprintf("work %s is at generation %d, not the expected %d%s", w.ID, w.Generation, *req.ExpectGeneration, why),
				Detail:  &api.ErrorDetail{WorkID: w.ID, Generation: w.Generation}}
		}
		if req.Action == api.CheckpointTakeover && w.Generation >= api.MaxGeneration {
			return api.Errorf(http.StatusConflict, api.CodeInvalidState, "work %s is at generation %d, the last one a Hub allows", w.ID, w.Generation)
		}
		allowed := false
		for _, f := range tr.from {
			allowed = allowed || f == w.State
		}
		if !allowed {
			return api.Errorf(http.StatusConflict, api.CodeInvalidState, "work %s is %s; %s is not possible", w.ID, w.State, req.Action)
		}
		now := s.now()
		from := w.State
		w.State, w.UpdatedAt = tr.to, now
		if req.Action == api.CheckpointTakeover {
			w.Generation++
			if err := tx.SetCurrent(store.Current{RepositoryID: repo.ID, WorktreeID: req.WorktreeID, WorkID: w.ID, Generation: w.Generation, UpdatedAt: now}); err != nil {
				return err
			}
			if err := tx.InsertSession(store.Session{WorkID: w.ID, Generation: w.Generation, Canonical: DefaultSessionAlias, WorktreeID: req.WorktreeID, Alias: true, CreatedAt: now}); err != nil {
				return err
			}
		}
		if err := tx.UpdateWork(w); err != nil {
			return err
		}
		if _, err := tx.AppendCheckpoint(store.Checkpoint{WorkID: w.ID, Action: req.Action, From: from, To: w.State, Generation: w.Generation,
			HumanID: p.HumanID, WorktreeID: req.WorktreeID, Note: req.Note, At: now}); err != nil {
			return err
		}
		out, err = workView(tx, repo, w)
		return err
	})
	return out, internal(err)
}

// Record returns a Work's change-record projection. It only reads.
func (s *Service) Record(ctx context.Context, p Principal, repository, id string) (api.ChangeRecord, error) {
	var rec api.ChangeRecord
	err := s.st.View(ctx, func(tx store.Tx) error {
		repo, w, err := authorizedWork(tx, p, repository, id, false)
		if err != nil {
			return err
		}
		if rec.Work, err = workView(tx, repo, w); err != nil {
			return err
		}
		sessions, err := tx.Sessions(w.ID)
		if err != nil {
			return err
		}
		natives, err := tx.Natives(w.ID)
		if err != nil {
			return err
		}
		stats, err := tx.SessionStats(w.ID)
		if err != nil {
			return err
		}
		byKey := map[store.SessionKey][]store.SessionStats{}
		for _, st := range stats {
			k := store.SessionKey{Generation: st.Generation, Canonical: st.Session}
			byKey[k] = append(byKey[k], st)
		}
		var reasons []string
		var boundaries []api.GapRecord
		agentOf := map[store.SessionKey]string{}
		rec.Sessions = []api.SessionRecord{}
		for _, ss := range sessions {
			k := store.SessionKey{Generation: ss.Generation, Canonical: ss.Canonical}
			sr, bs := sessionRecord(ss, natives[k], byKey[k])
			agentOf[k] = ss.Agent
			boundaries = append(boundaries, bs...)
			if sr.MissingSeqs > 0 {
				reasons = append(reasons, fmt.Sprintf("session %s (generation %d): %d sequence numbers missing", ss.Canonical, ss.Generation, sr.MissingSeqs))
			}
			// A session is complete only once its end was observed: an open
			// (or abandoned) session may still hold unobserved events.
			if st := byKey[k]; len(st) > 0 && st[len(st)-1].LastKind != api.KindSessionEnd {
				reasons = append(reasons, fmt.Sprintf("session %s (generation %d) has not ended", ss.Canonical, ss.Generation))
			}
			rec.Sessions = append(rec.Sessions, sr)
		}
		var total int64
		if rec.Events, total, err = tx.ListEvents(w.ID, MaxRecordEvents); err != nil {
			return err
		}
		if rec.Events == nil {
			rec.Events = []api.EventRecord{}
		}
		for i, e := range rec.Events {
			rec.Events[i].Agent = agentOf[store.SessionKey{Generation: e.Generation, Canonical: e.Session}]
		}
		rec.EventsOmitted = total - int64(len(rec.Events))
		actions, err := tx.Actions(w.ID)
		if err != nil {
			return err
		}
		rec.Actions = []api.ActionRecord{}
		var open, orphan int
		for _, a := range actions {
			ar := api.ActionRecord{Session: a.Session, Generation: a.Generation, ActionID: a.ActionID, Start: a.Start, Finish: a.Finish,
				Agent: agentOf[store.SessionKey{Generation: a.Generation, Canonical: a.Session}]}
			switch {
			case a.Start != nil && a.Finish != nil:
				ar.Status = "complete"
			case a.Start != nil:
				ar.Status = "incomplete"
				open++
			default:
				ar.Status = "finish_without_start"
				orphan++
			}
			rec.Actions = append(rec.Actions, ar)
		}
		if open > 0 {
			reasons = append(reasons, fmt.Sprintf("%d actions started without a finish", open))
		}
		if orphan > 0 {
			reasons = append(reasons, fmt.Sprintf("%d action finishes without a start", orphan))
		}
		if rec.Gaps, err = tx.Gaps(w.ID); err != nil {
			return err
		}
		rec.Gaps = append(rec.Gaps, boundaries...)
		if rec.Gaps == nil {
			rec.Gaps = []api.GapRecord{}
		}
		if len(rec.Gaps) > 0 {
			kinds := map[string]int{}
			var order []string
			for _, g := range rec.Gaps {
				if kinds[g.Kind] == 0 {
					order = append(order, g.Kind)
				}
				kinds[g.Kind]++
			}
			for _, k := range order {
				reasons = append(reasons, fmt.Sprintf("%d %s gaps", kinds[k], k))
			}
		}
		if rec.Usage, err = tx.UsageTotals(w.ID); err != nil {
			return err
		}
		if rec.Setups, err = tx.Setups(w.ID); err != nil {
			return err
		}
		switch {
		case total == 0 && len(actions) == 0 && len(rec.Gaps) == 0 && rec.Usage.Records == 0:
			rec.Coverage = api.Coverage{State: "none", Reasons: []string{"nothing captured yet"}}
		case len(reasons) > 0:
			rec.Coverage = api.Coverage{State: "partial", Reasons: reasons}
		default:
			rec.Coverage = api.Coverage{State: "complete"}
		}
		return nil
	})
	return rec, internal(err)
}

// missingSeqs counts the numbers 1..last that events (the distinct
// sequences received) do not cover. It never overflows and is never
// negative, whatever the store holds: admission keeps seq in 1..MaxSeq, and
// data written around the Hub (seq <= 0) only makes the count smaller.
func missingSeqs(last, events int64) int64 {
	if last <= 0 || events >= last {
		return 0
	}
	return last - max(events, 0)
}

// sessionRecord projects one canonical session from its per-stream event
// statistics (streams in the order they first reached the Hub). Each
// stream's sequence starts at 1, so its missing numbers are LastSeq-Events;
// the session's are their sum. Where a later stream continues the session
// (a re-enabled spool, a second worktree, a lost capture ledger) a derived
// stream_boundary gap says that one account ended and another began and
// that nothing in between was observed.
func sessionRecord(ss store.Session, natives []string, streams []store.SessionStats) (api.SessionRecord, []api.GapRecord) {
	sr := api.SessionRecord{Session: ss.Canonical, Generation: ss.Generation, WorktreeID: ss.WorktreeID, NativeSessionIDs: natives, Agent: ss.Agent}
	if sr.NativeSessionIDs == nil {
		sr.NativeSessionIDs = []string{}
	}
	var gaps []api.GapRecord
	for i, st := range streams {
		missing := missingSeqs(st.LastSeq, st.Events)
		sr.Events += st.Events
		sr.MissingSeqs += missing
		sr.FirstSeq, sr.LastSeq = st.FirstSeq, st.LastSeq
		sr.Streams = append(sr.Streams, api.StreamRecord{Stream: st.Stream, Events: st.Events, FirstSeq: st.FirstSeq,
			LastSeq: st.LastSeq, MissingSeqs: missing, FirstReceivedAt: st.FirstReceived})
		if i > 0 {
			prev := streams[i-1]
			gaps = append(gaps, api.GapRecord{Session: ss.Canonical, Generation: ss.Generation, Stream: st.Stream,
				Derived: true, PreviousStream: prev.Stream, PreviousLastSeq: prev.LastSeq, ReceivedAt: st.FirstReceived,
				Gap: api.Gap{Kind: "capture_interrupted", Reason: api.GapReasonStreamBoundary}})
		}
	}
	return sr, gaps
}

// CurrentWork returns the Work that is current for a worktree and the
// generation the worktree is at (which is older than the Work's after a
// takeover elsewhere).
func (s *Service) CurrentWork(ctx context.Context, p Principal, repository, worktree string) (api.CurrentWork, error) {
	if !api.ValidName(worktree) {
		return api.CurrentWork{}, badf("worktree id is not valid")
	}
	var out api.CurrentWork
	err := s.st.View(ctx, func(tx store.Tx) error {
		repo, err := authorize(tx, p, repository, false)
		if err != nil {
			return err
		}
		cur, err := tx.Current(repo.ID, worktree)
		if errors.Is(err, store.ErrNotFound) {
			return api.Errorf(http.StatusNotFound, api.CodeNotFound, "worktree %s has no current work in repository %q", worktree, repo.Name)
		}
		if err != nil {
			return err
		}
		w, err := tx.WorkByID(cur.WorkID)
		if err != nil {
			return err
		}
		out.WorktreeID, out.Generation = worktree, cur.Generation
		out.Work, err = workView(tx, repo, w)
		return err
	})
	return out, internal(err)
}
