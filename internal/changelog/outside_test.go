package changelog

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
)

// Work done between tool calls is its own outside increment, never the next
// call's; a change of the conversation roots alone stores nothing.
func TestCaptureOutsideKeepsOutsideWorkApart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		between func(t *testing.T, s *scenario)
		// outside lists the paths the outside increment names (nil: none
		// is stored); call the paths the next call's increment names.
		outside []string
		call    []string
	}{
		{name: "nothing changed", between: func(*testing.T, *scenario) {}, call: []string{"agent.txt"}},
		{name: "only the transcript grew", between: func(t *testing.T, s *scenario) {
			appendFile(t, filepath.Join(s.trans, "s1.jsonl"), "{\"more\":1}\n")
		}, call: []string{"agent.txt"}},
		{name: "the user edits and creates", between: func(t *testing.T, s *scenario) {
			writeFile(t, filepath.Join(s.checkout, "README"), "the user's edit\n")
			writeFile(t, filepath.Join(s.checkout, "mine.txt"), "mine\n")
		}, outside: []string{"README", "mine.txt"}, call: []string{"agent.txt"}},
		{name: "the user deletes", between: func(t *testing.T, s *scenario) {
			os.Remove(filepath.Join(s.checkout, "README"))
		}, outside: []string{"README"}, call: []string{"agent.txt"}},
		{name: "an ignored file changes", between: func(t *testing.T, s *scenario) {
			writeFile(t, filepath.Join(s.checkout, "run.log"), "log\n")
		}, call: []string{"agent.txt"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t)
			s.roots[1].Name = TranscriptRootName // a conversation root
			c, err := Open(filepath.Join(s.base, "changelog2"), Options{Roots: s.roots})
			if err != nil {
				t.Fatal(err)
			}
			s.c = c
			mustCapture(t, s.c, -1)
			tc.between(t, s)
			out, err := s.c.CaptureOutside(context.Background(), CaptureRequest{Position: -1, SessionID: "s1",
				Outside: &incmeta.Outside{Event: "PreToolUse", BeforeToolUseID: "toolu_2", BeforeTool: "Write"}})
			if err != nil {
				t.Fatal(err)
			}
			if (out != nil) != (tc.outside != nil) {
				t.Fatalf("outside increment %+v, want paths %v", out, tc.outside)
			}
			if out != nil {
				m := out.Meta
				if m.Kind != KindOutside || m.Position != 1 || m.Outside == nil || m.Outside.BeforeToolUseID != "toolu_2" || m.ToolUseID != "" {
					t.Fatalf("outside increment meta %+v", m)
				}
				if got := changedPaths(m.Changes); !slices.Equal(got, tc.outside) {
					t.Errorf("outside increment names %v, want %v", got, tc.outside)
				}
			}
			writeFile(t, filepath.Join(s.checkout, "agent.txt"), "the agent's\n")
			call := mustCapture(t, s.c, -1)
			if got := changedPaths(call.Meta.Changes); !slices.Equal(got, tc.call) {
				t.Errorf("the call's increment names %v, want %v", got, tc.call)
			}
			list, err := s.c.List()
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for _, in := range list {
				kinds = append(kinds, in.Kind)
			}
			want := []string{KindCall, KindCall}
			if tc.outside != nil {
				want = []string{KindCall, KindOutside, KindCall}
			}
			if !slices.Equal(kinds, want) {
				t.Errorf("kinds %v, want %v", kinds, want)
			}
		})
	}
}

func changedPaths(ch *incmeta.Changes) []string {
	if ch == nil {
		return nil
	}
	out := append(append(append([]string{}, ch.Created...), ch.Modified...), ch.Deleted...)
	slices.Sort(out)
	return out
}

// A call whose increment could not be stored keeps its position: the next
// increment takes the one after it, carries its writes and says which
// positions it holds.
func TestFailedStoreKeepsItsPosition(t *testing.T) {
	for _, tc := range []struct {
		name string
		fast bool
	}{{"fast path", true}, {"full path", false}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t)
			s.c.forceFull = !tc.fast
			mustCapture(t, s.c, -1)
			writeFile(t, filepath.Join(s.checkout, "one.txt"), "1\n")
			s.c.opts.Failpoint = "store:1"
			_, err := s.c.Capture(context.Background(), CaptureRequest{Position: -1, SessionID: "s1", Tool: "Write"})
			var he *HoleError
			if !errors.As(err, &he) || he.Position != 1 || !errors.Is(err, errFailpoint) {
				t.Fatalf("failed store: %v", err)
			}
			s.c.opts.Failpoint = ""
			// The lost call's writes cannot be told from outside work: the
			// outside capture before the next call stores nothing.
			if out, err := s.c.CaptureOutside(context.Background(), CaptureRequest{Position: -1, Outside: &incmeta.Outside{Event: "PreToolUse"}}); err != nil || out != nil {
				t.Fatalf("outside capture after a lost call: %+v %v", out, err)
			}
			writeFile(t, filepath.Join(s.checkout, "two.txt"), "2\n")
			inc := mustCapture(t, s.c, -1)
			if inc.Position != 2 {
				t.Fatalf("the call after the failed one took position %d, want 2", inc.Position)
			}
			if len(inc.Meta.Holds) != 1 || inc.Meta.Holds[0].Position != 1 || inc.Meta.Holds[0].Tool != "Write" || inc.Meta.Holds[0].Kind != KindCall {
				t.Fatalf("holds %+v, want position 1", inc.Meta.Holds)
			}
			if got := changedPaths(inc.Meta.Changes); !slices.Equal(got, []string{"one.txt", "two.txt"}) {
				t.Errorf("increment 2 names %v, want both calls' writes", got)
			}
			next := mustCapture(t, s.c, -1)
			if next.Position != 3 || len(next.Meta.Holds) != 0 {
				t.Fatalf("the next increment: position %d holds %+v", next.Position, next.Meta.Holds)
			}
			// A rewind's undo point never takes a lost call's number.
			s.c.opts.Failpoint = "store:4"
			writeFile(t, filepath.Join(s.checkout, "four.txt"), "4\n")
			if _, err := s.c.Capture(context.Background(), CaptureRequest{Position: -1, Tool: "Bash"}); !errors.As(err, &he) || he.Position != 4 {
				t.Fatalf("failed store 4: %v", err)
			}
			s.c.opts.Failpoint = ""
			res, err := s.c.Apply(context.Background(), ApplyRequest{To: 3, Force: true}) // four.txt is uncaptured
			if err != nil {
				t.Fatal(err)
			}
			if res.PreApply.Position != 5 || len(res.PreApply.Meta.Holds) != 1 || res.PreApply.Meta.Holds[0].Position != 4 || res.Result.Position != 6 {
				t.Fatalf("undo point %d holds %+v, result %d", res.PreApply.Position, res.PreApply.Meta.Holds, res.Result.Position)
			}
			// A rewind to the lost position says where its writes are.
			_, err = s.c.Apply(context.Background(), ApplyRequest{To: 1})
			if !errors.Is(err, ErrNoIncrement) {
				t.Fatalf("rewind to the lost position: %v", err)
			}
		})
	}
}

// The hook stores outside work before a tool call and before a prompt,
// and nothing when nothing changed.
func TestHookCapturesOutsideWork(t *testing.T) {
	for _, tc := range []struct {
		event string
		want  string // "" none
	}{{"PreToolUse", KindOutside}, {"UserPromptSubmit", KindOutside}} {
		t.Run(tc.event, func(t *testing.T) {
			cfg, root, _ := hookFixture(t)
			os.WriteFile(filepath.Join(root, "a"), []byte("agent"), 0o644)
			if _, err := runHook(t, cfg, root, "PostToolUse", "s1"); err != nil {
				t.Fatal(err)
			}
			if r, err := runHook(t, cfg, root, tc.event, "s1"); err != nil || r.Increment != nil {
				t.Fatalf("nothing changed: %+v %v", r, err)
			}
			os.WriteFile(filepath.Join(root, "a"), []byte("the user's"), 0o644)
			r, err := runHook(t, cfg, root, tc.event, "s1")
			if err != nil || r.Increment == nil || r.Increment.Meta.Kind != tc.want || r.Increment.Meta.Outside.Event != tc.event {
				t.Fatalf("after the user's edit: %+v %v", r, err)
			}
			if tc.event == "PreToolUse" && r.Increment.Meta.Outside.BeforeToolUseID != "toolu_x" {
				t.Errorf("outside %+v", r.Increment.Meta.Outside)
			}
		})
	}
}
