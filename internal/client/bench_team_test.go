package client_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/hub/objects"
	"github.com/agentscm/agentscm/internal/hub/store/postgres"
	"github.com/agentscm/agentscm/internal/hub/store/postgres/pgtest"
)

// BenchmarkIngestTeam compares the single SQLite Hub with one `hub serve`
// process on PostgreSQL and with two behind a loopback round-robin proxy
// (fsync and synchronous_commit on: every 200 is durable, as on SQLite), for
// 8 and 64 concurrent clients at 1, 10 and 50 events per envelope. Run it
// with
//
//	go test -run '^$' -bench IngestTeam -benchtime 2000x -count 5 ./internal/client/
//
// (reference=fsync is the same-run disk reference). Each run reports the CPU
// time per event of the Hubs, the PostgreSQL server, this process (clients
// and proxy) and the rest of the machine (docs/performance.md; the measurement log "The team
// Hub" is in git at 7899756).
func BenchmarkIngestTeam(b *testing.B) {
	b.Run("reference=fsync", benchFsyncRef)
	for _, per := range []int{1, 10, 50} {
		for _, clients := range []int{8, 64} {
			for _, mode := range []string{"sqlite-1", "postgres-1", "postgres-2"} {
				b.Run(fmt.Sprintf("batch=%d/clients=%d/%s", per, clients, mode), func(b *testing.B) { benchTeam(b, mode, clients, per) })
			}
		}
	}
}

func benchTeam(b *testing.B, mode string, clients, per int) {
	ctx := context.Background()
	dir := filepath.Join(b.TempDir(), "data")
	sec := bootstrap(b, dir)
	var hubURL string
	// The processes whose CPU time is summed per event: the Hubs, the
	// PostgreSQL server (postmaster and every backend), and this process
	// (the clients and, with two Hubs, the proxy).
	var hubs, pgServer cpuGroup
	self := cpuGroup{roots: []int{os.Getpid()}}
	// pgStats reads the database's transaction counters (PostgreSQL modes).
	var pgStats func() [3]int64
	switch mode {
	case "sqlite-1":
		s := startServer(b, dir)
		hubs.roots = append(hubs.roots, s.cmd.Process.Pid)
		hubURL = s.URL
	case "postgres-1", "postgres-2":
		pg, err := pgtest.StartDurable()
		if err != nil {
			b.Skipf("PostgreSQL: %v", err)
		}
		b.Cleanup(pg.Stop)
		pid, err := pg.Pid()
		if err != nil {
			b.Fatal(err)
		}
		pgServer = cpuGroup{roots: []int{pid}, tree: true}
		dsn := pg.Database(b)
		st, err := postgres.Open(ctx, dsn)
		if err != nil {
			b.Fatal(err)
		}
		objDir := filepath.Join(b.TempDir(), "objects")
		dirObj, err := objects.OpenDir(filepath.Join(dir, "objects"))
		if err != nil {
			b.Fatal(err)
		}
		dstObj, err := objects.OpenDir(objDir)
		if err != nil {
			b.Fatal(err)
		}
		// The bootstrapped humans and tokens, copied as hub migrate does.
		if _, err := postgres.CopyFromSQLite(ctx, dir, st, dirObj, dstObj); err != nil {
			b.Fatal(err)
		}
		pool := st.Pool()
		pgStats = func() [3]int64 {
			var c [3]int64
			// The statistics collector lags; this forces the counters out.
			pool.Exec(ctx, "SELECT pg_stat_clear_snapshot()")
			if err := pool.QueryRow(ctx, "SELECT xact_commit, xact_rollback, conflicts FROM pg_stat_database WHERE datname=current_database()").Scan(&c[0], &c[1], &c[2]); err != nil {
				b.Fatal(err)
			}
			return c
		}
		b.Cleanup(func() { st.Close() })
		dsnFile := filepath.Join(b.TempDir(), "dsn")
		if w := os.Getenv("AGENTSCM_BENCH_PG_WRITERS"); w != "" {
			// Group-commit writers per instance (-1: none), for comparison.
			dsn += "&" + postgres.WritersParam + "=" + w
		}
		if x := os.Getenv("AGENTSCM_BENCH_PG_DSN_EXTRA"); x != "" {
			// More DSN parameters for the Hubs' connections, for
			// experiments: pool_max_conns=N, or a server setting such as
			// plan_cache_mode=force_generic_plan (sent at connect).
			dsn += "&" + x
		}
		os.WriteFile(dsnFile, []byte(dsn), 0o600)
		instances := 1
		if mode == "postgres-2" {
			instances = 2
		}
		var backends []*url.URL
		for range instances {
			// --data is the (unused) data directory; the records are in
			// PostgreSQL, the objects in objDir.
			s := startServer(b, dir, "--store-file", dsnFile, "--objects", objDir)
			hubs.roots = append(hubs.roots, s.cmd.Process.Pid)
			u, err := url.Parse(s.URL)
			if err != nil {
				b.Fatal(err)
			}
			backends = append(backends, u)
		}
		if instances == 1 {
			hubURL = backends[0].String()
			break
		}
		var next atomic.Int64
		proxy := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(backends[next.Add(1)%int64(len(backends))])
		}})
		b.Cleanup(proxy.Close)
		hubURL = proxy.URL
	}
	conns := make([]client.Conn, clients)
	for i := range conns {
		c, err := client.NewHTTP(hubURL, "proj", sec.alice, nil)
		if err != nil {
			b.Fatal(err)
		}
		conns[i] = c
	}
	if _, err := conns[0].StartWork(ctx, api.StartWorkRequest{WorktreeID: "wt-bench"}); err != nil {
		b.Fatal(err)
	}
	targets := make([]api.Target, clients)
	for i := range targets {
		t, err := conns[i].Resolve(ctx, api.ResolveRequest{WorktreeID: "wt-bench", NativeSessionID: fmt.Sprintf("native-%d", i)})
		if err != nil {
			b.Fatal(err)
		}
		targets[i] = t
	}
	var next atomic.Int64
	lat := make([][]time.Duration, clients)
	var wg sync.WaitGroup
	var before [3]int64
	if pgStats != nil {
		before = pgStats()
	}
	cpu0 := [3]map[int]int64{hubs.sample(), pgServer.sample(), self.sample()}
	busy0 := machineBusy(b)
	b.ResetTimer()
	t0 := time.Now()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seq := int64(0)
			for {
				n := next.Add(1)
				if n > int64(b.N) {
					return
				}
				evs := make([]api.Event, per)
				for j := range evs {
					seq++
					evs[j] = api.Event{Seq: seq, Kind: "tool_finish", ToolName: "Bash", ToolUseID: fmt.Sprintf("toolu_%d", seq), Outcome: "returned", ObservedAt: time.Now().Unix()}
				}
				env := eventsEnv(targets[c], fmt.Sprint(mode, per, c, n), evs...)
				s := time.Now()
				r, err := conns[c].Deliver(ctx, env)
				if err != nil || r.Status != api.StatusAccepted {
					b.Errorf("deliver: %v %+v", err, r)
					return
				}
				lat[c] = append(lat[c], time.Since(s))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(t0)
	b.StopTimer()
	busy := float64(machineBusy(b)-busy0) / clockTick
	cpu := [3]float64{cpuSeconds(cpu0[0], hubs.sample()), cpuSeconds(cpu0[1], pgServer.sample()), cpuSeconds(cpu0[2], self.sample())}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	if len(all) > 0 {
		b.ReportMetric(float64(len(all)*per)/elapsed.Seconds(), "events/s")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
		b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
		// CPU microseconds per event ingested, per component; "other" is
		// what the rest of the machine used meanwhile (other work on a
		// shared machine), busy-s/s how many CPUs were busy on average.
		ev := float64(len(all) * per)
		us := func(s float64) float64 { return s * 1e6 / ev }
		b.ReportMetric(us(cpu[0]), "hub-cpu-us/ev")
		b.ReportMetric(us(cpu[1]), "pg-cpu-us/ev")
		b.ReportMetric(us(cpu[2]), "bench-cpu-us/ev")
		// The Hub with its database (SQLite is inside the Hub process):
		// issue 33's comparison, like for like without the clients.
		b.ReportMetric(us(cpu[0]+cpu[1]), "hubdb-cpu-us/ev")
		b.ReportMetric(us(cpu[0]+cpu[1]+cpu[2]), "total-cpu-us/ev")
		b.ReportMetric(us(busy-cpu[0]-cpu[1]-cpu[2]), "other-cpu-us/ev")
		b.ReportMetric(busy/elapsed.Seconds(), "busy-cpus")
	}
	if pgStats != nil && len(all) > 0 {
		// Transactions per envelope: committed (the reads' too) and
		// rolled back (serialization failures, and read-only ones).
		time.Sleep(600 * time.Millisecond) // stats_fetch / backend flush
		after := pgStats()
		b.ReportMetric(float64(after[0]-before[0])/float64(len(all)), "commits/env")
		b.ReportMetric(float64(after[1]-before[1])/float64(len(all)), "rollbacks/env")
	}
}
