package postgres

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/hub/store"
	"github.com/agentscm/agentscm/internal/hub/store/postgres/pgtest"
	"github.com/jackc/pgx/v5"
)

// TestSchema3FromVersion2: a database at version 2 (rows and all) is
// brought to version 3 when a newer Hub opens it: its events and gaps are
// in the legacy stream ”, each session has its legacy stream's arrival,
// and the sequence key includes the stream.
func TestSchema3FromVersion2(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Database(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{
		"CREATE TABLE agentscm_schema(version INTEGER NOT NULL)", "INSERT INTO agentscm_schema VALUES(2)", schemaV2,
		"INSERT INTO repositories VALUES('r','r',0)", "INSERT INTO works VALUES('w','r','','active',1,'',0,0)",
		"INSERT INTO events VALUES('w',1,'s',1,'turn_end','{}','id1',5)",
		"INSERT INTO gaps VALUES('w',1,'s','id2','outage','',2,3,6)",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var evs []api.EventRecord
	var gaps []api.GapRecord
	var stats []store.SessionStats
	err = s.View(ctx, func(tx store.Tx) error {
		var err error
		if evs, _, err = tx.ListEvents("w", 10); err != nil {
			return err
		}
		if gaps, err = tx.Gaps("w"); err != nil {
			return err
		}
		stats, err = tx.SessionStats("w")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Stream != "" || len(gaps) != 1 || gaps[0].Stream != "" || len(stats) != 1 || stats[0].Stream != "" || stats[0].FirstReceived != 5 {
		t.Fatalf("after the migration: events %+v gaps %+v stats %+v", evs, gaps, stats)
	}
	// The same seq in another stream is another event.
	err = s.Update(ctx, func(tx store.Tx) error {
		return tx.InsertEvents(store.Scope{WorkID: "w", Generation: 1, Session: "s", Stream: "obs_b", Identity: "id3", ReceivedAt: 7},
			[]api.Event{{Seq: 1, Kind: "turn_end"}})
	})
	if err != nil {
		t.Fatal(err)
	}
	var arrivals []int64
	rows, _ := s.Pool().Query(ctx, "SELECT arrival FROM streams ORDER BY arrival")
	for rows.Next() {
		var a int64
		rows.Scan(&a)
		arrivals = append(arrivals, a)
	}
	rows.Close()
	if !slices.Equal(arrivals, []int64{0, 1}) {
		t.Fatalf("stream arrivals %v", arrivals)
	}
}

// TestSchema5FromVersion4: a session of a version-4 database has no agent
// ("", unknown) after the upgrade, and takes the first one claimed.
func TestSchema5FromVersion4(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Database(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{
		"CREATE TABLE agentscm_schema(version INTEGER NOT NULL)", "INSERT INTO agentscm_schema VALUES(4)", schemaV2, schemaV3, schemaV4,
		"INSERT INTO repositories VALUES('r','r',0)", "INSERT INTO works VALUES('w','r','','active',1,'',0,0)",
		"INSERT INTO sessions VALUES('w',1,'s','wt',false,3)",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	agent := func() string {
		var sess store.Session
		if err := s.View(ctx, func(tx store.Tx) (err error) { sess, err = tx.Session("w", 1, "s"); return err }); err != nil {
			t.Fatal(err)
		}
		return sess.Agent
	}
	if a := agent(); a != "" {
		t.Fatalf("agent after the migration %q, want unknown", a)
	}
	if err := s.Update(ctx, func(tx store.Tx) error { return tx.ClaimSessionAgent("w", 1, "s", "codex") }); err != nil {
		t.Fatal(err)
	}
	if a := agent(); a != "codex" {
		t.Fatalf("agent after a claim %q", a)
	}
}

// TestSumsSaturate: sums that would leave int64 (only data written around
// the Hub) are capped and named, as on SQLite, never an error.
func TestSumsSaturate(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, pgtest.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, q := range []string{
		"INSERT INTO repositories VALUES('r','r',0)", "INSERT INTO works VALUES('w','r','','active',1,'',0,0)",
		"INSERT INTO usage VALUES('w',1,'s','u1','m','',9223372036854775807,5,-9223372036854775808,1,0,'request')",
		"INSERT INTO usage VALUES('w',1,'s','u2','m','',1,6,-1,NULL,0,'request')",
		"INSERT INTO changelog_increments VALUES('w',0,'d',9223372036854775807,'s',1,'wt','k','t',false,0)",
		"INSERT INTO changelog_increments VALUES('w',1,'d',9223372036854775807,'s',1,'wt','k','t',false,0)",
	} {
		if _, err := s.Pool().Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var u api.UsageTotals
	var g api.GrantUsage
	err = s.View(ctx, func(tx store.Tx) error {
		var err error
		if u, err = tx.UsageTotals("w"); err != nil {
			return err
		}
		g, err = tx.ChangelogUsage("w")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if u.InputTokens != math.MaxInt64 || u.OutputTokens != 11 || u.CacheCreationInputTokens != math.MinInt64 || u.CacheReadInputTokens != 1 ||
		!slices.Equal(u.Saturated, []string{"input_tokens", "cache_creation_input_tokens"}) || u.Unknown["cache_read_input_tokens"] != 1 {
		t.Fatalf("usage totals %+v", u)
	}
	if g.Objects != 2 || g.Bytes != math.MaxInt64 {
		t.Fatalf("changelog usage %+v", g)
	}
}
