package client_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/hub"
	"github.com/agentscm/agentscm/internal/hub/api"
)

// benchClients is the number of concurrent clients of the load benchmark.
const benchClients = 8

// BenchmarkIngest posts event batches from concurrent clients, each its own
// native session, to a real `agentscm hub serve` process on loopback (and,
// for reference, to the in-process service). It reports events/s and the p99
// latency of one batch delivery. Run it with
//
//	go test -run '^$' -bench Ingest -benchtime 2000x -count 5 ./internal/client/
func BenchmarkIngest(b *testing.B) {
	b.Run("reference=fsync", benchFsyncRef)
	for _, mode := range []string{"served", "in-process"} {
		for _, per := range []int{1, 10, 50} {
			b.Run(fmt.Sprintf("%s/batch=%d", mode, per), func(b *testing.B) { benchIngest(b, mode, per, false) })
		}
	}
	// Envelopes of a client stream (each client its own spool stream, as
	// clients with streams send); the sub-benchmarks above send the legacy
	// stream "" and are comparable with clients before streams.
	for _, mode := range []string{"served", "in-process"} {
		for _, per := range []int{1, 10} {
			b.Run(fmt.Sprintf("%s/stream/batch=%d", mode, per), func(b *testing.B) { benchIngest(b, mode, per, true) })
		}
	}
}

func benchIngest(b *testing.B, mode string, per int, streamed bool) {
	ctx := context.Background()
	dir := filepath.Join(b.TempDir(), "data")
	sec := bootstrap(b, dir)
	conns := make([]client.Conn, benchClients)
	switch mode {
	case "served":
		srv := startServer(b, dir)
		for i := range conns {
			c, err := client.NewHTTP(srv.URL, "proj", sec.alice, nil)
			if err != nil {
				b.Fatal(err)
			}
			conns[i] = c
		}
	default:
		svc, err := hub.Open(ctx, dir, hub.Config{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { svc.Close() })
		p, err := svc.Authenticate(ctx, sec.alice)
		if err != nil {
			b.Fatal(err)
		}
		for i := range conns {
			conns[i] = client.NewLocal(svc, p, "proj")
		}
	}
	if _, err := conns[0].StartWork(ctx, api.StartWorkRequest{WorktreeID: "wt-bench"}); err != nil {
		b.Fatal(err)
	}
	targets := make([]api.Target, benchClients)
	for i := range targets {
		t, err := conns[i].Resolve(ctx, api.ResolveRequest{WorktreeID: "wt-bench", NativeSessionID: fmt.Sprintf("native-%d", i)})
		if err != nil {
			b.Fatal(err)
		}
		targets[i] = t
	}
	var next atomic.Int64
	lat := make([][]time.Duration, benchClients)
	var wg sync.WaitGroup
	b.ResetTimer()
	t0 := time.Now()
	for c := range benchClients {
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
				if streamed {
					env.Stream = fmt.Sprintf("obs_%032x.%016x", c, c)
				}
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
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	if len(all) > 0 {
		b.ReportMetric(float64(len(all)*per)/elapsed.Seconds(), "events/s")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
		b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
	}
}

// benchFsyncRef is the reference: the same number of concurrent clients each
// appending a small record to its own file with fdatasync, the least a
// durable acknowledgement costs on this disk.
func benchFsyncRef(b *testing.B) {
	dir := b.TempDir()
	files := make([]*os.File, benchClients)
	for i := range files {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprint(i)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		files[i] = f
	}
	rec := make([]byte, 200)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	t0 := time.Now()
	for c := range benchClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if _, err := files[c].Write(rec); err != nil {
					b.Error(err)
					return
				}
				if err := fsutil.Fdatasync(int(files[c].Fd())); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "syncs/s")
}
