package postgres

import (
	"context"
	"sync"

	"github.com/agentscm/agentscm/internal/hub/store"
	"github.com/agentscm/agentscm/internal/hub/store/sqlstore"
	"github.com/jackc/pgx/v5"
)

// Group commit: concurrent Updates of one process share a transaction, as
// on SQLite. Each of Options.Writers goroutines takes the Updates waiting when it is
// free (at most MaxGroup), runs their functions one after another in one
// SERIALIZABLE transaction — each sees the writes of those before it, as if
// they had run one at a time — and commits them with one commit (one WAL
// flush, two round trips, for the whole group). When any function of a
// group fails, or the group's commit is a serialization failure (another
// instance wrote what the group read), the group is rolled back and each of
// its Updates runs again on its own, with the usual retries: a group is an
// optimisation that never changes an Update's outcome. So fn must, as
// always, only assign its outputs.
// MaxGroup bounds the Updates in one transaction.
//
// Group commit is off unless asked for (Options.Writers, or
// agentscm_writers=N in the DSN): on the 2-vCPU test machine it did not
// measurably raise the ingest rate (docs/performance.md) — a PostgreSQL
// Hub there is bound by round trips and CPU, not by WAL flushes — so it is
// for a database whose commits wait on a slow disk.
const MaxGroup = 64

// writeOp is one Update waiting for a writer.
type writeOp struct {
	ctx  context.Context
	fn   func(store.Tx) error
	done chan error
}

var errClosed = sqlstore.ErrClosed

// startWriters starts n writer goroutines (none when n < 1: every Update
// runs on its own).
func (s *Store) startWriters(n int) {
	if n < 1 {
		return
	}
	s.ops = make(chan *writeOp)
	if s.quit == nil {
		s.quit = make(chan struct{})
	}
	for range n {
		s.writers.Add(1)
		go s.writer()
	}
}

func (s *Store) stopWriters() {
	if s.quit != nil {
		s.closeOnce.Do(func() { close(s.quit) })
		s.writers.Wait()
	}
}

func (s *Store) writer() {
	defer s.writers.Done()
	for {
		group, ok := sqlstore.NextGroup(s.ops, s.quit, MaxGroup)
		if !ok {
			return
		}
		s.runGroup(group)
	}
}

// runGroup runs a group in one transaction, or, if that fails, each of its
// Updates on its own (concurrently, as they arrived).
func (s *Store) runGroup(group []*writeOp) {
	live := group[:0]
	for _, op := range group {
		if err := op.ctx.Err(); err != nil {
			op.done <- err
			continue
		}
		live = append(live, op)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		live[0].done <- s.update(live[0].ctx, live[0].fn)
		return
	}
	s.groups.Add(1)
	s.grouped.Add(int64(len(live)))
	committed, err := s.tryGroup(live)
	if committed {
		for _, op := range live {
			op.done <- nil
		}
		return
	}
	if err != nil {
		// The commit's outcome is unknown (say, the connection broke during
		// COMMIT): report it, as a lone Update does.
		for _, op := range live {
			op.done <- err
		}
		return
	}
	s.fallbacks.Add(1)
	var wg sync.WaitGroup
	for _, op := range live {
		wg.Add(1)
		go func() {
			defer wg.Done()
			op.done <- s.update(op.ctx, op.fn)
		}()
	}
	wg.Wait()
}

// tryGroup runs the group's functions in one transaction and commits it.
// It returns committed, or a non-nil error when the commit was attempted and
// failed otherwise than by a serialization failure; (false, nil) means
// nothing was committed and each Update is to run on its own.
func (s *Store) tryGroup(group []*writeOp) (bool, error) {
	// The group's statements are not cancelled by one caller's context:
	// they are the others' too.
	ctx := context.WithoutCancel(group[0].ctx)
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
	if err != nil {
		return false, nil
	}
	for _, op := range group {
		t := s.newTx(ctx, tx)
		if err := op.fn(t); err != nil || t.c.conflict != nil {
			tx.Rollback(ctx)
			return false, nil
		}
	}
	if err := tx.Commit(ctx); err != nil {
		if retryable(err) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}
