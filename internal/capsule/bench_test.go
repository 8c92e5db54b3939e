package capsule

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkRunInProcess runs one transaction (warm object store) over a
// 10,000-file tree with a command that changes one file; see
// cmd/agentdiff BenchmarkRun for the whole-process comparison.
func BenchmarkRunInProcess(b *testing.B) {
	root := b.TempDir()
	for i := range 10000 {
		dir := filepath.Join(root, fmt.Sprintf("d%03d", i/100))
		if i%100 == 0 {
			os.MkdirAll(dir, 0o755)
		}
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d.txt", i%100)), []byte(fmt.Sprintf("file %d\n", i)), 0o644)
	}
	o := RunOptions{Root: root, Policy: DefaultPolicy(), Argv: []string{"sh", "-c", "echo 1 >> d000/f00.txt"}, Env: os.Environ(), KeyDir: b.TempDir()}
	if _, _, err := Run(context.Background(), o); err != nil {
		b.Fatal(err)
	}
	// Age the tree past the stat cache's racy window and refresh the cache.
	time.Sleep(2100 * time.Millisecond)
	if _, _, err := Run(context.Background(), o); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, _, err := Run(context.Background(), o); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		os.RemoveAll(filepath.Join(root, StateDir, "runs"))
		b.StartTimer()
	}
}
