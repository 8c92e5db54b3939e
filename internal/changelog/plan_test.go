package changelog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
)

func TestPlanOutside(t *testing.T) {
	roots := []string{"checkout", "extra"}
	ch := func(created, modified, deleted []string) *incmeta.Changes {
		return &incmeta.Changes{Created: created, Modified: modified, Deleted: deleted}
	}
	for _, tc := range []struct {
		name  string
		later []laterIncrement
		want  []string // "root:rel how @pos"
	}{
		{name: "none", want: nil},
		{name: "outside work alone", later: []laterIncrement{
			{Position: 2, Kind: KindOutside, Changes: ch([]string{"mine.txt"}, []string{"a.txt"}, []string{"gone.txt"})},
		}, want: []string{"checkout:a.txt modified @2", "checkout:gone.txt deleted @2", "checkout:mine.txt created @2"}},
		{name: "a later call rewrote it", later: []laterIncrement{
			{Position: 2, Kind: KindOutside, Changes: ch(nil, []string{"a.txt", "b.txt"}, nil)},
			{Position: 3, Kind: KindCall, Changes: ch(nil, []string{"a.txt"}, nil)},
		}, want: []string{"checkout:b.txt modified @2"}},
		{name: "outside work after a call", later: []laterIncrement{
			{Position: 2, Kind: KindCall, Changes: ch([]string{"a.txt"}, nil, nil)},
			{Position: 3, Kind: KindOutside, Changes: ch(nil, []string{"a.txt"}, nil)},
		}, want: []string{"checkout:a.txt modified @3"}},
		{name: "a call deleted the directory", later: []laterIncrement{
			{Position: 2, Kind: KindOutside, Changes: ch([]string{"d/", "d/x", "e/y"}, nil, nil)},
			{Position: 3, Kind: KindCall, Changes: ch(nil, nil, []string{"d/"})},
		}, want: []string{"checkout:e/y created @2"}},
		{name: "another root", later: []laterIncrement{
			{Position: 4, Kind: KindOutside, Changes: ch([]string{"extra:n.txt", "extra:/"}, nil, nil)},
		}, want: []string{"extra:n.txt created @4"}},
		{name: "a colon in a checkout path", later: []laterIncrement{
			{Position: 4, Kind: KindOutside, Changes: ch([]string{"notes:today.txt"}, nil, nil)},
		}, want: []string{"checkout:notes:today.txt created @4"}},
		{name: "a rewind's increments are not outside work", later: []laterIncrement{
			{Position: 4, Kind: KindPreApply, Changes: ch([]string{"u.txt"}, nil, nil)},
			{Position: 5, Kind: KindApply, Changes: ch(nil, nil, []string{"u.txt"})},
		}},
		{name: "unnamed paths", later: []laterIncrement{
			{Position: 2, Kind: KindOutside, Changes: &incmeta.Changes{Created: []string{"a"}, CreatedOmitted: 3}},
		}, want: []string{"checkout:a created @2", ": unnamed @2"}},
		{name: "old increments without changes", later: []laterIncrement{{Position: 2, Kind: KindCall}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, p := range planOutside(tc.later, roots) {
				if p.Unnamed {
					got = append(got, fmt.Sprintf("%s:%s unnamed @%d", p.Root, p.Rel, p.Position))
					continue
				}
				got = append(got, fmt.Sprintf("%s:%s %s @%d", p.Root, p.Rel, p.How, p.Position))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// A rewind over outside work recorded after its target refuses and lists
// it; DiscardOutsideEdits goes ahead and its undo brings the work back.
func TestApplyRefusesOverOutsideWork(t *testing.T) {
	s := newScenario(t)
	ctx := context.Background()
	at := func(rel string) string { return filepath.Join(s.checkout, rel) }
	writeFile(t, at("agent.txt"), "call 0\n")
	mustCapture(t, s.c, -1) // 0
	// The user, between calls: edits the agent's file, adds one.
	writeFile(t, at("agent.txt"), "the user's edit\n")
	writeFile(t, at("mine.txt"), "mine\n")
	if inc, err := s.c.CaptureOutside(ctx, CaptureRequest{Position: -1, Outside: &incmeta.Outside{Event: "PreToolUse"}}); err != nil || inc == nil || inc.Position != 1 {
		t.Fatalf("outside capture: %+v %v", inc, err)
	}
	writeFile(t, at("two.txt"), "call 2\n")
	mustCapture(t, s.c, -1) // 2
	before := snapshot(t, s.checkout, true, s.skip)

	_, err := s.c.Apply(ctx, ApplyRequest{To: 0})
	var ce *ChangedError
	if !errors.As(err, &ce) || !errors.Is(err, ErrOutsideWork) || errors.Is(err, ErrChangedSinceCapture) {
		t.Fatalf("rewind over outside work: %v", err)
	}
	var got []string
	for _, p := range ce.Outside {
		got = append(got, fmt.Sprintf("%s %s>%s @%d", p.Path, p.Since, p.Change, *p.OutsideAt))
	}
	if want := []string{"agent.txt modified>modified @1", "mine.txt created>deleted @1"}; !slices.Equal(got, want) {
		t.Fatalf("refusal lists %q, want %q", got, want)
	}
	if d := diffTrees(before, snapshot(t, s.checkout, true, s.skip)); d != "" {
		t.Fatalf("the refused rewind changed the checkout:\n%s", d)
	}
	// A rewind to the outside position itself changes no outside work.
	if res, err := s.c.Apply(ctx, ApplyRequest{To: 1, DryRun: true}); err != nil || len(res.Outside) != 0 {
		t.Fatalf("dry run to the outside position: %+v %v", res, err)
	}
	dry, err := s.c.Apply(ctx, ApplyRequest{To: 0, DryRun: true})
	if err != nil || len(dry.Outside) != 2 {
		t.Fatalf("dry run: %+v %v", dry, err)
	}
	res, err := s.c.Apply(ctx, ApplyRequest{To: 0, DiscardOutsideEdits: true})
	if err != nil || len(res.Outside) != 2 {
		t.Fatalf("discarding rewind: %+v %v", res, err)
	}
	if b, _ := os.ReadFile(at("agent.txt")); string(b) != "call 0\n" {
		t.Fatalf("after the rewind agent.txt holds %q", b)
	}
	if _, err := s.c.Apply(ctx, ApplyRequest{To: res.PreApply.Position}); err != nil {
		t.Fatal(err)
	}
	if d := diffTrees(before, snapshot(t, s.checkout, true, s.skip)); d != "" {
		t.Fatalf("the undo did not restore the outside work:\n%s", d)
	}
}
