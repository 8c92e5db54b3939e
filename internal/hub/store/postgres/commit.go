package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/hub/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

var _ store.EventsCommitter = (*Store)(nil)

// commitEventsSQL is CommitEvents' statement. Its writes are conditional on
// every check the service makes of a plain events envelope (the Work in the
// repository, accepting, at the envelope's generation, with the session),
// so a refused envelope writes nothing and the transaction can be
// committed in the same round trip. A taken identity is read only when the
// claim inserted nothing: the lookup is behind a one-time filter, so a
// fresh identity takes no SSI predicate lock on the envelopes index (which
// failed concurrent ingests against each other). A taken sequence number is
// a unique violation of events_pkey, which aborts the transaction.
const commitEventsSQL = commitEventsHead + commitEventsArrival + commitEventsTail

// commitEventsKnownSQL is commitEventsSQL for a stream whose arrival is
// already recorded (streamCache): without the arrival's read of the
// session's streams and its insert.
const commitEventsKnownSQL = commitEventsHead + commitEventsTail

const commitEventsHead = `WITH w AS (SELECT id,repository_id,title,state,generation,created_by,created_at,updated_at FROM works WHERE id=$5),
	sess AS (SELECT EXISTS(SELECT 1 FROM sessions WHERE work_id=$5 AND generation=$6::bigint AND canonical=$7) AS found),
	env AS (INSERT INTO envelopes(repository_id,identity,digest,type,work_id,generation,session,received_at)
		SELECT $1,$2,$3,$4,$5,$6::bigint,$7,$8::bigint FROM w, sess
		WHERE sess.found AND w.repository_id=$1 AND w.state=ANY($13::text[]) AND w.generation=$6::bigint
		ON CONFLICT DO NOTHING RETURNING 1),`

const commitEventsArrival = `
	arrival AS (INSERT INTO streams(work_id,generation,session,stream,arrival)
		SELECT $5,$6::bigint,$7,$9,m.a FROM (SELECT coalesce(max(arrival),0)+1 AS a FROM streams WHERE work_id=$5 AND generation=$6::bigint AND session=$7) m
		WHERE EXISTS(SELECT 1 FROM env) ON CONFLICT DO NOTHING),`

const commitEventsTail = `
	ev AS (INSERT INTO events(work_id,generation,session,stream,seq,kind,body,identity,received_at)
		SELECT $5,$6::bigint,$7,$9,u.seq,u.kind,u.body,$2,$8::bigint FROM unnest($10::bigint[],$11::text[],$12::text[]) AS u(seq,kind,body)
		WHERE EXISTS(SELECT 1 FROM env) RETURNING 1)
	SELECT (SELECT count(*) FROM env), (SELECT count(*) FROM ev),
		(SELECT digest||' '||type FROM envelopes WHERE repository_id=$1 AND identity=$2 AND NOT EXISTS(SELECT 1 FROM env)),
		(SELECT found FROM sess), w.id,w.repository_id,w.title,w.state,w.generation,w.created_by,w.created_at,w.updated_at
	FROM (SELECT 1) one LEFT JOIN w ON true`

// eventsStmt is one envelope's statement: commitEventsSQL or, for a known
// stream, commitEventsKnownSQL; its arguments; its number of events.
type eventsStmt struct {
	sql    string
	args   []any
	n      int
	stream streamKey
}

// CommitEvents implements store.EventsCommitter: BEGIN ISOLATION LEVEL
// SERIALIZABLE, the statement and COMMIT are sent as one pipeline, one round
// trip where an Update with IngestEvents takes three. A serialization
// failure or deadlock runs it again, as Update does. Like Update's commit,
// the pipeline is not cancelled by ctx once sent.
func (s *Store) CommitEvents(ctx context.Context, e store.Envelope, sc store.Scope, events []api.Event, accepting []string) (store.CommittedEvents, error) {
	seqs := make([]int64, len(events))
	kinds := make([]string, len(events))
	bodies := make([]string, len(events))
	for i, ev := range events {
		body, err := json.Marshal(ev)
		if err != nil {
			return store.CommittedEvents{}, err
		}
		seqs[i], kinds[i], bodies[i] = ev.Seq, ev.Kind, string(body)
	}
	st := eventsStmt{sql: commitEventsSQL, n: len(events), stream: streamKey{sc.WorkID, sc.Generation, sc.Session, sc.Stream},
		args: []any{e.RepositoryID, e.Identity, e.Digest, e.Type, sc.WorkID, sc.Generation, sc.Session, sc.ReceivedAt, sc.Stream, seqs, kinds, bodies, accepting}}
	if s.streams.known(st.stream) {
		st.sql = commitEventsKnownSQL
	}
	var out store.CommittedEvents
	var err error
	if s.evOps != nil {
		out, err = s.commitEventsGrouped(ctx, st)
	} else {
		out, err = s.commitEventsAlone(ctx, st)
	}
	if err == nil && out.Accepted {
		// Committed with its arrival (or the stream had one).
		s.streams.add(st.stream)
	}
	return out, err
}

// commitEventsAlone commits one envelope in a transaction of its own, with
// the retries.
func (s *Store) commitEventsAlone(ctx context.Context, st eventsStmt) (store.CommittedEvents, error) {
	for attempt := 0; ; attempt++ {
		out, err := s.commitEvents(ctx, st)
		if err == nil || !retryable(err) || attempt >= MaxRetries {
			return out, err
		}
		s.retries.Add(1)
		d := time.Duration(1+rand.IntN(1<<min(attempt, 6))) * time.Millisecond
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
}

func (s *Store) commitEvents(ctx context.Context, st eventsStmt) (store.CommittedEvents, error) {
	if err := ctx.Err(); err != nil {
		return store.CommittedEvents{}, err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return store.CommittedEvents{}, fmt.Errorf("hub store: acquire a connection: %w", err)
	}
	// A connection left inside a transaction is destroyed on Release.
	defer conn.Release()
	outs, err := runEventsPipeline(context.WithoutCancel(ctx), conn, []eventsStmt{st})
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == "events_pkey" {
			return store.CommittedEvents{SequenceTaken: true}, nil
		}
		if retryable(err) {
			return store.CommittedEvents{}, err
		}
		return store.CommittedEvents{}, fmt.Errorf("hub store: ingest events: %w", err)
	}
	return outs[0], nil
}

// runEventsPipeline sends BEGIN ISOLATION LEVEL SERIALIZABLE, each envelope's
// statement and COMMIT as one pipeline (one
// round trip) and reads what each statement found and did. An error means
// nothing was committed when it is a *pgconn.PgError (a statement failed,
// or the commit did: the transaction is rolled back); any other error leaves
// the outcome unknown (say, the connection broke).
func runEventsPipeline(ctx context.Context, conn *pgxpool.Conn, stmts []eventsStmt) ([]store.CommittedEvents, error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN ISOLATION LEVEL SERIALIZABLE")
	for _, st := range stmts {
		b.Queue(st.sql, st.args...)
	}
	b.Queue("COMMIT")
	br := conn.SendBatch(ctx, b)
	outs := make([]store.CommittedEvents, len(stmts))
	_, err := br.Exec()
	for i, st := range stmts {
		if err != nil {
			break
		}
		outs[i], err = scanCommitted(br.QueryRow(), st.n)
	}
	var tag pgconn.CommandTag
	if err == nil {
		tag, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if conn.Conn().PgConn().TxStatus() != 'I' {
		// A statement failed and the pipeline skipped the COMMIT.
		conn.Exec(ctx, "ROLLBACK")
	}
	if err != nil {
		return nil, err
	}
	if tag.String() != "COMMIT" {
		return nil, fmt.Errorf("the transaction ended in %q, not COMMIT", tag.String())
	}
	return outs, nil
}

// errPartial is a statement that claimed an envelope and inserted fewer
// events than it carries: it cannot happen (every event is inserted or the
// statement fails), and the commit is reported, not hidden.
var errPartial = errors.New("an envelope was committed with only some of its events")

// scanCommitted reads commitEventsSQL's row for an envelope of n events.
func scanCommitted(row pgx.Row, n int) (store.CommittedEvents, error) {
	var out store.CommittedEvents
	var claimed, inserted int64
	var taken *string
	var found *bool
	var w struct {
		id, repo, title, state, createdBy *string
		gen, createdAt, updatedAt         *int64
	}
	if err := row.Scan(&claimed, &inserted, &taken, &found, &w.id, &w.repo, &w.title, &w.state, &w.gen, &w.createdBy, &w.createdAt, &w.updatedAt); err != nil {
		return out, err
	}
	if claimed == 1 && inserted != int64(n) {
		return out, fmt.Errorf("%w: %d of %d", errPartial, inserted, n)
	}
	out.Accepted = claimed == 1
	if taken != nil {
		// Digests and types have no spaces ("sha256:..." and a name).
		out.Taken = true
		out.TakenDigest, out.TakenType, _ = strings.Cut(*taken, " ")
	}
	out.SessionFound = found != nil && *found
	if w.id == nil {
		out.WorkErr = store.ErrNotFound
	} else {
		out.Work = store.Work{ID: *w.id, RepositoryID: *w.repo, Title: *w.title, State: *w.state, Generation: *w.gen,
			CreatedBy: *w.createdBy, CreatedAt: *w.createdAt, UpdatedAt: *w.updatedAt}
	}
	return out, nil
}

// streamKey names a session's stream.
type streamKey struct {
	work       string
	generation int64
	session    string
	stream     string
}

// maxKnownStreams bounds streamCache; a full cache starts again empty.
const maxKnownStreams = 1 << 14

// streamCache remembers the streams this process saw committed with their
// arrival: their next envelopes need no arrival (rows of streams are never
// deleted, so a stream once recorded stays recorded).
type streamCache struct {
	mu sync.Mutex
	m  map[streamKey]struct{}
}

func (c *streamCache) known(k streamKey) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.m[k]
	return ok
}

func (c *streamCache) add(k streamKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxKnownStreams {
		c.m = make(map[streamKey]struct{})
	}
	c.m[k] = struct{}{}
}
