package changelog

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// A path the changelog captured stays captured after an ignore rule starts
// matching it, so a rewind restores it exactly (and so does its undo).
func TestCapturedPathStaysCapturedOnceIgnored(t *testing.T) {
	for _, tc := range []struct {
		name   string
		path   string // what call 0 writes and call 2 rewrites
		ignore string // the rule call 1 adds
		fresh  string // a new file call 2 adds below an ignored directory ("" none)
	}{
		{name: "file", path: "cfg.txt", ignore: "cfg.txt"},
		{name: "pattern", path: "cfg.txt", ignore: "*.txt"},
		{name: "directory", path: "conf/cfg.txt", ignore: "conf/", fresh: "conf/new.tmp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, full := range []bool{false, true} {
				s := newScenario(t)
				s.c.forceFull = full
				ctx := context.Background()
				p := filepath.Join(s.checkout, tc.path)
				writeFile(t, p, "call 0\n")
				mustCapture(t, s.c, -1)
				gi := filepath.Join(s.checkout, ".gitignore")
				appendFile(t, gi, tc.ignore+"\n")
				mustCapture(t, s.c, -1)
				writeFile(t, p, "call 2, longer\n")
				if tc.fresh != "" {
					writeFile(t, filepath.Join(s.checkout, tc.fresh), "ignored and new\n")
				}
				inc := mustCapture(t, s.c, -1)
				if got := changedPaths(inc.Meta.Changes); !slices.Contains(got, tc.path) {
					t.Fatalf("full=%v: call 2's increment names %v, not %s", full, got, tc.path)
				}
				if tc.fresh != "" && slices.Contains(changedPaths(inc.Meta.Changes), tc.fresh) {
					t.Fatalf("full=%v: the new ignored file %s was captured", full, tc.fresh)
				}
				dry, err := s.c.Apply(ctx, ApplyRequest{To: 0, DryRun: true})
				if err != nil {
					t.Fatal(err)
				}
				var planned []string
				for _, e := range dry.Effects {
					planned = append(planned, e.Change+" "+e.Path)
				}
				if !slices.Contains(planned, "modified "+tc.path) || !slices.Contains(planned, "modified .gitignore") {
					t.Fatalf("full=%v: the dry run lists %v", full, planned)
				}
				res, err := s.c.Apply(ctx, ApplyRequest{To: 0})
				if err != nil {
					t.Fatal(err)
				}
				if b, _ := os.ReadFile(p); string(b) != "call 0\n" {
					t.Fatalf("full=%v: after the rewind %s holds %q", full, tc.path, b)
				}
				if b, _ := os.ReadFile(gi); string(b) != "build/\n*.log\n" {
					t.Fatalf("full=%v: after the rewind .gitignore holds %q", full, b)
				}
				if tc.fresh != "" {
					if b, _ := os.ReadFile(filepath.Join(s.checkout, tc.fresh)); string(b) != "ignored and new\n" {
						t.Fatalf("full=%v: the rewind changed the ignored %s: %q", full, tc.fresh, b)
					}
				}
				if _, err := s.c.Apply(ctx, ApplyRequest{To: res.PreApply.Position}); err != nil {
					t.Fatal(err)
				}
				if b, _ := os.ReadFile(p); string(b) != "call 2, longer\n" {
					t.Fatalf("full=%v: after the undo %s holds %q", full, tc.path, b)
				}
			}
		})
	}
}
