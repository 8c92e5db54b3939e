package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

// A session that begins while the Hub is down, in a checkout whose
// current Work and generation this machine knows (an earlier session
// resolved them, or `work start` just returned them): its events belong
// to that Work from receipt (seed 000: "If that observed session already
// had an exact authorized target, the deferred record copies that target
// and the next reachable hook makes the outage visible under that exact
// work, generation, and canonical session"). Through the installed
// intake hook: SessionStart, a prompt, tool calls and Stop during the
// outage, more after the Hub is back; once delivered, every tool call is
// on the Hub under generation 1 as events or inside a named
// capture_interrupted gap of that target, nothing of the session is an
// unassociated deferred fact, and the Hub names no adapter_started_late
// gap for it.
func TestIntakeNewSessionDuringOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and runs a Hub")
	}
	bin := build(t)
	for _, c := range []struct {
		name string
		// earlier: a session of the checkout resolved the Work before the
		// outage (the checkout target file a lock holder writes); without
		// it only `work start` knows the Work when the Hub goes down.
		earlier bool
	}{{"earlier-session", true}, {"right-after-work-start", false}} {
		t.Run(c.name, func(t *testing.T) {
			h := startHub(t, bin)
			f := hubFixture(t, bin, h, true)
			w := f.startWork(t)
			var ids []string
			if c.earlier {
				const old = "outage-old"
				f.send(t, old, startFields())
				ids = append(ids, f.toolCalls(t, old, "old", 1)...)
				f.drain(t)
			}
			h.stop()
			const fresh = "outage-fresh"
			for _, p := range []string{startFields(), `"hook_event_name":"UserPromptSubmit","prompt":"go"`} {
				f.hookWarned(t, "agentscm-hook-intake", []string{"change-capture", "hook-claude"}, fresh, p)
			}
			ids = append(ids, f.toolCallsWarned(t, fresh, "down", 2)...)
			f.hookWarned(t, "agentscm-hook-intake", []string{"change-capture", "hook-claude"}, fresh, `"hook_event_name":"Stop","stop_hook_active":false`)
			f.waitDeliverer(t)
			_ = f.deliver(t) // the Hub is down: admission only
			h.start(t)
			f.hookWarned(t, "agentscm-hook-intake", []string{"change-capture", "hook-claude"}, fresh, `"hook_event_name":"UserPromptSubmit","prompt":"again"`)
			ids = append(ids, f.toolCallsWarned(t, fresh, "up", 1)...)
			f.drain(t)

			checkNewSession(t, f, w.ID, fresh, ids)
		})
	}
}

// The soak's outage: sessions with targets keep making tool calls through
// the intake hook while the Hub restarts (down 3 s), and a session begins
// during the outage. Its events are held to the checkout's Work and
// generation from receipt, as in TestIntakeNewSessionDuringOutage.
func TestIntakeNewSessionDuringBusyOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and restarts a Hub")
	}
	bin := build(t)
	h := startHub(t, bin)
	f := hubFixture(t, bin, h, true)
	w := f.startWork(t)
	busy := []string{"busy-a", "busy-b", "busy-c"}
	for _, s := range busy {
		f.send(t, s, startFields())
	}
	f.drain(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	stopBusy := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopBusy)
	for _, s := range busy {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				tool := "Read"
				in := `{"file_path":"/etc/hostname"}`
				if i%3 == 0 {
					tool, in = "Bash", `{"command":"true"}`
				}
				id := fmt.Sprintf("toolu_%s_%03d", s, i)
				call := `"tool_name":"` + tool + `","tool_use_id":"` + id + `","tool_input":` + in
				for _, p := range []string{`"hook_event_name":"PreToolUse",` + call, `"hook_event_name":"PostToolUse",` + call + `,"tool_response":{"ok":true}`} {
					cmd := exec.Command(filepath.Join(f.bin, "agentscm-hook-intake"), "change-capture", "hook-claude")
					cmd.Env = f.env()
					cmd.Stdin = strings.NewReader(`{"session_id":"` + s + `","cwd":"` + f.root + `",` + p + `}`)
					if out, err := cmd.Output(); err != nil || len(out) > 0 {
						t.Errorf("hook %s: %v, stdout %q", p, err, out)
					}
				}
			}
		}()
	}
	time.Sleep(time.Second)
	h.stop()
	down := time.Now()
	const fresh = "busy-fresh"
	var ids []string
	run := func(p string) {
		f.hookWarned(t, "agentscm-hook-intake", []string{"change-capture", "hook-claude"}, fresh, p)
	}
	run(startFields())
	run(`"hook_event_name":"UserPromptSubmit","prompt":"go"`)
	calls := func(prefix string, n int) {
		for i := range n {
			id := fmt.Sprintf("toolu_%s%02d", prefix, i)
			call := `"tool_name":"Read","tool_use_id":"` + id + `","tool_input":{"file_path":"/etc/hostname"}`
			run(`"hook_event_name":"PreToolUse",` + call)
			run(`"hook_event_name":"PostToolUse",` + call + `,"tool_response":{"ok":true}`)
			ids = append(ids, id)
		}
	}
	calls("down", 2)
	run(`"hook_event_name":"Stop","stop_hook_active":false`)
	time.Sleep(time.Until(down.Add(3 * time.Second)))
	h.start(t)
	run(`"hook_event_name":"UserPromptSubmit","prompt":"again"`)
	calls("up", 1)
	time.Sleep(time.Second)
	stopBusy()
	f.drain(t)
	checkNewSession(t, f, w.ID, fresh, ids)
}

// checkNewSession checks the Hub's record of work and the spool after the
// new session fresh ran the tool calls ids (and others of its events)
// across an outage: see TestIntakeNewSessionDuringOutage.
func checkNewSession(t *testing.T, f *fixture, work, fresh string, ids []string) {
	t.Helper()
	rec := f.record(t, work)
	events, gapped := accounted(t, f, rec, 1, ids)
	t.Logf("%d records delivered as events, %d inside gaps", events, gapped)
	dep, err := capture.ListDeferred(f.spool, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, fact := range dep.Facts {
		if fact.Association == "unassociated" || fact.Target == nil || fact.Target.WorkID != work || fact.Target.Generation != 1 {
			t.Errorf("deferred fact of session %s (%s, %s) not held to the Work's generation 1: %+v",
				fact.Session, fact.HookEvent, fact.Association, fact.Target)
		}
	}
	sp, err := spool.OpenReadOnly(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := sp.Events()
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[event.Kind]int{}
	for _, r := range recs {
		if r.SessionID != fresh {
			continue
		}
		kinds[r.Kind]++
		if r.WorkID != work || r.Generation != 1 || r.Association == capture.AssocUnassociated {
			t.Errorf("the new session's %s %s: work %q generation %d association %q (deferred %v, %q); want the Work %s at generation 1",
				r.Kind, r.ToolUseID, r.WorkID, r.Generation, r.Association, r.Deferred, r.DeferredReason, work)
		}
	}
	if kinds[event.SessionStart] != 1 || kinds[event.ToolStart] != 3 || kinds[event.TurnEnd] == 0 {
		t.Errorf("the new session's records in the spool: %v", kinds)
	}
	for _, g := range rec.Gaps {
		if g.Kind == event.GapAdapterStartedLate {
			t.Errorf("the Hub names an adapter_started_late gap (%s) for session %s", g.Reason, g.Session)
		}
	}
}

// A session that begins during an outage right after `work start` (or
// `work takeover`) from this checkout, none of whose sessions resolved
// since, and whose Work the other checkout takes over once the Hub is
// back, before this checkout's deliverer admitted the session's events:
// they were received at the generation the command returned and are
// accounted for there (inside a named capture_interrupted gap under the
// alias session the Hub created with it), never unassociated. On main
// they stayed unassociated deferred facts (the checkout target file was
// written only by a lock holder's resolution).
func TestIntakeNewSessionAfterWorkStartTakenOver(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and runs a Hub")
	}
	bin := build(t)
	for _, takeoverFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("takeover=%v", takeoverFirst), func(t *testing.T) {
			h := startHub(t, bin)
			a := hubFixture(t, bin, h, true)
			b := hubFixture(t, bin, h, true)
			w := b.startWork(t)
			gen := int64(1)
			if takeoverFirst {
				// B started the Work and resolved a session at generation
				// 1; A takes it over: A's new target is generation 2.
				b.send(t, "b-session", startFields())
				b.drain(t)
				gen = 2
				takeover(t, a, w.ID, gen)
			} else {
				w = a.startWork(t)
			}
			h.stop()
			const fresh = "started-fresh"
			run := func(p string) {
				a.hookWarned(t, "agentscm-hook-intake", []string{"change-capture", "hook-claude"}, fresh, p)
			}
			run(startFields())
			run(`"hook_event_name":"UserPromptSubmit","prompt":"go"`)
			var ids []string
			for i := range 2 {
				id := fmt.Sprintf("toolu_wsfresh%02d", i)
				call := `"tool_name":"Read","tool_use_id":"` + id + `","tool_input":{"file_path":"/etc/hostname"}`
				run(`"hook_event_name":"PreToolUse",` + call)
				run(`"hook_event_name":"PostToolUse",` + call + `,"tool_response":{"ok":true}`)
				ids = append(ids, id)
			}
			a.waitDeliverer(t)
			release := a.holdDeliverLock(t)
			h.start(t)
			takeover(t, b, w.ID, gen+1)
			release()
			_ = a.deliver(t)
			a.waitDeliverer(t)
			dep, err := capture.ListDeferred(a.spool, 1000)
			if err != nil {
				t.Fatal(err)
			}
			for _, fact := range dep.Facts {
				if fact.Association == "unassociated" || fact.Target == nil || fact.Target.WorkID != w.ID || fact.Target.Generation != gen {
					t.Errorf("deferred fact of session %s (%s, %s) not held to generation %d: %+v", fact.Session, fact.HookEvent, fact.Association, gen, fact.Target)
				}
			}
			events, gapped := accounted(t, a, a.record(t, w.ID), gen, ids)
			if gapped != 2*len(ids) {
				t.Errorf("%d records delivered as events, %d inside gaps under generation %d; want all %d inside gaps", events, gapped, gen, 2*len(ids))
			}
		})
	}
}
