// Package postgres is the Hub's store.Store on PostgreSQL (pgx, pooled), for
// a team Hub that runs several `hub serve` processes on one database. It is
// linked only by the command tree (internal/cli), never by agentscm-hook.
//
// Tables and columns have the SQLite store's names; TEXT columns collate
// "C" so every ORDER BY gives SQLite's byte order. Update transactions run
// SERIALIZABLE and are retried on a serialization failure or deadlock, which
// gives the guarantees SQLite's single writer gives (idempotent ingestion,
// sequence uniqueness, takeover fencing) to writers in several processes.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentscm/agentscm/internal/hub/store"
	"github.com/agentscm/agentscm/internal/hub/store/sqlstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SchemaVersion is the schema this binary writes; it follows the SQLite
// store's numbering (store.SchemaVersion), so a schema change is one entry
// appended to migrations in each store.
const SchemaVersion = 5

// migration brings a database to version by running sql.
type migration struct {
	version int
	sql     string
}

// migrations run in order, each once, under an advisory lock: a database at
// version v gets every migration above v. A fresh database starts at the
// SQLite store's version 2 (PostgreSQL never had version 1).
var migrations = []migration{
	{2, schemaV2},
	{3, schemaV3},
	{4, schemaV4},
	{5, schemaV5},
}

// schemaLockKey is the pg_advisory_xact_lock key of schema migrations.
const schemaLockKey = 0x6167656e74736d31 // "agentsm1"

// MaxRetries bounds the retries of one Update after serialization failures.
const MaxRetries = 30

// Store is a PostgreSQL Hub store; it is safe for concurrent use by many
// goroutines and, on one database, by many processes.
type Store struct {
	pool    *pgxpool.Pool
	retries atomic.Int64
	rebind  sqlstore.Rebinder

	// Group commit (group.go).
	ops                        chan *writeOp
	quit                       chan struct{}
	closeOnce                  sync.Once
	writers                    sync.WaitGroup
	groups, grouped, fallbacks atomic.Int64

	// Group commit of plain events envelopes (eventsgroup.go).
	evOps                            chan *eventsOp
	evGroups, evGrouped, evFallbacks atomic.Int64
	streams                          streamCache
}

// Retries counts the Update attempts rolled back for a serialization
// failure or deadlock and run again.
func (s *Store) Retries() int64 { return s.retries.Load() }

// Stats counts what the store did so far, for benchmarks and logs.
type Stats struct {
	// Retries: attempts of a lone Update rolled back for a serialization
	// failure or deadlock and run again.
	Retries int64
	// Groups: transactions that ran two or more Updates; Grouped: the
	// Updates in them; Fallbacks: groups rolled back whose Updates then
	// ran on their own.
	Groups, Grouped, Fallbacks int64
	// EventGroups: transactions that committed two or more plain events
	// envelopes (CommitEvents); EventGrouped: the envelopes in them;
	// EventFallbacks: groups that committed nothing and whose envelopes
	// then ran on their own.
	EventGroups, EventGrouped, EventFallbacks int64
}

// Stats returns the counters.
func (s *Store) Stats() Stats {
	return Stats{Retries: s.retries.Load(), Groups: s.groups.Load(), Grouped: s.grouped.Load(), Fallbacks: s.fallbacks.Load(),
		EventGroups: s.evGroups.Load(), EventGrouped: s.evGrouped.Load(), EventFallbacks: s.evFallbacks.Load()}
}

// Options tune a Store.
type Options struct {
	// Writers is the number of group-commit writers: 0 or a negative
	// number means none (every Update its own transaction, the default).
	Writers int
	// EventCommitters is the number of goroutines that group-commit
	// concurrent plain events envelopes (CommitEvents, eventsgroup.go):
	// 0 means DefaultEventCommitters, a negative number none (each
	// envelope its own transaction).
	EventCommitters int
}

// Open connects to the database a DSN names (postgres://... or key=value;
// pool_max_conns and the other pgxpool parameters are honoured) and brings
// its schema up to date.
func Open(ctx context.Context, dsn string) (*Store, error) {
	return OpenWith(ctx, dsn, Options{})
}

// OpenWith is Open with options.
func OpenWith(ctx context.Context, dsn string, o Options) (*Store, error) {
	dsn, err := takeWriters(dsn, &o)
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx's message can quote the DSN; keep a password out of logs.
		return nil, fmt.Errorf("hub store: the PostgreSQL DSN does not parse")
	}
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "agentscm-hub"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("hub store: connect to PostgreSQL: %w", err)
	}
	s := &Store{pool: pool}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	s.startWriters(o.Writers)
	committers := o.EventCommitters
	if committers == 0 {
		committers = DefaultEventCommitters
	}
	s.startEventCommitters(committers)
	return s, nil
}

// WritersParam is the DSN query parameter (postgres://...?agentscm_writers=N)
// that turns group commit on with N writers (0, -1 or absent: off);
// it is taken out before the DSN reaches pgx.
const WritersParam = "agentscm_writers"

func takeWriters(dsn string, o *Options) (string, error) {
	if !strings.Contains(dsn, WritersParam) && !strings.Contains(dsn, EventCommittersParam) {
		return dsn, nil
	}
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("hub store: %s and %s are only understood in a postgres:// DSN", WritersParam, EventCommittersParam)
	}
	q := u.Query()
	if q.Has(WritersParam) {
		n, err := strconv.Atoi(q.Get(WritersParam))
		if err != nil || n < -1 || n > 64 {
			return "", fmt.Errorf("hub store: %s must be 1 to 64 writers, or 0 or -1 for no group commit", WritersParam)
		}
		o.Writers = n
		q.Del(WritersParam)
	}
	if q.Has(EventCommittersParam) {
		n, err := strconv.Atoi(q.Get(EventCommittersParam))
		if err != nil || n < -1 || n > 64 {
			return "", fmt.Errorf("hub store: %s must be 1 to 64 committers, 0 for the default (%d) or -1 for none", EventCommittersParam, DefaultEventCommitters)
		}
		o.EventCommitters = n
		q.Del(EventCommittersParam)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// Close stops the writers and event committers (after their current
// group) and closes the pool.
func (s *Store) Close() error {
	s.stopWriters()
	s.pool.Close()
	return nil
}

// Pool returns the connection pool (for tools such as hub migrate).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

func (s *Store) migrate(ctx context.Context) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("hub store: begin migration: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	// Every process that opens the store queues here; the first migrates,
	// the others find the version current.
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(schemaLockKey)); err != nil {
		return fmt.Errorf("hub store: lock schema: %w", err)
	}
	if _, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS agentscm_schema(version INTEGER NOT NULL)"); err != nil {
		return fmt.Errorf("hub store: create schema table: %w", err)
	}
	var v int
	err = tx.QueryRow(ctx, "SELECT version FROM agentscm_schema").Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		if _, err := tx.Exec(ctx, "INSERT INTO agentscm_schema(version) VALUES(0)"); err != nil {
			return fmt.Errorf("hub store: init schema version: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("hub store: read schema version: %w", err)
	}
	if v > SchemaVersion {
		return fmt.Errorf("hub database schema version %d is newer than this agentscm (%d)", v, SchemaVersion)
	}
	for _, m := range migrations {
		if m.version <= v {
			continue
		}
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return fmt.Errorf("hub store: migrate schema to version %d: %w", m.version, err)
		}
		if _, err := tx.Exec(ctx, "UPDATE agentscm_schema SET version=$1", m.version); err != nil {
			return fmt.Errorf("hub store: set schema version: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("hub store: commit migration: %w", err)
	}
	return nil
}

// View runs fn in a read-only REPEATABLE READ transaction: one consistent
// snapshot, as an SQLite read transaction sees.
func (s *Store) View(ctx context.Context, fn func(store.Tx) error) error {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("begin hub read: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	return fn(s.newTx(ctx, tx))
}

// Update runs fn in a SERIALIZABLE transaction and commits it. A
// serialization failure or deadlock (in fn or at commit) rolls back and runs
// fn again, at most MaxRetries times, so fn must only assign its outputs.
// The commit is not cancelled by ctx: a caller never reports failure for a
// change that then commits. With Options.Writers, concurrent Updates are
// group-committed (group.go).
func (s *Store) Update(ctx context.Context, fn func(store.Tx) error) error {
	if s.ops == nil {
		return s.update(ctx, fn)
	}
	op := &writeOp{ctx: ctx, fn: fn, done: make(chan error, 1)}
	select {
	case s.ops <- op:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.quit:
		return errClosed
	}
	// Once taken by a writer the outcome is awaited even if ctx ends.
	return <-op.done
}

// update runs fn in a transaction of its own, with the retries.
func (s *Store) update(ctx context.Context, fn func(store.Tx) error) error {
	for attempt := 0; ; attempt++ {
		err := s.try(ctx, fn)
		if err == nil || !retryable(err) || attempt >= MaxRetries {
			return err
		}
		s.retries.Add(1)
		// Jittered backoff, capped: contenders spread out instead of
		// colliding again.
		d := time.Duration(1+rand.IntN(1<<min(attempt, 6))) * time.Millisecond
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *Store) try(ctx context.Context, fn func(store.Tx) error) error {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
	if err != nil {
		return fmt.Errorf("begin hub transaction: %w", err)
	}
	t := s.newTx(ctx, tx)
	ferr := fn(t)
	if t.c.conflict != nil || ferr != nil {
		tx.Rollback(context.WithoutCancel(ctx))
		if t.c.conflict != nil {
			return t.c.conflict // whatever fn made of it
		}
		return ferr
	}
	if err := tx.Commit(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("commit hub transaction: %w", err)
	}
	return nil
}

// retryable reports a serialization failure or a deadlock.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// Dialect is PostgreSQL's sqlstore.Dialect: exact numeric sums and pgx's
// error classification.
func Dialect() sqlstore.Dialect {
	return sqlstore.Dialect{NumericSums: true, IsNoRows: isNoRows, IsUnique: isUnique}
}

func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

func isUnique(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// pgTx is store.Tx on one pgx transaction: sqlstore's statements, plus the
// ones written for PostgreSQL alone (tx.go).
type pgTx struct {
	*sqlstore.Tx
	c *conn
}

// newTx returns the store.Tx of the transaction tx.
func (s *Store) newTx(ctx context.Context, tx pgx.Tx) *pgTx {
	c := &conn{ctx: ctx, tx: tx, rb: &s.rebind}
	return &pgTx{Tx: sqlstore.NewTx(c, Dialect()), c: c}
}

// conn is sqlstore.DB on one pgx transaction.
type conn struct {
	ctx context.Context
	tx  pgx.Tx
	rb  *sqlstore.Rebinder
	// conflict is the first serialization failure seen: the transaction is
	// aborted and is retried whatever fn returns.
	conflict error
}

func (c *conn) note(err error) error {
	if err != nil && c.conflict == nil && retryable(err) {
		c.conflict = err
	}
	return err
}

// Exec runs a statement and returns the rows it affected.
func (c *conn) Exec(q string, args ...any) (int64, error) {
	tag, err := c.tx.Exec(c.ctx, c.rb.Rebind(q), args...)
	if err != nil {
		return 0, c.note(err)
	}
	return tag.RowsAffected(), nil
}

func (c *conn) QueryRow(q string, args []any, dest ...any) error {
	return c.note(c.tx.QueryRow(c.ctx, c.rb.Rebind(q), args...).Scan(dest...))
}

// Query runs a query and calls each for every row.
func (c *conn) Query(q string, args []any, each func(sqlstore.Scanner) error) error {
	rows, err := c.tx.Query(c.ctx, c.rb.Rebind(q), args...)
	if err != nil {
		return c.note(err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return c.note(err)
		}
	}
	return c.note(rows.Err())
}
