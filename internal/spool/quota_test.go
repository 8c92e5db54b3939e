package spool_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

func gaps(t *testing.T, sp *spool.Spool, kind string) []event.Record {
	t.Helper()
	evs, err := sp.Events()
	if err != nil {
		t.Fatal(err)
	}
	var out []event.Record
	for _, e := range evs {
		if e.Kind == event.KindGap && e.Gap.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// fillOrdinary appends ordinary records until capture pauses and returns
// how many were admitted.
func fillOrdinary(t *testing.T, sp *spool.Spool, max int) int {
	t.Helper()
	for i := 0; i < max; i++ {
		if _, err := sp.Append(rec(event.PromptSubmit, "s")); err != nil {
			if !errors.Is(err, spool.ErrCapturePaused) || !errors.Is(err, spool.ErrQuota) {
				t.Fatalf("append %d: %v", i, err)
			}
			return i
		}
	}
	t.Fatalf("capture never paused after %d appends", max)
	return 0
}

func TestQuotaAtFloor(t *testing.T) {
	ctx := context.Background()
	sp, dir := newSpool(t, spool.Config{Limits: spool.Limits{Records: spool.FloorRecords, Bytes: spool.FloorBytes}})
	// Delivery acknowledges the first ten records as it goes.
	for range 10 {
		if _, err := sp.Append(rec(event.PromptSubmit, "s")); err != nil {
			t.Fatal(err)
		}
	}
	ackAll(t, sp)
	// 48 records - 12 headroom = 36 for ordinary capture, of which the
	// fixed layout (2 locks, scope, limits, cursor, commit, compaction
	// index) takes 7, and the ten records and their ten markers take 20.
	if n := fillOrdinary(t, sp, 100); n != 36-7-20 {
		t.Fatalf("admitted %d more ordinary records at the floor, want 9", n)
	}
	p := gaps(t, sp, event.GapCaptureInterrupted)
	if len(p) != 1 || p[0].Gap.Reason != event.GapReasonRecordLimit || p[0].Gap.RefusedKind != event.PromptSubmit {
		t.Fatalf("pause gaps %+v", p)
	}
	// Still paused: refusals record no second marker.
	for range 3 {
		if _, err := sp.Append(rec(event.PromptSubmit, "s")); !errors.Is(err, spool.ErrCapturePaused) {
			t.Fatal(err)
		}
	}
	if len(gaps(t, sp, event.GapCaptureInterrupted)) != 1 {
		t.Fatal("a second pause marker was recorded")
	}
	// Finishing a started action uses the reserved headroom.
	fin := rec(event.ToolFinish, "s")
	fin.ToolUseID = "t1"
	if _, err := sp.Append(fin); err != nil {
		t.Fatalf("finish under pressure: %v", err)
	}
	st, _ := sp.Status(ctx)
	if !st.Paused || st.Usage.Records != 36+1+1 {
		t.Fatalf("status %+v", st)
	}
	// Capacity returns after compaction; the next retained event at a
	// higher sequence shows capture resumed, and the gap remains.
	if _, err := sp.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	seq, err := sp.Append(rec(event.PromptSubmit, "s"))
	if err != nil {
		t.Fatalf("after compaction: %v", err)
	}
	g := gaps(t, sp, event.GapCaptureInterrupted)
	if len(g) != 1 || seq <= g[0].Seq {
		t.Fatalf("resume seq %d, gaps %+v", seq, g)
	}
	rep, _ := spool.Inspect(dir, 0)
	if rep.Paused {
		t.Fatal("still paused after resuming")
	}
}

func ackAll(t *testing.T, sp *spool.Spool) {
	t.Helper()
	ctx := context.Background()
	pend, err := sp.Pending(ctx, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range pend {
		if err := sp.Ack(ctx, e.Record.Seq, e.Digest); err != nil {
			t.Fatal(err)
		}
	}
}

func TestQuotaBytesAtFloor(t *testing.T) {
	sp, _ := newSpool(t, spool.Config{Limits: spool.Limits{Records: spool.FloorRecords, Bytes: spool.FloorBytes}})
	var retained, missing []event.Record
	for i := 0; ; i++ {
		r := rec(event.PromptSubmit, "s")
		r.Body = &event.Body{Prompt: strings.Repeat("x", 20<<10) + string(rune('a'+i))}
		_, err := sp.Append(r)
		if errors.Is(err, spool.ErrCapturePaused) {
			break
		}
		if err != nil || i > 40 {
			t.Fatalf("append %d: %v", i, err)
		}
		if r.BodyRef.Availability == event.AvailabilityMissing {
			missing = append(missing, *r)
		} else {
			retained = append(retained, *r)
		}
	}
	// 64 KiB - 16 KiB headroom holds two 20 KiB bodies; later records keep
	// their facts with availability missing and a gap each, until the
	// records and gaps themselves reach the ordinary byte cap.
	if len(retained) != 2 || len(missing) == 0 {
		t.Fatalf("%d retained, %d missing", len(retained), len(missing))
	}
	g := gaps(t, sp, event.GapContentNotRetained)
	if len(g) != len(missing) || g[0].Gap.AffectedSeq != missing[0].Seq || g[0].Gap.Reason != event.GapReasonByteLimit {
		t.Fatalf("content gaps %+v", g)
	}
	p := gaps(t, sp, event.GapCaptureInterrupted)
	if len(p) != 1 || p[0].Gap.Reason != event.GapReasonByteLimit {
		t.Fatalf("pause gaps %+v", p)
	}
}

func TestQuotaAtDefaults(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a default-sized spool")
	}
	sp, _ := newSpool(t, spool.Config{})
	sp.SetNoSync(true)
	want := spool.DefaultRecords - spool.HeadroomRecords - 7
	var batch []*event.Record
	for range want - 1 {
		batch = append(batch, rec(event.PromptSubmit, "s"))
	}
	if n, err := sp.AppendBatch(batch); err != nil {
		t.Fatalf("batch stopped at %d: %v", n, err)
	}
	// The last ordinary record fits, the next pauses capture.
	if n := fillOrdinary(t, sp, 10); n != 1 {
		t.Fatalf("admitted %d more at the default record limit", n)
	}
	if p := gaps(t, sp, event.GapCaptureInterrupted); len(p) != 1 || p[0].Seq != uint64(want+1) {
		t.Fatalf("pause gaps %+v", p)
	}
	sp2, _ := newSpool(t, spool.Config{})
	sp2.SetNoSync(true)
	if !raceEnabled { // TestArtifactLimit covers the same path under -race
		// Per-artifact limit: a 16 MiB+ body is not retained, the completion is.
		fin := rec(event.ToolFinish, "s")
		fin.ToolUseID = "t"
		fin.Body = &event.Body{ToolResponse: []byte(`"` + strings.Repeat("y", spool.DefaultArtifactBytes) + `"`)}
		if _, err := sp2.Append(fin); err != nil {
			t.Fatal(err)
		}
		g := gaps(t, sp2, event.GapContentNotRetained)
		if fin.BodyRef.Availability != event.AvailabilityMissing || len(g) != 1 || g[0].Gap.Reason != event.GapReasonArtifactLimit {
			t.Fatalf("ref %+v gaps %+v", fin.BodyRef, g)
		}
	}
	// Total bytes at the default 64 MiB: quarantined debris counts, so a
	// 60 MiB file in the quarantine leaves room for three 1 MiB bodies
	// before the headroom; later records keep coming without content.
	debris := filepath.Join(sp2.Dir(), "quarantine", "debris")
	if err := os.WriteFile(debris, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(debris, 60<<20); err != nil { // sparse: 60 MiB apparent size
		t.Fatal(err)
	}
	retained, missing := 0, 0
	for i := 0; i < 6; i++ {
		r := rec(event.PromptSubmit, "s")
		r.Body = &event.Body{Prompt: strings.Repeat("z", 1<<20-100) + string(rune(i+'0'))}
		if _, err := sp2.Append(r); err != nil {
			t.Fatal(err)
		}
		if r.BodyRef.Availability == event.AvailabilityRetained {
			retained++
		} else {
			missing++
		}
	}
	if retained != 3 || missing != 3 {
		t.Fatalf("retained %d, missing %d 1 MiB bodies beside 60 MiB of quarantine, want 3 and 3", retained, missing)
	}
}

func TestArtifactLimit(t *testing.T) {
	sp, _ := newSpool(t, spool.Config{Limits: spool.Limits{ArtifactBytes: 4 << 10}})
	small := rec(event.ToolFinish, "s")
	small.Body = &event.Body{ToolResponse: []byte(`"` + strings.Repeat("y", 3<<10) + `"`)}
	big := rec(event.ToolFinish, "s")
	big.Body = &event.Body{ToolResponse: []byte(`"` + strings.Repeat("y", 4<<10) + `"`)}
	for _, r := range []*event.Record{small, big} {
		if _, err := sp.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	g := gaps(t, sp, event.GapContentNotRetained)
	if small.BodyRef.Availability != event.AvailabilityRetained || big.BodyRef.Availability != event.AvailabilityMissing ||
		len(g) != 1 || g[0].Gap.AffectedSeq != big.Seq || g[0].Gap.Reason != event.GapReasonArtifactLimit {
		t.Fatalf("small %+v big %+v gaps %+v", small.BodyRef, big.BodyRef, g)
	}
	if big.BodyRef.Digest == "" || big.BodyRef.Bytes <= 4<<10 {
		t.Fatalf("missing content lost its identity: %+v", big.BodyRef)
	}
}

func TestOrderLedgerBound(t *testing.T) {
	sp, _ := newSpool(t, spool.Config{Limits: spool.Limits{ActiveOrders: 4}})
	for i := 0; i < 7; i++ {
		r := rec(event.ToolStart, "s")
		r.ToolUseID = string(rune('a' + i))
		if _, err := sp.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	evs, _ := sp.Events()
	starts := 0
	for _, e := range evs {
		if e.Kind == event.ToolStart {
			starts++
		}
	}
	g := gaps(t, sp, event.GapCaptureInterrupted)
	if starts != 7 || len(g) != 1 || g[0].Gap.Reason != event.GapReasonOrderLedger {
		t.Fatalf("starts %d gaps %+v", starts, g)
	}
}

func TestInjectedENOSPC(t *testing.T) {
	t.Run("envelope write pauses capture with a gap", func(t *testing.T) {
		_, dir := newSpool(t, spool.Config{})
		t.Setenv(spool.FailpointEnv, "append.envelope=enospc")
		sp, _ := spool.Open(dir)
		_, err := sp.Append(rec(event.PromptSubmit, "s"))
		if !errors.Is(err, spool.ErrCapturePaused) || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("append: %v", err)
		}
		g := gaps(t, sp, event.GapCaptureInterrupted)
		if len(g) != 1 || g[0].Gap.Reason != event.GapReasonNoSpace {
			t.Fatalf("gaps %+v", g)
		}
	})
	t.Run("artifact write keeps the completion", func(t *testing.T) {
		_, dir := newSpool(t, spool.Config{})
		t.Setenv(spool.FailpointEnv, "append.artifact=enospc")
		sp, _ := spool.Open(dir)
		fin := rec(event.ToolFinish, "s")
		fin.Body = &event.Body{ToolResponse: []byte(`"out"`)}
		seq, err := sp.Append(fin)
		if err != nil || seq == 0 || fin.BodyRef.Availability != event.AvailabilityMissing {
			t.Fatalf("append: %d %v %+v", seq, err, fin.BodyRef)
		}
		g := gaps(t, sp, event.GapContentNotRetained)
		if len(g) != 1 || g[0].Gap.AffectedSeq != seq || g[0].Gap.Reason != event.GapReasonNoSpace {
			t.Fatalf("gaps %+v", g)
		}
	})
}

// TestFullFilesystem runs the spool on a real, small tmpfs when the machine
// allows mounting one (root), and ends in a gap, not a lost completion.
func TestFullFilesystem(t *testing.T) {
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v: %s); TestInjectedENOSPC covers this", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", mnt).Run() })
	dir := filepath.Join(mnt, "spool")
	sp, err := spool.Init(dir)
	if err != nil {
		t.Fatal(err)
	}
	free := func() int64 {
		var s syscall.Statfs_t
		syscall.Statfs(mnt, &s)
		return int64(s.Bavail) * int64(s.Bsize)
	}
	for i := 0; free() > 100<<10; i++ {
		r := rec(event.PromptSubmit, "s")
		r.Body = &event.Body{Prompt: strings.Repeat("p", 40<<10) + string(rune('a'+i%26)) + string(rune('a'+i/26))}
		if _, err := sp.Append(r); err != nil {
			t.Fatalf("fill %d: %v", i, err)
		}
	}
	fin := rec(event.ToolFinish, "s")
	fin.ToolUseID = "t"
	fin.Body = &event.Body{ToolResponse: []byte(`"` + strings.Repeat("r", 200<<10) + `"`)}
	seq, err := sp.Append(fin)
	if err != nil || seq == 0 {
		t.Fatalf("completion lost on a full filesystem: %v", err)
	}
	g := gaps(t, sp, event.GapContentNotRetained)
	if fin.BodyRef.Availability != event.AvailabilityMissing || len(g) != 1 || g[0].Gap.AffectedSeq != seq || g[0].Gap.Reason != event.GapReasonNoSpace {
		t.Fatalf("ref %+v gaps %+v", fin.BodyRef, g)
	}
	// No temporary debris is left behind by the failed write.
	ents, _ := os.ReadDir(filepath.Join(dir, "artifacts"))
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			t.Fatalf("debris %s", e.Name())
		}
	}
	// Ordinary capture with content keeps the records without content.
	r := rec(event.PromptSubmit, "s")
	r.Body = &event.Body{Prompt: strings.Repeat("q", 300<<10)}
	if _, err := sp.Append(r); err != nil || r.BodyRef.Availability != event.AvailabilityMissing {
		t.Fatalf("ordinary append on full fs: %v", err)
	}
}

// At the 48-record floor a spool whose capture paused keeps taking gaps
// (other sessions' losses, finishes) until they are refused, yet what the
// Hub accepted can still be acknowledged and compacted, and capture then
// resumes: finishes and gaps never spend the maintenance part of the
// headroom, and acknowledgements never spend compaction's index reserve.
// On main the gaps spent all 12 reserved records: acknowledgement and
// compaction were refused (record_limit) and the pause gap's advice,
// change-capture compact, could not work.
func TestFloorKeepsRoomToAcknowledgeAndCompact(t *testing.T) {
	ctx := context.Background()
	sp, _ := newSpool(t, spool.Config{Limits: spool.Limits{Records: spool.FloorRecords, Bytes: spool.FloorBytes}})
	fillOrdinary(t, sp, 100)
	gapsWritten := 0
	for i := 0; ; i++ {
		g := rec(event.KindGap, "other")
		g.Gap = &event.GapInfo{Kind: event.GapCaptureInterrupted, Reason: event.GapReasonRecordLimit}
		if _, err := sp.Append(g); errors.Is(err, spool.ErrQuota) {
			break
		} else if err != nil || i > 48 {
			t.Fatalf("gap %d: %v", i, err)
		}
		gapsWritten++
	}
	st, _ := sp.Status(ctx)
	if st.Usage.Records != spool.FloorRecords-spool.MaintenanceRecords {
		t.Fatalf("gaps stopped at %d records (%d gaps), want %d", st.Usage.Records, gapsWritten, spool.FloorRecords-spool.MaintenanceRecords)
	}
	pend, err := sp.Pending(ctx, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	ackSome := func(pend []spool.Envelope) int {
		acked := 0
		for _, e := range pend {
			if err := sp.Ack(ctx, e.Record.Seq, e.Digest); err != nil {
				if !errors.Is(err, spool.ErrQuota) {
					t.Fatal(err)
				}
				break
			}
			acked++
		}
		return acked
	}
	if acked := ackSome(pend); acked != spool.MaintenanceRecords-spool.IndexReserveRecords {
		t.Fatalf("%d acknowledgements at the limit, want %d", acked, spool.MaintenanceRecords-spool.IndexReserveRecords)
	}
	rep, err := sp.Compact(ctx)
	if err != nil {
		t.Fatalf("compaction at the limit: %v", err)
	}
	after, _ := sp.Status(ctx)
	if after.Usage.Records >= st.Usage.Records {
		t.Fatalf("compaction %+v freed nothing: %d records before, %d after", rep, st.Usage.Records, after.Usage.Records)
	}
	// Acknowledging the rest and compacting again makes room for ordinary
	// capture: it resumes.
	for range 10 {
		pend, err := sp.Pending(ctx, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		ackSome(pend)
		if _, err := sp.Compact(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sp.Append(rec(event.PromptSubmit, "s")); err != nil {
		t.Fatalf("capture did not resume after acknowledgement and compaction: %v", err)
	}
}
