package sqlite

import (
	"context"
	"database/sql"
	"github.com/agentscm/agentscm/internal/hub/store"
	"path/filepath"
	"testing"

	"github.com/agentscm/agentscm/internal/hub/api"
)

// TestUsageMigrationFromV1 opens a version-1 database (usage counts NOT
// NULL, no scope) and checks that its rows become request-scoped records
// and that unknown counts and cumulative records work afterwards.
func TestUsageMigrationFromV1(t *testing.T) {
	dir := t.TempDir()
	if err := createPrivate(filepath.Join(dir, DBFile)); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, DBFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE usage(work_id TEXT NOT NULL, generation INTEGER NOT NULL, session TEXT NOT NULL, identity TEXT NOT NULL,
  model TEXT NOT NULL, message_id TEXT NOT NULL, input INTEGER NOT NULL, output INTEGER NOT NULL, cache_creation INTEGER NOT NULL,
  cache_read INTEGER NOT NULL, received_at INTEGER NOT NULL, PRIMARY KEY(work_id, identity)) WITHOUT ROWID`,
		`INSERT INTO usage VALUES('w1',1,'default','id1','m','msg_1',10,5,0,2,100)`,
		`PRAGMA user_version = 1`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(q, err)
		}
	}
	db.Close()
	s := open(t, dir)
	n := func(v int64) *int64 { return &v }
	ctx := context.Background()
	err = s.Update(ctx, func(tx store.Tx) error {
		sc := store.Scope{WorkID: "w1", Generation: 1, Session: "default", ReceivedAt: 200}
		sc.Identity = "id2"
		if err := tx.InsertUsage(sc, &api.Usage{Scope: api.UsageScopeRequest, MessageID: "msg_2", OutputTokens: n(1)}); err != nil {
			return err
		}
		sc.Identity = "id3"
		if err := tx.InsertUsage(sc, &api.Usage{Scope: api.UsageScopeSessionCumulative, Model: "m", InputTokens: n(1000)}); err != nil {
			return err
		}
		sc.Identity, sc.ReceivedAt = "id4", 300
		return tx.InsertUsage(sc, &api.Usage{Scope: api.UsageScopeSessionCumulative, Model: "m", InputTokens: n(2000)})
	})
	if err != nil {
		t.Fatal(err)
	}
	var u api.UsageTotals
	if err := s.View(ctx, func(tx store.Tx) error { var err error; u, err = tx.UsageTotals("w1"); return err }); err != nil {
		t.Fatal(err)
	}
	if u.Records != 2 || u.InputTokens != 10 || u.OutputTokens != 6 || u.CacheReadInputTokens != 2 {
		t.Fatalf("totals = %+v (a cumulative record must never be summed)", u)
	}
	if u.Unknown["input_tokens"] != 1 || u.Unknown["cache_read_input_tokens"] != 1 || u.Unknown["output_tokens"] != 0 {
		t.Fatalf("unknown = %+v", u.Unknown)
	}
	if len(u.SessionCumulative) != 1 || *u.SessionCumulative[0].InputTokens != 2000 || u.SessionCumulative[0].OutputTokens != nil {
		t.Fatalf("cumulative = %+v", u.SessionCumulative)
	}
}
