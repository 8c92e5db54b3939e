package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/agentscm/agentscm/internal/hub/store"
	"github.com/agentscm/agentscm/internal/hub/store/sqlstore"
	"github.com/jackc/pgx/v5/pgconn"
)

// Group commit of plain events envelopes: concurrent CommitEvents of one
// process share a transaction. Each of Options.EventCommitters goroutines
// takes the envelopes waiting when it is free (at most MaxGroup) and sends
// BEGIN, one commitEventsSQL per envelope and COMMIT as one pipeline: one
// round trip, one commit and one WAL flush for the group, where each
// envelope alone pays all three (on the test machine the flush alone was
// about 40% of the database's CPU per envelope). Each statement sees the
// writes of those before it, as if the envelopes had come one at a time, so
// a duplicate in the same group is a duplicate. When a statement fails (a
// taken sequence number) or the group's transaction is a serialization
// failure, nothing of the group was committed and each envelope runs again
// on its own, with the usual retries: a group never changes an envelope's
// outcome. A committer takes only what is already waiting: a lone envelope
// is not delayed.

// DefaultEventCommitters is the number of event committers when
// Options.EventCommitters is 0.
const DefaultEventCommitters = 1

// EventCommittersParam is the DSN query parameter
// (postgres://...?agentscm_event_committers=N) that sets
// Options.EventCommitters (-1: no grouping); it is taken out before the DSN
// reaches pgx.
const EventCommittersParam = "agentscm_event_committers"

// eventsOp is one CommitEvents waiting for a committer.
type eventsOp struct {
	ctx  context.Context
	st   eventsStmt
	out  store.CommittedEvents
	err  error
	done chan struct{}
}

// startEventCommitters starts n committer goroutines (none when n < 1).
func (s *Store) startEventCommitters(n int) {
	if n < 1 {
		return
	}
	if s.quit == nil {
		s.quit = make(chan struct{})
	}
	s.evOps = make(chan *eventsOp)
	for range n {
		s.writers.Add(1)
		go s.eventCommitter()
	}
}

// commitEventsGrouped hands one envelope to a committer and waits for its
// outcome (once taken, even if ctx ends: the commit may be under way).
func (s *Store) commitEventsGrouped(ctx context.Context, st eventsStmt) (store.CommittedEvents, error) {
	op := &eventsOp{ctx: ctx, st: st, done: make(chan struct{})}
	select {
	case s.evOps <- op:
	case <-ctx.Done():
		return store.CommittedEvents{}, ctx.Err()
	case <-s.quit:
		return store.CommittedEvents{}, errClosed
	}
	<-op.done
	return op.out, op.err
}

func (s *Store) eventCommitter() {
	defer s.writers.Done()
	for {
		group, ok := sqlstore.NextGroup(s.evOps, s.quit, MaxGroup)
		if !ok {
			return
		}
		s.runEventsGroup(group)
	}
}

// runEventsGroup commits a group in one transaction or, when that commits
// nothing, each envelope on its own (concurrently, as they arrived).
func (s *Store) runEventsGroup(group []*eventsOp) {
	live := group[:0]
	for _, op := range group {
		if err := op.ctx.Err(); err != nil {
			op.err = err
			close(op.done)
			continue
		}
		live = append(live, op)
	}
	alone := func(op *eventsOp) {
		op.out, op.err = s.commitEventsAlone(op.ctx, op.st)
		close(op.done)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		alone(live[0])
		return
	}
	s.evGroups.Add(1)
	s.evGrouped.Add(int64(len(live)))
	outs, again, err := s.tryEventsGroup(live)
	if !again {
		// Committed, or the outcome is unknown (say, the connection broke
		// with the COMMIT sent): reported as a lone envelope reports it.
		for i, op := range live {
			if err == nil {
				op.out = outs[i]
			} else {
				op.err = err
			}
			close(op.done)
		}
		return
	}
	s.evFallbacks.Add(1)
	var wg sync.WaitGroup
	for _, op := range live {
		wg.Add(1)
		go func() {
			defer wg.Done()
			alone(op)
		}()
	}
	wg.Wait()
}

// tryEventsGroup runs the group's statements in one pipelined transaction
// and returns each envelope's outcome; again when nothing was committed
// (each envelope is to run on its own); or an error when the outcome is
// unknown.
func (s *Store) tryEventsGroup(group []*eventsOp) (outs []store.CommittedEvents, again bool, err error) {
	// The group's statements are not cancelled by one caller's context:
	// they are the others' too.
	ctx := context.WithoutCancel(group[0].ctx)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, true, nil // nothing sent: each tries on its own
	}
	defer conn.Release()
	stmts := make([]eventsStmt, len(group))
	for i, op := range group {
		stmts[i] = op.st
	}
	outs, err = runEventsPipeline(ctx, conn, stmts)
	var pe *pgconn.PgError
	switch {
	case err == nil:
		return outs, false, nil
	case errors.As(err, &pe):
		// A statement or the commit failed: the transaction was rolled
		// back.
		return nil, true, nil
	}
	return nil, false, fmt.Errorf("hub store: ingest events: %w", err)
}
