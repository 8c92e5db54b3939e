package capsule

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A command that makes names that are not valid UTF-8 still ends in a
// sealed capsule that records them byte-exact, classifies them like any
// other path, verifies, and rolls back (seed 001: the evidence is kept
// whatever the command does).
func TestNonUTF8NamesKeepTheEvidence(t *testing.T) {
	root := project(t)
	bad := "bad\xffname"
	write(t, filepath.Join(root, "old\xfe.txt"), "before\n") // in the base manifest
	out := runIn(t, root, allowAll(), 0, `rm a.txt; touch "$(printf 'bad\377name')"; echo after > "$(printf 'old\376.txt')"`)
	if out.res.Status != StatusPassed && out.res.Status != StatusReview {
		t.Fatalf("status %s: %+v", out.res.Status, out.res)
	}
	got := map[string]string{}
	for _, c := range out.res.Changes {
		got[c.Path] = c.Change
	}
	if got[bad] != Created || got["old\xfe.txt"] != Modified || got["a.txt"] != Deleted {
		t.Fatalf("changes %v", got)
	}
	verifyOK(t, out.dir)
	// result.json holds the raw bytes beside the display form.
	b, err := os.ReadFile(filepath.Join(out.dir, FileResult))
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Changes []struct {
			Path    string `json:"path"`
			PathRaw []byte `json:"path_raw"`
		} `json:"changes"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(raw.Changes, func(c struct {
		Path    string `json:"path"`
		PathRaw []byte `json:"path_raw"`
	}) bool {
		return string(c.PathRaw) == bad && c.Path == "bad\uFFFDname"
	}) {
		t.Fatalf("result.json changes %s", b)
	}
	id := filepath.Base(out.dir)
	att, _, err := Rollback(context.Background(), root, id, RollbackOptions{})
	if err != nil || att.Status != RollbackComplete {
		t.Fatalf("rollback %+v %v", att, err)
	}
	if _, err := os.Lstat(filepath.Join(root, bad)); !os.IsNotExist(err) {
		t.Fatalf("created %q still there: %v", bad, err)
	}
	if read(t, filepath.Join(root, "old\xfe.txt")) != "before\n" || read(t, filepath.Join(root, "a.txt")) != "alpha\n" {
		t.Fatal("before-state not restored")
	}
	verifyOK(t, out.dir)
	// The next run works on the same tree.
	if next := runIn(t, root, allowAll(), 0, "true"); next.res.Status != StatusPassed {
		t.Fatalf("next run %s", next.res.Status)
	}
}

// A raw name must display as the path it stands for: one that would rename
// a path is refused.
func TestRawNamesMustMatchTheirDisplay(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    Manifest
		ok   bool
	}{
		{"matching", Manifest{Changes: []ManifestEntry{{Path: "a\uFFFD"}}, RawNames: []RawName{{Field: "changes.path", Index: 0, Bytes: []byte("a\xff")}}}, true},
		{"renames", Manifest{Changes: []ManifestEntry{{Path: "a\uFFFD"}}, RawNames: []RawName{{Field: "changes.path", Index: 0, Bytes: []byte("b\xff")}}}, false},
		{"valid bytes", Manifest{Changes: []ManifestEntry{{Path: "a"}}, RawNames: []RawName{{Field: "changes.path", Index: 0, Bytes: []byte("a")}}}, false},
		{"out of range", Manifest{Removed: []string{"x"}, RawNames: []RawName{{Field: "removed", Index: 1, Bytes: []byte("\xff")}}}, false},
		{"unknown field", Manifest{Removed: []string{"\uFFFD"}, RawNames: []RawName{{Field: "entries", Index: 0, Bytes: []byte("\xff")}}}, false},
	} {
		err := tc.m.applyRawNames()
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	if QuoteName("ok.txt") != "ok.txt" || !strings.Contains(QuoteName("bad\xff"), `\xff`) {
		t.Fatal("QuoteName")
	}
}
