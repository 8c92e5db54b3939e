package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentscm/agentscm/internal/hub/store"
	"github.com/agentscm/agentscm/internal/hub/store/postgres"
	"github.com/agentscm/agentscm/internal/hub/store/postgres/pgtest"
)

// TestMigrationsRunOnce: instances opening a fresh database at once all
// succeed and the schema is created once, at the current version; a newer
// schema is refused.
func TestMigrationsRunOnce(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Database(t)
	const n = 8
	stores := make([]*postgres.Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = postgres.Open(ctx, dsn)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		defer stores[i].Close()
	}
	var rows, v int
	if err := stores[0].Pool().QueryRow(ctx, "SELECT count(*), max(version) FROM agentscm_schema").Scan(&rows, &v); err != nil {
		t.Fatal(err)
	}
	if rows != 1 || v != postgres.SchemaVersion {
		t.Fatalf("agentscm_schema: %d rows, version %d", rows, v)
	}
	var tables []string
	r, err := stores[0].Pool().Query(ctx, "SELECT tablename FROM pg_tables WHERE schemaname='public' ORDER BY tablename")
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
		var s string
		r.Scan(&s)
		tables = append(tables, s)
	}
	r.Close()
	var want []string
	for _, tb := range postgres.Tables {
		want = append(want, tb.Name)
	}
	want = append(want, "agentscm_schema")
	slices.Sort(want)
	if !slices.Equal(tables, want) {
		t.Fatalf("tables %v, want %v", tables, want)
	}
	if _, err := stores[0].Pool().Exec(ctx, "UPDATE agentscm_schema SET version=99"); err != nil {
		t.Fatal(err)
	}
	if s, err := postgres.Open(ctx, dsn); err == nil || !strings.Contains(err.Error(), "newer than this agentscm") {
		if s != nil {
			s.Close()
		}
		t.Fatalf("open of a newer schema: %v", err)
	}
}

// TestUpdatesSerialize: concurrent Updates that read and then write the
// same rows (the next checkpoint number of one Work) behave as if run one
// at a time: every number is taken once, none is skipped. Serialization
// failures are retried, not returned.
func TestUpdatesSerialize(t *testing.T) {
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
	err = a.Update(ctx, func(tx store.Tx) error {
		if err := tx.InsertRepository(store.Repository{ID: "r", Name: "r"}); err != nil {
			return err
		}
		return tx.InsertWork(store.Work{ID: "w", RepositoryID: "r", State: "active", Generation: 1})
	})
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		st := a
		if i%2 == 1 {
			st = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := st.Update(ctx, func(tx store.Tx) error {
				_, err := tx.AppendCheckpoint(store.Checkpoint{WorkID: "w", Action: "note", Note: fmt.Sprint(i)})
				if err != nil {
					return err
				}
				// The Work's row is read and written too, as a takeover does.
				w, err := tx.WorkByID("w")
				if err != nil {
					return err
				}
				w.Generation++
				return tx.UpdateWork(w)
			})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var cps []store.Checkpoint
	var w store.Work
	if err := a.View(ctx, func(tx store.Tx) error {
		var err error
		if cps, err = tx.Checkpoints("w"); err != nil {
			return err
		}
		w, err = tx.WorkByID("w")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(cps) != n || w.Generation != 1+n {
		t.Fatalf("%d checkpoints, generation %d; want %d and %d", len(cps), w.Generation, n, 1+n)
	}
	for i, c := range cps {
		if c.Seq != int64(i+1) {
			t.Fatalf("checkpoint %d has seq %d", i, c.Seq)
		}
	}
	t.Logf("retried %d attempts (instance a), %d (instance b)", a.Retries(), b.Retries())
}

// TestExistsDoesNotAbort: after an insert of an existing key the
// transaction goes on, as on SQLite (the Service relies on it).
func TestExistsDoesNotAbort(t *testing.T) {
	ctx := context.Background()
	s, err := postgres.Open(ctx, pgtest.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Update(ctx, func(tx store.Tx) error {
		if err := tx.InsertHuman(store.Human{ID: "h1", Name: "alice"}); err != nil {
			return err
		}
		if err := tx.InsertHuman(store.Human{ID: "h2", Name: "alice"}); !isExists(err) {
			return fmt.Errorf("duplicate name: %v", err)
		}
		if err := tx.InsertHuman(store.Human{ID: "h1", Name: "bob"}); !isExists(err) {
			return fmt.Errorf("duplicate id: %v", err)
		}
		return tx.InsertHuman(store.Human{ID: "h3", Name: "carol"})
	})
	if err != nil {
		t.Fatal(err)
	}
	var hs []store.Human
	s.View(ctx, func(tx store.Tx) error { hs, err = tx.ListHumans(); return err })
	if len(hs) != 2 || hs[0].Name != "alice" || hs[1].Name != "carol" {
		t.Fatalf("humans %+v", hs)
	}
	if err := s.View(ctx, func(tx store.Tx) error { _, err := tx.HumanByName("nobody"); return err }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("lookup of a missing human: %v", err)
	}
}

func isExists(err error) bool { return errors.Is(err, store.ErrExists) }
