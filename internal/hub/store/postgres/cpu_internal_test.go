package postgres

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/hub/store"
	"github.com/agentscm/agentscm/internal/hub/store/postgres/pgtest"
	"github.com/jackc/pgx/v5"
)

// treeTicks sums the CPU time (utime+stime, and the reaped children's) of
// a process and its children, in clock ticks (USER_HZ, 100).
func treeTicks(root int) int64 {
	stat := func(pid int) (ppid int, t int64, ok bool) {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if err != nil {
			return 0, 0, false
		}
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b[i+1:]))
		num := func(k int) int64 { n, _ := strconv.ParseInt(f[k], 10, 64); return n }
		return int(num(1)), num(11) + num(12) + num(13) + num(14), true
	}
	_, total, _ := stat(root)
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == root {
			continue
		}
		if ppid, t, ok := stat(pid); ok && ppid == root {
			total += t
		}
	}
	return total
}

// BenchmarkIngestEventsCPU measures the PostgreSQL server's CPU time and
// this process's per event of a plain events envelope (10 events) on a
// durable cluster over one connection: CommitEvents (one round trip), the
// one-statement ingest in an Update (three), the same without the commit's
// WAL flush, and an empty transaction (the three round trips alone). Run it alone:
//
//	go test -run '^$' -bench IngestEventsCPU -benchtime 3000x ./internal/hub/store/postgres/
func BenchmarkIngestEventsCPU(b *testing.B) {
	ctx := context.Background()
	pg, err := pgtest.StartDurable()
	if err != nil {
		b.Skipf("PostgreSQL: %v", err)
	}
	defer pg.Stop()
	postmaster, err := pg.Pid()
	if err != nil {
		b.Fatal(err)
	}
	const per = 10
	for _, mode := range []string{"commit-events", "update", "update-async-commit", "empty-tx"} {
		b.Run(mode, func(b *testing.B) {
			dsn := pg.Database(b) + "&pool_max_conns=1"
			if x := os.Getenv("AGENTSCM_BENCH_PG_DSN_EXTRA"); x != "" {
				dsn += "&" + x // experiments: plan_cache_mode=..., server settings
			}
			s, err := Open(ctx, dsn)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			err = s.Update(ctx, func(tx store.Tx) error {
				if err := tx.InsertRepository(store.Repository{ID: "r", Name: "r"}); err != nil {
					return err
				}
				if err := tx.InsertWork(store.Work{ID: "01JWORKWORKWORKWORKWORKWORK", RepositoryID: "r", State: "active", Generation: 1}); err != nil {
					return err
				}
				return tx.InsertSession(store.Session{WorkID: "01JWORKWORKWORKWORKWORKWORK", Generation: 1, Canonical: "s-native-1"})
			})
			if err != nil {
				b.Fatal(err)
			}
			seq := int64(0)
			envelope := func(n int) (store.Envelope, store.Scope, []api.Event) {
				evs := make([]api.Event, per)
				for j := range evs {
					seq++
					evs[j] = api.Event{Seq: seq, Kind: "tool_finish", ToolName: "Bash", ToolUseID: fmt.Sprintf("toolu_%d", seq), Outcome: "returned", ObservedAt: time.Now().Unix()}
				}
				id := fmt.Sprintf("ident-%032d", n)
				row := store.Envelope{RepositoryID: "r", Identity: id, Digest: "sha256:" + strings.Repeat("a", 64), Type: api.TypeEvents,
					WorkID: "01JWORKWORKWORKWORKWORKWORK", Generation: 1, Session: "s-native-1", ReceivedAt: time.Now().Unix()}
				sc := store.Scope{WorkID: row.WorkID, Generation: 1, Session: row.Session, Stream: "stream-0123456789", Identity: id, ReceivedAt: row.ReceivedAt}
				return row, sc, evs
			}
			one := func(n int) error {
				row, sc, evs := envelope(n)
				switch mode {
				case "commit-events":
					got, err := s.CommitEvents(ctx, row, sc, evs, []string{api.StateActive})
					if err == nil && !got.Accepted {
						err = fmt.Errorf("commit: %+v", got)
					}
					return err
				case "empty-tx":
					tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
					if err != nil {
						return err
					}
					if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
						return err
					}
					return tx.Commit(ctx)
				}
				return s.Update(ctx, func(tx store.Tx) error {
					if mode == "update-async-commit" {
						if _, err := tx.(*pgTx).c.Exec("SET LOCAL synchronous_commit=off"); err != nil {
							return err
						}
					}
					got, err := tx.(store.EventsIngester).IngestEvents(row, sc, evs)
					if err == nil && (got.Inserted != per || got.EnvelopeTaken || !got.SessionFound) {
						err = fmt.Errorf("ingest: %+v", got)
					}
					return err
				})
			}
			for i := range 50 { // warm the statement cache and the plan
				if err := one(-1 - i); err != nil {
					b.Fatal(err)
				}
			}
			pg0, self0 := treeTicks(postmaster), treeTicks(os.Getpid())
			b.ResetTimer()
			for i := range b.N {
				if err := one(i); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			ev := float64(b.N * per)
			b.ReportMetric(float64(treeTicks(postmaster)-pg0)*1e4/ev, "pg-cpu-us/ev")
			b.ReportMetric(float64(treeTicks(os.Getpid())-self0)*1e4/ev, "go-cpu-us/ev")
		})
	}
}
