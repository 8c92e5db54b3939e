package changelog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/scan"
)

// randomEntries returns a walk-ordered entry list drawn from a small path
// universe, so two draws share most paths.
func randomEntries(r *rand.Rand) []entry {
	var out []entry
	out = append(out, entry{Path: "", Type: scan.Dir, Mode: 0o755, MTime: r.Int64N(3)})
	for _, d := range []string{"a", "a/b", "c", "c/d/e"} {
		for i := range 6 {
			if r.IntN(4) == 0 {
				continue
			}
			e := entry{Path: fmt.Sprintf("%s/f%d", d, i), Type: scan.File, Mode: 0o644, Size: r.Int64N(3), MTime: r.Int64N(3), Ino: uint64(r.IntN(3))}
			switch r.IntN(6) {
			case 0:
				e.Hash = &[32]byte{byte(r.IntN(2))}
			case 1:
				e = entry{Path: e.Path, Type: scan.File, Excluded: true}
			case 2:
				e.Type, e.Target = scan.Symlink, fmt.Sprint(r.IntN(2))
			}
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(x, y entry) int { return comparePaths(x.Path, y.Path) })
	return out
}

func TestJournalRecordRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for iter := range 300 {
		prev := &captureState{LastPosition: 3, gen: 7, Roots: []*rootState{
			{Name: "checkout", Path: "/w", Exists: true, Entries: randomEntries(r)},
			{Name: "t", Path: "/t", Exists: r.IntN(2) == 0, Entries: randomEntries(r)},
		}}
		base, err := decodeState(prev.encode())
		if err != nil {
			t.Fatal(err)
		}
		// Several records in a row, each against the state before it.
		j := append([]byte(journalMagic), 0, 0, 0, 0, 0, 0, 0, 7)
		cur := prev
		var next *captureState
		for k := range 1 + r.IntN(3) {
			next = &captureState{LastPosition: cur.LastPosition + 1 + k, Roots: []*rootState{
				{Name: "checkout", Path: "/w", Exists: true, Stamp: fmt.Sprint(k), Entries: randomEntries(r)},
				{Name: "t", Path: "/t", Exists: r.IntN(2) == 0, Entries: randomEntries(r)},
			}}
			rec, _ := journalRecord(cur, next)
			j = appendRecord(j, rec)
			cur = next
		}
		if err := applyJournal(base, j); err != nil {
			t.Fatalf("iteration %d: %v", iter, err)
		}
		if base.LastPosition != next.LastPosition {
			t.Fatalf("iteration %d: position %d, want %d", iter, base.LastPosition, next.LastPosition)
		}
		for i := range next.Roots {
			g, w := base.Roots[i], next.Roots[i]
			if g.Exists != w.Exists || g.Stamp != w.Stamp || len(g.Entries) != len(w.Entries) {
				t.Fatalf("iteration %d root %d: got %+v, want %+v", iter, i, g, w)
			}
			for k := range w.Entries {
				if !sameEntry(&g.Entries[k], &w.Entries[k]) || g.Entries[k].Path != w.Entries[k].Path {
					t.Fatalf("iteration %d root %d entry %d: got %+v, want %+v", iter, i, k, g.Entries[k], w.Entries[k])
				}
			}
		}
	}
}

func appendRecord(j, rec []byte) []byte {
	j = binary.BigEndian.AppendUint32(j, uint32(len(rec)))
	j = binary.BigEndian.AppendUint32(j, crc32.ChecksumIEEE(rec))
	return append(j, rec...)
}

// journalScenario captures a few one-file changes and returns the changelog.
func journalScenario(t *testing.T) (*Changelog, string) {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "root")
	for i := range 20 {
		writeFile(t, filepath.Join(root, fmt.Sprintf("d%d/f%d", i%4, i)), fmt.Sprint(i))
	}
	c, err := Open(filepath.Join(base, "cl"), Options{Roots: []Root{{Name: "r", Path: root}}})
	if err != nil {
		t.Fatal(err)
	}
	mustCapture(t, c, 0)
	return c, root
}

func TestStateJournalAppendsAndCompacts(t *testing.T) {
	c, root := journalScenario(t)
	baseBefore, err := os.Stat(filepath.Join(c.dir, stateFile))
	if err != nil {
		t.Fatal(err)
	}
	for k := 1; k <= 5; k++ {
		writeFile(t, filepath.Join(root, "d1/f1"), fmt.Sprint("changed ", k))
		if k == 3 {
			os.Remove(filepath.Join(root, "d2/f2"))
		}
		mustCapture(t, c, k)
	}
	baseAfter, err := os.Stat(filepath.Join(c.dir, stateFile))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(baseBefore, baseAfter) {
		t.Errorf("a one-file capture rewrote the state base")
	}
	st, err := c.loadState()
	if err != nil {
		t.Fatal(err)
	}
	if st.journalRecords != 5 || st.LastPosition != 5 {
		t.Fatalf("journal records %d, position %d; want 5, 5", st.journalRecords, st.LastPosition)
	}
	// The journaled state equals what a fresh walk records.
	for _, e := range st.Roots[0].Entries {
		if e.Path == "d2/f2" {
			t.Errorf("deleted path still in the state")
		}
	}
	for k := 6; k <= maxJournalRecords+2; k++ {
		writeFile(t, filepath.Join(root, "d1/f1"), fmt.Sprint("changed ", k))
		mustCapture(t, c, k)
	}
	st, err = c.loadState()
	if err != nil {
		t.Fatal(err)
	}
	if st.journalRecords >= maxJournalRecords || st.LastPosition != maxJournalRecords+2 {
		t.Fatalf("no compaction: %d journal records, position %d", st.journalRecords, st.LastPosition)
	}
	// No change: the next increment holds no file.
	inc := mustCapture(t, c, maxJournalRecords+3)
	if inc.Meta.Files != 0 || inc.Meta.Deleted != 0 {
		t.Errorf("an unchanged tree captured %d files, %d deletions", inc.Meta.Files, inc.Meta.Deleted)
	}
}

// A journal that does not check out makes the next capture a full one: the
// sequence still replays to the disk, nothing is lost.
func TestCorruptStateJournalMeansFullCapture(t *testing.T) {
	for _, damage := range []string{"flip", "truncate", "no-base", "foreign-record"} {
		t.Run(damage, func(t *testing.T) {
			c, root := journalScenario(t)
			writeFile(t, filepath.Join(root, "d1/f1"), "one")
			mustCapture(t, c, 1)
			writeFile(t, filepath.Join(root, "d3/f3"), "two")
			mustCapture(t, c, 2)
			jp := filepath.Join(c.dir, journalFile)
			j, err := os.ReadFile(jp)
			if err != nil {
				t.Fatal(err)
			}
			switch damage {
			case "flip":
				j[len(j)-3] ^= 1
			case "truncate":
				j = j[:len(j)-2]
			case "no-base":
				os.Remove(filepath.Join(c.dir, stateFile))
			case "foreign-record":
				j = appendRecord(j, []byte{0x02, 0x01, 0x01, 'x', 0x00})
			}
			if err := os.WriteFile(jp, j, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := c.loadState(); !errors.Is(err, errBadState) {
				t.Fatalf("loadState of a damaged journal: %v, want errBadState", err)
			}
			os.Remove(filepath.Join(root, "d0/f0"))
			inc := mustCapture(t, c, 3)
			if !inc.Meta.Full || inc.Meta.Files != 19 {
				t.Fatalf("capture after a damaged journal: full=%v files=%d, want a full capture of 19 files", inc.Meta.Full, inc.Meta.Files)
			}
			out := t.TempDir()
			var paths []string
			for p := 0; p <= 3; p++ {
				paths = append(paths, c.incrementPath(p))
			}
			if err := Replay(context.Background(), paths, []Root{{Name: "r", Path: out}}); err != nil {
				t.Fatal(err)
			}
			if d := diffTrees(snapshot(t, root, false, nil), snapshot(t, out, false, nil)); d != "" {
				t.Fatalf("replay differs from the disk:\n%s", d)
			}
			// The state is whole again: the next capture is incremental.
			writeFile(t, filepath.Join(root, "d1/f1"), "three")
			if inc := mustCapture(t, c, 4); inc.Meta.Full || inc.Meta.Files != 1 {
				t.Fatalf("capture after recovery: full=%v files=%d", inc.Meta.Full, inc.Meta.Files)
			}
		})
	}
}

// A journal of an older generation, left by a crash between a compaction's
// new base and the journal's removal, is ignored.
func TestStaleJournalIsIgnored(t *testing.T) {
	c, root := journalScenario(t)
	writeFile(t, filepath.Join(root, "d1/f1"), "one")
	mustCapture(t, c, 1)
	jp := filepath.Join(c.dir, journalFile)
	old, err := os.ReadFile(jp)
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.loadState()
	if err != nil {
		t.Fatal(err)
	}
	want := st.Roots[0].Entries
	if err := c.saveState(st); err != nil { // compaction
		t.Fatal(err)
	}
	if err := os.WriteFile(jp, old, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := c.loadState()
	if err != nil {
		t.Fatal(err)
	}
	if !got.journalStale || got.LastPosition != 1 || !reflect.DeepEqual(got.Roots[0].Entries, want) {
		t.Fatalf("stale journal: stale=%v position=%d", got.journalStale, got.LastPosition)
	}
	writeFile(t, filepath.Join(root, "d2/f2"), "two")
	if inc := mustCapture(t, c, 2); inc.Meta.Full || inc.Meta.Files != 1 {
		t.Fatalf("capture over a stale journal: full=%v files=%d", inc.Meta.Full, inc.Meta.Files)
	}
	if st, err := c.loadState(); err != nil || st.journalStale {
		t.Fatalf("the stale journal was not replaced: %v", err)
	}
}

// A rewrite that keeps the size and puts the mtime back (touch -d, or a
// tool preserving times) is still captured: the inode change time moved.
func TestCaptureSeesChangeTime(t *testing.T) {
	c, root := journalScenario(t)
	p := filepath.Join(root, "d1/f1")
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	// Not racy: the capture keeps no content hash to verify later.
	mustCapture(t, c, 1)
	// The same size as "1".
	if err := os.WriteFile(p, []byte("X"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	inc := mustCapture(t, c, 2)
	if inc.Meta.Files != 1 {
		t.Fatalf("a same-size rewrite with its mtime restored captured %d files, want 1", inc.Meta.Files)
	}
}

// FuzzStateJournal feeds arbitrary record payloads, framed with a correct
// length and checksum, to the journal decoder over a fixed base: it must
// refuse or produce a walk-ordered state, never panic.
func FuzzStateJournal(f *testing.F) {
	prev := &captureState{LastPosition: 1, gen: 9, Roots: []*rootState{{Name: "r", Path: "/r", Exists: true, Entries: []entry{
		{Path: "", Type: scan.Dir}, {Path: "a", Type: scan.File, Size: 1}, {Path: "b", Type: scan.Dir}, {Path: "b/c", Type: scan.Symlink, Target: "x"},
	}}}}
	next := &captureState{LastPosition: 2, Roots: []*rootState{{Name: "r", Path: "/r", Exists: true, Entries: []entry{
		{Path: "", Type: scan.Dir}, {Path: "a", Type: scan.File, Size: 2}, {Path: "b", Type: scan.Dir}, {Path: "b/d", Type: scan.File},
	}}}}
	rec, _ := journalRecord(prev, next)
	f.Add(rec)
	f.Add([]byte{})
	baseBytes := prev.encode()
	f.Fuzz(func(t *testing.T, payload []byte) {
		base, err := decodeState(baseBytes)
		if err != nil {
			t.Fatal(err)
		}
		j := append([]byte(journalMagic), 0, 0, 0, 0, 0, 0, 0, 9)
		if err := applyJournal(base, appendRecord(j, payload)); err != nil {
			return
		}
		ents := base.Roots[0].Entries
		for i := 1; i < len(ents); i++ {
			if comparePaths(ents[i-1].Path, ents[i].Path) >= 0 {
				t.Fatalf("entries out of walk order after %x: %q then %q", payload, ents[i-1].Path, ents[i].Path)
			}
		}
	})
}
