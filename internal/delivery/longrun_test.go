package delivery

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/spool"
)

// newSmallFixture is newFixture with small spool limits and the given
// compaction policy change, so a long run fits a unit test.
func newSmallFixture(t testing.TB, records int64, pol binding.PolicyChange) *fixture {
	t.Helper()
	return newFixtureWith(t, func(o *binding.EnableOptions) {
		o.Limits, o.Compaction = spool.Limits{Records: records}, pol
	})
}

// TestEnableKeepsCapturingWithAutoCompaction: one-step enable records the
// default compaction policy, and the hook keeps capturing far beyond what
// the record limit holds, compacting acknowledged history by itself; every
// event reaches the Hub and each automatic compaction is recorded.
func TestEnableKeepsCapturingWithAutoCompaction(t *testing.T) {
	f := newSmallFixture(t, 256, binding.PolicyChange{})
	cfg, err := f.store.Bindings().Load()
	if err != nil {
		t.Fatal(err)
	}
	if p := cfg.Bindings[0].Compaction; p == nil || p.ThresholdPercent != binding.DefaultCompactThreshold || p.ChosenBy != "enable" {
		t.Fatalf("enable recorded policy %+v", p)
	}
	work := f.startWork(t)
	f.hook(t, f.sessionPayload("s1", "SessionStart", `,"source":"startup"`))
	events := 1
	compactions := 0
	for i := 0; i < 200; i++ {
		// Read is no action: one tool_start and one tool_finish envelope.
		for _, ev := range []string{"PreToolUse", "PostToolUse"} {
			r := f.hook(t, f.sessionPayload("s1", ev, fmt.Sprintf(`,"tool_name":"Read","tool_use_id":"toolu_%d","tool_input":{"file_path":"/x"}`, i)))
			events++
			if r.Warning != "" || r.DeliveryErr != nil || r.Deferred {
				t.Fatalf("event %d: %+v", events, r)
			}
			if r.Compacted != nil {
				compactions++
				if !strings.HasPrefix(r.Compacted.Trigger, "policy: ") || r.Compacted.Digests+r.Compacted.Receipts == 0 {
					t.Fatalf("automatic compaction %+v", r.Compacted)
				}
			}
		}
	}
	if compactions == 0 {
		t.Fatal("the policy never compacted")
	}
	rep, err := spool.Inspect(f.spool, 5)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Paused || rep.UsageFraction == nil || rep.UsageFraction.Records >= 0.8 {
		t.Fatalf("after %d events: paused=%v usage=%+v of %+v", events, rep.Paused, rep.Usage, rep.Limits)
	}
	if rep.Compaction.Runs != uint64(compactions) || len(rep.Compaction.History) == 0 || !strings.HasPrefix(rep.Compaction.History[0].Trigger, "policy: records") {
		t.Fatalf("compaction history: runs %d (hook saw %d), %+v", rep.Compaction.Runs, compactions, rep.Compaction.History)
	}
	if n := rep.Compaction.Digests + 2*rep.Compaction.Receipts; n < events/2 {
		t.Fatalf("only %d envelopes compacted after %d events", n, events)
	}
	rec := f.record(t, work)
	if len(rec.Sessions) != 1 || rec.Sessions[0].Events != int64(events) || rec.Sessions[0].MissingSeqs != 0 {
		t.Fatalf("Hub sessions %+v, want %d events and no hole", rec.Sessions, events)
	}
	// An exact re-run of a compacted event is still a duplicate.
	r := f.hook(t, f.sessionPayload("s1", "PreToolUse", `,"tool_name":"Read","tool_use_id":"toolu_0","tool_input":{"file_path":"/x"}`))
	if !r.Duplicate {
		t.Fatalf("re-run after compaction: %+v", r)
	}
}

// TestUsageWarningOncePerSession: without a policy the hook warns once per
// session when usage passes 80%, naming the command that helps; raising
// the limits on the existing spool makes room.
func TestUsageWarningOncePerSession(t *testing.T) {
	f := newSmallFixture(t, 128, binding.PolicyChange{Clear: true})
	f.startWork(t)
	n := 0
	hook := func(session string) string {
		n++
		r := f.hook(t, f.sessionPayload(session, "PreToolUse", fmt.Sprintf(`,"tool_name":"Read","tool_use_id":"t%d","tool_input":{}`, n)))
		if r.Compacted != nil {
			t.Fatal("compacted without a policy")
		}
		if r.Warning != "" && (!strings.Contains(r.Warning, "of its records limit") || !strings.Contains(r.Warning, "agentscm change-capture compact --spool "+f.spool)) {
			t.Fatalf("warning %q", r.Warning)
		}
		return r.Warning
	}
	for hook("a") == "" {
		if n > 60 {
			t.Fatal("no warning before the spool filled")
		}
	}
	if rep, _ := spool.Inspect(f.spool, 1); rep.UsageFraction.Records < 0.8 {
		t.Fatalf("warned at %+v", rep.UsageFraction)
	}
	for _, s := range []string{"a", "a"} {
		if w := hook(s); w != "" {
			t.Fatalf("session a warned twice: %q", w)
		}
	}
	if hook("b") == "" {
		t.Fatal("a new session was not warned")
	}
	if w := hook("b"); w != "" {
		t.Fatalf("session b warned twice: %q", w)
	}
	// Raising the limits of the existing spool: re-enable with a larger one.
	if _, err := binding.EnableCapture(context.Background(), f.store, Connections{f.cfg}, binding.EnableOptions{Root: f.root, ConfigDir: f.cfg,
		Executable: "/usr/local/bin/agentscm", Now: time.Now(), Limits: spool.Limits{Records: 4096}}); err != nil {
		t.Fatal(err)
	}
	rep, err := spool.Inspect(f.spool, 1)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Limits.Records != 4096 || rep.UsageFraction.Records > 0.1 {
		t.Fatalf("after raising: %+v %+v", rep.Limits, rep.UsageFraction)
	}
	// Lowering below what it holds is refused and changes nothing.
	_, err = binding.EnableCapture(context.Background(), f.store, Connections{f.cfg}, binding.EnableOptions{Root: f.root, ConfigDir: f.cfg,
		Executable: "/usr/local/bin/agentscm", Now: time.Now(), Limits: spool.Limits{Records: 64}})
	if err == nil || !strings.Contains(err.Error(), "below current usage") {
		t.Fatalf("lowering: %v", err)
	}
	if rep, _ := spool.Inspect(f.spool, 1); rep.Limits.Records != 4096 {
		t.Fatalf("refused lowering changed the limits: %+v", rep.Limits)
	}
}

// TestDeferredReasonsInSummary: facts kept while no Work was current say
// why, and the spool summary counts them.
func TestDeferredReasonsInSummary(t *testing.T) {
	f := newFixture(t)
	f.hook(t, f.sessionPayload("early", "UserPromptSubmit", `,"prompt":"p"`))
	f.hook(t, f.sessionPayload("early", "PreToolUse", `,"tool_name":"Read","tool_use_id":"t1","tool_input":{}`))
	cfg, err := f.store.Bindings().Load()
	if err != nil {
		t.Fatal(err)
	}
	sum, err := capture.SummarizeSpool(&cfg.Bindings[0])
	if err != nil {
		t.Fatal(err)
	}
	if sum.Deferred.Total < 2 || sum.Deferred.Sessions != 1 || len(sum.Deferred.Reasons) != 1 || sum.Deferred.Reasons[0].Reason != "no_current_work" {
		t.Fatalf("deferred summary %+v", sum.Deferred)
	}
	if !strings.Contains(sum.Deferred.Reasons[0].Description, "no current Work") {
		t.Fatalf("description %q", sum.Deferred.Reasons[0].Description)
	}
	if sum.Compaction == nil || sum.Limits.Records != spool.DefaultRecords || sum.Fraction.Records <= 0 {
		t.Fatalf("summary %+v", sum)
	}
}

// TestDeferredFactsDoNotStarveDelivery: facts that stay local forever take
// no place in the hook's ten-envelope delivery page, so after many of them
// a hook still delivers its own event at once.
func TestDeferredFactsDoNotStarveDelivery(t *testing.T) {
	f := newFixture(t)
	for i := 0; i < 30; i++ {
		r := f.hook(t, f.sessionPayload("early", "PreToolUse", fmt.Sprintf(`,"tool_name":"Read","tool_use_id":"t%d","tool_input":{}`, i)))
		if !r.Deferred {
			t.Fatalf("no Work yet: %+v", r)
		}
	}
	work := f.startWork(t)
	for i := 0; i < 3; i++ {
		r := f.hook(t, f.sessionPayload("later", "PreToolUse", fmt.Sprintf(`,"tool_name":"Read","tool_use_id":"u%d","tool_input":{}`, i)))
		if r.Deferred || r.Delivered == 0 || r.DeliveryErr != nil {
			t.Fatalf("hook %d after the deferred facts: %+v", i, r)
		}
	}
	rec := f.record(t, work)
	var got int64
	for _, s := range rec.Sessions {
		got += s.Events
	}
	// Each of the three hooks delivered its own tool start at once.
	if got != 3 {
		t.Fatalf("the Hub has %d events, want 3: %+v", got, rec.Sessions)
	}
}

// TestReplayIndexFullWarns: when automatic compaction meets a full replay
// index it keeps those envelopes whole, compacts the rest, and says so once
// per session, naming the remedy; capture goes on.
func TestReplayIndexFullWarns(t *testing.T) {
	f := newFixtureWith(t, func(o *binding.EnableOptions) { o.Limits = spool.Limits{Records: 256, ReplayEntries: 4} })
	f.startWork(t)
	warnings, kept := 0, 0
	for i := 0; i < 80; i++ {
		// A prompt records an identity_uncertain gap: a replay entry.
		r := f.hook(t, f.sessionPayload("s", "UserPromptSubmit", `,"prompt":"p"`))
		if strings.Contains(r.Warning, "replay index is full") {
			warnings++
			if !strings.Contains(r.Warning, "--max-replay-entries") {
				t.Fatalf("warning %q", r.Warning)
			}
		}
		if r.Compacted != nil {
			kept += r.Compacted.ReplayKept
		}
	}
	if warnings != 1 || kept == 0 {
		t.Fatalf("%d warnings, %d envelopes kept whole", warnings, kept)
	}
	rep, err := spool.Inspect(f.spool, 1)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Paused || rep.Compaction.Replay != 4 || rep.Compaction.Digests == 0 {
		t.Fatalf("after the run: paused %v, compaction %+v", rep.Paused, rep.Compaction)
	}
}
