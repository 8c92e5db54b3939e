package changelog

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// changedBetween lists, as "root:path change", what differs between two
// descriptions of the roots (without times: a rewrite of equal content
// is no change).
func changedBetween(before, after map[string]tree) []string {
	var out []string
	for root, b := range before {
		a := after[root]
		for p, v := range b {
			w, ok := a[p]
			switch {
			case !ok:
				out = append(out, root+":"+p+" "+ChangeDeleted)
			case w != v && !(strings.HasPrefix(v, "dir") && strings.HasPrefix(w, "dir")):
				out = append(out, root+":"+p+" "+ChangeModified)
			}
		}
		for p := range a {
			if _, ok := b[p]; !ok {
				out = append(out, root+":"+p+" "+ChangeCreated)
			}
		}
	}
	slices.Sort(out)
	return out
}

// The dry run lists each path once, with the change the rewind then makes,
// transcripts included (a rewind only adds to or extends a conversation,
// and cuts the rewound session's transcript); so does the dry run of the
// undo.
func TestDryRunMatchesTheRewind(t *testing.T) {
	s := newScenario(t)
	s.roots[1].Name = TranscriptRootName
	c, err := Open(filepath.Join(s.base, "cl2"), Options{Roots: s.roots})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	at := func(rel string) string { return filepath.Join(s.checkout, rel) }
	tr := func(rel string) string { return filepath.Join(s.trans, rel) }
	session := func(n int) {
		appendFile(t, tr("s1.jsonl"), fmt.Sprintf("{\"call\":%d}\n", n))
	}
	writeFile(t, at("a.txt"), "a0\n")
	session(0)
	if _, err := c.Capture(ctx, CaptureRequest{Position: -1, SessionID: "s1", Tool: "Write"}); err != nil {
		t.Fatal(err)
	}
	writeFile(t, at("b.txt"), "b1\n")
	writeFile(t, at("a.txt"), "a1\n")
	session(1)
	writeFile(t, tr("s2.jsonl"), "{\"other\":1}\n") // another session, started later
	if _, err := c.Capture(ctx, CaptureRequest{Position: -1, SessionID: "s1", Tool: "Write"}); err != nil {
		t.Fatal(err)
	}
	session(2) // the host's result line, after the capture
	roots := func() map[string]tree {
		return map[string]tree{"checkout": snapshot(t, s.checkout, false, s.skip), TranscriptRootName: snapshot(t, s.trans, false, nil)}
	}
	check := func(what string, to int) *ApplyResult {
		t.Helper()
		dry, err := c.Apply(ctx, ApplyRequest{To: to, DryRun: true, Force: true})
		if err != nil {
			t.Fatal(err)
		}
		var planned []string
		for _, e := range dry.Effects {
			planned = append(planned, e.Root+":"+e.Path+" "+e.Change)
		}
		slices.Sort(planned)
		seen := map[string]bool{}
		for _, e := range dry.Effects {
			if seen[e.Root+":"+e.Path] {
				t.Errorf("%s: the dry run lists %s:%s twice: %q", what, e.Root, e.Path, planned)
			}
			seen[e.Root+":"+e.Path] = true
		}
		before := roots()
		res, err := c.Apply(ctx, ApplyRequest{To: to, Force: true})
		if err != nil {
			t.Fatal(err)
		}
		if done := changedBetween(before, roots()); !slices.Equal(done, planned) {
			t.Errorf("%s: the dry run planned %q\nthe rewind did     %q", what, planned, done)
		}
		return res
	}
	res := check("rewind to 0", 0)
	if b, _ := os.ReadFile(tr("s1.jsonl")); string(b) != "{}\n{\"call\":0}\n" {
		t.Fatalf("the rewound session's transcript holds %q", b)
	}
	check("its undo", res.PreApply.Position)
}

// A symlink whose target lies outside every capture root is restored as a
// link, but what it points to is not: the dry run and the rewind both list
// it; links inside the roots are not listed.
func TestRewindListsWhatItCannotRestore(t *testing.T) {
	s := newScenario(t)
	ctx := context.Background()
	outside := filepath.Join(s.base, "shared.conf")
	writeFile(t, outside, "v0\n")
	if err := os.Symlink(outside, filepath.Join(s.checkout, "conf")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("README", filepath.Join(s.checkout, "readme-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../elsewhere", filepath.Join(s.checkout, "up")); err != nil {
		t.Fatal(err)
	}
	mustCapture(t, s.c, -1)
	writeFile(t, outside, "v1, written through the link\n")
	writeFile(t, filepath.Join(s.checkout, "a.txt"), "a\n")
	mustCapture(t, s.c, -1)
	for _, dry := range []bool{true, false} {
		res, err := s.c.Apply(ctx, ApplyRequest{To: 0, DryRun: dry})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, u := range res.Unrestorable {
			got = append(got, u.Root+":"+u.Path)
		}
		if want := []string{"checkout:conf", "checkout:up"}; !slices.Equal(got, want) {
			t.Errorf("dry=%v: unrestorable %q, want %q", dry, got, want)
		}
	}
}
