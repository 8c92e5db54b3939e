package capture

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// BenchmarkLedger measures what the ledger adds to one hook: the claim of
// an identified tool event (lock, read, reserve, ledger write, claim write,
// appended marker) and the bare reservation of an unidentified one, against
// the reference of one durable small-file create (fsync of file and dir).
func BenchmarkLedger(b *testing.B) {
	tgt := Target{WorkID: "wrk_bench", Generation: 1, Session: "default"}
	fp := strings.Repeat("c", 64)
	b.Run("claim", func(b *testing.B) {
		store := StateDir{Dir: filepath.Join(b.TempDir(), "cfg")}
		for i := 0; b.Loop(); i++ {
			l, err := store.OpenLedger("/bench/spool")
			if err != nil {
				b.Fatal(err)
			}
			occ := Occurrence{Session: "s", Phase: "pre", Identity: fmt.Sprintf("tool_use_id:t%d", i)}
			if _, st, err := l.Claim(occ, fp, Route{Target: tgt, Association: AssocExact}); err != nil || st != ClaimNew {
				b.Fatal(st, err)
			}
			if err := l.MarkAppended(occ, 0); err != nil {
				b.Fatal(err)
			}
			l.Close()
		}
	})
	b.Run("reserve", func(b *testing.B) {
		store := StateDir{Dir: filepath.Join(b.TempDir(), "cfg")}
		for b.Loop() {
			l, err := store.OpenLedger("/bench/spool")
			if err != nil {
				b.Fatal(err)
			}
			r := Route{Target: tgt, Association: AssocExact}
			if err := l.Reserve("s", &r); err != nil {
				b.Fatal(err)
			}
			if err := l.Flush(); err != nil {
				b.Fatal(err)
			}
			l.Close()
		}
	})
	b.Run("reference-one-durable-create", func(b *testing.B) {
		dir := b.TempDir()
		data := []byte(strings.Repeat("x", 200))
		for i := 0; b.Loop(); i++ {
			if err := fsutil.WriteNew(filepath.Join(dir, fmt.Sprint(i)), data, fsutil.FileMode); err != nil {
				b.Fatal(err)
			}
		}
	})
}
