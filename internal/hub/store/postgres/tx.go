package postgres

import (
	"encoding/json"
	"fmt"

	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/hub/store"
	"github.com/jackc/pgx/v5"
)

var _ store.Store = (*Store)(nil)
var _ store.Tx = (*pgTx)(nil)

func (t *pgTx) InsertHuman(h store.Human) error {
	return t.insert("INSERT INTO humans(id,name,admin,created_at) VALUES($1,$2,$3,$4) ON CONFLICT DO NOTHING", h.ID, h.Name, h.Admin, h.CreatedAt)
}

func (t *pgTx) human(where, arg string) (store.Human, error) {
	var h store.Human
	err := t.row("SELECT id,name,admin,created_at FROM humans WHERE "+where+"=$1", []any{arg}, &h.ID, &h.Name, &h.Admin, &h.CreatedAt)
	return h, err
}

func (t *pgTx) HumanByName(name string) (store.Human, error) { return t.human("name", name) }
func (t *pgTx) HumanByID(id string) (store.Human, error)     { return t.human("id", id) }

func (t *pgTx) ListHumans() ([]store.Human, error) {
	var out []store.Human
	err := t.rows("SELECT id,name,admin,created_at FROM humans ORDER BY name", nil, func(r pgx.Rows) error {
		var h store.Human
		err := r.Scan(&h.ID, &h.Name, &h.Admin, &h.CreatedAt)
		out = append(out, h)
		return err
	})
	return out, err
}

func (t *pgTx) InsertRepository(r store.Repository) error {
	return t.insert("INSERT INTO repositories(id,name,created_at) VALUES($1,$2,$3) ON CONFLICT DO NOTHING", r.ID, r.Name, r.CreatedAt)
}

func (t *pgTx) repository(where, arg string) (store.Repository, error) {
	var r store.Repository
	err := t.row("SELECT id,name,created_at FROM repositories WHERE "+where+"=$1", []any{arg}, &r.ID, &r.Name, &r.CreatedAt)
	return r, err
}

func (t *pgTx) RepositoryByName(name string) (store.Repository, error) {
	return t.repository("name", name)
}
func (t *pgTx) RepositoryByID(id string) (store.Repository, error) { return t.repository("id", id) }

func (t *pgTx) ListRepositories() ([]store.Repository, error) {
	var out []store.Repository
	err := t.rows("SELECT id,name,created_at FROM repositories ORDER BY name", nil, func(r pgx.Rows) error {
		var x store.Repository
		err := r.Scan(&x.ID, &x.Name, &x.CreatedAt)
		out = append(out, x)
		return err
	})
	return out, err
}

func (t *pgTx) InsertToken(k store.Token) error {
	return t.insert("INSERT INTO tokens(id,hash,human_id,repository_id,scope,label,created_at) VALUES($1,$2,$3,$4,$5,$6,$7) ON CONFLICT DO NOTHING",
		k.ID, k.Hash, k.HumanID, k.RepositoryID, k.Scope, k.Label, k.CreatedAt)
}

const tokenCols = "id,hash,human_id,repository_id,scope,label,created_at"

func tokenDest(k *store.Token) []any {
	return []any{&k.ID, &k.Hash, &k.HumanID, &k.RepositoryID, &k.Scope, &k.Label, &k.CreatedAt}
}

func (t *pgTx) TokenByHash(hash string) (store.Token, error) {
	var k store.Token
	err := t.row("SELECT "+tokenCols+" FROM tokens WHERE hash=$1", []any{hash}, tokenDest(&k)...)
	return k, err
}

func (t *pgTx) TokenPrincipal(hash string) (store.Token, store.Human, store.Repository, error) {
	var k store.Token
	var h store.Human
	var r store.Repository
	err := t.row(`SELECT k.id,k.hash,k.human_id,k.repository_id,k.scope,k.label,k.created_at, h.id,h.name,h.admin,h.created_at, r.id,r.name,r.created_at
		FROM tokens k JOIN humans h ON h.id=k.human_id JOIN repositories r ON r.id=k.repository_id WHERE k.hash=$1`, []any{hash},
		&k.ID, &k.Hash, &k.HumanID, &k.RepositoryID, &k.Scope, &k.Label, &k.CreatedAt, &h.ID, &h.Name, &h.Admin, &h.CreatedAt, &r.ID, &r.Name, &r.CreatedAt)
	return k, h, r, err
}

func (t *pgTx) ListTokens() ([]store.Token, error) {
	var out []store.Token
	err := t.rows("SELECT "+tokenCols+" FROM tokens ORDER BY created_at, id", nil, func(r pgx.Rows) error {
		var k store.Token
		err := r.Scan(tokenDest(&k)...)
		out = append(out, k)
		return err
	})
	return out, err
}

const workCols = "id,repository_id,title,state,generation,created_by,created_at,updated_at"

func workDest(w *store.Work) []any {
	return []any{&w.ID, &w.RepositoryID, &w.Title, &w.State, &w.Generation, &w.CreatedBy, &w.CreatedAt, &w.UpdatedAt}
}

func (t *pgTx) InsertWork(w store.Work) error {
	return t.insert("INSERT INTO works("+workCols+") VALUES($1,$2,$3,$4,$5,$6,$7,$8) ON CONFLICT DO NOTHING",
		w.ID, w.RepositoryID, w.Title, w.State, w.Generation, w.CreatedBy, w.CreatedAt, w.UpdatedAt)
}

func (t *pgTx) WorkByID(id string) (store.Work, error) {
	var w store.Work
	err := t.row("SELECT "+workCols+" FROM works WHERE id=$1", []any{id}, workDest(&w)...)
	return w, err
}

func (t *pgTx) UpdateWork(w store.Work) error {
	n, err := t.exec("UPDATE works SET title=$1,state=$2,generation=$3,updated_at=$4 WHERE id=$5", w.Title, w.State, w.Generation, w.UpdatedAt, w.ID)
	if err != nil {
		return err
	}
	if n != 1 {
		return store.ErrNotFound
	}
	return nil
}

func (t *pgTx) ListWorks(repositoryID string, limit int) ([]store.Work, int, error) {
	var total int
	if err := t.row("SELECT count(*) FROM works WHERE repository_id=$1", []any{repositoryID}, &total); err != nil {
		return nil, 0, err
	}
	var out []store.Work
	err := t.rows("SELECT "+workCols+" FROM works WHERE repository_id=$1 ORDER BY created_at DESC, id DESC LIMIT $2", []any{repositoryID, limit}, func(r pgx.Rows) error {
		var w store.Work
		err := r.Scan(workDest(&w)...)
		out = append(out, w)
		return err
	})
	return out, total, err
}

func (t *pgTx) AppendCheckpoint(c store.Checkpoint) (int64, error) {
	var seq int64
	if err := t.row("SELECT coalesce(max(seq),0)+1 FROM checkpoints WHERE work_id=$1", []any{c.WorkID}, &seq); err != nil {
		return 0, err
	}
	err := t.insert("INSERT INTO checkpoints(work_id,seq,action,from_state,to_state,generation,human_id,worktree_id,note,at) VALUES($1,$2,$3,$4,$5,$6,$7,$8,$9,$10) ON CONFLICT DO NOTHING",
		c.WorkID, seq, c.Action, c.From, c.To, c.Generation, c.HumanID, c.WorktreeID, c.Note, c.At)
	return seq, err
}

func (t *pgTx) Checkpoints(workID string) ([]store.Checkpoint, error) {
	var out []store.Checkpoint
	err := t.rows("SELECT work_id,seq,action,from_state,to_state,generation,human_id,worktree_id,note,at FROM checkpoints WHERE work_id=$1 ORDER BY seq", []any{workID}, func(r pgx.Rows) error {
		var c store.Checkpoint
		err := r.Scan(&c.WorkID, &c.Seq, &c.Action, &c.From, &c.To, &c.Generation, &c.HumanID, &c.WorktreeID, &c.Note, &c.At)
		out = append(out, c)
		return err
	})
	return out, err
}

func (t *pgTx) Current(repositoryID, worktreeID string) (store.Current, error) {
	c := store.Current{RepositoryID: repositoryID, WorktreeID: worktreeID}
	err := t.row("SELECT work_id,generation,updated_at FROM currents WHERE repository_id=$1 AND worktree_id=$2",
		[]any{repositoryID, worktreeID}, &c.WorkID, &c.Generation, &c.UpdatedAt)
	return c, err
}

func (t *pgTx) SetCurrent(c store.Current) error {
	_, err := t.exec(`INSERT INTO currents(repository_id,worktree_id,work_id,generation,updated_at) VALUES($1,$2,$3,$4,$5)
		ON CONFLICT(repository_id,worktree_id) DO UPDATE SET work_id=excluded.work_id, generation=excluded.generation, updated_at=excluded.updated_at`,
		c.RepositoryID, c.WorktreeID, c.WorkID, c.Generation, c.UpdatedAt)
	return err
}

func (t *pgTx) CurrentsForWork(workID string) ([]store.Current, error) {
	var out []store.Current
	err := t.rows("SELECT repository_id,worktree_id,work_id,generation,updated_at FROM currents WHERE work_id=$1 ORDER BY worktree_id", []any{workID}, func(r pgx.Rows) error {
		var c store.Current
		err := r.Scan(&c.RepositoryID, &c.WorktreeID, &c.WorkID, &c.Generation, &c.UpdatedAt)
		out = append(out, c)
		return err
	})
	return out, err
}

const sessionCols = "work_id,generation,canonical,worktree_id,alias,created_at"

func sessionDest(s *store.Session) []any {
	return []any{&s.WorkID, &s.Generation, &s.Canonical, &s.WorktreeID, &s.Alias, &s.CreatedAt}
}

func (t *pgTx) InsertSession(s store.Session) error {
	return t.insert("INSERT INTO sessions("+sessionCols+") VALUES($1,$2,$3,$4,$5,$6) ON CONFLICT DO NOTHING",
		s.WorkID, s.Generation, s.Canonical, s.WorktreeID, s.Alias, s.CreatedAt)
}

func (t *pgTx) Session(workID string, generation int64, canonical string) (store.Session, error) {
	var s store.Session
	err := t.row("SELECT "+sessionCols+" FROM sessions WHERE work_id=$1 AND generation=$2 AND canonical=$3", []any{workID, generation, canonical}, sessionDest(&s)...)
	return s, err
}

func (t *pgTx) Sessions(workID string) ([]store.Session, error) {
	var out []store.Session
	err := t.rows("SELECT "+sessionCols+" FROM sessions WHERE work_id=$1 ORDER BY generation, created_at, canonical", []any{workID}, func(r pgx.Rows) error {
		var s store.Session
		err := r.Scan(sessionDest(&s)...)
		out = append(out, s)
		return err
	})
	return out, err
}

func (t *pgTx) SessionByNative(workID string, generation int64, native string) (store.Session, error) {
	var s store.Session
	err := t.row(`SELECT s.work_id,s.generation,s.canonical,s.worktree_id,s.alias,s.created_at
		FROM session_natives n JOIN sessions s ON s.work_id=n.work_id AND s.generation=n.generation AND s.canonical=n.canonical
		WHERE n.work_id=$1 AND n.generation=$2 AND n.native=$3`, []any{workID, generation, native}, sessionDest(&s)...)
	return s, err
}

func (t *pgTx) UnboundAlias(workID string, generation int64, worktreeID string) (store.Session, error) {
	var s store.Session
	err := t.row(`SELECT `+sessionCols+` FROM sessions s
		WHERE work_id=$1 AND generation=$2 AND worktree_id=$3 AND alias
		AND NOT EXISTS (SELECT 1 FROM session_natives n WHERE n.work_id=s.work_id AND n.generation=s.generation AND n.canonical=s.canonical)
		ORDER BY created_at, canonical LIMIT 1`, []any{workID, generation, worktreeID}, sessionDest(&s)...)
	return s, err
}

func (t *pgTx) BindNative(workID string, generation int64, canonical, native string, at int64) error {
	return t.insert("INSERT INTO session_natives(work_id,generation,native,canonical,first_seen) VALUES($1,$2,$3,$4,$5) ON CONFLICT DO NOTHING",
		workID, generation, native, canonical, at)
}

func (t *pgTx) Natives(workID string) (map[store.SessionKey][]string, error) {
	out := map[store.SessionKey][]string{}
	err := t.rows("SELECT generation,canonical,native FROM session_natives WHERE work_id=$1 ORDER BY first_seen, native", []any{workID}, func(r pgx.Rows) error {
		var k store.SessionKey
		var n string
		if err := r.Scan(&k.Generation, &k.Canonical, &n); err != nil {
			return err
		}
		out[k] = append(out[k], n)
		return nil
	})
	return out, err
}

func (t *pgTx) EnvelopeByIdentity(repositoryID, identity string) (store.Envelope, error) {
	e := store.Envelope{RepositoryID: repositoryID, Identity: identity}
	err := t.row("SELECT digest,type,work_id,generation,session,received_at FROM envelopes WHERE repository_id=$1 AND identity=$2",
		[]any{repositoryID, identity}, &e.Digest, &e.Type, &e.WorkID, &e.Generation, &e.Session, &e.ReceivedAt)
	return e, err
}

func (t *pgTx) InsertEnvelope(e store.Envelope) error {
	return t.insert("INSERT INTO envelopes(repository_id,identity,digest,type,work_id,generation,session,received_at) VALUES($1,$2,$3,$4,$5,$6,$7,$8) ON CONFLICT DO NOTHING",
		e.RepositoryID, e.Identity, e.Digest, e.Type, e.WorkID, e.Generation, e.Session, e.ReceivedAt)
}

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
	n, err := t.exec(`WITH arrival AS (INSERT INTO streams(work_id,generation,session,stream,arrival)
		SELECT $1,$2,$3,$4,coalesce(max(arrival),0)+1 FROM streams WHERE work_id=$1 AND generation=$2 AND session=$3
		ON CONFLICT DO NOTHING)
		INSERT INTO events(work_id,generation,session,stream,seq,kind,body,identity,received_at)
		SELECT $1,$2,$3,$4,u.seq,u.kind,u.body,$5,$6 FROM unnest($7::bigint[],$8::text[],$9::text[]) AS u(seq,kind,body)
		ON CONFLICT DO NOTHING`, s.WorkID, s.Generation, s.Session, s.Stream, s.Identity, s.ReceivedAt, seqs, kinds, bodies)
	if err != nil {
		return err
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
	err := t.row(`WITH env AS (INSERT INTO envelopes(repository_id,identity,digest,type,work_id,generation,session,received_at)
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
		return out, err
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

func (t *pgTx) Action(workID, actionID string) (store.Action, error) {
	a := store.Action{WorkID: workID, ActionID: actionID}
	var start, finish *string
	err := t.row("SELECT generation,session,start,start_identity,finish,finish_identity FROM actions WHERE work_id=$1 AND action_id=$2",
		[]any{workID, actionID}, &a.Generation, &a.Session, &start, &a.StartIdentity, &finish, &a.FinishIdentity)
	if err != nil {
		return a, err
	}
	return a, decodeAction(&a, start, finish)
}

func decodeAction(a *store.Action, start, finish *string) error {
	if start != nil {
		a.Start = new(api.ActionStart)
		if err := json.Unmarshal([]byte(*start), a.Start); err != nil {
			return fmt.Errorf("stored action start %s: %w", a.ActionID, err)
		}
	}
	if finish != nil {
		a.Finish = new(api.ActionFinish)
		if err := json.Unmarshal([]byte(*finish), a.Finish); err != nil {
			return fmt.Errorf("stored action finish %s: %w", a.ActionID, err)
		}
	}
	return nil
}

func (t *pgTx) InsertActionStart(s store.Scope, a *api.ActionStart) error {
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	_, err = t.exec(`INSERT INTO actions(work_id,action_id,generation,session,start,start_identity) VALUES($1,$2,$3,$4,$5,$6)
		ON CONFLICT(work_id,action_id) DO UPDATE SET start=excluded.start, start_identity=excluded.start_identity WHERE actions.start IS NULL`,
		s.WorkID, a.ActionID, s.Generation, s.Session, string(b), s.Identity)
	return err
}

func (t *pgTx) SetActionFinish(s store.Scope, f *api.ActionFinish) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	_, err = t.exec(`INSERT INTO actions(work_id,action_id,generation,session,finish,finish_identity) VALUES($1,$2,$3,$4,$5,$6)
		ON CONFLICT(work_id,action_id) DO UPDATE SET finish=excluded.finish, finish_identity=excluded.finish_identity`,
		s.WorkID, f.ActionID, s.Generation, s.Session, string(b), s.Identity)
	return err
}

func (t *pgTx) InsertUsage(s store.Scope, u *api.Usage) error {
	return t.insert("INSERT INTO usage(work_id,generation,session,identity,model,message_id,input,output,cache_creation,cache_read,received_at,scope) VALUES($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12) ON CONFLICT DO NOTHING",
		s.WorkID, s.Generation, s.Session, s.Identity, u.Model, u.MessageID, u.InputTokens, u.OutputTokens,
		u.CacheCreationInputTokens, u.CacheReadInputTokens, s.ReceivedAt, u.Scope)
}

func (t *pgTx) InsertSetup(s store.Scope, st *api.Setup) error {
	un, err := json.Marshal(st.Unobserved)
	if err != nil {
		return err
	}
	_, err = t.exec("INSERT INTO setups(work_id,generation,session,artifact,model,permission_mode,effort,unobserved,received_at) VALUES($1,$2,$3,$4,$5,$6,$7,$8,$9) ON CONFLICT DO NOTHING",
		s.WorkID, s.Generation, s.Session, st.Artifact, st.Model, st.PermissionMode, st.Effort, string(un), s.ReceivedAt)
	return err
}

func (t *pgTx) Setups(workID string) ([]api.SetupRecord, error) {
	out := []api.SetupRecord{}
	err := t.rows("SELECT generation,session,artifact,model,permission_mode,effort,unobserved,received_at FROM setups WHERE work_id=$1 ORDER BY received_at,generation,session,artifact", []any{workID}, func(r pgx.Rows) error {
		var x api.SetupRecord
		var un string
		if err := r.Scan(&x.Generation, &x.Session, &x.Artifact, &x.Model, &x.PermissionMode, &x.Effort, &un, &x.ReceivedAt); err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(un), &x.Unobserved); err != nil {
			return fmt.Errorf("setup of work %s: %w", workID, err)
		}
		out = append(out, x)
		return nil
	})
	return out, err
}

func (t *pgTx) InsertGap(s store.Scope, g *api.Gap) error {
	return t.insert("INSERT INTO gaps(work_id,generation,session,identity,kind,reason,from_seq,to_seq,received_at,stream) VALUES($1,$2,$3,$4,$5,$6,$7,$8,$9,$10) ON CONFLICT DO NOTHING",
		s.WorkID, s.Generation, s.Session, s.Identity, g.Kind, g.Reason, g.FromSeq, g.ToSeq, s.ReceivedAt, s.Stream)
}

func (t *pgTx) ListEvents(workID string, limit int) ([]api.EventRecord, int64, error) {
	var total int64
	if err := t.row("SELECT count(*) FROM events WHERE work_id=$1", []any{workID}, &total); err != nil {
		return nil, 0, err
	}
	var out []api.EventRecord
	// Streams of one session in the order they first reached the Hub
	// (NULLS FIRST: SQLite's order of a missing arrival).
	err := t.rows(`SELECT e.generation,e.session,e.stream,e.body,e.received_at FROM events e
  LEFT JOIN streams f ON f.work_id=e.work_id AND f.generation=e.generation AND f.session=e.session AND f.stream=e.stream
  WHERE e.work_id=$1 ORDER BY e.generation, e.session, f.arrival NULLS FIRST, e.stream, e.seq LIMIT $2`, []any{workID, limit}, func(r pgx.Rows) error {
		var x api.EventRecord
		var body string
		if err := r.Scan(&x.Generation, &x.Session, &x.Stream, &body, &x.ReceivedAt); err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(body), &x.Event); err != nil {
			return fmt.Errorf("stored event: %w", err)
		}
		out = append(out, x)
		return nil
	})
	return out, total, err
}

func (t *pgTx) SessionStats(workID string) ([]store.SessionStats, error) {
	var out []store.SessionStats
	err := t.rows(`SELECT generation,session,stream,count(*),min(seq),max(seq),min(received_at),
  (SELECT e2.kind FROM events e2 WHERE e2.work_id=events.work_id AND e2.generation=events.generation AND e2.session=events.session
    AND e2.stream=events.stream ORDER BY e2.seq DESC LIMIT 1)
  FROM events WHERE work_id=$1 GROUP BY work_id, generation, session, stream
  ORDER BY generation, session, (SELECT arrival FROM streams s WHERE s.work_id=events.work_id AND s.generation=events.generation
    AND s.session=events.session AND s.stream=events.stream) NULLS FIRST, stream`, []any{workID}, func(r pgx.Rows) error {
		var s store.SessionStats
		err := r.Scan(&s.Generation, &s.Session, &s.Stream, &s.Events, &s.FirstSeq, &s.LastSeq, &s.FirstReceived, &s.LastKind)
		out = append(out, s)
		return err
	})
	return out, err
}

func (t *pgTx) Actions(workID string) ([]store.Action, error) {
	var out []store.Action
	err := t.rows("SELECT action_id,generation,session,start,start_identity,finish,finish_identity FROM actions WHERE work_id=$1 ORDER BY generation, session, action_id", []any{workID}, func(r pgx.Rows) error {
		a := store.Action{WorkID: workID}
		var start, finish *string
		if err := r.Scan(&a.ActionID, &a.Generation, &a.Session, &start, &a.StartIdentity, &finish, &a.FinishIdentity); err != nil {
			return err
		}
		if err := decodeAction(&a, start, finish); err != nil {
			return err
		}
		out = append(out, a)
		return nil
	})
	return out, err
}

func (t *pgTx) Gaps(workID string) ([]api.GapRecord, error) {
	var out []api.GapRecord
	err := t.rows("SELECT generation,session,stream,kind,reason,from_seq,to_seq,received_at FROM gaps WHERE work_id=$1 ORDER BY received_at, identity", []any{workID}, func(r pgx.Rows) error {
		var g api.GapRecord
		err := r.Scan(&g.Generation, &g.Session, &g.Stream, &g.Kind, &g.Reason, &g.FromSeq, &g.ToSeq, &g.ReceivedAt)
		out = append(out, g)
		return err
	})
	return out, err
}

func (t *pgTx) UsageTotals(workID string) (api.UsageTotals, error) {
	var u api.UsageTotals
	var unknown [4]int64
	// Only request-scoped records are summed; a session-cumulative record is
	// the host's own running total and adding it would count twice.
	const from = "FROM usage WHERE work_id=$1 AND scope='request'"
	err := t.row(`SELECT count(*),count(*)-count(input),count(*)-count(output),count(*)-count(cache_creation),count(*)-count(cache_read) `+from,
		[]any{workID}, &u.Records, &unknown[0], &unknown[1], &unknown[2], &unknown[3])
	if err != nil {
		return u, err
	}
	// Sums never fail: one that would leave int64 is capped and named in
	// Saturated, by the SQLite store's rule (saturatingSums).
	sums, sat, err := t.saturatingSums(from, []any{workID}, "input", "output", "cache_creation", "cache_read")
	if err != nil {
		return u, err
	}
	u.InputTokens, u.OutputTokens, u.CacheCreationInputTokens, u.CacheReadInputTokens = sums[0], sums[1], sums[2], sums[3]
	for i, name := range []string{"input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"} {
		if unknown[i] > 0 {
			if u.Unknown == nil {
				u.Unknown = map[string]int64{}
			}
			u.Unknown[name] = unknown[i]
		}
		if sat[i] {
			u.Saturated = append(u.Saturated, name)
		}
	}
	// The latest cumulative record per session and model, kept apart.
	err = t.rows(`SELECT generation,session,model,input,output,cache_creation,cache_read,received_at FROM usage
		WHERE work_id=$1 AND scope='session_cumulative' ORDER BY generation,session,model,received_at DESC,identity`, []any{workID}, func(r pgx.Rows) error {
		var c api.CumulativeUsage
		if err := r.Scan(&c.Generation, &c.Session, &c.Model, &c.InputTokens, &c.OutputTokens, &c.CacheCreationInputTokens, &c.CacheReadInputTokens, &c.ReceivedAt); err != nil {
			return err
		}
		if n := len(u.SessionCumulative); n > 0 {
			p := u.SessionCumulative[n-1]
			if p.Generation == c.Generation && p.Session == c.Session && p.Model == c.Model {
				return nil // an older snapshot of the same session and model
			}
		}
		c.Scope = api.UsageScopeSessionCumulative
		u.SessionCumulative = append(u.SessionCumulative, c)
		return nil
	})
	return u, err
}

func (t *pgTx) ChangelogGrant(workID string) (api.Grant, error) {
	var g api.Grant
	err := t.row("SELECT max_objects,max_bytes FROM changelog_grants WHERE work_id=$1", []any{workID}, &g.MaxObjects, &g.MaxBytes)
	return g, err
}

func (t *pgTx) SetChangelogGrant(workID string, g api.Grant, at int64) error {
	_, err := t.exec(`INSERT INTO changelog_grants(work_id,max_objects,max_bytes,updated_at) VALUES($1,$2,$3,$4)
		ON CONFLICT(work_id) DO UPDATE SET max_objects=excluded.max_objects, max_bytes=excluded.max_bytes, updated_at=excluded.updated_at`,
		workID, g.MaxObjects, g.MaxBytes, at)
	return err
}

func (t *pgTx) ChangelogUsage(workID string) (api.GrantUsage, error) {
	var u api.GrantUsage
	const from = "FROM changelog_increments WHERE work_id=$1"
	if err := t.row("SELECT count(*) "+from, []any{workID}, &u.Objects); err != nil {
		return u, err
	}
	// Sizes are bounded at upload; a sum that would overflow (only data
	// written around the Hub) is capped, refusing further uploads.
	sums, _, err := t.saturatingSums(from, []any{workID}, "size")
	if err != nil {
		return u, err
	}
	u.Bytes = max(sums[0], 0)
	return u, nil
}

func (t *pgTx) ChangelogLast(workID, worktreeID string) (int, error) {
	var last int
	err := t.row("SELECT coalesce(max(position),-1) FROM changelog_increments WHERE work_id=$1 AND worktree_id=$2", []any{workID, worktreeID}, &last)
	return last, err
}

const incrementCols = "work_id,position,digest,size,session,generation,worktree_id,kind,tool,failed,stored_at"

func incrementDest(i *store.Increment) []any {
	return []any{&i.WorkID, &i.Position, &i.Digest, &i.Size, &i.Session, &i.Generation, &i.WorktreeID, &i.Kind, &i.Tool, &i.Failed, &i.StoredAt}
}

func (t *pgTx) ChangelogIncrement(workID, worktreeID string, position int) (store.Increment, error) {
	var i store.Increment
	err := t.row("SELECT "+incrementCols+" FROM changelog_increments WHERE work_id=$1 AND worktree_id=$2 AND position=$3", []any{workID, worktreeID, position}, incrementDest(&i)...)
	return i, err
}

func (t *pgTx) ChangelogIncrements(workID string) ([]store.Increment, error) {
	var out []store.Increment
	err := t.rows("SELECT "+incrementCols+" FROM changelog_increments WHERE work_id=$1 ORDER BY worktree_id, position", []any{workID}, func(r pgx.Rows) error {
		var i store.Increment
		err := r.Scan(incrementDest(&i)...)
		out = append(out, i)
		return err
	})
	return out, err
}

func (t *pgTx) PutChangelogIncrement(i store.Increment) error {
	_, err := t.exec("INSERT INTO changelog_increments("+incrementCols+") VALUES($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11)"+
		` ON CONFLICT(work_id,worktree_id,position) DO UPDATE SET digest=excluded.digest, size=excluded.size, session=excluded.session,
		generation=excluded.generation, kind=excluded.kind, tool=excluded.tool, failed=excluded.failed, stored_at=excluded.stored_at`,
		i.WorkID, i.Position, i.Digest, i.Size, i.Session, i.Generation, i.WorktreeID, i.Kind, i.Tool, i.Failed, i.StoredAt)
	return err
}

func (t *pgTx) IncrementDigestRefs(digest string) (int64, error) {
	var n int64
	err := t.row("SELECT count(*) FROM changelog_increments WHERE digest=$1", []any{digest}, &n)
	return n, err
}
