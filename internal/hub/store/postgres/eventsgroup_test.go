package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/hub/store"
	"github.com/agentscm/agentscm/internal/hub/store/postgres"
	"github.com/agentscm/agentscm/internal/hub/store/postgres/pgtest"
)

const groupWork = "01JGROUPGROUPGROUPGROUPGROU"

// seedEventsWork creates a repository, an active Work at generation 1 and
// its session "s1".
func seedEventsWork(t *testing.T, st *postgres.Store) {
	t.Helper()
	err := st.Update(context.Background(), func(tx store.Tx) error {
		if err := tx.InsertRepository(store.Repository{ID: "r", Name: "r"}); err != nil {
			return err
		}
		if err := tx.InsertWork(store.Work{ID: groupWork, RepositoryID: "r", State: api.StateActive, Generation: 1}); err != nil {
			return err
		}
		return tx.InsertSession(store.Session{WorkID: groupWork, Generation: 1, Canonical: "s1"})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// groupEnvelope is envelope identity id of session, stream: 10 events from
// seq first.
func groupEnvelope(id, digest, session, stream string, first int64) (store.Envelope, store.Scope, []api.Event) {
	evs := make([]api.Event, 10)
	for j := range evs {
		evs[j] = api.Event{Seq: first + int64(j), Kind: "tool_finish", ToolName: "Bash", ToolUseID: fmt.Sprintf("toolu_%s_%d", id, j), Outcome: "returned"}
	}
	row := store.Envelope{RepositoryID: "r", Identity: id, Digest: digest, Type: api.TypeEvents, WorkID: groupWork, Generation: 1, Session: session, ReceivedAt: 5}
	sc := store.Scope{WorkID: groupWork, Generation: 1, Session: session, Stream: stream, Identity: id, ReceivedAt: 5}
	return row, sc, evs
}

// TestEventsGroupCommitOutcomes: many concurrent CommitEvents on one store
// (group-committed, several envelopes per transaction) have exactly the
// outcomes they have one at a time: fresh envelopes are accepted; of one
// identity sent many times one is accepted and the others are duplicates
// of it; of envelopes claiming the same sequence numbers one is accepted
// and the others are sequence_taken and leave nothing (not even their
// identity) — although they shared transactions with envelopes that were
// accepted; an envelope of an unknown session writes nothing. Also with
// grouping off, and with two stores (two instances) on one database.
func TestEventsGroupCommitOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name       string
		committers string
		stores     int
	}{
		{"default", "", 1},
		{"one committer", "1", 1},
		{"four committers", "4", 1},
		{"no grouping", "-1", 1},
		{"two instances", "1", 2},
	} {
		for _, contended := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/contended=%v", tc.name, contended), func(t *testing.T) { eventsGroupOutcomes(t, tc.committers, tc.stores, contended) })
		}
	}
}

// eventsGroupOutcomes sends 200 envelopes at once; with contended, 20 of
// them claim the same sequence numbers (a group with one of them commits
// nothing and falls back), else every group can commit.
func eventsGroupOutcomes(t *testing.T, committers string, nstores int, contended bool) {
	tc := struct {
		committers string
		stores     int
	}{committers, nstores}
	{
		ctx := context.Background()
		dsn := pgtest.Database(t)
		if tc.committers != "" {
			dsn += "&" + postgres.EventCommittersParam + "=" + tc.committers
		}
		var stores []*postgres.Store
		for range tc.stores {
			st, err := postgres.Open(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			stores = append(stores, st)
		}
		seedEventsWork(t, stores[0])
		const n = 200
		digest := "sha256:" + strings.Repeat("d", 64)
		outs := make([]store.CommittedEvents, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id, session, stream, first := fmt.Sprintf("id-%03d", i), "s1", fmt.Sprintf("stream-%03d", i), int64(1)
				switch i % 10 {
				case 3: // one identity, sent by many
					id, stream = "shared", "shared-stream"
				case 5: // distinct identities claiming the same numbers
					if contended {
						stream = "contended"
					}
				case 7:
					session = "no-such-session"
				}
				row, sc, evs := groupEnvelope(id, digest, session, stream, first)
				<-start
				outs[i], errs[i] = stores[i%len(stores)].CommitEvents(ctx, row, sc, evs, []string{api.StateActive})
			}()
		}
		close(start)
		wg.Wait()
		var shared, contendedOK, accepted int
		for i, out := range outs {
			if errs[i] != nil {
				t.Fatalf("envelope %d: %v", i, errs[i])
			}
			switch i % 10 {
			case 3:
				if out.Accepted {
					shared++
				} else if !out.Taken || out.TakenDigest != digest || out.TakenType != api.TypeEvents {
					t.Fatalf("envelope %d of the shared identity: %+v", i, out)
				}
			case 5:
				if out.Accepted {
					contendedOK++
				} else if !contended || !out.SequenceTaken {
					t.Fatalf("envelope %d of the contended stream: %+v", i, out)
				}
			case 7:
				if out.Accepted || out.Taken || out.SequenceTaken || out.SessionFound || out.WorkErr != nil {
					t.Fatalf("envelope %d of an unknown session: %+v", i, out)
				}
			default:
				if !out.Accepted || out.Taken || !out.SessionFound || out.Work.ID != groupWork {
					t.Fatalf("envelope %d: %+v", i, out)
				}
			}
			if out.Accepted {
				accepted++
			}
		}
		want := 1
		if !contended {
			want = n / 10
		}
		if shared != 1 || contendedOK != want {
			t.Fatalf("the shared identity was accepted %d times, the contended numbers %d times", shared, contendedOK)
		}
		// 140 fresh ones, one of the shared identity, and one of the
		// contended numbers (20 uncontended).
		if accepted != n-60+1+want {
			t.Fatalf("%d accepted", accepted)
		}
		var envelopes, events, streams int
		if err := stores[0].Pool().QueryRow(ctx, "SELECT (SELECT count(*) FROM envelopes), (SELECT count(*) FROM events), (SELECT count(*) FROM streams)").Scan(&envelopes, &events, &streams); err != nil {
			t.Fatal(err)
		}
		if envelopes != accepted || events != 10*accepted || streams != accepted {
			t.Fatalf("%d envelopes, %d events, %d streams for %d accepted", envelopes, events, streams, accepted)
		}
		var st postgres.Stats
		for _, s := range stores {
			x := s.Stats()
			st.EventGroups, st.EventGrouped, st.EventFallbacks = st.EventGroups+x.EventGroups, st.EventGrouped+x.EventGrouped, st.EventFallbacks+x.EventFallbacks
		}
		switch {
		case tc.committers == "-1" && st.EventGroups != 0:
			t.Fatalf("groups with grouping off: %+v", st)
		case tc.committers != "-1" && st.EventGroups == 0:
			// 200 envelopes sent at once: with grouping on some share
			// a transaction, or this test checks nothing of it.
			t.Fatalf("no groups: %+v", st)
		case tc.committers == "1" && tc.stores == 1 && !contended && st.EventFallbacks != 0:
			// One committer's groups never run concurrently, so
			// without contended numbers every group commits: its
			// duplicates and refusals were decided inside it.
			// (Concurrent groups may fail each other for
			// serialization, on the shared identity and on the
			// session's stream arrivals, and fall back.)
			t.Fatalf("a group fell back: %+v", st)
		}
		t.Logf("%+v", st)
	}
}

// TestEventsGroupCommitCancelled: an envelope whose context ends before a
// committer takes it is not written; a store closed meanwhile refuses new
// envelopes.
func TestEventsGroupCommitCancelled(t *testing.T) {
	ctx := context.Background()
	st, err := postgres.Open(ctx, pgtest.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	seedEventsWork(t, st)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	row, sc, evs := groupEnvelope("cancelled", "sha256:x", "s1", "st", 1)
	if _, err := st.CommitEvents(cctx, row, sc, evs, []string{api.StateActive}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled envelope: %v", err)
	}
	var n int
	if err := st.Pool().QueryRow(ctx, "SELECT count(*) FROM envelopes").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d envelopes after a cancelled one (%v)", n, err)
	}
	st.Close()
	done := make(chan error, 1)
	go func() {
		_, err := st.CommitEvents(ctx, row, sc, evs, []string{api.StateActive})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("an envelope after Close was committed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an envelope after Close hangs")
	}
}

// TestCommitEventsStreamArrivals: a stream's arrival is recorded once, by
// its first envelope, in the order the streams first came, whichever
// instance (each with its own memory of the streams it saw) takes the
// envelopes; a later envelope of a known stream records nothing more.
func TestCommitEventsStreamArrivals(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Database(t)
	a, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	seedEventsWork(t, a)
	next := map[string]int64{}
	for i, step := range []struct {
		st     *postgres.Store
		stream string
	}{{a, "A"}, {a, "B"}, {a, "A"}, {b, "A"}, {b, "C"}, {a, "C"}, {b, "B"}, {a, "D"}, {a, "A"}} {
		row, sc, evs := groupEnvelope(fmt.Sprintf("arrival-%d", i), "sha256:x", "s1", step.stream, next[step.stream]+1)
		next[step.stream] += int64(len(evs))
		out, err := step.st.CommitEvents(ctx, row, sc, evs, []string{api.StateActive})
		if err != nil || !out.Accepted {
			t.Fatalf("envelope %d (stream %s): %+v %v", i, step.stream, out, err)
		}
	}
	rows, err := a.Pool().Query(ctx, "SELECT stream, arrival FROM streams ORDER BY arrival")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var s string
		var n int64
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s=%d", s, n))
	}
	rows.Close()
	if strings.Join(got, " ") != "A=1 B=2 C=3 D=4" {
		t.Fatalf("arrivals: %v", got)
	}
	var events int
	if err := a.Pool().QueryRow(ctx, "SELECT count(*) FROM events").Scan(&events); err != nil || events != 90 {
		t.Fatalf("%d events (%v)", events, err)
	}
}
