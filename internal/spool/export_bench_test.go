package spool

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkExport exports a spool at its default record limit (about
// 4,077 envelopes): the time the spool lock is held shared, with every
// file digested twice, copied, fsynced and re-read.
func BenchmarkExport(b *testing.B) {
	sp := populated(b)
	parent := b.TempDir()
	i := 0
	var held time.Duration
	h := &exportHooks{lockReleased: func(d time.Duration) { held += d }}
	for b.Loop() {
		i++
		if _, err := Export(context.Background(), ExportOptions{Spool: sp.dir, Destination: filepath.Join(parent, fmt.Sprintf("a%d", i)), hooks: h}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(held.Milliseconds())/float64(i), "ms-lock-held/op")
}

// BenchmarkRefCopySync is the reference: cp -a of the same spool followed
// by sync -f of the copy (a copy made durable, without any verification).
func BenchmarkRefCopySync(b *testing.B) {
	sp := populated(b)
	parent := b.TempDir()
	i := 0
	for b.Loop() {
		i++
		dst := filepath.Join(parent, fmt.Sprintf("c%d", i))
		if out, err := exec.Command("sh", "-c", `cp -a "$1" "$2" && find "$2" -type f -exec sync {} + && sync -f "$2"`, "sh", sp.dir, dst).CombinedOutput(); err != nil {
			b.Fatalf("%v %s", err, out)
		}
	}
}

// BenchmarkExportInterleaved runs the export and the cp+sync reference
// alternately on the same spool, so both see the same machine load; it
// reports each one's mean per iteration and the time the lock was held.
func BenchmarkExportInterleaved(b *testing.B) {
	sp := populated(b)
	parent := b.TempDir()
	var exp, ref, held time.Duration
	h := &exportHooks{lockReleased: func(d time.Duration) { held += d }}
	i := 0
	for b.Loop() {
		i++
		t0 := time.Now()
		if _, err := Export(context.Background(), ExportOptions{Spool: sp.dir, Destination: filepath.Join(parent, fmt.Sprintf("a%d", i)), hooks: h}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		dst := filepath.Join(parent, fmt.Sprintf("c%d", i))
		if out, err := exec.Command("sh", "-c", `cp -a "$1" "$2" && find "$2" -type f -exec sync {} + && sync -f "$2"`, "sh", sp.dir, dst).CombinedOutput(); err != nil {
			b.Fatalf("%v %s", err, out)
		}
		exp, ref = exp+t1.Sub(t0), ref+time.Since(t1)
	}
	b.ReportMetric(float64(exp.Milliseconds())/float64(i), "ms-export/op")
	b.ReportMetric(float64(ref.Milliseconds())/float64(i), "ms-cp-sync/op")
	b.ReportMetric(float64(held.Milliseconds())/float64(i), "ms-lock-held/op")
}
