package postgres

import "strings"

// schemaV2 is the SQLite store's schema version 2 in PostgreSQL: the same
// tables, columns and keys; INTEGER 0/1 flags are BOOLEAN and every TEXT
// collates "C" (byte order, as SQLite's BINARY).
var schemaV2 = strings.ReplaceAll(`
CREATE TABLE humans(id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, admin BOOLEAN NOT NULL, created_at BIGINT NOT NULL);
CREATE TABLE repositories(id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, created_at BIGINT NOT NULL);
CREATE TABLE tokens(id TEXT PRIMARY KEY, hash TEXT NOT NULL UNIQUE, human_id TEXT NOT NULL REFERENCES humans(id),
  repository_id TEXT NOT NULL REFERENCES repositories(id), scope TEXT NOT NULL, label TEXT NOT NULL, created_at BIGINT NOT NULL);
CREATE TABLE works(id TEXT PRIMARY KEY, repository_id TEXT NOT NULL REFERENCES repositories(id), title TEXT NOT NULL,
  state TEXT NOT NULL, generation BIGINT NOT NULL, created_by TEXT NOT NULL, created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL);
CREATE INDEX works_repository ON works(repository_id, created_at);
CREATE TABLE checkpoints(work_id TEXT NOT NULL REFERENCES works(id), seq BIGINT NOT NULL, action TEXT NOT NULL,
  from_state TEXT NOT NULL, to_state TEXT NOT NULL, generation BIGINT NOT NULL, human_id TEXT NOT NULL, worktree_id TEXT NOT NULL,
  note TEXT NOT NULL, at BIGINT NOT NULL, PRIMARY KEY(work_id, seq));
CREATE TABLE currents(repository_id TEXT NOT NULL, worktree_id TEXT NOT NULL, work_id TEXT NOT NULL REFERENCES works(id),
  generation BIGINT NOT NULL, updated_at BIGINT NOT NULL, PRIMARY KEY(repository_id, worktree_id));
CREATE INDEX currents_work ON currents(work_id);
CREATE TABLE sessions(work_id TEXT NOT NULL REFERENCES works(id), generation BIGINT NOT NULL, canonical TEXT NOT NULL,
  worktree_id TEXT NOT NULL, alias BOOLEAN NOT NULL, created_at BIGINT NOT NULL, PRIMARY KEY(work_id, generation, canonical));
CREATE TABLE session_natives(work_id TEXT NOT NULL, generation BIGINT NOT NULL, native TEXT NOT NULL, canonical TEXT NOT NULL,
  first_seen BIGINT NOT NULL, PRIMARY KEY(work_id, generation, native));
CREATE TABLE envelopes(repository_id TEXT NOT NULL, identity TEXT NOT NULL, digest TEXT NOT NULL, type TEXT NOT NULL,
  work_id TEXT NOT NULL, generation BIGINT NOT NULL, session TEXT NOT NULL, received_at BIGINT NOT NULL,
  PRIMARY KEY(repository_id, identity));
CREATE TABLE events(work_id TEXT NOT NULL, generation BIGINT NOT NULL, session TEXT NOT NULL, seq BIGINT NOT NULL,
  kind TEXT NOT NULL, body TEXT NOT NULL, identity TEXT NOT NULL, received_at BIGINT NOT NULL,
  PRIMARY KEY(work_id, generation, session, seq));
CREATE TABLE actions(work_id TEXT NOT NULL, action_id TEXT NOT NULL, generation BIGINT NOT NULL, session TEXT NOT NULL,
  start TEXT, start_identity TEXT NOT NULL DEFAULT '', finish TEXT, finish_identity TEXT NOT NULL DEFAULT '',
  PRIMARY KEY(work_id, action_id));
CREATE TABLE usage(work_id TEXT NOT NULL, generation BIGINT NOT NULL, session TEXT NOT NULL, identity TEXT NOT NULL,
  model TEXT NOT NULL, message_id TEXT NOT NULL, input BIGINT, output BIGINT, cache_creation BIGINT,
  cache_read BIGINT, received_at BIGINT NOT NULL, scope TEXT NOT NULL DEFAULT 'request', PRIMARY KEY(work_id, identity));
CREATE TABLE setups(work_id TEXT NOT NULL, generation BIGINT NOT NULL, session TEXT NOT NULL,
  artifact TEXT NOT NULL, model TEXT NOT NULL, permission_mode TEXT NOT NULL, effort TEXT NOT NULL, unobserved TEXT NOT NULL,
  received_at BIGINT NOT NULL, PRIMARY KEY(work_id, generation, session, artifact));
CREATE TABLE gaps(work_id TEXT NOT NULL, generation BIGINT NOT NULL, session TEXT NOT NULL, identity TEXT NOT NULL,
  kind TEXT NOT NULL, reason TEXT NOT NULL, from_seq BIGINT NOT NULL, to_seq BIGINT NOT NULL, received_at BIGINT NOT NULL,
  PRIMARY KEY(work_id, identity));
CREATE TABLE changelog_grants(work_id TEXT PRIMARY KEY REFERENCES works(id), max_objects BIGINT NOT NULL,
  max_bytes BIGINT NOT NULL, updated_at BIGINT NOT NULL);
CREATE TABLE changelog_increments(work_id TEXT NOT NULL REFERENCES works(id), position BIGINT NOT NULL,
  digest TEXT NOT NULL, size BIGINT NOT NULL, session TEXT NOT NULL, generation BIGINT NOT NULL, worktree_id TEXT NOT NULL,
  kind TEXT NOT NULL, tool TEXT NOT NULL, failed BOOLEAN NOT NULL, stored_at BIGINT NOT NULL,
  PRIMARY KEY(work_id, worktree_id, position));
CREATE INDEX changelog_increments_digest ON changelog_increments(digest);
`, " TEXT", ` TEXT COLLATE "C"`)

// schemaV3 is the SQLite store's version 3: the client stream joins the
// event sequence key and gaps, and streams records the order in which a
// session's streams first arrived. Rows of earlier versions are in the
// legacy stream ”. (Columns added here go last in PostgreSQL; hub migrate
// names every column, so the order does not matter.)
var schemaV3 = strings.ReplaceAll(`
ALTER TABLE events ADD COLUMN stream TEXT NOT NULL DEFAULT '';
ALTER TABLE events ALTER COLUMN stream DROP DEFAULT;
ALTER TABLE events DROP CONSTRAINT events_pkey;
ALTER TABLE events ADD PRIMARY KEY(work_id, generation, session, stream, seq);
CREATE TABLE streams(work_id TEXT NOT NULL, generation BIGINT NOT NULL, session TEXT NOT NULL, stream TEXT NOT NULL,
  arrival BIGINT NOT NULL, PRIMARY KEY(work_id, generation, session, stream));
INSERT INTO streams(work_id,generation,session,stream,arrival) SELECT DISTINCT work_id,generation,session,'',0 FROM events;
ALTER TABLE gaps ADD COLUMN stream TEXT NOT NULL DEFAULT '';
`, " TEXT", ` TEXT COLLATE "C"`)

// schemaV5 is the SQLite store's version 5: the session's agent, "" for
// sessions of earlier versions.
var schemaV5 = `ALTER TABLE sessions ADD COLUMN agent TEXT COLLATE "C" NOT NULL DEFAULT '';`

// Table describes one table for hub migrate: its columns in the SQLite
// store's order, its key (the copy's and the digest's order) and which
// columns are BOOLEAN here and INTEGER 0/1 in SQLite.
type Table struct {
	Name    string
	Columns []string
	Key     []string
	Bools   []string
}

// Tables lists every Hub table in an order that satisfies the foreign keys.
// A schema change updates this list with the migration.
var Tables = []Table{
	{"humans", cols("id,name,admin,created_at"), cols("id"), cols("admin")},
	{"repositories", cols("id,name,created_at"), cols("id"), nil},
	{"tokens", cols("id,hash,human_id,repository_id,scope,label,created_at"), cols("id"), nil},
	{"works", cols("id,repository_id,title,state,generation,created_by,created_at,updated_at"), cols("id"), nil},
	{"checkpoints", cols("work_id,seq,action,from_state,to_state,generation,human_id,worktree_id,note,at"), cols("work_id,seq"), nil},
	{"currents", cols("repository_id,worktree_id,work_id,generation,updated_at"), cols("repository_id,worktree_id"), nil},
	{"sessions", cols("work_id,generation,canonical,worktree_id,alias,created_at,agent"), cols("work_id,generation,canonical"), cols("alias")},
	{"session_natives", cols("work_id,generation,native,canonical,first_seen"), cols("work_id,generation,native"), nil},
	{"envelopes", cols("repository_id,identity,digest,type,work_id,generation,session,received_at"), cols("repository_id,identity"), nil},
	{"events", cols("work_id,generation,session,stream,seq,kind,body,identity,received_at"), cols("work_id,generation,session,stream,seq"), nil},
	{"streams", cols("work_id,generation,session,stream,arrival"), cols("work_id,generation,session,stream"), nil},
	{"actions", cols("work_id,action_id,generation,session,start,start_identity,finish,finish_identity"), cols("work_id,action_id"), nil},
	{"usage", cols("work_id,generation,session,identity,model,message_id,input,output,cache_creation,cache_read,received_at,scope"), cols("work_id,identity"), nil},
	{"setups", cols("work_id,generation,session,artifact,model,permission_mode,effort,unobserved,received_at"), cols("work_id,generation,session,artifact"), nil},
	{"gaps", cols("work_id,generation,session,identity,kind,reason,from_seq,to_seq,received_at,stream"), cols("work_id,identity"), nil},
	{"changelog_grants", cols("work_id,max_objects,max_bytes,updated_at"), cols("work_id"), nil},
	{"changelog_increments", cols("work_id,position,digest,size,session,generation,worktree_id,kind,tool,failed,stored_at"), cols("work_id,worktree_id,position"), cols("failed")},
	{"bodies", cols("work_id,human_id,digest,repository_id,bytes,media_type,retention,state,generation,session,identity,declared_at,uploaded_at,expires_at,ended_at"), cols("work_id,human_id,digest"), nil},
	{"body_removals", cols("digest,next_at,backoff,attempts,last_error"), cols("digest"), nil},
	{"leases", cols("name,holder,expires_at"), cols("name"), nil},
}

func cols(s string) []string { return strings.Split(s, ",") }
