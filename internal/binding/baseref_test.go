package binding_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/binding"
)

// enable runs one-step enable on f's checkout and returns its warnings.
func (f fixture) enable(t *testing.T) []string {
	t.Helper()
	res, err := binding.EnableCapture(context.Background(), f.store, f.conns, binding.EnableOptions{Root: f.root, ConfigDir: f.store.Dir, Executable: f.exe, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if res.BaseRef != "origin/main" {
		t.Fatalf("base ref %q, want the seed's fallback origin/main", res.BaseRef)
	}
	return res.Warnings
}

func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.invalid"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

// An unresolved default base ref is kept (seed 000: else origin/main) and
// warned about once per spool and ref, with advice that works where it is
// given; once it resolves the note goes, so it is named again should it
// stop resolving.
func TestEnableWarnsOnceAboutBaseRef(t *testing.T) {
	cases := []struct {
		name   string
		setup  func(t *testing.T, root string)
		advice string
	}{
		{"no remote", func(*testing.T, string) {},
			`this repository has no remote "origin": it resolves once it has one with a branch main (git remote add origin URL && git fetch origin)`},
		{"remote not fetched", func(t *testing.T, root string) {
			git(t, root, "remote", "add", "origin", "https://example.invalid/r.git")
		},
			`it resolves once the branch is fetched (git fetch origin main)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			git(t, f.root, "init", "-q", "-b", "work")
			git(t, f.root, "commit", "-q", "--allow-empty", "-m", "init")
			tc.setup(t, f.root)
			warned := func(ws []string) bool {
				for _, w := range ws {
					if strings.Contains(w, `base ref "origin/main"`) {
						if !strings.Contains(w, tc.advice) || strings.Contains(w, "--base-ref") {
							t.Errorf("warning %q: want the advice %q and no flag enable lacks", w, tc.advice)
						}
						return true
					}
				}
				return false
			}
			if !warned(f.enable(t)) {
				t.Fatal("first enable: no base ref warning")
			}
			if ws := f.enable(t); warned(ws) {
				t.Fatalf("second enable repeated the warning: %q", ws)
			}
			git(t, f.root, "update-ref", "refs/remotes/origin/main", "HEAD")
			if ws := f.enable(t); warned(ws) {
				t.Fatalf("warned although origin/main resolves: %q", ws)
			}
			git(t, f.root, "update-ref", "-d", "refs/remotes/origin/main")
			if !warned(f.enable(t)) {
				t.Fatal("no warning once origin/main stopped resolving again")
			}
		})
	}
}
