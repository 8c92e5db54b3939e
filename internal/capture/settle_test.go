package capture

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/spool"
)

// TestSettleIntake checks each bound of the background deliverer's settle:
// it returns at once when nothing waits, waits while intake files keep
// coming and returns once they stop (Settle), at SettleFiles waiting
// files, and at SettleMax however the files come.
func TestSettleIntake(t *testing.T) {
	type tc struct {
		name     string
		files    int           // intake files written before the settle
		arrivals int           // more written during it, one per gap
		gap      time.Duration //
		b        DeliverBounds
		min, max time.Duration
		// after: the settle returns only after every arrival was written
		// (each write, fsync included, well within Settle).
		after bool
	}
	cases := []tc{
		{name: "nothing waits", b: DeliverBounds{Settle: time.Second, SettleMax: 5 * time.Second}, max: 500 * time.Millisecond},
		{name: "off", files: 1, b: DeliverBounds{}, max: 500 * time.Millisecond},
		{name: "quiet", files: 1, b: DeliverBounds{Settle: 50 * time.Millisecond, SettleMax: 5 * time.Second}, min: 50 * time.Millisecond, max: 2 * time.Second},
		{name: "burst then quiet", files: 1, arrivals: 5, gap: 20 * time.Millisecond,
			b: DeliverBounds{Settle: 500 * time.Millisecond, SettleMax: 10 * time.Second}, min: 500 * time.Millisecond, max: 5 * time.Second, after: true},
		{name: "files bound", files: 4, b: DeliverBounds{Settle: time.Second, SettleMax: 5 * time.Second, SettleFiles: 4}, max: 500 * time.Millisecond},
		{name: "max bound", files: 1, arrivals: 100, gap: 10 * time.Millisecond,
			b: DeliverBounds{Settle: 5 * time.Second, SettleMax: 300 * time.Millisecond}, min: 300 * time.Millisecond, max: 2 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sp, err := spool.Init(filepath.Join(t.TempDir(), "spool"))
			if err != nil {
				t.Fatal(err)
			}
			write := func(i int) {
				if _, err := sp.WriteIntake([]byte(fmt.Sprintf(`{"n":%d}`, i)), time.Now()); err != nil {
					t.Error(err)
				}
			}
			for i := range c.files {
				write(i)
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := range c.arrivals {
					time.Sleep(c.gap)
					write(c.files + i)
				}
			}()
			t0 := time.Now()
			settleIntake(context.Background(), sp, c.b)
			el := time.Since(t0)
			if c.after {
				select {
				case <-done:
				default:
					t.Errorf("settle returned after %v, before the arrivals ended", el)
				}
			}
			<-done
			if el < c.min || el > c.max {
				t.Fatalf("settle took %v, want %v..%v", el, c.min, c.max)
			}
		})
	}
}
