package store

import (
	"context"

	"github.com/agentscm/agentscm/internal/hub/api"
)

// EventsIngester is an optional Tx extension: a store that can accept a
// plain events envelope in one round trip implements it (PostgreSQL); the
// service falls back to the separate calls otherwise (SQLite, in-process,
// gains nothing from it).
type EventsIngester interface {
	// IngestEvents does, as one statement, what the service's separate
	// calls do for an events envelope: InsertEnvelope(e); and only when
	// that inserted it, InsertEvents(sc, events); and reads the Work
	// e.WorkID and whether its session sc.Session exists at sc.Generation.
	// Its writes are made whatever the Work and session say: the caller
	// refuses (and so discards the transaction) when they do not fit.
	IngestEvents(e Envelope, sc Scope, events []api.Event) (IngestedEvents, error)
}

// IngestedEvents is what IngestEvents found and did.
type IngestedEvents struct {
	// EnvelopeTaken: the identity was already taken (nothing was written).
	EnvelopeTaken bool
	// Work is the envelope's Work (ErrNotFound in WorkErr when there is
	// none).
	Work    Work
	WorkErr error
	// SessionFound: the Work has the envelope's session at its generation.
	SessionFound bool
	// Inserted is how many of the events were inserted (fewer: a taken
	// sequence number).
	Inserted int64
}

// EventsCommitter is an optional Store extension: a store that can accept a
// plain events envelope as one transaction in one round trip (BEGIN, one
// statement, COMMIT pipelined) implements it (PostgreSQL). Every check the
// service makes is a condition of the statement's writes, so an envelope
// the service then refuses has written nothing; the service still makes
// the checks, on what the statement read, to choose the refusal.
type EventsCommitter interface {
	// CommitEvents claims e's identity and inserts the events (and the
	// stream's arrival) only if the Work e.WorkID exists in
	// e.RepositoryID, its state is one of accepting, its generation is
	// sc.Generation and it has the session sc.Session at that generation;
	// and commits. A taken identity writes nothing and returns its digest;
	// a taken sequence number rolls everything back (SequenceTaken).
	CommitEvents(ctx context.Context, e Envelope, sc Scope, events []api.Event, accepting []string) (CommittedEvents, error)
}

// CommittedEvents is what CommitEvents found and did.
type CommittedEvents struct {
	// Accepted: the envelope and all its events were committed. Otherwise
	// nothing was written.
	Accepted bool
	// Taken: the identity was already taken, by an envelope of TakenDigest
	// and TakenType.
	Taken                  bool
	TakenDigest, TakenType string
	// SequenceTaken: the session's stream already has one of the events'
	// sequence numbers.
	SequenceTaken bool
	// Work is the envelope's Work (ErrNotFound in WorkErr when there is
	// none); SessionFound: it has the session at the envelope's generation.
	Work         Work
	WorkErr      error
	SessionFound bool
}
