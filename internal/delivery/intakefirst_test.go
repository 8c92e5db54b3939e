package delivery

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	f := newFixtureWith(t, func(o *capture.EnableOptions) {
		o.Limits, o.Compaction = spool.Limits{Records: 150}, capture.PolicyChange{Clear: true}
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
