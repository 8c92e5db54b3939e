package client_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/hub/api"
)

// BenchmarkEmbeddedOneShot is the embedded hook's Hub work without the
// process start: open the store, resolve, deliver one envelope, close.
func BenchmarkEmbeddedOneShot(b *testing.B) {
	ctx := context.Background()
	cfg := filepath.Join(b.TempDir(), "agentscm")
	c, _, err := client.SetupLocal(ctx, cfg, b.TempDir(), "proj", time.Now())
	if err != nil {
		b.Fatal(err)
	}
	conn, err := client.Open(ctx, c, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := conn.StartWork(ctx, api.StartWorkRequest{WorktreeID: c.WorktreeID}); err != nil {
		b.Fatal(err)
	}
	conn.Close()
	var tOpen, tResolve, tDeliver, tClose time.Duration
	defer func() {
		n := time.Duration(b.N)
		b.ReportMetric(float64((tOpen/n).Microseconds())/1000, "open-ms")
		b.ReportMetric(float64((tResolve/n).Microseconds())/1000, "resolve-ms")
		b.ReportMetric(float64((tDeliver/n).Microseconds())/1000, "deliver-ms")
		b.ReportMetric(float64((tClose/n).Microseconds())/1000, "close-ms")
	}()
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		conn, err := client.Open(ctx, c, client.Options{})
		tOpen += time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		t0 = time.Now()
		tg, err := conn.Resolve(ctx, api.ResolveRequest{WorktreeID: c.WorktreeID, NativeSessionID: "n"})
		if err != nil {
			b.Fatal(err)
		}
		tResolve += time.Since(t0)
		t0 = time.Now()
		if _, err := conn.Deliver(ctx, eventsEnv(tg, fmt.Sprint("oneshot", i), api.Event{Seq: int64(i + 1), Kind: "turn_end"})); err != nil {
			b.Fatal(err)
		}
		tDeliver += time.Since(t0)
		t0 = time.Now()
		if err := conn.Close(); err != nil {
			b.Fatal(err)
		}
		tClose += time.Since(t0)
	}
}
