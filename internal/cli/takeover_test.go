package cli

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/agentscm/agentscm/internal/hub/api"
)

// TestTakeoverExpectGeneration: `work takeover` applies only to the
// generation expected (given, or read by the command); a stale expectation
// exits ExitGenerationChanged with a clear message and changes nothing;
// bad values are usage errors.
func TestTakeoverExpectGeneration(t *testing.T) {
	env := map[string]string{"XDG_CONFIG_HOME": t.TempDir()}
	a, b, c := gitRepo(t, "a"), gitRepo(t, "b"), gitRepo(t, "c")
	for _, r := range []string{a, b, c} {
		mustRun(t, env, "client", "setup", "--root", r, "--local", "--repository", "proj")
	}
	w := decode[api.Work](t, mustRun(t, env, "work", "start", "--root", a, "--format", "json").stdout)
	tw := decode[api.Work](t, mustRun(t, env, "work", "takeover", "--root", b, "--work-id", w.ID, "--expect-generation", "1", "--format", "json").stdout)
	if tw.Generation != 2 {
		t.Fatalf("takeover = %+v", tw)
	}
	r := runMain(t, env, "", "work", "takeover", "--root", c, "--work-id", w.ID, "--expect-generation", "1")
	if r.code != ExitGenerationChanged || !strings.Contains(r.stderr, "taken over meanwhile") || !strings.Contains(r.stderr, "generation 2 now") ||
		!strings.Contains(r.stderr, "--expect-generation 2") || r.stdout != "" {
		t.Fatalf("stale takeover: %+v", r)
	}
	if out := mustRun(t, env, "work", "show", "--root", b, "--work-id", w.ID, "--format", "json").stdout; decode[api.Work](t, out).Generation != 2 {
		t.Fatalf("a refused takeover changed the Work: %s", out)
	}
	// Other checkpoints take the expectation too.
	if r := runMain(t, env, "", "work", "pause", "--root", b, "--work-id", w.ID, "--expect-generation", "1"); r.code != ExitGenerationChanged || !strings.Contains(r.stderr, "not changed") {
		t.Fatalf("stale pause: %+v", r)
	}
	// An expectation ahead of the Work is refused the same way, without
	// claiming a takeover.
	if r := runMain(t, env, "", "work", "takeover", "--root", c, "--work-id", w.ID, "--expect-generation", "9"); r.code != ExitGenerationChanged ||
		strings.Contains(r.stderr, "meanwhile") || !strings.Contains(r.stderr, "generation 2 now, not 9") {
		t.Fatalf("takeover expecting a future generation: %+v", r)
	}
	for _, bad := range []string{"0", "-1", "2147483648", "9223372036854775807", "1.5", "x"} {
		if r := runMain(t, env, "", "work", "takeover", "--root", c, "--work-id", w.ID, "--expect-generation", bad); r.code != ExitUsage {
			t.Fatalf("--expect-generation %s: %+v", bad, r)
		}
	}
	if out := mustRun(t, env, "work", "takeover", "--root", a, "--work-id", w.ID, "--expect-generation", "2").stdout; out != w.ID+": active, generation 3; current for this checkout\n" {
		t.Fatalf("takeover text = %q", out)
	}
	// Without the flag the command expects what it reads: it wins.
	if tw := decode[api.Work](t, mustRun(t, env, "work", "takeover", "--root", c, "--work-id", w.ID, "--format", "json").stdout); tw.Generation != 4 {
		t.Fatalf("takeover without --expect-generation = %+v", tw)
	}
	if help := runMain(t, env, "", "work", "takeover", "--help"); help.code != 0 || !strings.Contains(help.stdout, "--expect-generation") || !strings.Contains(help.stdout, fmt.Sprintf("exits %d", ExitGenerationChanged)) {
		t.Fatalf("help: %+v", help)
	}
}

// TestConcurrentTakeoversEmbedded runs 12 takeovers at once in this process
// against the embedded store, each from its own checkout: with the same
// --expect-generation exactly one wins; without it every success is told
// the truth (the generations won form a chain) and only the last winner's
// checkout is current.
func TestConcurrentTakeoversEmbedded(t *testing.T) {
	env := map[string]string{"XDG_CONFIG_HOME": t.TempDir()}
	const n = 12
	roots := make([]string, n+1)
	for i := range roots {
		roots[i] = gitRepo(t, fmt.Sprintf("r%d", i))
		mustRun(t, env, "client", "setup", "--root", roots[i], "--local", "--repository", "proj")
	}
	w := decode[api.Work](t, mustRun(t, env, "work", "start", "--root", roots[n], "--format", "json").stdout)
	for _, expect := range []bool{true, false} {
		before := decode[api.Work](t, mustRun(t, env, "work", "show", "--root", roots[n], "--work-id", w.ID, "--format", "json").stdout).Generation
		results := make([]run, n)
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				args := []string{"work", "takeover", "--root", roots[i], "--work-id", w.ID, "--format", "json"}
				if expect {
					args = append(args, "--expect-generation", fmt.Sprint(before))
				}
				results[i] = runMain(t, env, "", args...)
			}(i)
		}
		wg.Wait()
		checkTakeoverRace(t, expect, before, results, func(i int) (api.Work, int64) {
			out := mustRun(t, env, "work", "show", "--root", roots[i], "--work-id", w.ID, "--format", "json").stdout
			wk := decode[api.Work](t, out)
			for _, cw := range wk.Worktrees {
				if cw.Generation == wk.Generation {
					return wk, cw.Generation
				}
			}
			return wk, 0
		}, func(i int) string {
			st := decode[struct{ Connections []connectionView }](t, mustRun(t, env, "client", "status", "--root", roots[i], "--format", "json").stdout)
			if len(st.Connections) != 1 {
				t.Fatalf("status of %s: %+v", roots[i], st)
			}
			return st.Connections[0].WorktreeID
		})
	}
}

// checkTakeoverRace checks n concurrent takeovers' results: exit 0 or
// ExitGenerationChanged; with a shared expectation exactly one winner; every
// winner won a distinct generation, the Work ends at the highest, and only
// that winner's worktree is current at it.
func checkTakeoverRace(t *testing.T, expect bool, before int64, results []run, show func(int) (api.Work, int64), worktree func(int) string) {
	t.Helper()
	won := map[int64]int{}
	last := -1
	for i, r := range results {
		switch r.code {
		case 0:
			g := decode[api.Work](t, r.stdout).Generation
			if _, dup := won[g]; dup || g <= before {
				t.Fatalf("takeover %d told generation %d (won: %v)", i, g, won)
			}
			won[g] = i
			if last < 0 || g > decode[api.Work](t, results[last].stdout).Generation {
				last = i
			}
		case ExitGenerationChanged:
			if !strings.Contains(r.stderr, "taken over meanwhile") || r.stdout != "" {
				t.Fatalf("loser %d: %+v", i, r)
			}
		default:
			t.Fatalf("takeover %d: %+v", i, r)
		}
	}
	// Without --expect-generation every command expects the generation it
	// read; takeovers that all read before any wrote cannot all win (before
	// compare-and-swap, all 12 did, each told it was current).
	if len(won) == 0 || (expect && len(won) != 1) || len(won) == len(results) {
		t.Fatalf("expect=%v: %d winners of %d: %v", expect, len(won), len(results), won)
	}
	for g := before + 1; g <= before+int64(len(won)); g++ {
		if _, ok := won[g]; !ok {
			t.Fatalf("generations won are not a chain from %d: %v", before, won)
		}
	}
	wk, curGen := show(last)
	if wk.Generation != before+int64(len(won)) || curGen != wk.Generation {
		t.Fatalf("work after the race = %+v (winners %v)", wk, won)
	}
	current := 0
	for _, cw := range wk.Worktrees {
		if cw.Generation == wk.Generation {
			current++
			if cw.WorktreeID != worktree(last) {
				t.Fatalf("current worktree %s, want the last winner's %s", cw.WorktreeID, worktree(last))
			}
		}
	}
	if current != 1 {
		t.Fatalf("%d worktrees current at generation %d: %+v", current, wk.Generation, wk.Worktrees)
	}
	t.Logf("expect=%v: %d of %d won", expect, len(won), len(results))
}
