package spool_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

func seqs(envs []spool.Envelope) []uint64 {
	var out []uint64
	for _, e := range envs {
		out = append(out, e.Record.Seq)
	}
	return out
}

func eq(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestDeliveryState(t *testing.T) {
	ctx := context.Background()
	sp, dir := newSpool(t, spool.Config{})
	for range 5 {
		if _, err := sp.Append(rec(event.PromptSubmit, "s")); err != nil {
			t.Fatal(err)
		}
	}
	pend, err := sp.Pending(ctx, 10)
	if err != nil || !eq(seqs(pend), []uint64{1, 2, 3, 4, 5}) {
		t.Fatalf("pending %v %v", seqs(pend), err)
	}
	// An acknowledgement must carry the exact envelope digest.
	if err := sp.Ack(ctx, 2, pend[0].Digest); !errors.Is(err, spool.ErrDigestMismatch) {
		t.Fatalf("ack with another digest: %v", err)
	}
	if err := sp.Ack(ctx, 99, pend[0].Digest); !errors.Is(err, spool.ErrNotFound) {
		t.Fatalf("ack of unknown: %v", err)
	}
	if err := sp.Ack(ctx, 2, pend[1].Digest); err != nil {
		t.Fatal(err)
	}
	if err := sp.Ack(ctx, 2, pend[1].Digest); err != nil {
		t.Fatalf("second ack: %v", err)
	}
	// The cursor advances after every attempt, whatever its outcome, and
	// scheduling resumes after it, wrapping around.
	if err := sp.RecordAttempt(ctx, spool.Attempt{Seq: 3, Digest: pend[2].Digest, At: t0, Outcome: "failed"}); err != nil {
		t.Fatal(err)
	}
	pend2, _ := sp.Pending(ctx, 10)
	if !eq(seqs(pend2), []uint64{4, 5, 1, 3}) {
		t.Fatalf("after ack and attempt: %v", seqs(pend2))
	}
	if p, _ := sp.Pending(ctx, 2); !eq(seqs(p), []uint64{4, 5}) {
		t.Fatalf("bounded: %v", seqs(p))
	}
	// The envelope is hidden, not deleted.
	if evs, _ := sp.Events(); len(evs) != 5 {
		t.Fatalf("events %d", len(evs))
	}
	rep, _ := spool.Inspect(dir, 0)
	if rep.Pending.Total != 2 || rep.Deferred.Total != 2 || rep.Acknowledged != 1 || rep.Attempts.Total != 1 || rep.Deferred.Items[1].Attempts != 1 {
		t.Fatalf("inspect %+v", rep)
	}

	// A malformed acknowledgement stops delivery and compaction.
	ack := filepath.Join(dir, "acks", "0000000000000002.ack")
	good, _ := os.ReadFile(ack)
	os.WriteFile(ack, []byte("garbage"), 0o600)
	if _, err := sp.Pending(ctx, 10); !errors.Is(err, spool.ErrMalformedAck) {
		t.Fatalf("pending with malformed ack: %v", err)
	}
	if _, err := sp.Compact(ctx); !errors.Is(err, spool.ErrMalformedAck) {
		t.Fatalf("compact with malformed ack: %v", err)
	}
	rep, _ = spool.Inspect(dir, 0)
	if !rep.DeliveryStopped {
		t.Fatal("inspect does not report the stop")
	}
	// Capture itself stays available (hooks stay fail-open).
	if _, err := sp.Append(rec(event.PromptSubmit, "s")); err != nil {
		t.Fatal(err)
	}
	// No automatic repair: the bytes are still the operator's to inspect.
	if b, _ := os.ReadFile(ack); string(b) != "garbage" {
		t.Fatal("the marker was repaired")
	}
	os.WriteFile(ack, good, 0o600)
	if _, err := sp.Pending(ctx, 10); err != nil {
		t.Fatal(err)
	}
}

func TestCompaction(t *testing.T) {
	ctx := context.Background()
	sp, dir := newSpool(t, spool.Config{})
	add := func(kind event.Kind, id string, mut func(*event.Record)) uint64 {
		r := rec(kind, "s")
		r.ToolUseID = id
		if mut != nil {
			mut(r)
		}
		seq, err := sp.Append(r)
		if err != nil {
			t.Fatal(err)
		}
		return seq
	}
	ss := add(event.SessionStart, "", nil)
	s1 := add(event.ToolStart, "t1", func(r *event.Record) { r.Body = &event.Body{ToolInput: []byte(`{"cmd":"ls"}`)} })
	f1 := add(event.ToolFinish, "t1", nil)
	s2 := add(event.ToolStart, "t2", nil) // incomplete action start
	u := add(event.KindUsage, "", nil)
	m := add(event.ToolStart, "t3", func(r *event.Record) { r.Managed = true })
	mf := add(event.ToolFinish, "t3", func(r *event.Record) { r.Managed = true })
	g := add(event.KindGap, "", func(r *event.Record) {
		r.Gap = &event.GapInfo{Kind: event.GapCaptureInterrupted, Reason: "test"}
	})
	pendingSeq := add(event.PromptSubmit, "", nil) // never acknowledged
	pend, _ := sp.Pending(ctx, 100)
	for _, e := range pend {
		if e.Record.Seq != pendingSeq {
			if err := sp.Ack(ctx, e.Record.Seq, e.Digest); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The cursor names history that compaction will remove.
	sp.RecordAttempt(ctx, spool.Attempt{Seq: f1, Outcome: "accepted", At: t0})
	before, _ := spool.Inspect(dir, 0)
	rep, err := sp.Compact(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Receipts for t1 and the managed t3 pair; a digest for the session
	// start; the replay index keeps usage, gap and the managed Pre/Post
	// envelopes whole. s2 stays (incomplete), the pending envelope stays.
	if rep.Receipts != 2 || rep.Digests != 1 || rep.Replay != 4 || rep.Kept != 2 {
		t.Fatalf("report %+v", rep)
	}
	_ = s1
	evs, _ := sp.Events()
	var got []uint64
	for _, e := range evs {
		got = append(got, e.Seq)
	}
	if !eq(got, []uint64{s2, u, m, mf, g, pendingSeq}) {
		t.Fatalf("retained after compaction %v", got)
	}
	after, _ := spool.Inspect(dir, 0)
	if after.Artifacts != before.Artifacts || after.Artifacts != 1 {
		t.Fatalf("artifacts %d -> %d", before.Artifacts, after.Artifacts)
	}
	// The cursor names compacted history: delivery is not wedged, also
	// after a repeated compaction with no new selection.
	for range 2 {
		p, err := sp.Pending(ctx, 10)
		if err != nil || !eq(seqs(p), []uint64{pendingSeq}) {
			t.Fatalf("pending after compaction: %v %v", seqs(p), err)
		}
		if r, err := sp.Compact(ctx); err != nil || r.Changed {
			t.Fatalf("repeat compaction %+v %v", r, err)
		}
	}
	// A late acknowledgement of compacted history is harmless.
	if err := sp.Ack(ctx, ss, pend[0].Digest); err != nil {
		t.Fatalf("late ack: %v", err)
	}
	if after.Compaction.Generation != 1 || after.Compaction.Receipts != 2 {
		t.Fatalf("compaction %+v", after.Compaction)
	}
}

func TestCompactionReplayIndexFull(t *testing.T) {
	ctx := context.Background()
	sp, dir := newSpool(t, spool.Config{Limits: spool.Limits{ReplayEntries: 2}})
	for range 3 {
		r := rec(event.KindUsage, "s")
		if _, err := sp.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	ackAll(t, sp)
	before := treeDigest(t, dir)
	if _, err := sp.Compact(ctx); !errors.Is(err, spool.ErrReplayIndexFull) {
		t.Fatalf("compact: %v", err)
	}
	if treeDigest(t, dir) != before {
		t.Fatal("a refused compaction changed the spool")
	}
	if evs, _ := sp.Events(); len(evs) != 3 {
		t.Fatal("records were pruned")
	}
}

// TestCompactActionPairsBesideToolPairs: a tool call's lifecycle pair and
// the pair of the action a rule made of it share session and tool_use_id;
// compaction pairs each with its own kind, so both become receipts and an
// incomplete action start stays even when its tool pair completed.
func TestCompactActionPairsBesideToolPairs(t *testing.T) {
	ctx := context.Background()
	sp, _ := newSpool(t, spool.Config{})
	add := func(kind event.Kind, id string) uint64 {
		r := rec(kind, "s")
		r.ToolUseID = id
		seq, err := sp.Append(r)
		if err != nil {
			t.Fatal(err)
		}
		return seq
	}
	add(event.ToolStart, "t1")
	add(event.ActionStart, "t1")
	add(event.ToolFinish, "t1")
	add(event.ActionFinish, "t1")
	add(event.ToolStart, "t2")
	open := add(event.ActionStart, "t2")
	add(event.ToolFinish, "t2")
	pend, _ := sp.Pending(ctx, 100)
	for _, e := range pend {
		if err := sp.Ack(ctx, e.Record.Seq, e.Digest); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := sp.Compact(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Receipts != 3 || rep.Kept != 1 {
		t.Fatalf("report %+v", rep)
	}
	evs, _ := sp.Events()
	if len(evs) != 1 || evs[0].Seq != open || evs[0].Kind != event.ActionStart {
		t.Fatalf("retained %+v", evs)
	}
}

// TestObservationScope: the scope is persisted (the same after reopening)
// and random per spool (two spools never share one), and does not reveal
// the spool id.
func TestObservationScope(t *testing.T) {
	a, dir := newSpool(t, spool.Config{})
	b, _ := newSpool(t, spool.Config{})
	again, err := spool.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if a.ObservationScope() != again.ObservationScope() || a.ObservationScope() == b.ObservationScope() ||
		!strings.HasPrefix(a.ObservationScope(), "obs_") || strings.Contains(a.ObservationScope(), a.ID()) {
		t.Fatalf("scopes %s %s %s (id %s)", a.ObservationScope(), again.ObservationScope(), b.ObservationScope(), a.ID())
	}
}
