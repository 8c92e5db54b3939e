package hubapply

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/agentscm/agentscm/internal/hub/api"
)

func listOf(work string, seqs map[string][]int) api.IncrementList {
	l := api.IncrementList{WorkID: work}
	// Worktrees in a fixed order: the listing's order names them.
	for _, wt := range []string{"wt-a", "wt-b"} {
		for _, p := range seqs[wt] {
			l.Increments = append(l.Increments, api.IncrementInfo{Position: p, WorktreeID: wt})
		}
	}
	return l
}

func positions(ins []api.IncrementInfo) []int {
	out := []int{}
	for _, in := range ins {
		out = append(out, in.Position)
	}
	return out
}

// TestPlanApply table-tests which increments an apply from the Hub
// downloads, and its refusals, from a Work's listing alone.
func TestPlanApply(t *testing.T) {
	tests := []struct {
		name     string
		list     api.IncrementList
		worktree string
		to       int
		apply    []int
		later    []int
		err      error
		msg      []string // substrings of the refusal
	}{
		{name: "the whole sequence", list: listOf("w1", map[string][]int{"wt-a": {0, 1, 2}}), to: 2,
			apply: []int{0, 1, 2}, later: []int{}},
		{name: "a prefix, the rest kept for the call's result", list: listOf("w1", map[string][]int{"wt-a": {0, 1, 2, 3}}), to: 1,
			apply: []int{0, 1}, later: []int{2, 3}},
		{name: "later increments listed out of order come sorted",
			list: api.IncrementList{WorkID: "w1", Increments: []api.IncrementInfo{{Position: 0}, {Position: 5}, {Position: 3}}}, to: 0,
			apply: []int{0}, later: []int{3, 5}},
		{name: "merged positions before the target leave holes", list: listOf("w1", map[string][]int{"wt-a": {0, 3, 4}}), to: 4,
			apply: []int{0, 3, 4}, later: []int{}},
		{name: "a target merged into a later increment", list: listOf("w1", map[string][]int{"wt-a": {0, 1, 4}}), to: 2,
			err: changelog.ErrNoIncrement, msg: []string{"position 2 has no increment of its own", "increment 4 carries positions 2..4", "--root /r", "apply --to 4"}},
		{name: "beyond the sequence", list: listOf("w1", map[string][]int{"wt-a": {0, 1}}), to: 5,
			err: changelog.ErrNoIncrement, msg: []string{"holds positions 0..1, not all of 0..5"}},
		{name: "an empty Work", list: api.IncrementList{WorkID: "w1"}, to: 0,
			err: changelog.ErrNoIncrement, msg: []string{"holds none, not all of 0..0"}},
		{name: "several checkouts, none named", list: listOf("w1", map[string][]int{"wt-a": {0, 1}, "wt-b": {0}}), to: 0,
			msg: []string{"work w1 holds the changelogs of 2 checkouts: wt-a (positions 0..1), wt-b (positions 0..0); pass --worktree ID"}},
		{name: "several checkouts, one named", list: listOf("w1", map[string][]int{"wt-a": {0, 1}, "wt-b": {0, 1, 2}}), worktree: "wt-b", to: 1,
			apply: []int{0, 1}, later: []int{2}},
		{name: "a worktree the Work does not hold", list: listOf("w1", map[string][]int{"wt-a": {0}}), worktree: "wt-x", to: 0,
			err: changelog.ErrNoIncrement, msg: []string{"holds none"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := PlanApply(tc.list, Request{Work: "w1", Worktree: tc.worktree, To: tc.to, Root: "/r"})
			if tc.msg != nil {
				if err == nil {
					t.Fatalf("plan %+v, want a refusal", p)
				}
				if tc.err != nil && !errors.Is(err, tc.err) {
					t.Errorf("error %v, want %v", err, tc.err)
				}
				var amb *AmbiguousWorktreeError
				if tc.err == nil && !errors.As(err, &amb) {
					t.Errorf("error %T %v, want *AmbiguousWorktreeError", err, err)
				}
				for _, m := range tc.msg {
					if !strings.Contains(err.Error(), m) {
						t.Errorf("error %q lacks %q", err, m)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Work != "w1" || p.To != tc.to {
				t.Errorf("plan of work %s to %d", p.Work, p.To)
			}
			if got := positions(p.Apply); !reflect.DeepEqual(got, tc.apply) {
				t.Errorf("apply %v, want %v", got, tc.apply)
			}
			if got := positions(p.Later); !reflect.DeepEqual(got, tc.later) {
				t.Errorf("later %v, want %v", got, tc.later)
			}
		})
	}
}

func TestResultOf(t *testing.T) {
	p := &Plan{Work: "w1", To: 3, Later: make([]api.IncrementInfo, 2)}
	tests := []struct {
		name  string
		later *changelog.LaterTranscript
		err   error
		want  Result
		note  string
	}{
		{name: "found", later: &changelog.LaterTranscript{Position: 5, Data: []byte("x"), HoldsResult: true},
			want: Result{Pre: []byte("x"), FromPosition: 5}},
		{name: "only the call", later: &changelog.LaterTranscript{Position: 4, Data: []byte("y")},
			want: Result{Pre: []byte("y")}, note: "resumes after the call, without its result (the call from position 4)"},
		{name: "none stores it", note: "no later increment of work w1 stores call 3's result (2 after it on the Hub, at most 32 read"},
		{name: "unreadable", err: errors.New("boom"), note: "call 3's result could not be read from the later increments of work w1 (boom)"},
	}
	for _, tc := range tests {
		got := resultOf(p, tc.later, tc.err)
		if !strings.Contains(got.Note, tc.note) || (tc.note == "") != (got.Note == "") {
			t.Errorf("%s: note %q, want %q", tc.name, got.Note, tc.note)
		}
		if !reflect.DeepEqual(got.Pre, tc.want.Pre) || got.FromPosition != tc.want.FromPosition || got.Err != tc.err {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestConversationNote(t *testing.T) {
	tr := incmeta.Meta{Roots: []incmeta.Root{{Name: "checkout"}, {Name: changelog.TranscriptRootName}}}
	tests := []struct {
		name string
		m    incmeta.Meta
		want string
	}{
		{name: "shared", m: tr},
		{name: "withheld", m: incmeta.Meta{Conversation: incmeta.ConvWithheld, ConversationMode: "private"}, want: "was in private mode"},
		{name: "withheld, mode unknown", m: incmeta.Meta{Conversation: incmeta.ConvWithheld}, want: "was in metadata-only mode"},
		{name: "no conversation root", m: incmeta.Meta{Roots: []incmeta.Root{{Name: "checkout"}}}, want: "hold no conversation"},
	}
	for _, tc := range tests {
		got := ConversationNote(&tc.m)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
