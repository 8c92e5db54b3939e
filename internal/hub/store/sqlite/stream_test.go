package sqlite

import (
	"context"
	"database/sql"
	"github.com/agentscm/agentscm/internal/hub/store"
	"path/filepath"
	"testing"

	"github.com/agentscm/agentscm/internal/hub/api"
)

// TestStreamMigrationFromV2 opens a version-2 database holding events and
// gaps (sequence key without a stream) and checks, after the one-transaction
// migration to version 3, that they are in the legacy stream ”, that a
// new stream can reuse their numbers and the legacy one cannot.
func TestStreamMigrationFromV2(t *testing.T) {
	dir := t.TempDir()
	if err := createPrivate(filepath.Join(dir, DBFile)); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, DBFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE events(work_id TEXT NOT NULL, generation INTEGER NOT NULL, session TEXT NOT NULL, seq INTEGER NOT NULL,
  kind TEXT NOT NULL, body TEXT NOT NULL, identity TEXT NOT NULL, received_at INTEGER NOT NULL,
  PRIMARY KEY(work_id, generation, session, seq)) WITHOUT ROWID`,
		`CREATE TABLE gaps(work_id TEXT NOT NULL, generation INTEGER NOT NULL, session TEXT NOT NULL, identity TEXT NOT NULL,
  kind TEXT NOT NULL, reason TEXT NOT NULL, from_seq INTEGER NOT NULL, to_seq INTEGER NOT NULL, received_at INTEGER NOT NULL,
  PRIMARY KEY(work_id, identity)) WITHOUT ROWID`,
		`INSERT INTO events VALUES('w1',1,'default',1,'session_start','{"seq":1,"kind":"session_start"}','id1',100)`,
		`INSERT INTO events VALUES('w1',1,'default',2,'prompt_submit','{"seq":2,"kind":"prompt_submit"}','id2',101)`,
		`INSERT INTO gaps VALUES('w1',1,'default','id3','identity_uncertain','no_provider_identity',2,2,101)`,
		`PRAGMA user_version = 2`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(q, err)
		}
	}
	db.Close()
	s := open(t, dir)
	ctx := context.Background()
	var v int
	if err := s.r.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil || v != SchemaVersion {
		t.Fatalf("version %d %v", v, err)
	}
	sc := store.Scope{WorkID: "w1", Generation: 1, Session: "default", Identity: "id4", ReceivedAt: 200}
	err = s.Update(ctx, func(tx store.Tx) error {
		if err := tx.InsertEvents(sc, []api.Event{{Seq: 1, Kind: "prompt_submit"}}); err == nil {
			t.Error("seq 1 of the legacy stream was taken twice")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sc.Stream, sc.Identity = "obs_x.1", "id5"
	if err := s.Update(ctx, func(tx store.Tx) error { return tx.InsertEvents(sc, []api.Event{{Seq: 1, Kind: "prompt_submit"}}) }); err != nil {
		t.Fatal(err)
	}
	err = s.View(ctx, func(tx store.Tx) error {
		st, err := tx.SessionStats("w1")
		if err != nil {
			return err
		}
		if len(st) != 2 || st[0].Stream != "" || st[0].Events != 2 || st[0].LastSeq != 2 || st[1].Stream != "obs_x.1" || st[1].Events != 1 {
			t.Errorf("stats %+v", st)
		}
		gaps, err := tx.Gaps("w1")
		if err != nil {
			return err
		}
		if len(gaps) != 1 || gaps[0].Stream != "" || gaps[0].FromSeq != 2 {
			t.Errorf("gaps %+v", gaps)
		}
		ev, total, err := tx.ListEvents("w1", 10)
		if err != nil {
			return err
		}
		if total != 3 || ev[0].Seq != 1 || ev[0].Stream != "" || ev[2].Stream != "obs_x.1" {
			t.Errorf("events %+v", ev)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tbl := range []string{"events_v2", "gaps_v2"} {
		var n int
		if err := s.r.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE name=?", tbl).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%s left behind: %d %v", tbl, n, err)
		}
	}
}

// TestSchema5FromVersion4: a session of a version-4 database has no agent
// ("", unknown) after the upgrade, and takes the first one claimed.
func TestSchema5FromVersion4(t *testing.T) {
	dir := t.TempDir()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, DBFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE sessions(work_id TEXT NOT NULL REFERENCES works(id), generation INTEGER NOT NULL, canonical TEXT NOT NULL,
  worktree_id TEXT NOT NULL, alias INTEGER NOT NULL, created_at INTEGER NOT NULL, PRIMARY KEY(work_id, generation, canonical)) WITHOUT ROWID`,
		`INSERT INTO sessions VALUES('w',1,'s','wt',0,3)`,
		`PRAGMA user_version = 4`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(q, err)
		}
	}
	db.Close()
	s := open(t, dir)
	ctx := context.Background()
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
