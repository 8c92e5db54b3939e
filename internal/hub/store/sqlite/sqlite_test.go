package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/agentscm/agentscm/internal/hub/store"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

func open(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func countHumans(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	err := s.View(context.Background(), func(tx store.Tx) error {
		hs, err := tx.ListHumans()
		n = len(hs)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestFilesArePrivate(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	if err := s.Update(context.Background(), func(tx store.Tx) error { return tx.InsertHuman(store.Human{ID: "h1", Name: "a"}) }); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{DBFile, DBFile + "-wal", DBFile + "-shm"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", name, fi.Mode().Perm())
		}
	}
}

func TestRefusals(t *testing.T) {
	t.Run("symlinked database", func(t *testing.T) {
		dir := t.TempDir()
		target := filepath.Join(t.TempDir(), "elsewhere.db")
		os.WriteFile(target, nil, 0o600)
		os.Symlink(target, filepath.Join(dir, DBFile))
		if _, err := Open(context.Background(), dir); err == nil {
			t.Fatal("opened a symlinked database")
		}
	})
	t.Run("newer schema", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir)
		s.Close()
		db, err := sql.Open("sqlite", filepath.Join(dir, DBFile))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec("PRAGMA user_version = 99"); err != nil {
			t.Fatal(err)
		}
		db.Close()
		if _, err := Open(context.Background(), dir); err == nil {
			t.Fatal("opened a database with a newer schema")
		}
	})
	t.Run("version 1 upgraded in place", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir)
		s.Close()
		db, err := sql.Open("sqlite", filepath.Join(dir, DBFile))
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{"DROP TABLE changelog_increments", "DROP TABLE changelog_grants", "PRAGMA user_version = 1"} {
			if _, err := db.Exec(q); err != nil {
				t.Fatal(err)
			}
		}
		db.Close()
		s = open(t, dir)
		defer s.Close()
		err = s.View(context.Background(), func(tx store.Tx) error {
			_, err := tx.ChangelogUsage("wrk_x")
			return err
		})
		if err != nil {
			t.Fatalf("changelog tables after the upgrade: %v", err)
		}
	})
	t.Run("duplicate key", func(t *testing.T) {
		s := open(t, t.TempDir())
		ctx := context.Background()
		ins := func(tx store.Tx) error { return tx.InsertHuman(store.Human{ID: "h", Name: "same"}) }
		if err := s.Update(ctx, ins); err != nil {
			t.Fatal(err)
		}
		if err := s.Update(ctx, ins); !errors.Is(err, store.ErrExists) {
			t.Fatalf("second insert: %v", err)
		}
	})
}

// TestGroupCommitIsolation runs many concurrent Updates, some of which fail
// after writing: their writes are rolled back, every other one commits.
func TestGroupCommitIsolation(t *testing.T) {
	s := open(t, t.TempDir())
	ctx := context.Background()
	const n = 200
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Update(ctx, func(tx store.Tx) error {
				if err := tx.InsertHuman(store.Human{ID: fmt.Sprint("h", i), Name: fmt.Sprint("n", i)}); err != nil {
					return err
				}
				if i%3 == 0 {
					return fmt.Errorf("refused %d", i)
				}
				return nil
			})
		}()
	}
	wg.Wait()
	want := 0
	for i, err := range errs {
		if (i%3 == 0) != (err != nil) {
			t.Fatalf("update %d: %v", i, err)
		}
		if err == nil {
			want++
		}
	}
	if got := countHumans(t, s); got != want {
		t.Fatalf("%d humans committed, want %d", got, want)
	}
	err := s.View(ctx, func(tx store.Tx) error {
		_, err := tx.HumanByName("n3")
		return err
	})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a failed update's write survived: %v", err)
	}
}

// TestManyProcesses has several processes open the same database at once and
// each commit many short transactions, the way hook processes do.
func TestManyProcesses(t *testing.T) {
	if dir := os.Getenv("HUB_STORE_CHILD_DIR"); dir != "" {
		id := os.Getenv("HUB_STORE_CHILD_ID")
		n, _ := strconv.Atoi(os.Getenv("HUB_STORE_CHILD_N"))
		for i := range n {
			s, err := Open(context.Background(), dir)
			if err != nil {
				t.Fatal(err)
			}
			err = s.Update(context.Background(), func(tx store.Tx) error {
				return tx.InsertHuman(store.Human{ID: fmt.Sprint(id, "-", i), Name: fmt.Sprint(id, "-", i)})
			})
			s.Close()
			if err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	dir := t.TempDir()
	const procs, each = 6, 15
	var wg sync.WaitGroup
	fail := make(chan string, procs)
	for p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run", "^TestManyProcesses$")
			cmd.Env = append(os.Environ(), "HUB_STORE_CHILD_DIR="+dir, fmt.Sprint("HUB_STORE_CHILD_ID=p", p), fmt.Sprint("HUB_STORE_CHILD_N=", each))
			if out, err := cmd.CombinedOutput(); err != nil {
				fail <- fmt.Sprintf("child %d: %v\n%s", p, err, out)
			}
		}()
	}
	wg.Wait()
	close(fail)
	for f := range fail {
		t.Error(f)
	}
	s := open(t, dir)
	if got := countHumans(t, s); got != procs*each {
		t.Fatalf("%d humans, want %d", got, procs*each)
	}
}

// TestLockWaitHonoursContext holds the write lock from another connection
// (as another process would): an Update gives up when its context ends
// instead of waiting out the busy timeout, and commits nothing.
func TestLockWaitHonoursContext(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	other, err := sql.Open("sqlite", "file:"+filepath.Join(dir, DBFile)+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = s.Update(ctx, func(tx store.Tx) error { return tx.InsertHuman(store.Human{ID: "h", Name: "n"}) })
	if err == nil {
		t.Fatal("Update succeeded while another connection held the write lock")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Update waited %v, past its context", d)
	}
	if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if n := countHumans(t, s); n != 0 {
		t.Fatalf("%d humans after a refused update", n)
	}
}

// TestReadAfterWriterOnlyClose: closing the last connection checkpoints and
// removes the WAL; the next process's readers see everything.
func TestReadAfterWriterOnlyClose(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, func(tx store.Tx) error { return tx.InsertHuman(store.Human{ID: "h", Name: "n"}) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, DBFile+"-wal")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("writer-only close left the WAL: %v", err)
	}
	s = open(t, dir)
	if got := countHumans(t, s); got != 1 {
		t.Fatalf("%d humans after a writer-only close, want 1", got)
	}
}

// TestWriterHealsAnOpenTransaction: a writer connection left inside a
// transaction (a BEGIN that reported an error after it began, or a failed
// ROLLBACK) must not refuse every later group; the leftover transaction,
// whose operations were all answered with an error, is rolled back and the
// group commits. Before the fix every POST of the soak after the first such
// failure answered "cannot start a transaction within a transaction".
func TestWriterHealsAnOpenTransaction(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, DBFile)+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The leftover: a transaction holding an unacknowledged write.
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), "CREATE TABLE leftover (x)"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		op := &writeOp{ctx: context.Background(), fn: func(tx store.Tx) error { return tx.InsertHuman(store.Human{ID: id, Name: id}) }, done: make(chan error, 1)}
		s.commitGroup(conn, map[string]*sql.Stmt{}, []*writeOp{op})
		if err := <-op.done; err != nil {
			t.Fatalf("group %s on a connection left in a transaction: %v", id, err)
		}
	}
	var names []string
	rows, err := db.QueryContext(context.Background(), "SELECT name FROM humans ORDER BY name")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var n string
		rows.Scan(&n)
		names = append(names, n)
	}
	if fmt.Sprint(names) != "[a b]" {
		t.Fatalf("humans %v, want [a b] (both groups committed)", names)
	}
	var n int
	if err := db.QueryRowContext(context.Background(), "SELECT count(*) FROM sqlite_master WHERE name = 'leftover'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("the leftover transaction's table: %d (%v), want it rolled back", n, err)
	}
}
