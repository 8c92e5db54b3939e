// Package sqlite is the Hub's embedded store.Store: one SQLite database file
// in WAL mode (modernc.org/sqlite, no cgo), its schema and migrations, and
// the group commit of concurrent Updates; the transactions are sqlstore's.
package sqlite

import (
	"context"
	"database/sql"
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
	"github.com/agentscm/agentscm/internal/hub/store"
	"github.com/agentscm/agentscm/internal/hub/store/sqlstore"

	driver "modernc.org/sqlite"
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
// body_removals and leases tables (bodiesSchema). Version 5 added the
// session's agent (sessions.agent, "" for sessions of earlier versions).
const SchemaVersion = 5

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

// addedColumns[v] are the columns version v+1 added to tables that exist
// before it: after the schema, a database that was at v or below gets each
// one it lacks.
var addedColumns = map[int][]addedColumn{
	4: {{"sessions", "agent", "TEXT NOT NULL DEFAULT ''"}},
}

type addedColumn struct{ table, name, decl string }

// addColumns adds the columns of addedColumns[u] that the database lacks.
func addColumns(ctx context.Context, tx *sql.Tx, u int) error {
	for _, c := range addedColumns[u] {
		var n int
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM pragma_table_info(?) WHERE name=?", c.table, c.name).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			if _, err := tx.ExecContext(ctx, "ALTER TABLE "+c.table+" ADD COLUMN "+c.name+" "+c.decl); err != nil {
				return err
			}
		}
	}
	return nil
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

// Store is the embedded store: one database file in WAL mode, safe for many
// short-lived processes (busy timeout, immediate write transactions).
type Store struct {
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
	fn   func(store.Tx) error
	done chan error
}

// maxGroup bounds how many Updates share one transaction.
const maxGroup = 128

// Open opens (creating when missing, mode 0600) the database in dir,
// which must exist, and brings its schema up to date.
func Open(ctx context.Context, dir string) (*Store, error) {
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
	s := &Store{w: w, r: r}
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
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.quit)
		<-s.done
		s.closeErr = errors.Join(s.r.Close(), s.w.Close())
	})
	return s.closeErr
}

// errClosed answers Updates that arrive after Close.
var errClosed = sqlstore.ErrClosed

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
  worktree_id TEXT NOT NULL, alias INTEGER NOT NULL, created_at INTEGER NOT NULL, agent TEXT NOT NULL DEFAULT '',
  PRIMARY KEY(work_id, generation, canonical)) WITHOUT ROWID;
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
func (s *Store) migrateRetrying(ctx context.Context) error {
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

func (s *Store) migrate(ctx context.Context) error {
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
			if err := addColumns(ctx, tx, u); err != nil {
				return fmt.Errorf("migrate hub schema from version %d: %w", u, err)
			}
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", SchemaVersion)); err != nil {
			return fmt.Errorf("set hub schema version: %w", err)
		}
		return nil
	})
}

func (s *Store) update(ctx context.Context, fn func(*sql.Tx) error) error {
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
func (s *Store) Update(ctx context.Context, fn func(store.Tx) error) error {
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

func (s *Store) writer(conn *sql.Conn) {
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
		group, ok := sqlstore.NextGroup(s.ops, s.quit, maxGroup)
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
func (s *Store) commitGroup(conn *sql.Conn, stmts map[string]*sql.Stmt, group []*writeOp) {
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
		if err := op.fn(newTx(ctx, conn, stmts)); err != nil {
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
func (s *Store) View(ctx context.Context, fn func(store.Tx) error) error {
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("begin hub read: %w", err)
	}
	defer tx.Rollback()
	return fn(newTx(ctx, tx, map[string]*sql.Stmt{}))
}

// querier is what a transaction runs statements on: a *sql.Tx for reads,
// the writer's *sql.Conn (inside BEGIN IMMEDIATE) for writes.
type querier interface {
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

// conn is sqlstore.DB on one SQLite transaction: every statement is
// prepared once on the transaction's connection (the writer's statements
// live as long as the store, across transactions).
type conn struct {
	ctx   context.Context
	q     querier
	stmts map[string]*sql.Stmt
}

// newTx returns the store.Tx of a transaction on q.
func newTx(ctx context.Context, q querier, stmts map[string]*sql.Stmt) store.Tx {
	return sqlstore.NewTx(&conn{ctx: ctx, q: q, stmts: stmts}, Dialect())
}

// Dialect is SQLite's sqlstore.Dialect: the driver's error classification
// and total()-probed sums.
func Dialect() sqlstore.Dialect {
	return sqlstore.Dialect{IsNoRows: isNoRows, IsUnique: isUnique}
}

func isNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }

func isUnique(err error) bool {
	var se *driver.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY, sqlite3.SQLITE_CONSTRAINT_UNIQUE:
			return true
		}
	}
	return false
}

// stmt returns q prepared on the transaction's connection, once.
func (c *conn) stmt(q string) (*sql.Stmt, error) {
	if st, ok := c.stmts[q]; ok {
		return st, nil
	}
	st, err := c.q.PrepareContext(c.ctx, q)
	if err != nil {
		return nil, err
	}
	c.stmts[q] = st
	return st, nil
}

func (c *conn) Exec(q string, args ...any) (int64, error) {
	st, err := c.stmt(q)
	if err != nil {
		return 0, err
	}
	res, err := st.ExecContext(c.ctx, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (c *conn) QueryRow(q string, args []any, dest ...any) error {
	st, err := c.stmt(q)
	if err != nil {
		return err
	}
	return st.QueryRowContext(c.ctx, args...).Scan(dest...)
}

func (c *conn) Query(q string, args []any, each func(sqlstore.Scanner) error) error {
	st, err := c.stmt(q)
	if err != nil {
		return err
	}
	rows, err := st.QueryContext(c.ctx, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// bodiesSchema is schema version 4 in SQLite.
const bodiesSchema = `
CREATE TABLE IF NOT EXISTS bodies(work_id TEXT NOT NULL REFERENCES works(id), human_id TEXT NOT NULL, digest TEXT NOT NULL,
  repository_id TEXT NOT NULL, bytes INTEGER NOT NULL, media_type TEXT NOT NULL, retention TEXT NOT NULL, state TEXT NOT NULL,
  generation INTEGER NOT NULL, session TEXT NOT NULL, identity TEXT NOT NULL, declared_at INTEGER NOT NULL,
  uploaded_at INTEGER NOT NULL, expires_at INTEGER NOT NULL, ended_at INTEGER NOT NULL,
  PRIMARY KEY(work_id, human_id, digest)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS bodies_due ON bodies(expires_at) WHERE state IN ('local','awaiting_upload','available');
CREATE INDEX IF NOT EXISTS bodies_digest ON bodies(digest, state);
CREATE TABLE IF NOT EXISTS body_removals(digest TEXT PRIMARY KEY, next_at INTEGER NOT NULL, backoff INTEGER NOT NULL,
  attempts INTEGER NOT NULL, last_error TEXT NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS body_removals_due ON body_removals(next_at);
CREATE TABLE IF NOT EXISTS leases(name TEXT PRIMARY KEY, holder TEXT NOT NULL, expires_at INTEGER NOT NULL) WITHOUT ROWID;
`
