package watch

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// BenchmarkClientSince measures one client round trip to a server (the
// cookie sync included) with a one-file change before each call.
func BenchmarkClientSince(b *testing.B) {
	root := b.TempDir()
	dir := filepath.Join(b.TempDir(), "w")
	if err := mkPrivate(dir); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	up := make(chan struct{})
	go func() { done <- Serve(ctx, dir, []string{root}, ServeOptions{Ready: func() { close(up) }}) }()
	<-up
	defer func() { cancel(); <-done }()
	c := &Client{Dir: dir, Timeout: 5 * time.Second}
	tok, _, err := c.Since(ctx, []string{root}, "")
	if err != nil {
		b.Fatal(err)
	}
	var ds []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		writeB(b, filepath.Join(root, "f"))
		t0 := time.Now()
		next, _, err := c.Since(ctx, []string{root}, tok)
		ds = append(ds, time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
		tok = next
	}
	b.StopTimer()
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "p50-ms/call")
}

func mkPrivate(dir string) error { return os.Mkdir(dir, 0o700) }

func writeB(b *testing.B, p string) {
	if err := os.WriteFile(p, []byte(time.Now().String()), 0o644); err != nil {
		b.Fatal(err)
	}
}
