package spool

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/agentscm/agentscm/internal/event"
)

func TestInitRefusesForeignDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sp")
	os.Mkdir(dir, 0o700)
	os.WriteFile(filepath.Join(dir, "stranger"), []byte("x"), 0o600)
	if _, err := Init(dir); !errors.Is(err, ErrNotSpool) {
		t.Fatalf("err = %v, want ErrNotSpool", err)
	}
	if _, err := Init("relative"); err == nil {
		t.Fatal("relative spool accepted")
	}
}

func TestConcurrentAppendsKeepOrder(t *testing.T) {
	sp, err := Init(filepath.Join(t.TempDir(), "sp"))
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := sp.Append(&event.Record{SessionID: "s", Kind: event.ToolStart, ToolUseID: string(rune('a' + i%26))}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	recs, err := sp.Events()
	if err != nil || len(recs) != n {
		t.Fatalf("%d records, %v", len(recs), err)
	}
	for i, r := range recs {
		if r.Seq != uint64(i+1) {
			t.Fatalf("record %d has seq %d", i, r.Seq)
		}
	}
}
