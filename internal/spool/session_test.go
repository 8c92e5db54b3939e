package spool

import (
	"context"
	"errors"
	"testing"

	"github.com/agentscm/agentscm/internal/event"
)

// TestSessionHookSequence runs the hook's sequence under one acquisition and
// checks it leaves what the one-shot calls leave: the new record pending
// until acknowledged, the ack marker hiding exactly its digest, the cursor
// past every attempt, and a closed session refusing work.
func TestSessionHookSequence(t *testing.T) {
	ctx := context.Background()
	sp := mustInit(t, Limits{})
	sp.Append(tagged("old", event.PromptSubmit))
	ss, err := sp.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seq, err := ss.Append(tagged("new", event.PromptSubmit))
	if err != nil || seq != 2 {
		t.Fatalf("append: %d %v", seq, err)
	}
	pend, err := ss.Pending(10)
	if err != nil || len(pend) != 2 {
		t.Fatalf("pending %v %v", seqsOf(pend), err)
	}
	if err := ss.Ack(2, pend[0].Digest); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("ack with another digest: %v", err)
	}
	if err := ss.Ack(2, pend[1].Digest); err != nil {
		t.Fatal(err)
	}
	if err := ss.RecordAttempt(Attempt{Seq: 1, Outcome: "failed"}); err != nil {
		t.Fatal(err)
	}
	if err := ss.RecordAttempt(Attempt{Seq: 2, Outcome: "accepted"}); err != nil {
		t.Fatal(err)
	}
	// The session sees its own ack.
	if again, err := ss.Pending(10); err != nil || len(again) != 1 || again[0].Record.Seq != 1 {
		t.Fatalf("pending inside the session after ack: %v %v", seqsOf(again), err)
	}
	ss.Close()
	if _, err := ss.Append(tagged("late", event.PromptSubmit)); err == nil {
		t.Fatal("a closed session appended")
	}
	ss.Close()
	after, err := sp.Pending(ctx, 10)
	if err != nil || len(after) != 1 || after[0].Record.Seq != 1 {
		t.Fatalf("pending after the session: %v %v", seqsOf(after), err)
	}
	c, err := sp.readCursor()
	if err != nil || c.LastSeq != 2 || c.AttemptsTotal != 2 {
		t.Fatalf("cursor %+v %v", c, err)
	}
	// The lock is free again: a one-shot call does not wait.
	if err := sp.RecordAttempt(ctx, Attempt{Seq: 1, Outcome: "failed"}); err != nil {
		t.Fatal(err)
	}
}
