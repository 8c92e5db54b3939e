package sqlite

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/hub/store"
)

func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkStoreIngest runs what the Hub's service does in one Update for
// a plain events envelope on the embedded SQLite store: claim the
// identity, read the Work and the session, insert the events; from
// concurrent goroutines (group commit), each its own stream. It reports
// events/s and the process's CPU time per event.
func BenchmarkStoreIngest(b *testing.B) {
	for _, per := range []int{1, 10, 50} {
		b.Run(fmt.Sprintf("batch=%d", per), func(b *testing.B) {
			ctx := context.Background()
			s, err := Open(ctx, b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			err = s.Update(ctx, func(tx store.Tx) error {
				if err := tx.InsertRepository(store.Repository{ID: "r", Name: "r"}); err != nil {
					return err
				}
				if err := tx.InsertWork(store.Work{ID: "w", RepositoryID: "r", State: "active", Generation: 1}); err != nil {
					return err
				}
				return tx.InsertSession(store.Session{WorkID: "w", Generation: 1, Canonical: "s"})
			})
			if err != nil {
				b.Fatal(err)
			}
			var next, streams atomic.Int64
			b.SetParallelism(4) // 8 goroutines on 2 CPUs
			cpu0, t0 := cpuNow(), time.Now()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				stream := fmt.Sprint("st-", streams.Add(1))
				var seq int64
				for pb.Next() {
					n := next.Add(1)
					evs := make([]api.Event, per)
					for i := range evs {
						seq++
						evs[i] = api.Event{Seq: seq, Kind: "tool_call", ToolName: "Edit", ObservedAt: 1700000000}
					}
					id := fmt.Sprintf("id-%d", n)
					err := s.Update(ctx, func(tx store.Tx) error {
						if err := tx.InsertEnvelope(store.Envelope{RepositoryID: "r", Identity: id, Digest: "sha256:x", Type: "events", WorkID: "w", Generation: 1, Session: "s", ReceivedAt: 1}); err != nil {
							return err
						}
						if _, err := tx.WorkByID("w"); err != nil {
							return err
						}
						if _, err := tx.Session("w", 1, "s"); err != nil {
							return err
						}
						return tx.InsertEvents(store.Scope{WorkID: "w", Generation: 1, Session: "s", Stream: stream, Identity: id, ReceivedAt: 1}, evs)
					})
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			events := float64(b.N * per)
			b.ReportMetric(events/time.Since(t0).Seconds(), "events/s")
			b.ReportMetric(float64((cpuNow()-cpu0).Nanoseconds())/events/1000, "cpu-us/event")
		})
	}
}
