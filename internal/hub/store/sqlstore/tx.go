package sqlstore

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/hub/store"
)

func (t *Tx) InsertHuman(h store.Human) error {
	return t.insert("INSERT INTO humans(id,name,admin,created_at) VALUES(?,?,?,?) ON CONFLICT DO NOTHING", h.ID, h.Name, h.Admin, h.CreatedAt)
}

func (t *Tx) human(where, arg string) (store.Human, error) {
	var h store.Human
	err := t.row("SELECT id,name,admin,created_at FROM humans WHERE "+where+"=?", []any{arg}, &h.ID, &h.Name, &h.Admin, &h.CreatedAt)
	return h, err
}

func (t *Tx) HumanByName(name string) (store.Human, error) { return t.human("name", name) }
func (t *Tx) HumanByID(id string) (store.Human, error)     { return t.human("id", id) }

func (t *Tx) ListHumans() ([]store.Human, error) {
	return list(t, "SELECT id,name,admin,created_at FROM humans ORDER BY name", nil, func(r Scanner) (store.Human, error) {
		var h store.Human
		err := r.Scan(&h.ID, &h.Name, &h.Admin, &h.CreatedAt)
		return h, err
	})
}

func (t *Tx) InsertRepository(r store.Repository) error {
	return t.insert("INSERT INTO repositories(id,name,created_at) VALUES(?,?,?) ON CONFLICT DO NOTHING", r.ID, r.Name, r.CreatedAt)
}

func (t *Tx) repository(where, arg string) (store.Repository, error) {
	var r store.Repository
	err := t.row("SELECT id,name,created_at FROM repositories WHERE "+where+"=?", []any{arg}, &r.ID, &r.Name, &r.CreatedAt)
	return r, err
}

func (t *Tx) RepositoryByName(name string) (store.Repository, error) {
	return t.repository("name", name)
}
func (t *Tx) RepositoryByID(id string) (store.Repository, error) { return t.repository("id", id) }

func (t *Tx) ListRepositories() ([]store.Repository, error) {
	return list(t, "SELECT id,name,created_at FROM repositories ORDER BY name", nil, func(r Scanner) (store.Repository, error) {
		var x store.Repository
		err := r.Scan(&x.ID, &x.Name, &x.CreatedAt)
		return x, err
	})
}

func (t *Tx) InsertToken(k store.Token) error {
	return t.insert("INSERT INTO tokens(id,hash,human_id,repository_id,scope,label,created_at) VALUES(?,?,?,?,?,?,?) ON CONFLICT DO NOTHING",
		k.ID, k.Hash, k.HumanID, k.RepositoryID, k.Scope, k.Label, k.CreatedAt)
}

const tokenCols = "id,hash,human_id,repository_id,scope,label,created_at"

func tokenDest(k *store.Token) []any {
	return []any{&k.ID, &k.Hash, &k.HumanID, &k.RepositoryID, &k.Scope, &k.Label, &k.CreatedAt}
}

func (t *Tx) TokenByHash(hash string) (store.Token, error) {
	var k store.Token
	err := t.row("SELECT "+tokenCols+" FROM tokens WHERE hash=?", []any{hash}, tokenDest(&k)...)
	return k, err
}

func (t *Tx) TokenPrincipal(hash string) (store.Token, store.Human, store.Repository, error) {
	var k store.Token
	var h store.Human
	var r store.Repository
	err := t.row(`SELECT k.id,k.hash,k.human_id,k.repository_id,k.scope,k.label,k.created_at, h.id,h.name,h.admin,h.created_at, r.id,r.name,r.created_at
		FROM tokens k JOIN humans h ON h.id=k.human_id JOIN repositories r ON r.id=k.repository_id WHERE k.hash=?`, []any{hash},
		&k.ID, &k.Hash, &k.HumanID, &k.RepositoryID, &k.Scope, &k.Label, &k.CreatedAt, &h.ID, &h.Name, &h.Admin, &h.CreatedAt, &r.ID, &r.Name, &r.CreatedAt)
	return k, h, r, err
}

func (t *Tx) ListTokens() ([]store.Token, error) {
	return list(t, "SELECT "+tokenCols+" FROM tokens ORDER BY created_at, id", nil, func(r Scanner) (store.Token, error) {
		var k store.Token
		err := r.Scan(tokenDest(&k)...)
		return k, err
	})
}

const workCols = "id,repository_id,title,state,generation,created_by,created_at,updated_at"

func workDest(w *store.Work) []any {
	return []any{&w.ID, &w.RepositoryID, &w.Title, &w.State, &w.Generation, &w.CreatedBy, &w.CreatedAt, &w.UpdatedAt}
}

func (t *Tx) InsertWork(w store.Work) error {
	return t.insert("INSERT INTO works("+workCols+") VALUES(?,?,?,?,?,?,?,?) ON CONFLICT DO NOTHING",
		w.ID, w.RepositoryID, w.Title, w.State, w.Generation, w.CreatedBy, w.CreatedAt, w.UpdatedAt)
}

func (t *Tx) WorkByID(id string) (store.Work, error) {
	var w store.Work
	err := t.row("SELECT "+workCols+" FROM works WHERE id=?", []any{id}, workDest(&w)...)
	return w, err
}

func (t *Tx) UpdateWork(w store.Work) error {
	n, err := t.db.Exec("UPDATE works SET title=?,state=?,generation=?,updated_at=? WHERE id=?", w.Title, w.State, w.Generation, w.UpdatedAt, w.ID)
	if err != nil {
		return t.d.MapErr(err)
	}
	if n != 1 {
		return store.ErrNotFound
	}
	return nil
}

func (t *Tx) ListWorks(repositoryID string, limit int) ([]store.Work, int, error) {
	var total int
	if err := t.row("SELECT count(*) FROM works WHERE repository_id=?", []any{repositoryID}, &total); err != nil {
		return nil, 0, err
	}
	out, err := list(t, "SELECT "+workCols+" FROM works WHERE repository_id=? ORDER BY created_at DESC, id DESC LIMIT ?", []any{repositoryID, limit},
		func(r Scanner) (store.Work, error) {
			var w store.Work
			err := r.Scan(workDest(&w)...)
			return w, err
		})
	return out, total, err
}

func (t *Tx) AppendCheckpoint(c store.Checkpoint) (int64, error) {
	var seq int64
	if err := t.row("SELECT coalesce(max(seq),0)+1 FROM checkpoints WHERE work_id=?", []any{c.WorkID}, &seq); err != nil {
		return 0, err
	}
	err := t.insert("INSERT INTO checkpoints(work_id,seq,action,from_state,to_state,generation,human_id,worktree_id,note,at) VALUES(?,?,?,?,?,?,?,?,?,?) ON CONFLICT DO NOTHING",
		c.WorkID, seq, c.Action, c.From, c.To, c.Generation, c.HumanID, c.WorktreeID, c.Note, c.At)
	return seq, err
}

func (t *Tx) Checkpoints(workID string) ([]store.Checkpoint, error) {
	return list(t, "SELECT work_id,seq,action,from_state,to_state,generation,human_id,worktree_id,note,at FROM checkpoints WHERE work_id=? ORDER BY seq", []any{workID},
		func(r Scanner) (store.Checkpoint, error) {
			var c store.Checkpoint
			err := r.Scan(&c.WorkID, &c.Seq, &c.Action, &c.From, &c.To, &c.Generation, &c.HumanID, &c.WorktreeID, &c.Note, &c.At)
			return c, err
		})
}

func (t *Tx) Current(repositoryID, worktreeID string) (store.Current, error) {
	c := store.Current{RepositoryID: repositoryID, WorktreeID: worktreeID}
	err := t.row("SELECT work_id,generation,updated_at FROM currents WHERE repository_id=? AND worktree_id=?",
		[]any{repositoryID, worktreeID}, &c.WorkID, &c.Generation, &c.UpdatedAt)
	return c, err
}

func (t *Tx) SetCurrent(c store.Current) error {
	return t.exec(`INSERT INTO currents(repository_id,worktree_id,work_id,generation,updated_at) VALUES(?,?,?,?,?)
		ON CONFLICT(repository_id,worktree_id) DO UPDATE SET work_id=excluded.work_id, generation=excluded.generation, updated_at=excluded.updated_at`,
		c.RepositoryID, c.WorktreeID, c.WorkID, c.Generation, c.UpdatedAt)
}

func (t *Tx) CurrentsForWork(workID string) ([]store.Current, error) {
	return list(t, "SELECT repository_id,worktree_id,work_id,generation,updated_at FROM currents WHERE work_id=? ORDER BY worktree_id", []any{workID},
		func(r Scanner) (store.Current, error) {
			var c store.Current
			err := r.Scan(&c.RepositoryID, &c.WorktreeID, &c.WorkID, &c.Generation, &c.UpdatedAt)
			return c, err
		})
}

const sessionCols = "work_id,generation,canonical,worktree_id,alias,created_at,agent"

func sessionDest(s *store.Session) []any {
	return []any{&s.WorkID, &s.Generation, &s.Canonical, &s.WorktreeID, &s.Alias, &s.CreatedAt, &s.Agent}
}

func (t *Tx) InsertSession(s store.Session) error {
	return t.insert("INSERT INTO sessions("+sessionCols+") VALUES(?,?,?,?,?,?,?) ON CONFLICT DO NOTHING",
		s.WorkID, s.Generation, s.Canonical, s.WorktreeID, s.Alias, s.CreatedAt, s.Agent)
}

func (t *Tx) ClaimSessionAgent(workID string, generation int64, canonical, agent string) error {
	return t.exec("UPDATE sessions SET agent=? WHERE work_id=? AND generation=? AND canonical=? AND agent=''",
		agent, workID, generation, canonical)
}

func (t *Tx) Session(workID string, generation int64, canonical string) (store.Session, error) {
	var s store.Session
	err := t.row("SELECT "+sessionCols+" FROM sessions WHERE work_id=? AND generation=? AND canonical=?", []any{workID, generation, canonical}, sessionDest(&s)...)
	return s, err
}

func (t *Tx) Sessions(workID string) ([]store.Session, error) {
	return list(t, "SELECT "+sessionCols+" FROM sessions WHERE work_id=? ORDER BY generation, created_at, canonical", []any{workID},
		func(r Scanner) (store.Session, error) {
			var s store.Session
			err := r.Scan(sessionDest(&s)...)
			return s, err
		})
}

func (t *Tx) SessionByNative(workID string, generation int64, native string) (store.Session, error) {
	var s store.Session
	err := t.row(`SELECT s.work_id,s.generation,s.canonical,s.worktree_id,s.alias,s.created_at,s.agent
		FROM session_natives n JOIN sessions s ON s.work_id=n.work_id AND s.generation=n.generation AND s.canonical=n.canonical
		WHERE n.work_id=? AND n.generation=? AND n.native=?`, []any{workID, generation, native}, sessionDest(&s)...)
	return s, err
}

func (t *Tx) UnboundAlias(workID string, generation int64, worktreeID string) (store.Session, error) {
	var s store.Session
	// alias is an INTEGER 0/1 in SQLite and a BOOLEAN in PostgreSQL: both
	// take it as the condition.
	err := t.row(`SELECT `+sessionCols+` FROM sessions s
		WHERE work_id=? AND generation=? AND worktree_id=? AND alias
		AND NOT EXISTS (SELECT 1 FROM session_natives n WHERE n.work_id=s.work_id AND n.generation=s.generation AND n.canonical=s.canonical)
		ORDER BY created_at, canonical LIMIT 1`, []any{workID, generation, worktreeID}, sessionDest(&s)...)
	return s, err
}

func (t *Tx) BindNative(workID string, generation int64, canonical, native string, at int64) error {
	return t.insert("INSERT INTO session_natives(work_id,generation,native,canonical,first_seen) VALUES(?,?,?,?,?) ON CONFLICT DO NOTHING",
		workID, generation, native, canonical, at)
}

func (t *Tx) Natives(workID string) (map[store.SessionKey][]string, error) {
	out := map[store.SessionKey][]string{}
	err := t.rows("SELECT generation,canonical,native FROM session_natives WHERE work_id=? ORDER BY first_seen, native", []any{workID}, func(r Scanner) error {
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

func (t *Tx) EnvelopeByIdentity(repositoryID, identity string) (store.Envelope, error) {
	e := store.Envelope{RepositoryID: repositoryID, Identity: identity}
	err := t.row("SELECT digest,type,work_id,generation,session,received_at FROM envelopes WHERE repository_id=? AND identity=?",
		[]any{repositoryID, identity}, &e.Digest, &e.Type, &e.WorkID, &e.Generation, &e.Session, &e.ReceivedAt)
	return e, err
}

func (t *Tx) InsertEnvelope(e store.Envelope) error {
	return t.insert("INSERT INTO envelopes(repository_id,identity,digest,type,work_id,generation,session,received_at) VALUES(?,?,?,?,?,?,?,?) ON CONFLICT DO NOTHING",
		e.RepositoryID, e.Identity, e.Digest, e.Type, e.WorkID, e.Generation, e.Session, e.ReceivedAt)
}

// InsertEvents inserts a batch in multi-row statements of at most 100
// events. A taken sequence number fails the statement (ErrExists) and the
// caller's error discards the transaction. (The PostgreSQL store inserts a
// batch in one statement of arrays instead; store/postgres.)
func (t *Tx) InsertEvents(s store.Scope, events []api.Event) error {
	if len(events) == 0 {
		return nil
	}
	// The order in which a session's streams first reached the Hub (the
	// receipt clock has whole seconds only).
	if err := t.exec(`INSERT INTO streams(work_id,generation,session,stream,arrival)
  SELECT ?,?,?,?,coalesce(max(arrival),0)+1 FROM streams WHERE work_id=? AND generation=? AND session=? ON CONFLICT DO NOTHING`,
		s.WorkID, s.Generation, s.Session, s.Stream, s.WorkID, s.Generation, s.Session); err != nil {
		return err
	}
	// Multi-row inserts in chunks keep a large batch to a few statements.
	const chunk = 100
	for i := 0; i < len(events); i += chunk {
		part := events[i:min(i+chunk, len(events))]
		var q strings.Builder
		q.WriteString("INSERT INTO events(work_id,generation,session,stream,seq,kind,body,identity,received_at) VALUES")
		args := make([]any, 0, len(part)*9)
		for j, ev := range part {
			if j > 0 {
				q.WriteByte(',')
			}
			q.WriteString("(?,?,?,?,?,?,?,?,?)")
			body, err := json.Marshal(ev)
			if err != nil {
				return err
			}
			args = append(args, s.WorkID, s.Generation, s.Session, s.Stream, ev.Seq, ev.Kind, string(body), s.Identity, s.ReceivedAt)
		}
		if err := t.exec(q.String(), args...); err != nil {
			return err
		}
	}
	return nil
}

func (t *Tx) Action(workID, actionID string) (store.Action, error) {
	a := store.Action{WorkID: workID, ActionID: actionID}
	var start, finish *string
	err := t.row("SELECT generation,session,start,start_identity,finish,finish_identity FROM actions WHERE work_id=? AND action_id=?",
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

func (t *Tx) InsertActionStart(s store.Scope, a *api.ActionStart) error {
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	return t.exec(`INSERT INTO actions(work_id,action_id,generation,session,start,start_identity) VALUES(?,?,?,?,?,?)
		ON CONFLICT(work_id,action_id) DO UPDATE SET start=excluded.start, start_identity=excluded.start_identity WHERE actions.start IS NULL`,
		s.WorkID, a.ActionID, s.Generation, s.Session, string(b), s.Identity)
}

func (t *Tx) SetActionFinish(s store.Scope, f *api.ActionFinish) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return t.exec(`INSERT INTO actions(work_id,action_id,generation,session,finish,finish_identity) VALUES(?,?,?,?,?,?)
		ON CONFLICT(work_id,action_id) DO UPDATE SET finish=excluded.finish, finish_identity=excluded.finish_identity`,
		s.WorkID, f.ActionID, s.Generation, s.Session, string(b), s.Identity)
}

func (t *Tx) InsertUsage(s store.Scope, u *api.Usage) error {
	return t.insert("INSERT INTO usage(work_id,generation,session,identity,model,message_id,input,output,cache_creation,cache_read,received_at,scope) VALUES(?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT DO NOTHING",
		s.WorkID, s.Generation, s.Session, s.Identity, u.Model, u.MessageID, nullable(u.InputTokens), nullable(u.OutputTokens),
		nullable(u.CacheCreationInputTokens), nullable(u.CacheReadInputTokens), s.ReceivedAt, u.Scope)
}

func (t *Tx) InsertSetup(s store.Scope, st *api.Setup) error {
	un, err := json.Marshal(st.Unobserved)
	if err != nil {
		return err
	}
	// Every event of a hook that exposed the same setup carries it: the
	// first one of a session records it.
	return t.exec("INSERT INTO setups(work_id,generation,session,artifact,model,permission_mode,effort,unobserved,received_at) VALUES(?,?,?,?,?,?,?,?,?) ON CONFLICT DO NOTHING",
		s.WorkID, s.Generation, s.Session, st.Artifact, st.Model, st.PermissionMode, st.Effort, string(un), s.ReceivedAt)
}

func (t *Tx) Setups(workID string) ([]api.SetupRecord, error) {
	out := []api.SetupRecord{}
	err := t.rows("SELECT generation,session,artifact,model,permission_mode,effort,unobserved,received_at FROM setups WHERE work_id=? ORDER BY received_at,generation,session,artifact", []any{workID}, func(r Scanner) error {
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

func (t *Tx) InsertGap(s store.Scope, g *api.Gap) error {
	return t.insert("INSERT INTO gaps(work_id,generation,session,identity,kind,reason,from_seq,to_seq,received_at,stream) VALUES(?,?,?,?,?,?,?,?,?,?) ON CONFLICT DO NOTHING",
		s.WorkID, s.Generation, s.Session, s.Identity, g.Kind, g.Reason, g.FromSeq, g.ToSeq, s.ReceivedAt, s.Stream)
}

func (t *Tx) ListEvents(workID string, limit int) ([]api.EventRecord, int64, error) {
	var total int64
	if err := t.row("SELECT count(*) FROM events WHERE work_id=?", []any{workID}, &total); err != nil {
		return nil, 0, err
	}
	// Streams of one session in the order they first reached the Hub (a
	// missing arrival first: SQLite's default order, PostgreSQL's NULLS
	// FIRST).
	out, err := list(t, `SELECT e.generation,e.session,e.stream,e.body,e.received_at FROM events e
  LEFT JOIN streams f ON f.work_id=e.work_id AND f.generation=e.generation AND f.session=e.session AND f.stream=e.stream
  WHERE e.work_id=? ORDER BY e.generation, e.session, f.arrival NULLS FIRST, e.stream, e.seq LIMIT ?`, []any{workID, limit},
		func(r Scanner) (api.EventRecord, error) {
			var x api.EventRecord
			var body string
			if err := r.Scan(&x.Generation, &x.Session, &x.Stream, &body, &x.ReceivedAt); err != nil {
				return x, err
			}
			if err := json.Unmarshal([]byte(body), &x.Event); err != nil {
				return x, fmt.Errorf("stored event: %w", err)
			}
			return x, nil
		})
	return out, total, err
}

func (t *Tx) SessionStats(workID string) ([]store.SessionStats, error) {
	return list(t, `SELECT generation,session,stream,count(*),min(seq),max(seq),min(received_at),
  (SELECT e2.kind FROM events e2 WHERE e2.work_id=events.work_id AND e2.generation=events.generation AND e2.session=events.session
    AND e2.stream=events.stream ORDER BY e2.seq DESC LIMIT 1)
  FROM events WHERE work_id=? GROUP BY work_id, generation, session, stream
  ORDER BY generation, session, (SELECT arrival FROM streams s WHERE s.work_id=events.work_id AND s.generation=events.generation
    AND s.session=events.session AND s.stream=events.stream) NULLS FIRST, stream`, []any{workID},
		func(r Scanner) (store.SessionStats, error) {
			var s store.SessionStats
			err := r.Scan(&s.Generation, &s.Session, &s.Stream, &s.Events, &s.FirstSeq, &s.LastSeq, &s.FirstReceived, &s.LastKind)
			return s, err
		})
}

func (t *Tx) Actions(workID string) ([]store.Action, error) {
	return list(t, "SELECT action_id,generation,session,start,start_identity,finish,finish_identity FROM actions WHERE work_id=? ORDER BY generation, session, action_id", []any{workID},
		func(r Scanner) (store.Action, error) {
			a := store.Action{WorkID: workID}
			var start, finish *string
			if err := r.Scan(&a.ActionID, &a.Generation, &a.Session, &start, &a.StartIdentity, &finish, &a.FinishIdentity); err != nil {
				return a, err
			}
			return a, decodeAction(&a, start, finish)
		})
}

func (t *Tx) Gaps(workID string) ([]api.GapRecord, error) {
	return list(t, "SELECT generation,session,stream,kind,reason,from_seq,to_seq,received_at FROM gaps WHERE work_id=? ORDER BY received_at, identity", []any{workID},
		func(r Scanner) (api.GapRecord, error) {
			var g api.GapRecord
			err := r.Scan(&g.Generation, &g.Session, &g.Stream, &g.Kind, &g.Reason, &g.FromSeq, &g.ToSeq, &g.ReceivedAt)
			return g, err
		})
}

func (t *Tx) UsageTotals(workID string) (api.UsageTotals, error) {
	var u api.UsageTotals
	var unknown [4]int64
	// Only request-scoped records are summed; a session-cumulative record is
	// the host's own running total and adding it would count twice.
	const from = "FROM usage WHERE work_id=? AND scope='request'"
	err := t.row(`SELECT count(*),count(*)-count(input),count(*)-count(output),count(*)-count(cache_creation),count(*)-count(cache_read) `+from,
		[]any{workID}, &u.Records, &unknown[0], &unknown[1], &unknown[2], &unknown[3])
	if err != nil {
		return u, err
	}
	// Sums never fail: one that would leave int64 is capped and named in
	// Saturated (admission bounds make that unreachable for accepted data).
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
		WHERE work_id=? AND scope='session_cumulative' ORDER BY generation,session,model,received_at DESC,identity`, []any{workID}, func(r Scanner) error {
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
