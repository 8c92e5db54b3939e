package delivery

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/spool"
)

// Intake-first: with a Backgrounder every hook, a SessionStart included,
// leaves its event in the intake without the spool lock or the Hub; the
// deliverer resolves, admits and delivers it. What the locked path did with
// the raw payload the hook still does: the session's setup artifact is
// written, and the once-per-session usage warning is given from the spool
// summary.
func TestIntakeFirstSessionStartSetupAndWarning(t *testing.T) {
	f := newFixtureWith(t, func(o *binding.EnableOptions) {
		o.Limits, o.Compaction = spool.Limits{Records: 150}, binding.PolicyChange{Clear: true}
	})
	work := f.startWork(t)
	bg := newBG(f)
	hook := func(pl string) *capture.HookResult {
		t.Helper()
		res, err := capture.HandleClaudeHook(context.Background(), f.store, bg, strings.NewReader(pl), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if res.Seq != 0 || res.Intake == "" || res.DeliveryErr != nil {
			t.Fatalf("hook did not go intake-first: %+v", res)
		}
		bg.wg.Wait()
		return res
	}
	hook(`{"session_id":"native-1","cwd":"` + f.root + `","hook_event_name":"SessionStart","source":"startup","model":"claude-sonnet-4-5","permission_mode":"default"}`)
	arts, _ := filepath.Glob(filepath.Join(f.cfg, "*", "*", "*", "setup-*.json"))
	if len(arts) == 0 {
		arts, _ = filepath.Glob(filepath.Join(f.cfg, "*", "*", "setup-*.json"))
	}
	if len(arts) != 1 {
		t.Fatalf("setup artifacts %v, want the SessionStart's one", arts)
	}
	rec := f.record(t, work)
	if len(rec.Events) != 1 || rec.Events[0].Kind != "session_start" {
		t.Fatalf("the Hub has %+v, want the admitted session_start", rec.Events)
	}
	// Fill the spool past 80% of its 150 records: exactly one hook of the
	// session warns, naming the command that helps.
	warned, after := 0, 0
	for i := 0; i < 125 && after < 3; i++ {
		if warned > 0 {
			after++
		}
		res := hook(f.payload("UserPromptSubmit", fmt.Sprintf(`,"prompt":"prompt %d"`, i)))
		if res.Warning != "" {
			warned++
			if !strings.Contains(res.Warning, "capture spool at") || !strings.Contains(res.Warning, "change-capture compact") {
				t.Fatalf("warning %q", res.Warning)
			}
		}
	}
	if warned != 1 || after != 3 {
		t.Fatalf("%d usage warnings in one session (%d hooks after the first), want exactly 1", warned, after)
	}
	if n := pendingCount(t, f.spool); n != 0 {
		t.Fatalf("%d envelopes still pending after the deliverers", n)
	}
}

// failingOpen is a Backgrounder whose deliverers cannot open the Hub (the
// hook's own connection lookup still works).
type failingOpen struct{ bgOpener }

func (o failingOpen) Open(context.Context, string) (capture.Hub, error) {
	return nil, errors.New("the Hub will not open")
}

func (o failingOpen) StartDeliverer(lock *os.File, spoolDir string) error {
	fd, err := syscall.Dup(int(lock.Fd()))
	if err != nil {
		return err
	}
	dup := os.NewFile(uintptr(fd), "deliver.lock")
	capture.DeliverSpool(context.Background(), o.store, o, spoolDir, dup, capture.DeliverBounds{})
	return nil
}

// A deliverer that cannot run (the Hub does not open) leaves intake-first
// events waiting, durable, and the next hook says so on its line; a later
// deliverer that can open the Hub admits and delivers every one of them.
func TestIntakeFirstDelivererErrorIsWarnedAndNothingLost(t *testing.T) {
	f := newFixture(t)
	work := f.startWork(t)
	bad := failingOpen{newBG(f)}
	pre := func(i int) string {
		return f.payload("PreToolUse", fmt.Sprintf(`,"tool_name":"Read","tool_use_id":"toolu_fe_%d","tool_input":{"file_path":"/etc/hostname"}`, i))
	}
	var warned bool
	for i := range 3 {
		res, err := capture.HandleClaudeHook(context.Background(), f.store, bad, strings.NewReader(pre(i)), time.Now())
		if err != nil || res.Intake == "" {
			t.Fatalf("hook %d: %+v %v", i, res, err)
		}
		if i > 0 && (res.DeliveryErr == nil || !strings.Contains(res.DeliveryErr.Error(), "the last delivery attempt failed") ||
			!strings.Contains(res.DeliveryErr.Error(), "will not open")) {
			t.Fatalf("hook %d after a deliverer that could not run: delivery error %v", i, res.DeliveryErr)
		}
		warned = warned || res.DeliveryErr != nil
	}
	if rep, err := spool.Inspect(f.spool, 1); err != nil || rep.Intake != 3 {
		t.Fatalf("intake %+v %v, want the 3 events waiting", rep, err)
	}
	good := newBG(f)
	if _, err := capture.HandleClaudeHook(context.Background(), f.store, good, strings.NewReader(pre(3)), time.Now()); err != nil {
		t.Fatal(err)
	}
	good.wg.Wait()
	if rec := f.record(t, work); len(rec.Events) != 4 || !warned {
		t.Fatalf("the Hub has %d events, want all 4", len(rec.Events))
	}
}
