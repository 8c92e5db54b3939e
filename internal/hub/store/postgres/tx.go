package postgres

import (
	"encoding/json"
	"fmt"

	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/hub/store"
)

var _ store.Store = (*Store)(nil)
var _ store.Tx = (*pgTx)(nil)

// mapErr classifies an error of the statements written here, as sqlstore
// classifies its own.
func mapErr(err error) error { return Dialect().MapErr(err) }

// InsertEvents inserts a batch in one statement (arrays unnested); a taken
// sequence number inserts nothing of the batch's conflicting rows and
// returns ErrExists, and the caller's error discards the transaction.
func (t *pgTx) InsertEvents(s store.Scope, events []api.Event) error {
	if len(events) == 0 {
		return nil
	}
	seqs := make([]int64, len(events))
	kinds := make([]string, len(events))
	bodies := make([]string, len(events))
	for i, ev := range events {
		body, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		seqs[i], kinds[i], bodies[i] = ev.Seq, ev.Kind, string(body)
	}
	// One statement: the order in which a session's streams first reached
	// the Hub (the receipt clock has whole seconds only), then the batch.
	n, err := t.c.Exec(`WITH arrival AS (INSERT INTO streams(work_id,generation,session,stream,arrival)
		SELECT $1,$2,$3,$4,coalesce(max(arrival),0)+1 FROM streams WHERE work_id=$1 AND generation=$2 AND session=$3
		ON CONFLICT DO NOTHING)
		INSERT INTO events(work_id,generation,session,stream,seq,kind,body,identity,received_at)
		SELECT $1,$2,$3,$4,u.seq,u.kind,u.body,$5,$6 FROM unnest($7::bigint[],$8::text[],$9::text[]) AS u(seq,kind,body)
		ON CONFLICT DO NOTHING`, s.WorkID, s.Generation, s.Session, s.Stream, s.Identity, s.ReceivedAt, seqs, kinds, bodies)
	if err != nil {
		return mapErr(err)
	}
	if n != int64(len(events)) {
		return fmt.Errorf("%w: %d of %d events have a taken sequence number", store.ErrExists, int64(len(events))-n, len(events))
	}
	return nil
}

var _ store.EventsIngester = (*pgTx)(nil)

// IngestEvents claims the envelope's identity, records the stream's arrival
// and inserts the events — the last two only when the identity was free —
// and reads the Work and the session, in one statement and round trip.
func (t *pgTx) IngestEvents(e store.Envelope, s store.Scope, events []api.Event) (store.IngestedEvents, error) {
	var out store.IngestedEvents
	seqs := make([]int64, len(events))
	kinds := make([]string, len(events))
	bodies := make([]string, len(events))
	for i, ev := range events {
		body, err := json.Marshal(ev)
		if err != nil {
			return out, err
		}
		seqs[i], kinds[i], bodies[i] = ev.Seq, ev.Kind, string(body)
	}
	var claimed int64
	var w struct {
		id, repo, title, state, createdBy *string
		gen, createdAt, updatedAt         *int64
	}
	err := t.c.QueryRow(`WITH env AS (INSERT INTO envelopes(repository_id,identity,digest,type,work_id,generation,session,received_at)
			VALUES($1,$2,$3,$4,$5,$6,$7,$8) ON CONFLICT DO NOTHING RETURNING 1),
		arrival AS (INSERT INTO streams(work_id,generation,session,stream,arrival)
			SELECT $5,$6,$7,$9,m.a FROM (SELECT coalesce(max(arrival),0)+1 AS a FROM streams WHERE work_id=$5 AND generation=$6 AND session=$7) m
			WHERE EXISTS(SELECT 1 FROM env) ON CONFLICT DO NOTHING),
		ev AS (INSERT INTO events(work_id,generation,session,stream,seq,kind,body,identity,received_at)
			SELECT $5,$6,$7,$9,u.seq,u.kind,u.body,$2,$8 FROM unnest($10::bigint[],$11::text[],$12::text[]) AS u(seq,kind,body)
			WHERE EXISTS(SELECT 1 FROM env) ON CONFLICT DO NOTHING RETURNING 1)
		SELECT (SELECT count(*) FROM env), (SELECT count(*) FROM ev),
			EXISTS(SELECT 1 FROM sessions WHERE work_id=$5 AND generation=$6 AND canonical=$7),
			w.id,w.repository_id,w.title,w.state,w.generation,w.created_by,w.created_at,w.updated_at
		FROM (SELECT 1) one LEFT JOIN works w ON w.id=$5`,
		[]any{e.RepositoryID, e.Identity, e.Digest, e.Type, s.WorkID, s.Generation, s.Session, s.ReceivedAt, s.Stream, seqs, kinds, bodies},
		&claimed, &out.Inserted, &out.SessionFound, &w.id, &w.repo, &w.title, &w.state, &w.gen, &w.createdBy, &w.createdAt, &w.updatedAt)
	if err != nil {
		return out, mapErr(err)
	}
	out.EnvelopeTaken = claimed == 0
	if w.id == nil {
		out.WorkErr = store.ErrNotFound
	} else {
		out.Work = store.Work{ID: *w.id, RepositoryID: *w.repo, Title: *w.title, State: *w.state, Generation: *w.gen,
			CreatedBy: *w.createdBy, CreatedAt: *w.createdAt, UpdatedAt: *w.updatedAt}
	}
	return out, nil
}
