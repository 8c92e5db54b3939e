package store

import "github.com/agentscm/agentscm/internal/hub/api"

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
