package spool_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

func TestSetLimits(t *testing.T) {
	ctx := context.Background()
	sp, dir := newSpool(t, spool.Config{MetadataOnly: true, Limits: spool.Limits{Records: 64, Bytes: 1 << 20}})
	for range 20 {
		if _, err := sp.Append(rec(event.PromptSubmit, "s")); err != nil {
			t.Fatal(err)
		}
	}
	st, err := sp.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		want spool.Limits
		err  string
	}{
		{"records below usage", spool.Limits{Records: st.Usage.Records + spool.HeadroomRecords - 1}, "records (+12 reserved headroom)"},
		{"bytes below usage", spool.Limits{Bytes: st.Usage.Bytes, ArtifactBytes: 1024}, "bytes (+16384 reserved headroom)"},
		{"artifact above bytes", spool.Limits{ArtifactBytes: 2 << 20}, "exceeds the total byte limit"},
		{"negative", spool.Limits{Records: -1}, "must be positive"},
	} {
		before := treeDigest(t, dir)
		if _, err := sp.SetLimits(ctx, tc.want); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.err)
		}
		if treeDigest(t, dir) != before {
			t.Errorf("%s: a refused change changed the spool", tc.name)
		}
	}
	if _, err := sp.SetLimits(ctx, spool.Limits{Records: 20}); !errors.Is(err, spool.ErrLimitsBelowUsage) {
		t.Fatalf("lowering below usage: %v", err)
	}
	ch, err := sp.SetLimits(ctx, spool.Limits{Records: 4096, Bytes: 8 << 20})
	if err != nil || !ch.Changed || ch.Old.Records != 64 || ch.New.Records != 4096 || ch.New.Bytes != 8<<20 || ch.New.ArtifactBytes != ch.Old.ArtifactBytes {
		t.Fatalf("raise: %+v %v", ch, err)
	}
	// The new limits are what the spool enforces, after a reopen too.
	sp2, err := spool.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err = sp2.Status(ctx)
	if err != nil || st.Limits.Records != 4096 || st.Fraction.Records >= 0.02 {
		t.Fatalf("after reopen: %+v %v", st, err)
	}
	for range 100 {
		if _, err := sp2.Append(rec(event.PromptSubmit, "s")); err != nil {
			t.Fatalf("append beyond the old limit: %v", err)
		}
	}
	// Lowering within what the spool holds works; the same limits change nothing.
	if ch, err := sp2.SetLimits(ctx, spool.Limits{Records: 2048}); err != nil || !ch.Changed {
		t.Fatalf("lower within usage: %+v %v", ch, err)
	}
	if ch, err := sp2.SetLimits(ctx, spool.Limits{Records: 2048}); err != nil || ch.Changed {
		t.Fatalf("same limits: %+v %v", ch, err)
	}
}

func TestCompactWithBoundedAndReplayKept(t *testing.T) {
	ctx := context.Background()
	sp, _ := newSpool(t, spool.Config{Limits: spool.Limits{ReplayEntries: 2}})
	for i := range 30 {
		k := event.PromptSubmit
		if i%10 == 0 {
			k = event.KindUsage // kept whole in the replay index
		}
		if _, err := sp.Append(rec(k, "s")); err != nil {
			t.Fatal(err)
		}
	}
	ackAll(t, sp)
	// Bounded: only the oldest 12 acknowledged envelopes.
	rep, err := sp.CompactWith(ctx, spool.CompactOptions{Trigger: "policy: test", MaxEnvelopes: 12, KeepReplayWhenFull: true})
	if err != nil || !rep.Changed || !rep.Bounded || rep.Digests != 10 || rep.Replay != 2 {
		t.Fatalf("bounded compaction %+v %v", rep, err)
	}
	// The replay index is full now: the rest compacts, the usage record
	// stays whole in the outbox, and the report says so.
	rep, err = sp.CompactWith(ctx, spool.CompactOptions{Trigger: "policy: test", MaxEnvelopes: 100, KeepReplayWhenFull: true})
	if err != nil || !rep.Changed || rep.Bounded || !rep.ReplayFull || rep.ReplayKept != 1 || rep.Digests != 17 {
		t.Fatalf("compaction with a full replay index %+v %v", rep, err)
	}
	// Without KeepReplayWhenFull a compaction that needs the index refuses.
	if _, err := sp.Compact(ctx); !errors.Is(err, spool.ErrReplayIndexFull) {
		t.Fatalf("manual compaction: %v", err)
	}
	// Every usage record is still whole: two in the index, one in the outbox.
	evs, _ := sp.Events()
	usage := 0
	for _, e := range evs {
		if e.Kind == event.KindUsage {
			usage++
		}
	}
	if usage != 3 {
		t.Fatalf("%d usage records after compaction, want 3", usage)
	}
	r, err := spool.Inspect(sp.Dir(), 5)
	if err != nil {
		t.Fatal(err)
	}
	h := r.Compaction.History
	if r.Compaction.Runs != 2 || len(h) != 2 || h[0].Trigger != "policy: test" || h[1].ReplayKept != 1 || h[0].UsageBefore.Records == 0 {
		t.Fatalf("history %+v runs %d", h, r.Compaction.Runs)
	}
	if r.UsageFraction == nil || r.UsageFraction.Records <= 0 || r.Compaction.ReplayLimit != 2 {
		t.Fatalf("report %+v", r)
	}
}
