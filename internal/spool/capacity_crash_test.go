package spool

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/agentscm/agentscm/internal/event"
)

// TestSetLimitsCrash kills a limits change at each failpoint: the spool then
// opens with either the old or the new limits (a fully written temporary
// file rolls forward), never damaged, and keeps every record.
func TestSetLimitsCrash(t *testing.T) {
	for _, fp := range []string{"limits.set.temp-written", "limits.set.temp-synced", "limits.set.renamed"} {
		t.Run(fp, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "spool")
			sp, err := Init(dir)
			if err != nil {
				t.Fatal(err)
			}
			for range 5 {
				if _, err := sp.Append(testRec(event.PromptSubmit)); err != nil {
					t.Fatal(err)
				}
			}
			mustCrash(t, "setlimits", dir, fp)
			sp, err = Open(dir)
			if err != nil {
				t.Fatalf("open after a crash at %s: %v", fp, err)
			}
			st, err := sp.Status(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if st.Limits.Records != DefaultRecords && st.Limits.Records != 8192 {
				t.Fatalf("limits after a crash at %s: %+v", fp, st.Limits)
			}
			if fp != "limits.set.temp-written" && st.Limits.Records != 8192 {
				t.Fatalf("a fully written limits change was not rolled forward: %+v", st.Limits)
			}
			if q, _ := sp.Quarantine(); len(q) != 0 {
				t.Fatalf("quarantined %+v", q)
			}
			if evs, _ := sp.Events(); len(evs) != 5 {
				t.Fatalf("%d events after the crash, want 5", len(evs))
			}
		})
	}
}
