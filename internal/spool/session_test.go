package spool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// TestPendingSkipsAckedByHeader: an envelope whose marker holds the digest
// its header records is skipped without a full read; when the header
// disagrees with the marker the full read decides, and a malformed envelope
// is quarantined, never delivered.
func TestPendingSkipsAckedByHeader(t *testing.T) {
	ctx := context.Background()
	sp := mustInit(t, Limits{})
	for i := range 3 {
		sp.Append(tagged(fmt.Sprint("r", i), event.PromptSubmit))
	}
	pend, err := sp.Pending(ctx, 10)
	if err != nil || len(pend) != 3 {
		t.Fatalf("pending %v %v", seqsOf(pend), err)
	}
	for _, e := range pend[:2] {
		if err := sp.Ack(ctx, e.Record.Seq, e.Digest); err != nil {
			t.Fatal(err)
		}
	}
	g, err := sp.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range g.st.sortOutbox() {
		if d := sp.headerDigest(e); d != pend[e.seq-1].Digest {
			t.Fatalf("header digest of %d is %q, want %s", e.seq, d, pend[e.seq-1].Digest)
		}
	}
	g.release()
	if got, err := sp.Pending(ctx, 10); err != nil || len(got) != 1 || got[0].Record.Seq != 3 {
		t.Fatalf("pending after acks: %v %v", seqsOf(got), err)
	}
	// Rewrite envelope 2's header digest (same size): the header no longer
	// matches the marker, the full read finds the frame malformed and
	// quarantines it.
	names, _ := os.ReadDir(filepath.Join(sp.dir, outboxDir))
	for _, n := range names {
		if !strings.HasPrefix(n.Name(), fmt.Sprintf("%016d-", 2)) {
			continue
		}
		p := filepath.Join(sp.dir, outboxDir, n.Name())
		b, _ := os.ReadFile(p)
		i := bytes.IndexByte(b, '\n')
		b[i-1] ^= 1 // last hex digit of the header digest
		if b[i-1] > 'f' || (b[i-1] > '9' && b[i-1] < 'a') {
			b[i-1] = '0'
		}
		os.WriteFile(p, b, 0o600)
	}
	got, err := sp.Pending(ctx, 10)
	if err != nil || len(got) != 1 || got[0].Record.Seq != 3 {
		t.Fatalf("pending after header damage: %v %v", seqsOf(got), err)
	}
	q, _ := os.ReadDir(filepath.Join(sp.dir, quarantineDir))
	if len(q) != 1 {
		t.Fatalf("%d quarantined entries, want the damaged envelope", len(q))
	}
}
