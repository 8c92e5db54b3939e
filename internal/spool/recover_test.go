package spool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/event"
)

func testRec(kind event.Kind) *event.Record {
	return &event.Record{Agent: "claude-code", SessionID: "s", Kind: kind, HookEvent: string(kind), ObservedAt: time.Unix(0, 0).UTC(), CaptureMode: event.ModeMetadataOnly}
}

func mustInit(t testing.TB, l Limits) *Spool {
	t.Helper()
	sp, err := InitWith(context.Background(), filepath.Join(t.TempDir(), "spool"), Config{Limits: l})
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

func quarantined(t *testing.T, sp *Spool) []string {
	t.Helper()
	q, err := sp.Quarantine()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range q {
		out = append(out, e.Name)
	}
	return out
}

func TestRecoveryDebris(t *testing.T) {
	ctx := context.Background()
	sp := mustInit(t, Limits{})
	for range 3 {
		if _, err := sp.Append(testRec(event.PromptSubmit)); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(sp.dir, outboxDir)
	// A fully written temporary envelope for seq 4 (its writer died before
	// the link) is completed.
	r := testRec(event.ToolStart)
	r.Seq = 4
	os.WriteFile(filepath.Join(out, ".tmp-complete"), encodeEnvelope(r, classStart), 0o600)
	// An exact duplicate of an installed envelope is removed.
	names, _ := os.ReadDir(out)
	dup, _ := os.ReadFile(filepath.Join(out, names[0].Name()))
	os.WriteFile(filepath.Join(out, ".tmp-dup"), dup, 0o600)
	// A torn temporary file and foreign files are quarantined.
	r5 := testRec(event.PromptSubmit)
	r5.Seq = 5
	torn := encodeEnvelope(r5, classEvent)
	os.WriteFile(filepath.Join(out, ".tmp-torn"), torn[:len(torn)-3], 0o600)
	os.WriteFile(filepath.Join(out, "junk.rec"), []byte("x"), 0o600)
	os.WriteFile(filepath.Join(sp.dir, acksDir, "junk"), []byte("x"), 0o600)
	os.Mkdir(filepath.Join(sp.dir, artifactsDir, "subdir"), 0o700)
	os.WriteFile(filepath.Join(sp.dir, "stray"), []byte("x"), 0o600)
	// Two envelopes with one sequence number are ambiguous.
	r9 := testRec(event.PromptSubmit)
	r9.Seq = 9
	a := encodeEnvelope(r9, classEvent)
	os.WriteFile(filepath.Join(out, outboxName(9, classEvent, int64(len(a)))), a, 0o600)
	b := encodeEnvelope(r9, classGap)
	os.WriteFile(filepath.Join(out, outboxName(9, classGap, int64(len(b)))), b, 0o600)

	st, err := sp.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Report.Completed != 1 || st.Report.Duplicates != 1 || len(st.Report.Quarantined) != 7 {
		t.Fatalf("report %+v", st.Report)
	}
	q := quarantined(t, sp)
	if len(q) != 7 {
		t.Fatalf("quarantine %v", q)
	}
	evs, err := sp.Events()
	if err != nil || len(evs) != 4 || evs[3].Seq != 4 || evs[3].Kind != event.ToolStart {
		t.Fatalf("events %+v %v", evs, err)
	}
	// Quarantine counts against the limits.
	want := int64(7 + 4 + 7)
	if st.Usage.Records != want {
		t.Fatalf("usage %d records, want %d", st.Usage.Records, want)
	}
	// The next append gets seq 5: the quarantined seq 9 is not adopted.
	if seq, err := sp.Append(testRec(event.PromptSubmit)); err != nil || seq != 5 {
		t.Fatalf("append after recovery: %d %v", seq, err)
	}

	// Prune deletes exactly the names given, and nothing when one is wrong.
	if _, err := sp.PruneQuarantine(ctx, []string{q[0], "nope"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("prune with unknown: %v", err)
	}
	if _, err := sp.PruneQuarantine(ctx, []string{"../outbox"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("prune with path: %v", err)
	}
	if len(quarantined(t, sp)) != 7 {
		t.Fatal("a refused prune deleted something")
	}
	if _, err := sp.PruneQuarantine(ctx, q[:2]); err != nil {
		t.Fatal(err)
	}
	if got := quarantined(t, sp); len(got) != 5 || got[0] != q[2] {
		t.Fatalf("after prune %v", got)
	}
}

func TestRecoveryMalformedContent(t *testing.T) {
	ctx := context.Background()
	sp := mustInit(t, Limits{})
	sp.Append(testRec(event.PromptSubmit))
	sp.Append(testRec(event.PromptSubmit))
	ents, _ := os.ReadDir(filepath.Join(sp.dir, outboxDir))
	p := filepath.Join(sp.dir, outboxDir, ents[1].Name())
	b, _ := os.ReadFile(p)
	b[len(b)-2] ^= 1
	os.WriteFile(p, b, 0o600)
	if _, err := sp.Events(); err == nil {
		t.Fatal("Events read a corrupted record silently")
	}
	rep, err := sp.Recover(ctx)
	if err != nil || len(rep.Quarantined) != 1 {
		t.Fatalf("recover %+v %v", rep, err)
	}
	if evs, err := sp.Events(); err != nil || len(evs) != 1 {
		t.Fatalf("events %v %v", evs, err)
	}
}

func TestReopenAboveCap(t *testing.T) {
	ctx := context.Background()
	sp := mustInit(t, Limits{Records: FloorRecords, Bytes: FloorBytes})
	for range 10 {
		if _, err := sp.Append(testRec(event.PromptSubmit)); err != nil {
			t.Fatal(err)
		}
	}
	// Crash debris beyond the whole cap.
	for i := range 40 {
		os.WriteFile(filepath.Join(sp.dir, outboxDir, fmt.Sprintf("debris-%d", i)), []byte("x"), 0o600)
	}
	sp2, err := Open(sp.dir)
	if err != nil {
		t.Fatalf("reopen above cap: %v", err)
	}
	st, _ := sp2.Status(ctx)
	if st.Usage.Records <= FloorRecords {
		t.Fatalf("usage %+v", st.Usage)
	}
	if _, err := sp2.Append(testRec(event.PromptSubmit)); !errors.Is(err, ErrCapturePaused) || !errors.Is(err, ErrQuota) {
		t.Fatalf("ordinary admission above cap: %v", err)
	}
	if _, err := sp2.Append(testRec(event.ToolFinish)); !errors.Is(err, ErrQuota) {
		t.Fatalf("priority admission above the whole cap: %v", err)
	}
	rep, err := Inspect(sp.dir, 5)
	if err != nil || !rep.AboveCap || rep.Quarantine.Total != 40 || len(rep.Quarantine.Items) != 5 || rep.Quarantine.Omitted != 35 {
		t.Fatalf("inspect %+v %v", rep, err)
	}
	q := quarantined(t, sp2)
	if _, err := sp2.PruneQuarantine(ctx, q); err != nil {
		t.Fatal(err)
	}
	if _, err := sp2.Append(testRec(event.PromptSubmit)); err != nil {
		t.Fatalf("after pruning: %v", err)
	}
}

func TestRecoveryScanBound(t *testing.T) {
	sp := mustInit(t, Limits{Records: FloorRecords, Bytes: FloorBytes})
	for i := range scanBound(Limits{Records: FloorRecords}) + 1 {
		os.WriteFile(filepath.Join(sp.dir, artifactsDir, fmt.Sprintf("x%d", i)), nil, 0o600)
	}
	if _, err := Open(sp.dir); !errors.Is(err, ErrScanBound) {
		t.Fatalf("open: %v", err)
	}
	if rep, err := Inspect(sp.dir, 0); err != nil || !strings.Contains(strings.Join(rep.Problems, " "), "scan bound") {
		t.Fatalf("inspect: %+v %v", rep, err)
	}
}
