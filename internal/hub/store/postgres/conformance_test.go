package postgres

import (
	"context"
	"testing"

	"github.com/agentscm/agentscm/internal/hub/store"
	"github.com/agentscm/agentscm/internal/hub/store/postgres/pgtest"
	"github.com/agentscm/agentscm/internal/hub/store/storetest"
)

// TestConformance runs the store conformance suite on PostgreSQL, with and
// without group commit (a throwaway server; skipped when PostgreSQL is not
// installed, failed then under AGENTSCM_REQUIRE_POSTGRES=1).
func TestConformance(t *testing.T) {
	for _, o := range []struct {
		name string
		opt  Options
	}{{"update", Options{}}, {"group-commit", Options{Writers: 2}}} {
		t.Run(o.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) store.Store {
				s, err := OpenWith(context.Background(), pgtest.Database(t), o.opt)
				if err != nil {
					t.Fatal(err)
				}
				return s
			})
		})
	}
}
