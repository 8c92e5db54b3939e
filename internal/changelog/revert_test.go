package changelog

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestPlanRevert(t *testing.T) {
	p := func(rel, before, after, current string, same bool, children ...string) RevertPath {
		return RevertPath{Root: "checkout", Rel: rel, Before: before, After: after, Current: current, CurrentIsAfter: same, Children: children, ParentCurrent: "dir"}
	}
	for _, tc := range []struct {
		name      string
		in        []RevertPath
		actions   []string // "change kind path"
		conflicts []string // "path: reason"
	}{
		{name: "a modified file, untouched since", in: []RevertPath{p("a.txt", "file", "file", "file", true)},
			actions: []string{"modified file a.txt"}},
		{name: "a modified file, edited later", in: []RevertPath{p("a.txt", "file", "file", "file", false)},
			conflicts: []string{"a.txt: changed after the call (the call left it a file, it is a file now)"}},
		{name: "a created file", in: []RevertPath{p("new.txt", "gone", "file", "file", true)},
			actions: []string{"deleted file new.txt"}},
		{name: "a created file deleted later", in: []RevertPath{p("new.txt", "gone", "file", "gone", false)},
			conflicts: []string{"new.txt: changed after the call (the call left it a file, it is deleted now)"}},
		{name: "a deleted file, still gone", in: []RevertPath{p("old.txt", "file", "gone", "gone", true)},
			actions: []string{"created file old.txt"}},
		{name: "a deleted file, recreated later", in: []RevertPath{p("old.txt", "file", "gone", "file", false)},
			conflicts: []string{"old.txt: changed after the call (the call left it deleted, it is a file now)"}},
		{name: "a created directory with only the call's files", in: []RevertPath{
			p("d", "gone", "dir", "dir", true, "d/x"), p("d/x", "gone", "file", "file", true)},
			actions: []string{"deleted dir d", "deleted file d/x"}},
		{name: "a created directory holding later work", in: []RevertPath{
			p("d", "gone", "dir", "dir", true, "d/later.txt", "d/x"), p("d/x", "gone", "file", "file", true)},
			actions:   []string{"deleted file d/x"},
			conflicts: []string{"d: it holds d/later.txt, which the revert does not remove"}},
		{name: "a created directory whose file was edited later", in: []RevertPath{
			p("d", "gone", "dir", "dir", true, "d/x"), p("d/x", "gone", "file", "file", false)},
			conflicts: []string{"d: it holds d/x, which the revert does not remove", "d/x: changed after the call (the call left it a file, it is a file now)"}},
		{name: "a deleted directory comes back with its files", in: []RevertPath{
			p("d", "dir", "gone", "gone", true), p("d/x", "file", "gone", "gone", true)},
			actions: []string{"created dir d", "created file d/x"}},
		{name: "a deleted directory replaced by a file later", in: []RevertPath{
			p("d", "dir", "gone", "file", false), p("d/x", "file", "gone", "gone", true)},
			conflicts: []string{"d: changed after the call (the call left it deleted, it is a file now)", "d/x: its directory d is not restored"}},
		{name: "a deleted file whose directory a later call removed", in: []RevertPath{
			{Root: "checkout", Rel: "e/y", Before: "file", After: "gone", Current: "gone", CurrentIsAfter: true, ParentCurrent: "gone"}},
			conflicts: []string{"e/y: its directory e is not restored"}},
		{name: "a file the call turned into a directory", in: []RevertPath{
			p("f", "file", "dir", "dir", true, "f/in"), p("f/in", "gone", "file", "file", true)},
			actions: []string{"modified file f", "deleted file f/in"}},
		{name: "a symlink retargeted", in: []RevertPath{p("l", "symlink", "symlink", "symlink", true)},
			actions: []string{"modified symlink l"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			actions, conflicts := planRevert(tc.in)
			var ga, gc []string
			for _, a := range actions {
				ga = append(ga, fmt.Sprintf("%s %s %s", a.Change, a.Kind, a.Path))
			}
			for _, c := range conflicts {
				gc = append(gc, c.Path+": "+c.Reason)
			}
			if !slices.Equal(ga, tc.actions) || !slices.Equal(gc, tc.conflicts) {
				t.Errorf("actions %q conflicts %q\nwant    %q conflicts %q", ga, gc, tc.actions, tc.conflicts)
			}
		})
	}
}

// Revert undoes one call alone: its paths untouched since go back, later
// calls' and the user's work stays, conflicts are listed and left alone,
// and the undo point brings the state before the revert back.
func TestRevertOneCall(t *testing.T) {
	s := newScenario(t)
	ctx := context.Background()
	at := func(rel string) string { return filepath.Join(s.checkout, rel) }
	read := func(rel string) string {
		b, err := os.ReadFile(at(rel))
		if err != nil {
			return "<gone>"
		}
		return string(b)
	}
	writeFile(t, at("a.txt"), "a0\n")
	writeFile(t, at("b.txt"), "b0\n")
	writeFile(t, at("gone.txt"), "g0\n")
	mustCapture(t, s.c, -1) // 0
	// Call 1: edits a and b, creates c and d/x, deletes gone.txt.
	writeFile(t, at("a.txt"), "a1\n")
	writeFile(t, at("b.txt"), "b1\n")
	writeFile(t, at("c.txt"), "c1\n")
	writeFile(t, at("d/x"), "x1\n")
	os.Remove(at("gone.txt"))
	mustCapture(t, s.c, -1) // 1
	// Call 2 edits b again and adds a file in d.
	writeFile(t, at("b.txt"), "b2\n")
	writeFile(t, at("d/later"), "l2\n")
	mustCapture(t, s.c, -1) // 2
	// The user edits c, uncaptured.
	writeFile(t, at("c.txt"), "the user's\n")
	before := snapshot(t, s.checkout, true, s.skip)

	dry, err := s.c.Revert(ctx, RevertRequest{Call: 1, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	var acts, confs []string
	for _, a := range dry.Reverted {
		acts = append(acts, a.Change+" "+a.Path)
	}
	for _, c := range dry.Conflicts {
		confs = append(confs, c.Path)
	}
	if want := []string{"modified a.txt", "deleted d/x", "created gone.txt"}; !slices.Equal(acts, want) {
		t.Errorf("dry run actions %q, want %q", acts, want)
	}
	if want := []string{"b.txt", "c.txt", "d"}; !slices.Equal(confs, want) {
		t.Errorf("dry run conflicts %q, want %q", confs, want)
	}
	if d := diffTrees(before, snapshot(t, s.checkout, true, s.skip)); d != "" {
		t.Fatalf("the dry run changed the checkout:\n%s", d)
	}
	res, err := s.c.Revert(ctx, RevertRequest{Call: 1})
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(read("a.txt"), read("b.txt"), read("c.txt"), read("d/x"), read("d/later"), read("gone.txt"))
	if want := fmt.Sprint("a0\n", "b2\n", "the user's\n", "<gone>", "l2\n", "g0\n"); got != want {
		t.Fatalf("after the revert: %q, want %q", got, want)
	}
	if res.Result == nil || res.Result.Meta.Kind != KindRevert || res.Result.Meta.Reverted == nil || *res.Result.Meta.Reverted != 1 {
		t.Fatalf("revert increment %+v", res.Result)
	}
	if _, err := s.c.Apply(ctx, ApplyRequest{To: res.PreApply.Position}); err != nil {
		t.Fatal(err)
	}
	if d := diffTrees(before, snapshot(t, s.checkout, true, s.skip)); d != "" {
		t.Fatalf("the undo of the revert:\n%s", d)
	}
	if _, err := s.c.Revert(ctx, RevertRequest{Call: res.PreApply.Position}); err == nil {
		t.Fatal("reverting a pre-apply position was not refused")
	}
}
