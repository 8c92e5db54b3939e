package changelog

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/agentscm/agentscm/internal/scan"
)

// Each capture names the paths its call created, modified and deleted and
// the bytes it changed; the first one is compared with the baseline taken
// when the changelog was enabled, not with an empty tree, and the
// conversation's growth is counted apart.
func TestChangesNameEachCallsPaths(t *testing.T) {
	base := t.TempDir()
	co, tr := filepath.Join(base, "co"), filepath.Join(base, "tr")
	writeFile(t, filepath.Join(co, "README.md"), strings.Repeat("r", 5000))
	writeFile(t, filepath.Join(co, "old/x.txt"), "x")
	writeFile(t, filepath.Join(co, "old/deep/y.txt"), "y")
	writeFile(t, filepath.Join(tr, "s.jsonl"), strings.Repeat("t", 2999)+"\n")
	c, err := Open(filepath.Join(base, "cl"), Options{Roots: []Root{{Name: "checkout", Path: co}, {Name: TranscriptRootName, Path: tr}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.RecordBaseline(context.Background()); err != nil {
		t.Fatal(err)
	}
	appendTo := func(p, s string) {
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(s)
		f.Close()
	}
	type want struct {
		created, modified, deleted string
		bytes, transcript          int64
	}
	check := func(inc *Increment, w want) {
		t.Helper()
		ch := inc.Meta.Changes
		got := want{fmt.Sprint(ch.Created), fmt.Sprint(ch.Modified), fmt.Sprint(ch.Deleted), ch.Bytes, ch.TranscriptBytes}
		if got != w || ch.Baseline {
			t.Fatalf("position %d changes %+v (baseline %v), want %+v", inc.Position, got, ch.Baseline, w)
		}
	}
	// An 11-byte write, the first capture: the whole tree is stored, but
	// only the write is the call's.
	writeFile(t, filepath.Join(co, "new.txt"), "hello world")
	appendTo(filepath.Join(tr, "s.jsonl"), "1234\n") // transcripts are whole lines
	inc := mustCapture(t, c, 0)
	if inc.Meta.Files < 4 {
		t.Fatalf("the first capture stores %d files, want the whole tree", inc.Meta.Files)
	}
	check(inc, want{"[new.txt]", "[]", "[]", 11, 5})
	// A modification, a directory deleted with its contents (named once),
	// and a new directory.
	writeFile(t, filepath.Join(co, "README.md"), "short")
	os.RemoveAll(filepath.Join(co, "old"))
	writeFile(t, filepath.Join(co, "src/a.go"), "package a")
	check(mustCapture(t, c, 1), want{"[src/ src/a.go]", "[README.md]", "[old/]", 14, 0})
	// Past MaxChangePaths, the rest is counted.
	for i := range incmeta.MaxChangePaths + 5 {
		writeFile(t, filepath.Join(co, "many", fmt.Sprintf("f%03d", i)), "z")
	}
	ch := mustCapture(t, c, 2).Meta.Changes
	if len(ch.Created) != incmeta.MaxChangePaths || ch.CreatedOmitted != 6 || ch.Bytes != incmeta.MaxChangePaths+5 {
		t.Fatalf("bounded lists: %d named, %d omitted, %d bytes", len(ch.Created), ch.CreatedOmitted, ch.Bytes)
	}
	// A checkout without a recorded baseline: its first capture says so.
	c2, err := Open(filepath.Join(base, "cl2"), Options{Roots: []Root{{Name: "checkout", Path: co}}})
	if err != nil {
		t.Fatal(err)
	}
	if ch := mustCapture(t, c2, 0).Meta.Changes; !ch.Baseline || len(ch.Created) == 0 {
		t.Fatalf("first capture without a baseline: %+v", ch)
	}
	list, err := c.List()
	if err != nil || len(list) != 3 || list[0].Changes == nil || list[0].Changes.Bytes != 11 {
		t.Fatalf("list %+v %v", list, err)
	}
}

// BenchmarkChangesOf100k: the per-capture pass that names the changed
// paths, over a 100,000-entry root where one file changed.
func BenchmarkChangesOf100k(b *testing.B) {
	old := make([]entry, 0, 100001)
	old = append(old, entry{Path: "", Type: scan.Dir})
	for i := range 100000 {
		old = append(old, entry{Path: fmt.Sprintf("d%03d/f%05d", i/1000, i), Type: scan.File, Size: 100, MTime: 1})
	}
	// Directories first within walk order does not matter here: both
	// sides share the order.
	cur := append([]entry(nil), old...)
	cur[500].MTime = 2
	r := Root{Name: "checkout", Path: "/x"}
	b.ResetTimer()
	for range b.N {
		var l changeList
		l.root(r, true, old, cur, false)
	}
}
