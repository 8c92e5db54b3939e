package spool

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentscm/agentscm/internal/event"
)

// populated returns a spool holding the most ordinary records the default
// limits admit (4,096 records minus 12 of headroom minus 7 fixed files).
func populated(b *testing.B) *Spool {
	b.Helper()
	sp := mustInit(b, Limits{})
	sp.noSync = true
	g, err := sp.acquire(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; ; i++ {
		r := testRec(event.PromptSubmit)
		if _, err := sp.appendLocked(g.st, r); err != nil {
			break
		}
	}
	g.release()
	sp.noSync = false
	return sp
}

// BenchmarkOpenRecovery is Open on a spool at its default record limit:
// lock, identity and authority revalidation, and the name-level recovery
// scan with complete physical usage.
func BenchmarkOpenRecovery(b *testing.B) {
	sp := populated(b)
	b.ResetTimer()
	for b.Loop() {
		if _, err := Open(sp.dir); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRecoverFull adds content validation of every envelope.
func BenchmarkRecoverFull(b *testing.B) {
	sp := populated(b)
	b.ResetTimer()
	for b.Loop() {
		if _, err := sp.Recover(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRefReadDir is the reference: listing the same outbox directory.
func BenchmarkRefReadDir(b *testing.B) {
	sp := populated(b)
	dir := filepath.Join(sp.dir, outboxDir)
	b.ResetTimer()
	for b.Loop() {
		if _, err := os.ReadDir(dir); err != nil {
			b.Fatal(err)
		}
	}
}
