// Package store is the Hub's storage contract: the Store and Tx interfaces
// of transactional primitives that the Hub service composes into its rules,
// and the rows they carry. sqlstore implements Tx once in SQL; sqlite (the
// embedded default) and postgres (a team Hub) are the Stores; storetest is
// the conformance suite every Store runs.
package store

import (
	"context"
	"errors"

	"github.com/agentscm/agentscm/internal/hub/api"
)

// Sentinel errors of the primitives.
var (
	ErrNotFound = errors.New("not found")
	ErrExists   = errors.New("already exists")
)

// Store runs transactions. View transactions only read; Update transactions
// are serialized against every other writer, in this process and in others.
// A store may run an Update's fn more than once (PostgreSQL retries a
// serialization failure), so fn must only assign its outputs.
type Store interface {
	View(ctx context.Context, fn func(Tx) error) error
	Update(ctx context.Context, fn func(Tx) error) error
	Close() error
}

// Human is a person known to the Hub.
type Human struct {
	ID        string
	Name      string
	Admin     bool
	CreatedAt int64
}

// Repository is a repository known to the Hub.
type Repository struct {
	ID        string
	Name      string
	CreatedAt int64
}

// Token is an issued bearer token; only the SHA-256 of its secret is kept.
type Token struct {
	ID           string
	Hash         string
	HumanID      string
	RepositoryID string
	Scope        string
	Label        string
	CreatedAt    int64
}

// Work is a Work row.
type Work struct {
	ID           string
	RepositoryID string
	Title        string
	State        string
	Generation   int64
	CreatedBy    string
	CreatedAt    int64
	UpdatedAt    int64
}

// Checkpoint is one recorded state change of a Work.
type Checkpoint struct {
	WorkID     string
	Seq        int64
	Action     string
	From       string
	To         string
	Generation int64
	HumanID    string
	WorktreeID string
	Note       string
	At         int64
}

// Current says which Work, at which generation, a worktree captures into.
type Current struct {
	RepositoryID string
	WorktreeID   string
	WorkID       string
	Generation   int64
	UpdatedAt    int64
}

// Session is a canonical session of a Work at one generation. Alias is true
// for a named session (such as "default") that the first native session on
// its worktree joins.
type Session struct {
	WorkID     string
	Generation int64
	Canonical  string
	WorktreeID string
	Alias      bool
	CreatedAt  int64
	// Agent is the host adapter whose envelopes feed the session
	// (claude-code, codex, gemini), as the first envelope that named one
	// said; "" while no envelope named it (clients before the field).
	Agent string
}

// Envelope is the retained identity and digest of an accepted envelope.
type Envelope struct {
	RepositoryID string
	Identity     string
	Digest       string
	Type         string
	WorkID       string
	Generation   int64
	Session      string
	ReceivedAt   int64
}

// Action is an action start and its finish, as retained.
type Action struct {
	WorkID         string
	ActionID       string
	Generation     int64
	Session        string
	Start          *api.ActionStart
	StartIdentity  string
	Finish         *api.ActionFinish
	FinishIdentity string
}

// Scope locates content inside a Work.
type Scope struct {
	WorkID     string
	Generation int64
	Session    string
	// Stream is the envelope's client stream ('' for legacy clients): part
	// of the event sequence key and of a gap's range.
	Stream     string
	Identity   string
	ReceivedAt int64
}

// SessionStats summarises the events of one session.
type SessionStats struct {
	Generation int64
	Session    string
	// Stream is the client stream of these events: one row per session
	// and stream, streams in the order they first reached the Hub.
	Stream        string
	FirstReceived int64
	Events        int64
	FirstSeq      int64
	LastSeq       int64
	// LastKind is the kind of the session's highest-sequence event.
	LastKind string
}

// Tx is one transaction's primitives. Lookups return ErrNotFound; inserts
// of an existing key return ErrExists.
type Tx interface {
	InsertHuman(h Human) error
	HumanByName(name string) (Human, error)
	HumanByID(id string) (Human, error)
	ListHumans() ([]Human, error)

	InsertRepository(r Repository) error
	RepositoryByName(name string) (Repository, error)
	RepositoryByID(id string) (Repository, error)
	ListRepositories() ([]Repository, error)

	InsertToken(t Token) error
	TokenByHash(hash string) (Token, error)
	// TokenPrincipal returns a token with its human and repository.
	TokenPrincipal(hash string) (Token, Human, Repository, error)
	ListTokens() ([]Token, error)

	InsertWork(w Work) error
	WorkByID(id string) (Work, error)
	UpdateWork(w Work) error
	// ListWorks returns at most limit Works of a repository, newest first,
	// and the total count.
	ListWorks(repositoryID string, limit int) ([]Work, int, error)

	// AppendCheckpoint stores c with the next sequence number of its Work.
	AppendCheckpoint(c Checkpoint) (int64, error)
	Checkpoints(workID string) ([]Checkpoint, error)

	Current(repositoryID, worktreeID string) (Current, error)
	SetCurrent(c Current) error
	CurrentsForWork(workID string) ([]Current, error)

	InsertSession(s Session) error
	Session(workID string, generation int64, canonical string) (Session, error)
	Sessions(workID string) ([]Session, error)
	// SessionByNative returns the session a native id is bound to at a
	// generation.
	SessionByNative(workID string, generation int64, native string) (Session, error)
	// UnboundAlias returns an alias session at a generation on a worktree
	// that no native session has joined yet.
	UnboundAlias(workID string, generation int64, worktreeID string) (Session, error)
	BindNative(workID string, generation int64, canonical, native string, at int64) error
	// ClaimSessionAgent sets a session's agent if it has none yet; a
	// session that already names one keeps it.
	ClaimSessionAgent(workID string, generation int64, canonical, agent string) error
	// Natives lists the native ids bound to each session, keyed by
	// generation and canonical id.
	Natives(workID string) (map[SessionKey][]string, error)

	EnvelopeByIdentity(repositoryID, identity string) (Envelope, error)
	InsertEnvelope(e Envelope) error

	// InsertEvents stores events; an event whose (work, generation,
	// session, seq) is taken returns ErrExists.
	InsertEvents(s Scope, events []api.Event) error
	Action(workID, actionID string) (Action, error)
	InsertActionStart(s Scope, a *api.ActionStart) error
	// SetActionFinish records a finish, inserting a finish-only row when the
	// start never arrived.
	SetActionFinish(s Scope, f *api.ActionFinish) error
	InsertUsage(s Scope, u *api.Usage) error
	InsertGap(s Scope, g *api.Gap) error
	// InsertSetup records a session's observed setup once (later copies
	// are ignored).
	InsertSetup(s Scope, st *api.Setup) error

	// ListEvents returns at most limit events of a Work in (generation,
	// session, seq) order and the total count.
	ListEvents(workID string, limit int) ([]api.EventRecord, int64, error)
	SessionStats(workID string) ([]SessionStats, error)
	Actions(workID string) ([]Action, error)
	Gaps(workID string) ([]api.GapRecord, error)
	UsageTotals(workID string) (api.UsageTotals, error)
	// Setups returns a Work's observed setups by receipt time.
	Setups(workID string) ([]api.SetupRecord, error)

	// ChangelogGrant returns a Work's explicit grant (ErrNotFound: none).
	ChangelogGrant(workID string) (api.Grant, error)
	SetChangelogGrant(workID string, g api.Grant, at int64) error
	// ChangelogUsage sums a Work's stored increments (every worktree's).
	ChangelogUsage(workID string) (api.GrantUsage, error)
	// ChangelogLast returns the last position of a worktree's sequence in
	// a Work (-1 when none).
	ChangelogLast(workID, worktreeID string) (int, error)
	ChangelogIncrement(workID, worktreeID string, position int) (Increment, error)
	// ChangelogIncrements lists a Work's increments by worktree, then
	// position.
	ChangelogIncrements(workID string) ([]Increment, error)
	// PutChangelogIncrement stores an increment, replacing the one at its
	// position.
	PutChangelogIncrement(inc Increment) error
	// IncrementDigestRefs counts the increments (of any Work) stored under
	// an object digest.
	IncrementDigestRefs(digest string) (int64, error)

	// BodyTx keeps shared conversation bodies (bodies.go).
	BodyTx
}

// Increment is one changelog increment stored for a Work: the object's
// digest and size and what its metadata says. Each worktree (checkout)
// uploads its own sequence of positions into a Work.
type Increment struct {
	WorkID     string
	Position   int
	Digest     string
	Size       int64
	Session    string
	Generation int64
	WorktreeID string
	Kind       string
	Tool       string
	Failed     bool
	StoredAt   int64
}

// SessionKey names a session inside a Work.
type SessionKey struct {
	Generation int64
	Canonical  string
}
