package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/hub/api"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// DBFile is the SQLite database's name inside a Hub data directory.
const DBFile = "hub.db"

// SchemaVersion is the schema this binary writes (PRAGMA user_version).
// Version 2 made usage counts nullable (unknown), added the usage scope and
// the setups table. Version 3 added the client stream to the event
// sequence key (events: work, generation, session, stream, seq) and to
// gaps; rows of earlier versions are in the legacy stream ”. Version 4
// added shared conversation bodies: the bodies (declarations),
// body_removals and leases tables (bodies.go).
const SchemaVersion = 4

// migrations[v] brings a version-v database to v+1 before the schema (all
// CREATE ... IF NOT EXISTS) is applied. All of them, the schema and the
// post-migrations run in one transaction.
var migrations = map[int]string{
	1: `ALTER TABLE usage RENAME TO usage_v1;`,
	// The tables are created in their version 2 shape when missing, so a
	// database of any earlier shape moves aside the same way.
	2: `CREATE TABLE IF NOT EXISTS events(work_id TEXT NOT NULL, generation INTEGER NOT NULL, session TEXT NOT NULL, seq INTEGER NOT NULL,
  kind TEXT NOT NULL, body TEXT NOT NULL, identity TEXT NOT NULL, received_at INTEGER NOT NULL,
  PRIMARY KEY(work_id, generation, session, seq)) WITHOUT ROWID;
ALTER TABLE events RENAME TO events_v2;
CREATE TABLE IF NOT EXISTS gaps(work_id TEXT NOT NULL, generation INTEGER NOT NULL, session TEXT NOT NULL, identity TEXT NOT NULL,
  kind TEXT NOT NULL, reason TEXT NOT NULL, from_seq INTEGER NOT NULL, to_seq INTEGER NOT NULL, received_at INTEGER NOT NULL,
  PRIMARY KEY(work_id, identity)) WITHOUT ROWID;
ALTER TABLE gaps RENAME TO gaps_v2;`,
}

// postMigrations[v] runs after the schema for a database that was at v.
var postMigrations = map[int]string{
	1: `INSERT INTO usage(work_id,generation,session,identity,model,message_id,input,output,cache_creation,cache_read,received_at,scope)
  SELECT work_id,generation,session,identity,model,message_id,input,output,cache_creation,cache_read,received_at,'request' FROM usage_v1;
DROP TABLE usage_v1;`,
	2: `INSERT INTO events(work_id,generation,session,stream,seq,kind,body,identity,received_at)
  SELECT work_id,generation,session,'',seq,kind,body,identity,received_at FROM events_v2;
DROP TABLE events_v2;
INSERT OR IGNORE INTO streams(work_id,generation,session,stream,arrival)
  SELECT DISTINCT work_id,generation,session,'',0 FROM events;
INSERT INTO gaps(work_id,generation,session,identity,kind,reason,from_seq,to_seq,received_at,stream)
  SELECT work_id,generation,session,identity,kind,reason,from_seq,to_seq,received_at,'' FROM gaps_v2;
DROP TABLE gaps_v2;`,
}

// BusyTimeoutMS is how long a writer waits for another process's write lock.
const BusyTimeoutMS = 10000

// SQLite is the embedded store: one database file in WAL mode, safe for many
// short-lived processes (busy timeout, immediate write transactions).
type SQLite struct {
	w *sql.DB // writers: one connection, so goroutines queue in Go
	r *sql.DB // readers

	ops  chan *writeOp // group commit queue
	quit chan struct{}
	done chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// writeOp is one Update waiting for the group-commit writer.
type writeOp struct {
	ctx  context.Context
	fn   func(Tx) error
	done chan error
}

// maxGroup bounds how many Updates share one transaction.
const maxGroup = 128

// OpenSQLite opens (creating when missing, mode 0600) the database in dir,
// which must exist, and brings its schema up to date.
func OpenSQLite(ctx context.Context, dir string) (*SQLite, error) {
	path := filepath.Join(dir, DBFile)
	if err := createPrivate(path); err != nil {
		return nil, err
	}
	// WAL and SHM files inherit the database file's mode.
	base := "file:" + (&url.URL{Path: path}).EscapedPath() +
		"?_pragma=busy_timeout(" + fmt.Sprint(BusyTimeoutMS) + ")" +
		"&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=foreign_keys(1)"
	w, err := sql.Open("sqlite", base+"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("open hub database: %w", err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	r, err := sql.Open("sqlite", base+"&_pragma=query_only(1)")
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open hub database: %w", err)
	}
	r.SetMaxOpenConns(4)
	r.SetMaxIdleConns(4)
	s := &SQLite{w: w, r: r}
	if err := s.migrateRetrying(ctx); err != nil {
		errors.Join(r.Close(), w.Close())
		return nil, err
	}
	conn, err := w.Conn(ctx)
	if err != nil {
		errors.Join(r.Close(), w.Close())
		return nil, fmt.Errorf("open hub database: %w", err)
	}
	s.ops, s.quit, s.done = make(chan *writeOp), make(chan struct{}), make(chan struct{})
	go s.writer(conn)
	return s, nil
}

func createPrivate(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, fsutil.FileMode)
	if err == nil {
		if err := f.Close(); err != nil {
			return fmt.Errorf("create hub database: %w", err)
		}
		return fsutil.SyncDir(filepath.Dir(path))
	}
	if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create hub database: %w", err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("stat hub database: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("hub database %s is not a regular file", path)
	}
	return nil
}

// Close stops the writer and closes both pools; closing the last connection
// checkpoints the WAL.
func (s *SQLite) Close() error {
	s.closeOnce.Do(func() {
		close(s.quit)
		<-s.done
		s.closeErr = errors.Join(s.r.Close(), s.w.Close())
	})
	return s.closeErr
}

// errClosed answers Updates that arrive after Close.
var errClosed = errors.New("hub store is closed")

const schema = `
CREATE TABLE IF NOT EXISTS humans(id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, admin INTEGER NOT NULL, created_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS repositories(id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, created_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS tokens(id TEXT PRIMARY KEY, hash TEXT NOT NULL UNIQUE, human_id TEXT NOT NULL REFERENCES humans(id),
  repository_id TEXT NOT NULL REFERENCES repositories(id), scope TEXT NOT NULL, label TEXT NOT NULL, created_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS works(id TEXT PRIMARY KEY, repository_id TEXT NOT NULL REFERENCES repositories(id), title TEXT NOT NULL,
  state TEXT NOT NULL, generation INTEGER NOT NULL, created_by TEXT NOT NULL, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS works_repository ON works(repository_id, created_at);
CREATE TABLE IF NOT EXISTS checkpoints(work_id TEXT NOT NULL REFERENCES works(id), seq INTEGER NOT NULL, action TEXT NOT NULL,
  from_state TEXT NOT NULL, to_state TEXT NOT NULL, generation INTEGER NOT NULL, human_id TEXT NOT NULL, worktree_id TEXT NOT NULL,
  note TEXT NOT NULL, at INTEGER NOT NULL, PRIMARY KEY(work_id, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS currents(repository_id TEXT NOT NULL, worktree_id TEXT NOT NULL, work_id TEXT NOT NULL REFERENCES works(id),
  generation INTEGER NOT NULL, updated_at INTEGER NOT NULL, PRIMARY KEY(repository_id, worktree_id)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS currents_work ON currents(work_id);
CREATE TABLE IF NOT EXISTS sessions(work_id TEXT NOT NULL REFERENCES works(id), generation INTEGER NOT NULL, canonical TEXT NOT NULL,
  worktree_id TEXT NOT NULL, alias INTEGER NOT NULL, created_at INTEGER NOT NULL, PRIMARY KEY(work_id, generation, canonical)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS session_natives(work_id TEXT NOT NULL, generation INTEGER NOT NULL, native TEXT NOT NULL, canonical TEXT NOT NULL,
  first_seen INTEGER NOT NULL, PRIMARY KEY(work_id, generation, native)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS envelopes(repository_id TEXT NOT NULL, identity TEXT NOT NULL, digest TEXT NOT NULL, type TEXT NOT NULL,
  work_id TEXT NOT NULL, generation INTEGER NOT NULL, session TEXT NOT NULL, received_at INTEGER NOT NULL,
  PRIMARY KEY(repository_id, identity)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events(work_id TEXT NOT NULL, generation INTEGER NOT NULL, session TEXT NOT NULL, stream TEXT NOT NULL,
  seq INTEGER NOT NULL, kind TEXT NOT NULL, body TEXT NOT NULL, identity TEXT NOT NULL, received_at INTEGER NOT NULL,
  PRIMARY KEY(work_id, generation, session, stream, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS streams(work_id TEXT NOT NULL, generation INTEGER NOT NULL, session TEXT NOT NULL, stream TEXT NOT NULL,
  arrival INTEGER NOT NULL, PRIMARY KEY(work_id, generation, session, stream)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS actions(work_id TEXT NOT NULL, action_id TEXT NOT NULL, generation INTEGER NOT NULL, session TEXT NOT NULL,
  start TEXT, start_identity TEXT NOT NULL DEFAULT '', finish TEXT, finish_identity TEXT NOT NULL DEFAULT '',
  PRIMARY KEY(work_id, action_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS usage(work_id TEXT NOT NULL, generation INTEGER NOT NULL, session TEXT NOT NULL, identity TEXT NOT NULL,
  model TEXT NOT NULL, message_id TEXT NOT NULL, input INTEGER, output INTEGER, cache_creation INTEGER,
  cache_read INTEGER, received_at INTEGER NOT NULL, scope TEXT NOT NULL DEFAULT 'request', PRIMARY KEY(work_id, identity)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS setups(work_id TEXT NOT NULL, generation INTEGER NOT NULL, session TEXT NOT NULL,
  artifact TEXT NOT NULL, model TEXT NOT NULL, permission_mode TEXT NOT NULL, effort TEXT NOT NULL, unobserved TEXT NOT NULL,
  received_at INTEGER NOT NULL, PRIMARY KEY(work_id, generation, session, artifact)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS gaps(work_id TEXT NOT NULL, generation INTEGER NOT NULL, session TEXT NOT NULL, identity TEXT NOT NULL,
  kind TEXT NOT NULL, reason TEXT NOT NULL, from_seq INTEGER NOT NULL, to_seq INTEGER NOT NULL, received_at INTEGER NOT NULL,
  stream TEXT NOT NULL DEFAULT '', PRIMARY KEY(work_id, identity)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS changelog_grants(work_id TEXT PRIMARY KEY REFERENCES works(id), max_objects INTEGER NOT NULL,
  max_bytes INTEGER NOT NULL, updated_at INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS changelog_increments(work_id TEXT NOT NULL REFERENCES works(id), position INTEGER NOT NULL,
  digest TEXT NOT NULL, size INTEGER NOT NULL, session TEXT NOT NULL, generation INTEGER NOT NULL, worktree_id TEXT NOT NULL,
  kind TEXT NOT NULL, tool TEXT NOT NULL, failed INTEGER NOT NULL, stored_at INTEGER NOT NULL,
  PRIMARY KEY(work_id, worktree_id, position)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS changelog_increments_digest ON changelog_increments(digest);
`

// migrateRetrying is migrate, retried while SQLite answers SQLITE_BUSY
// without waiting (it does so, busy handler or not, while another process
// switches a new database to WAL or recovers its WAL index), within the
// busy timeout.
func (s *SQLite) migrateRetrying(ctx context.Context) error {
	deadline := time.Now().Add(BusyTimeoutMS * time.Millisecond)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		err := s.migrate(ctx)
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// isBusy reports whether err is SQLite's SQLITE_BUSY or SQLITE_LOCKED (any
// extended code).
func isBusy(err error) bool {
	var c interface{ Code() int }
	if errors.As(err, &c) {
		switch c.Code() & 0xff {
		case 5, 6:
			return true
		}
	}
	return false
}

func (s *SQLite) migrate(ctx context.Context) error {
	var v int
	if err := s.w.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("read hub database version: %w", err)
	}
	if v == SchemaVersion {
		return nil
	}
	if v > SchemaVersion {
		return fmt.Errorf("hub database schema version %d is newer than this agentscm (%d)", v, SchemaVersion)
	}
	return s.update(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
			return fmt.Errorf("read hub database version: %w", err)
		}
		if v == SchemaVersion {
			return nil // another process migrated first
		}
		from := v
		for u := from; u > 0 && u < SchemaVersion; u++ {
			if m := migrations[u]; m != "" {
				if _, err := tx.ExecContext(ctx, m); err != nil {
					return fmt.Errorf("migrate hub schema from version %d: %w", u, err)
				}
			}
		}
		if _, err := tx.ExecContext(ctx, schema+bodiesSchema); err != nil {
			return fmt.Errorf("create hub schema: %w", err)
		}
		for u := from; u > 0 && u < SchemaVersion; u++ {
			if m := postMigrations[u]; m != "" {
				if _, err := tx.ExecContext(ctx, m); err != nil {
					return fmt.Errorf("migrate hub schema from version %d: %w", u, err)
				}
			}
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", SchemaVersion)); err != nil {
			return fmt.Errorf("set hub schema version: %w", err)
		}
		return nil
	})
}

func (s *SQLite) update(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin hub transaction: %w", err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit hub transaction: %w", err)
	}
	return nil
}

// Update runs fn in an immediate (write-locked) transaction and returns once
// its changes are durably committed (or discarded when fn fails). Concurrent
// Updates are group-committed: the writer runs each in its own savepoint of
// one transaction, in arrival order, and commits them with one fsync.
func (s *SQLite) Update(ctx context.Context, fn func(Tx) error) error {
	op := &writeOp{ctx: ctx, fn: fn, done: make(chan error, 1)}
	select {
	case s.ops <- op:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.quit:
		return errClosed
	}
	// Once queued the outcome is awaited even if ctx ends, so a caller never
	// reports failure for a change that then commits.
	return <-op.done
}

func (s *SQLite) writer(conn *sql.Conn) {
	defer close(s.done)
	// Statements prepared on the writer's connection live as long as the
	// store, across transactions.
	stmts := map[string]*sql.Stmt{}
	defer func() {
		for _, st := range stmts {
			st.Close()
		}
		conn.Close()
	}()
	for {
		group, ok := NextGroup(s.ops, s.quit, maxGroup)
		if !ok {
			return
		}
		if len(stmts) > maxStmts {
			for q, st := range stmts {
				st.Close()
				delete(stmts, q)
			}
		}
		s.commitGroup(conn, stmts, group)
	}
}

// maxStmts bounds the writer's prepared statements.
const maxStmts = 512

// commitGroup runs a group of Updates in one transaction on the writer's
// connection. An Update whose fn fails is rolled back to its savepoint and
// answered with its error; the others share the commit's outcome.
func (s *SQLite) commitGroup(conn *sql.Conn, stmts map[string]*sql.Stmt, group []*writeOp) {
	ctx := context.Background()
	results := make([]error, len(group))
	failAll := func(from int, err error) {
		conn.ExecContext(ctx, "ROLLBACK")
		for j, op := range group {
			if results[j] == nil || j >= from {
				results[j] = err
			}
			op.done <- results[j]
		}
	}
	// Waiting for another process's write lock (up to the busy timeout)
	// ends early when the only caller's context does; a group shares the
	// wait.
	beginCtx := ctx
	if len(group) == 1 {
		beginCtx = group[0].ctx
	}
	if err := beginImmediate(beginCtx, conn); err != nil {
		for _, op := range group {
			op.done <- fmt.Errorf("begin hub transaction: %w", err)
		}
		return
	}
	ok := 0
	for i, op := range group {
		if err := op.ctx.Err(); err != nil {
			results[i] = err
			continue
		}
		if _, err := conn.ExecContext(ctx, "SAVEPOINT op"); err != nil {
			failAll(i, fmt.Errorf("hub savepoint: %w", err))
			return
		}
		if err := op.fn(&sqliteTx{ctx: ctx, q: conn, stmts: stmts}); err != nil {
			results[i] = err
			_, rerr := conn.ExecContext(ctx, "ROLLBACK TO op")
			if rerr == nil {
				_, rerr = conn.ExecContext(ctx, "RELEASE op")
			}
			if rerr != nil {
				// The transaction is unusable: fail the whole group.
				failAll(i, fmt.Errorf("roll back hub savepoint: %w", rerr))
				return
			}
			continue
		}
		if _, err := conn.ExecContext(ctx, "RELEASE op"); err != nil {
			// Its changes could not be separated from the transaction.
			failAll(i, fmt.Errorf("release hub savepoint: %w", err))
			return
		}
		ok++
	}
	if ok == 0 {
		conn.ExecContext(ctx, "ROLLBACK")
	} else if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		conn.ExecContext(ctx, "ROLLBACK")
		for i := range results {
			if results[i] == nil {
				results[i] = fmt.Errorf("commit hub transaction: %w", err)
			}
		}
	}
	for i, op := range group {
		op.done <- results[i]
	}
}

// beginImmediate starts the writer's transaction. A BEGIN that reports an
// error may still have begun (the caller's context ended just as it took
// the lock), and a ROLLBACK after a failed group may itself have failed: in
// either case the connection is left inside a transaction whose operations
// were all answered with an error, and every later BEGIN would fail with
// "cannot start a transaction within a transaction" until the Hub restarts
// (found by the soak). So a failed BEGIN is always followed by a ROLLBACK,
// and a BEGIN refused for an open transaction rolls that transaction back
// (nothing in it was acknowledged) and begins again, once.
func beginImmediate(ctx context.Context, conn *sql.Conn) error {
	_, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE")
	if err == nil {
		return nil
	}
	if strings.Contains(err.Error(), "within a transaction") {
		if _, rerr := conn.ExecContext(context.Background(), "ROLLBACK"); rerr != nil {
			return fmt.Errorf("%w (and the open transaction would not roll back: %v)", err, rerr)
		}
		if _, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err == nil {
			return nil
		}
	}
	conn.ExecContext(context.Background(), "ROLLBACK") // no transaction is active: an error, ignored
	return err
}

// View runs fn in a read-only transaction.
func (s *SQLite) View(ctx context.Context, fn func(Tx) error) error {
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("begin hub read: %w", err)
	}
	defer tx.Rollback()
	return fn(&sqliteTx{ctx: ctx, q: tx, stmts: map[string]*sql.Stmt{}})
}

// querier is what a transaction runs statements on: a *sql.Tx for reads,
// the writer's *sql.Conn (inside BEGIN IMMEDIATE) for writes.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

type sqliteTx struct {
	ctx   context.Context
	q     querier
	stmts map[string]*sql.Stmt
}

// stmt returns q prepared on the transaction's connection, once.
func (t *sqliteTx) stmt(q string) (*sql.Stmt, error) {
	if st, ok := t.stmts[q]; ok {
		return st, nil
	}
	st, err := t.q.PrepareContext(t.ctx, q)
	if err != nil {
		return nil, err
	}
	t.stmts[q] = st
	return st, nil
}

func (t *sqliteTx) exec(q string, args ...any) error {
	st, err := t.stmt(q)
	if err != nil {
		return err
	}
	_, err = st.ExecContext(t.ctx, args...)
	return mapErr(err)
}

func (t *sqliteTx) query(q string, args ...any) (*sql.Rows, error) {
	st, err := t.stmt(q)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(t.ctx, args...)
}

func (t *sqliteTx) queryRow(q string, args ...any) *sql.Row {
	st, err := t.stmt(q)
	if err != nil {
		// QueryRowContext on a fresh tx statement reports the error at Scan.
		return t.q.QueryRowContext(t.ctx, q, args...)
	}
	return st.QueryRowContext(t.ctx, args...)
}

func (t *sqliteTx) row(q string, args []any, dest ...any) error {
	return mapErr(t.queryRow(q, args...).Scan(dest...))
}

func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY, sqlite3.SQLITE_CONSTRAINT_UNIQUE:
			return fmt.Errorf("%w: %v", ErrExists, err)
		}
	}
	return err
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (t *sqliteTx) InsertHuman(h Human) error {
	return t.exec("INSERT INTO humans(id,name,admin,created_at) VALUES(?,?,?,?)", h.ID, h.Name, b2i(h.Admin), h.CreatedAt)
}

func (t *sqliteTx) human(where string, arg string) (Human, error) {
	var h Human
	err := t.row("SELECT id,name,admin,created_at FROM humans WHERE "+where+"=?", []any{arg}, &h.ID, &h.Name, &h.Admin, &h.CreatedAt)
	return h, err
}

func (t *sqliteTx) HumanByName(name string) (Human, error) { return t.human("name", name) }
func (t *sqliteTx) HumanByID(id string) (Human, error)     { return t.human("id", id) }

func (t *sqliteTx) ListHumans() ([]Human, error) {
	rows, err := t.query("SELECT id,name,admin,created_at FROM humans ORDER BY name")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Human
	for rows.Next() {
		var h Human
		if err := rows.Scan(&h.ID, &h.Name, &h.Admin, &h.CreatedAt); err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, rows.Err()
}

func (t *sqliteTx) InsertRepository(r Repository) error {
	return t.exec("INSERT INTO repositories(id,name,created_at) VALUES(?,?,?)", r.ID, r.Name, r.CreatedAt)
}

func (t *sqliteTx) repository(where, arg string) (Repository, error) {
	var r Repository
	err := t.row("SELECT id,name,created_at FROM repositories WHERE "+where+"=?", []any{arg}, &r.ID, &r.Name, &r.CreatedAt)
	return r, err
}

func (t *sqliteTx) RepositoryByName(name string) (Repository, error) {
	return t.repository("name", name)
}
func (t *sqliteTx) RepositoryByID(id string) (Repository, error) { return t.repository("id", id) }

func (t *sqliteTx) ListRepositories() ([]Repository, error) {
	rows, err := t.query("SELECT id,name,created_at FROM repositories ORDER BY name")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Repository
	for rows.Next() {
		var r Repository
		if err := rows.Scan(&r.ID, &r.Name, &r.CreatedAt); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func (t *sqliteTx) InsertToken(k Token) error {
	return t.exec("INSERT INTO tokens(id,hash,human_id,repository_id,scope,label,created_at) VALUES(?,?,?,?,?,?,?)",
		k.ID, k.Hash, k.HumanID, k.RepositoryID, k.Scope, k.Label, k.CreatedAt)
}

const tokenCols = "id,hash,human_id,repository_id,scope,label,created_at"

func scanToken(sc interface{ Scan(...any) error }) (Token, error) {
	var k Token
	err := sc.Scan(&k.ID, &k.Hash, &k.HumanID, &k.RepositoryID, &k.Scope, &k.Label, &k.CreatedAt)
	return k, err
}

func (t *sqliteTx) TokenByHash(hash string) (Token, error) {
	k, err := scanToken(t.queryRow("SELECT "+tokenCols+" FROM tokens WHERE hash=?", hash))
	return k, mapErr(err)
}

func (t *sqliteTx) TokenPrincipal(hash string) (Token, Human, Repository, error) {
	var k Token
	var h Human
	var r Repository
	err := t.row(`SELECT k.id,k.hash,k.human_id,k.repository_id,k.scope,k.label,k.created_at, h.id,h.name,h.admin,h.created_at, r.id,r.name,r.created_at
		FROM tokens k JOIN humans h ON h.id=k.human_id JOIN repositories r ON r.id=k.repository_id WHERE k.hash=?`, []any{hash},
		&k.ID, &k.Hash, &k.HumanID, &k.RepositoryID, &k.Scope, &k.Label, &k.CreatedAt, &h.ID, &h.Name, &h.Admin, &h.CreatedAt, &r.ID, &r.Name, &r.CreatedAt)
	return k, h, r, err
}

func (t *sqliteTx) ListTokens() ([]Token, error) {
	rows, err := t.query("SELECT " + tokenCols + " FROM tokens ORDER BY created_at, id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Token
	for rows.Next() {
		k, err := scanToken(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

const workCols = "id,repository_id,title,state,generation,created_by,created_at,updated_at"

func scanWork(sc interface{ Scan(...any) error }) (Work, error) {
	var w Work
	err := sc.Scan(&w.ID, &w.RepositoryID, &w.Title, &w.State, &w.Generation, &w.CreatedBy, &w.CreatedAt, &w.UpdatedAt)
	return w, err
}

func (t *sqliteTx) InsertWork(w Work) error {
	return t.exec("INSERT INTO works("+workCols+") VALUES(?,?,?,?,?,?,?,?)",
		w.ID, w.RepositoryID, w.Title, w.State, w.Generation, w.CreatedBy, w.CreatedAt, w.UpdatedAt)
}

func (t *sqliteTx) WorkByID(id string) (Work, error) {
	w, err := scanWork(t.queryRow("SELECT "+workCols+" FROM works WHERE id=?", id))
	return w, mapErr(err)
}

func (t *sqliteTx) UpdateWork(w Work) error {
	st, err := t.stmt("UPDATE works SET title=?,state=?,generation=?,updated_at=? WHERE id=?")
	if err != nil {
		return err
	}
	res, err := st.ExecContext(t.ctx, w.Title, w.State, w.Generation, w.UpdatedAt, w.ID)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return ErrNotFound
	}
	return nil
}

func (t *sqliteTx) ListWorks(repositoryID string, limit int) ([]Work, int, error) {
	var total int
	if err := t.row("SELECT count(*) FROM works WHERE repository_id=?", []any{repositoryID}, &total); err != nil {
		return nil, 0, err
	}
	rows, err := t.query("SELECT "+workCols+" FROM works WHERE repository_id=? ORDER BY created_at DESC, id DESC LIMIT ?", repositoryID, limit)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var out []Work
	for rows.Next() {
		w, err := scanWork(rows)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, w)
	}
	return out, total, rows.Err()
}

func (t *sqliteTx) AppendCheckpoint(c Checkpoint) (int64, error) {
	var seq int64
	if err := t.row("SELECT coalesce(max(seq),0)+1 FROM checkpoints WHERE work_id=?", []any{c.WorkID}, &seq); err != nil {
		return 0, err
	}
	err := t.exec("INSERT INTO checkpoints(work_id,seq,action,from_state,to_state,generation,human_id,worktree_id,note,at) VALUES(?,?,?,?,?,?,?,?,?,?)",
		c.WorkID, seq, c.Action, c.From, c.To, c.Generation, c.HumanID, c.WorktreeID, c.Note, c.At)
	return seq, err
}

func (t *sqliteTx) Checkpoints(workID string) ([]Checkpoint, error) {
	rows, err := t.query("SELECT work_id,seq,action,from_state,to_state,generation,human_id,worktree_id,note,at FROM checkpoints WHERE work_id=? ORDER BY seq", workID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Checkpoint
	for rows.Next() {
		var c Checkpoint
		if err := rows.Scan(&c.WorkID, &c.Seq, &c.Action, &c.From, &c.To, &c.Generation, &c.HumanID, &c.WorktreeID, &c.Note, &c.At); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

func (t *sqliteTx) Current(repositoryID, worktreeID string) (Current, error) {
	c := Current{RepositoryID: repositoryID, WorktreeID: worktreeID}
	err := t.row("SELECT work_id,generation,updated_at FROM currents WHERE repository_id=? AND worktree_id=?",
		[]any{repositoryID, worktreeID}, &c.WorkID, &c.Generation, &c.UpdatedAt)
	return c, err
}

func (t *sqliteTx) SetCurrent(c Current) error {
	return t.exec(`INSERT INTO currents(repository_id,worktree_id,work_id,generation,updated_at) VALUES(?,?,?,?,?)
		ON CONFLICT(repository_id,worktree_id) DO UPDATE SET work_id=excluded.work_id, generation=excluded.generation, updated_at=excluded.updated_at`,
		c.RepositoryID, c.WorktreeID, c.WorkID, c.Generation, c.UpdatedAt)
}

func (t *sqliteTx) CurrentsForWork(workID string) ([]Current, error) {
	rows, err := t.query("SELECT repository_id,worktree_id,work_id,generation,updated_at FROM currents WHERE work_id=? ORDER BY worktree_id", workID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Current
	for rows.Next() {
		var c Current
		if err := rows.Scan(&c.RepositoryID, &c.WorktreeID, &c.WorkID, &c.Generation, &c.UpdatedAt); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

const sessionCols = "work_id,generation,canonical,worktree_id,alias,created_at"

func scanSession(sc interface{ Scan(...any) error }) (Session, error) {
	var s Session
	err := sc.Scan(&s.WorkID, &s.Generation, &s.Canonical, &s.WorktreeID, &s.Alias, &s.CreatedAt)
	return s, mapErr(err)
}

func (t *sqliteTx) InsertSession(s Session) error {
	return t.exec("INSERT INTO sessions("+sessionCols+") VALUES(?,?,?,?,?,?)", s.WorkID, s.Generation, s.Canonical, s.WorktreeID, b2i(s.Alias), s.CreatedAt)
}

func (t *sqliteTx) Session(workID string, generation int64, canonical string) (Session, error) {
	return scanSession(t.queryRow("SELECT "+sessionCols+" FROM sessions WHERE work_id=? AND generation=? AND canonical=?", workID, generation, canonical))
}

func (t *sqliteTx) Sessions(workID string) ([]Session, error) {
	rows, err := t.query("SELECT "+sessionCols+" FROM sessions WHERE work_id=? ORDER BY generation, created_at, canonical", workID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Session
	for rows.Next() {
		s, err := scanSession(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

func (t *sqliteTx) SessionByNative(workID string, generation int64, native string) (Session, error) {
	return scanSession(t.queryRow(`SELECT s.work_id,s.generation,s.canonical,s.worktree_id,s.alias,s.created_at
		FROM session_natives n JOIN sessions s ON s.work_id=n.work_id AND s.generation=n.generation AND s.canonical=n.canonical
		WHERE n.work_id=? AND n.generation=? AND n.native=?`, workID, generation, native))
}

func (t *sqliteTx) UnboundAlias(workID string, generation int64, worktreeID string) (Session, error) {
	return scanSession(t.queryRow(`SELECT `+sessionCols+` FROM sessions s
		WHERE work_id=? AND generation=? AND worktree_id=? AND alias=1
		AND NOT EXISTS (SELECT 1 FROM session_natives n WHERE n.work_id=s.work_id AND n.generation=s.generation AND n.canonical=s.canonical)
		ORDER BY created_at, canonical LIMIT 1`, workID, generation, worktreeID))
}

func (t *sqliteTx) BindNative(workID string, generation int64, canonical, native string, at int64) error {
	return t.exec("INSERT INTO session_natives(work_id,generation,native,canonical,first_seen) VALUES(?,?,?,?,?)", workID, generation, native, canonical, at)
}

func (t *sqliteTx) Natives(workID string) (map[SessionKey][]string, error) {
	rows, err := t.query("SELECT generation,canonical,native FROM session_natives WHERE work_id=? ORDER BY first_seen, native", workID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[SessionKey][]string{}
	for rows.Next() {
		var k SessionKey
		var n string
		if err := rows.Scan(&k.Generation, &k.Canonical, &n); err != nil {
			return nil, err
		}
		out[k] = append(out[k], n)
	}
	return out, rows.Err()
}

func (t *sqliteTx) EnvelopeByIdentity(repositoryID, identity string) (Envelope, error) {
	e := Envelope{RepositoryID: repositoryID, Identity: identity}
	err := t.row("SELECT digest,type,work_id,generation,session,received_at FROM envelopes WHERE repository_id=? AND identity=?",
		[]any{repositoryID, identity}, &e.Digest, &e.Type, &e.WorkID, &e.Generation, &e.Session, &e.ReceivedAt)
	return e, err
}

func (t *sqliteTx) InsertEnvelope(e Envelope) error {
	return t.exec("INSERT INTO envelopes(repository_id,identity,digest,type,work_id,generation,session,received_at) VALUES(?,?,?,?,?,?,?,?)",
		e.RepositoryID, e.Identity, e.Digest, e.Type, e.WorkID, e.Generation, e.Session, e.ReceivedAt)
}

func (t *sqliteTx) InsertEvents(s Scope, events []api.Event) error {
	if len(events) == 0 {
		return nil
	}
	// The order in which a session's streams first reached the Hub (the
	// receipt clock has whole seconds only).
	if err := t.exec(`INSERT OR IGNORE INTO streams(work_id,generation,session,stream,arrival)
  SELECT ?,?,?,?,coalesce(max(arrival),0)+1 FROM streams WHERE work_id=? AND generation=? AND session=?`,
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

func (t *sqliteTx) Action(workID, actionID string) (Action, error) {
	a := Action{WorkID: workID, ActionID: actionID}
	var start, finish sql.NullString
	err := t.row("SELECT generation,session,start,start_identity,finish,finish_identity FROM actions WHERE work_id=? AND action_id=?",
		[]any{workID, actionID}, &a.Generation, &a.Session, &start, &a.StartIdentity, &finish, &a.FinishIdentity)
	if err != nil {
		return a, err
	}
	return a, decodeAction(&a, start, finish)
}

func decodeAction(a *Action, start, finish sql.NullString) error {
	if start.Valid {
		a.Start = new(api.ActionStart)
		if err := json.Unmarshal([]byte(start.String), a.Start); err != nil {
			return fmt.Errorf("stored action start %s: %w", a.ActionID, err)
		}
	}
	if finish.Valid {
		a.Finish = new(api.ActionFinish)
		if err := json.Unmarshal([]byte(finish.String), a.Finish); err != nil {
			return fmt.Errorf("stored action finish %s: %w", a.ActionID, err)
		}
	}
	return nil
}

func (t *sqliteTx) InsertActionStart(s Scope, a *api.ActionStart) error {
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	return t.exec(`INSERT INTO actions(work_id,action_id,generation,session,start,start_identity) VALUES(?,?,?,?,?,?)
		ON CONFLICT(work_id,action_id) DO UPDATE SET start=excluded.start, start_identity=excluded.start_identity WHERE actions.start IS NULL`,
		s.WorkID, a.ActionID, s.Generation, s.Session, string(b), s.Identity)
}

func (t *sqliteTx) SetActionFinish(s Scope, f *api.ActionFinish) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return t.exec(`INSERT INTO actions(work_id,action_id,generation,session,finish,finish_identity) VALUES(?,?,?,?,?,?)
		ON CONFLICT(work_id,action_id) DO UPDATE SET finish=excluded.finish, finish_identity=excluded.finish_identity`,
		s.WorkID, f.ActionID, s.Generation, s.Session, string(b), s.Identity)
}

func (t *sqliteTx) InsertUsage(s Scope, u *api.Usage) error {
	return t.exec("INSERT INTO usage(work_id,generation,session,identity,model,message_id,input,output,cache_creation,cache_read,received_at,scope) VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
		s.WorkID, s.Generation, s.Session, s.Identity, u.Model, u.MessageID, nullable(u.InputTokens), nullable(u.OutputTokens),
		nullable(u.CacheCreationInputTokens), nullable(u.CacheReadInputTokens), s.ReceivedAt, u.Scope)
}

// nullable stores an unknown count as NULL.
func nullable(v *int64) any {
	if v == nil {
		return nil
	}
	return *v
}

func fromNull(v sql.NullInt64) *int64 {
	if !v.Valid {
		return nil
	}
	n := v.Int64
	return &n
}

func (t *sqliteTx) InsertSetup(s Scope, st *api.Setup) error {
	un, err := json.Marshal(st.Unobserved)
	if err != nil {
		return err
	}
	// Every event of a hook that exposed the same setup carries it: the
	// first one of a session records it.
	return t.exec("INSERT OR IGNORE INTO setups(work_id,generation,session,artifact,model,permission_mode,effort,unobserved,received_at) VALUES(?,?,?,?,?,?,?,?,?)",
		s.WorkID, s.Generation, s.Session, st.Artifact, st.Model, st.PermissionMode, st.Effort, string(un), s.ReceivedAt)
}

func (t *sqliteTx) Setups(workID string) ([]api.SetupRecord, error) {
	rows, err := t.query("SELECT generation,session,artifact,model,permission_mode,effort,unobserved,received_at FROM setups WHERE work_id=? ORDER BY received_at,generation,session,artifact", workID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []api.SetupRecord{}
	for rows.Next() {
		var r api.SetupRecord
		var un string
		if err := rows.Scan(&r.Generation, &r.Session, &r.Artifact, &r.Model, &r.PermissionMode, &r.Effort, &un, &r.ReceivedAt); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(un), &r.Unobserved); err != nil {
			return nil, fmt.Errorf("setup of work %s: %w", workID, err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func (t *sqliteTx) InsertGap(s Scope, g *api.Gap) error {
	return t.exec("INSERT INTO gaps(work_id,generation,session,identity,kind,reason,from_seq,to_seq,received_at,stream) VALUES(?,?,?,?,?,?,?,?,?,?)",
		s.WorkID, s.Generation, s.Session, s.Identity, g.Kind, g.Reason, g.FromSeq, g.ToSeq, s.ReceivedAt, s.Stream)
}

func (t *sqliteTx) ListEvents(workID string, limit int) ([]api.EventRecord, int64, error) {
	var total int64
	if err := t.row("SELECT count(*) FROM events WHERE work_id=?", []any{workID}, &total); err != nil {
		return nil, 0, err
	}
	// Streams of one session in the order they first reached the Hub.
	rows, err := t.query(`SELECT e.generation,e.session,e.stream,e.body,e.received_at FROM events e
  LEFT JOIN streams f ON f.work_id=e.work_id AND f.generation=e.generation AND f.session=e.session AND f.stream=e.stream
  WHERE e.work_id=? ORDER BY e.generation, e.session, f.arrival, e.stream, e.seq LIMIT ?`, workID, limit)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var out []api.EventRecord
	for rows.Next() {
		var r api.EventRecord
		var body string
		if err := rows.Scan(&r.Generation, &r.Session, &r.Stream, &body, &r.ReceivedAt); err != nil {
			return nil, 0, err
		}
		if err := json.Unmarshal([]byte(body), &r.Event); err != nil {
			return nil, 0, fmt.Errorf("stored event: %w", err)
		}
		out = append(out, r)
	}
	return out, total, rows.Err()
}

func (t *sqliteTx) SessionStats(workID string) ([]SessionStats, error) {
	rows, err := t.query(`SELECT generation,session,stream,count(*),min(seq),max(seq),min(received_at),
  (SELECT e2.kind FROM events e2 WHERE e2.work_id=events.work_id AND e2.generation=events.generation AND e2.session=events.session
    AND e2.stream=events.stream ORDER BY e2.seq DESC LIMIT 1)
  FROM events WHERE work_id=? GROUP BY generation, session, stream
  ORDER BY generation, session, (SELECT arrival FROM streams s WHERE s.work_id=events.work_id AND s.generation=events.generation
    AND s.session=events.session AND s.stream=events.stream), stream`, workID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []SessionStats
	for rows.Next() {
		var s SessionStats
		if err := rows.Scan(&s.Generation, &s.Session, &s.Stream, &s.Events, &s.FirstSeq, &s.LastSeq, &s.FirstReceived, &s.LastKind); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

func (t *sqliteTx) Actions(workID string) ([]Action, error) {
	rows, err := t.query("SELECT action_id,generation,session,start,start_identity,finish,finish_identity FROM actions WHERE work_id=? ORDER BY generation, session, action_id", workID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Action
	for rows.Next() {
		a := Action{WorkID: workID}
		var start, finish sql.NullString
		if err := rows.Scan(&a.ActionID, &a.Generation, &a.Session, &start, &a.StartIdentity, &finish, &a.FinishIdentity); err != nil {
			return nil, err
		}
		if err := decodeAction(&a, start, finish); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

func (t *sqliteTx) Gaps(workID string) ([]api.GapRecord, error) {
	rows, err := t.query("SELECT generation,session,stream,kind,reason,from_seq,to_seq,received_at FROM gaps WHERE work_id=? ORDER BY received_at, identity", workID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []api.GapRecord
	for rows.Next() {
		var g api.GapRecord
		if err := rows.Scan(&g.Generation, &g.Session, &g.Stream, &g.Kind, &g.Reason, &g.FromSeq, &g.ToSeq, &g.ReceivedAt); err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, rows.Err()
}

func (t *sqliteTx) UsageTotals(workID string) (api.UsageTotals, error) {
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
	rows, err := t.query(`SELECT generation,session,model,input,output,cache_creation,cache_read,received_at FROM usage
		WHERE work_id=? AND scope='session_cumulative' ORDER BY generation,session,model,received_at DESC,identity`, workID)
	if err != nil {
		return u, err
	}
	defer rows.Close()
	for rows.Next() {
		var c api.CumulativeUsage
		var in, out, cc, cr sql.NullInt64
		if err := rows.Scan(&c.Generation, &c.Session, &c.Model, &in, &out, &cc, &cr, &c.ReceivedAt); err != nil {
			return u, err
		}
		if n := len(u.SessionCumulative); n > 0 {
			p := u.SessionCumulative[n-1]
			if p.Generation == c.Generation && p.Session == c.Session && p.Model == c.Model {
				continue // an older snapshot of the same session and model
			}
		}
		c.Scope = api.UsageScopeSessionCumulative
		c.InputTokens, c.OutputTokens, c.CacheCreationInputTokens, c.CacheReadInputTokens = fromNull(in), fromNull(out), fromNull(cc), fromNull(cr)
		u.SessionCumulative = append(u.SessionCumulative, c)
	}
	return u, rows.Err()
}
