package delivery

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/spool"
)

// A background deliverer with Linger keeps the deliver lock after it went
// idle and delivers the next tool call's event itself: that call's hook
// finds the lock held and starts no deliverer (sessionbench: 30 deliverer
// processes for a 20-call Claude Code session without it). Without Linger
// the run ends before the next call and its event waits in the intake for
// the deliverer that hook starts.
func TestDelivererLingersForTheNextCall(t *testing.T) {
	for _, c := range []struct {
		name     string
		linger   time.Duration
		admitted int
	}{
		{"no linger", 0, 1},
		{"linger", 3 * time.Second, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			work := f.startWork(t)
			started := 0
			hook := func(i int) {
				t.Helper()
				bg := &countingBG{Opener: Opener{f.cfg}}
				res, err := capture.HandleClaudeHook(context.Background(), f.store, bg, strings.NewReader(f.payload("PreToolUse",
					fmt.Sprintf(`,"tool_name":"Read","tool_use_id":"toolu_linger_%d","tool_input":{"file_path":"/etc/hostname"}`, i))), time.Now())
				if err != nil || res.Intake == "" {
					t.Fatalf("hook %d: %+v %v", i, res, err)
				}
				started += bg.started
			}
			hook(0)
			type out struct {
				rep *capture.DeliverReport
				err error
			}
			done := make(chan out, 1)
			go func() {
				rep, err := capture.DeliverSpool(context.Background(), f.store, Opener{f.cfg}, f.spool, nil, capture.DeliverBounds{MaxRun: 20 * time.Second, Linger: c.linger})
				done <- out{rep, err}
			}()
			// The run delivered the first call's event and went idle.
			deadline := time.Now().Add(10 * time.Second)
			for len(f.record(t, work).Events) < 1 {
				if time.Now().After(deadline) {
					t.Fatal("the first event did not reach the Hub")
				}
				time.Sleep(20 * time.Millisecond)
			}
			if c.linger == 0 {
				<-done // ended idle; the next hook comes after it
				done <- out{}
			} else {
				time.Sleep(c.linger / 4)
			}
			hook(1)
			o := <-done
			if c.linger == 0 {
				if started != 2 {
					t.Fatalf("hooks started %d deliverers, want 2 (one per call)", started)
				}
				return
			}
			if o.err != nil || o.rep.Outcome != "idle" || o.rep.Admitted != c.admitted {
				t.Fatalf("deliverer %+v %v: want idle with %d admitted", o.rep, o.err, c.admitted)
			}
			if started != 1 {
				t.Fatalf("hooks started %d deliverers, want 1 (the second call found the lingering one)", started)
			}
			if ins, err := spool.Inspect(f.spool, 1); err != nil || ins.Intake != 0 || ins.Pending.Total != 0 {
				t.Fatalf("left: intake %d pending %d %v", ins.Intake, ins.Pending.Total, err)
			}
			if n := len(f.record(t, work).Events); n != 2 {
				t.Fatalf("Hub events %d, want 2", n)
			}
		})
	}
}

// countingBG counts the deliverers a hook asks for (none starts: the test
// runs the deliverer itself).
type countingBG struct {
	Opener
	started int
}

func (b *countingBG) StartDeliverer(*os.File, string) error { b.started++; return nil }
