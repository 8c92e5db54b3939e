package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/hub/store"
	"github.com/agentscm/agentscm/internal/hub/store/postgres"
	"github.com/agentscm/agentscm/internal/hub/store/postgres/pgtest"
)

// TestGroupCommitOutcomes: many concurrent Updates on one store (grouped
// into shared transactions) have exactly the outcomes they have one at a
// time: each that succeeds is committed, each that fails leaves nothing —
// even when it wrote before failing and shared a transaction with others
// that succeeded — and a duplicate key is an error for the second writer
// only. Also with group commit off, and with two stores (two instances) on
// one database.
func TestGroupCommitOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		writers string
		stores  int
	}{
		{"grouped", "2", 1},
		{"one writer", "1", 1},
		{"no group commit", "", 1},
		{"two instances", "4", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dsn := pgtest.Database(t)
			if tc.writers != "" {
				dsn += "&" + postgres.WritersParam + "=" + tc.writers
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
			const n = 120
			errFail := errors.New("fails after writing")
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = stores[i%len(stores)].Update(ctx, func(tx store.Tx) error {
						name := fmt.Sprintf("h%03d", i)
						if i%10 == 3 {
							name = "shared" // all but the first writer find it taken
						}
						if err := tx.InsertHuman(store.Human{ID: "id-" + fmt.Sprint(i), Name: name, CreatedAt: 1}); err != nil {
							return err
						}
						if i%10 == 7 {
							return errFail
						}
						return nil
					})
				}()
			}
			wg.Wait()
			shared := 0
			for i, err := range errs {
				switch {
				case i%10 == 7:
					if !errors.Is(err, errFail) {
						t.Fatalf("update %d: %v, want its own failure", i, err)
					}
				case i%10 == 3:
					if err == nil {
						shared++
					} else if !errors.Is(err, store.ErrExists) {
						t.Fatalf("update %d: %v", i, err)
					}
				case err != nil:
					t.Fatalf("update %d: %v", i, err)
				}
			}
			if shared != 1 {
				t.Fatalf("%d writers of the shared name succeeded", shared)
			}
			var names []string
			if err := stores[0].View(ctx, func(tx store.Tx) error {
				hs, err := tx.ListHumans()
				for _, h := range hs {
					names = append(names, h.Name)
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
			// 12 of 120 failed after writing, 11 lost the shared name.
			if len(names) != n-12-11 {
				t.Fatalf("%d humans: %s", len(names), strings.Join(names, " "))
			}
			for _, nm := range names {
				var i int
				if _, err := fmt.Sscanf(nm, "h%03d", &i); err == nil && i%10 == 7 {
					t.Fatalf("the failed update %d was committed", i)
				}
			}
			var st postgres.Stats
			for _, s := range stores {
				x := s.Stats()
				st.Groups, st.Grouped, st.Fallbacks, st.Retries = st.Groups+x.Groups, st.Grouped+x.Grouped, st.Fallbacks+x.Fallbacks, st.Retries+x.Retries
			}
			if tc.writers == "" && st.Groups != 0 {
				t.Fatalf("groups without group commit: %+v", st)
			}
			t.Logf("%+v", st)
		})
	}
}

// TestGroupCommitCancelled: an Update whose context ends before a writer
// takes it is not run; a store closed meanwhile refuses new Updates.
func TestGroupCommitCancelled(t *testing.T) {
	ctx := context.Background()
	st, err := postgres.Open(ctx, pgtest.Database(t)+"&"+postgres.WritersParam+"=2")
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	ran := false
	if err := st.Update(cctx, func(tx store.Tx) error { ran = true; return nil }); !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("cancelled update: %v, ran %v", err, ran)
	}
	st.Close()
	done := make(chan error, 1)
	go func() { done <- st.Update(ctx, func(tx store.Tx) error { return nil }) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("an update after Close succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an update after Close hangs")
	}
}

// TestWritersParam: agentscm_writers and agentscm_event_committers are
// taken from a postgres:// DSN and bounded.
func TestWritersParam(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Database(t)
	for _, name := range []string{postgres.WritersParam, postgres.EventCommittersParam} {
		for _, tc := range []struct {
			param string
			ok    bool
		}{{"2", true}, {"-1", true}, {"0", true}, {"65", false}, {"-2", false}, {"x", false}} {
			st, err := postgres.Open(ctx, dsn+"&"+name+"="+tc.param)
			if (err == nil) != tc.ok {
				t.Fatalf("%s=%s: %v", name, tc.param, err)
			}
			if err == nil {
				st.Close()
			}
		}
	}
	if _, err := postgres.Open(ctx, "host=127.0.0.1 "+postgres.WritersParam+"=2"); err == nil || !strings.Contains(err.Error(), postgres.WritersParam) {
		t.Fatalf("key=value DSN: %v", err)
	}
}
