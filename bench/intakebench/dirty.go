//go:build agentscm_bench

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

// The dirty budget: the installed PreToolUse hook of a Bash call (the
// default execution rule binds the source) on Git checkouts of -files small
// files: clean, dirty (-dirty-files modified tracked files and one
// untracked file, the same bytes at every hook) and edited (one of those
// files rewritten with new bytes before every hook, outside the timing),
// each against the one-fsync reference, interleaved; with -base-src the
// same subjects run the binaries built from that tree (e.g. main) in the
// same run, each subject on its own checkout, spool and Hub.

// buildFrom builds agentscm, agentscm-hook and agentscm-hook-intake from
// the source tree src into dir.
func buildFrom(src, dir string) (*env, error) {
	bin := filepath.Join(dir, "bin")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin+string(filepath.Separator),
		"./cmd/agentscm", "./cmd/agentscm-hook", "./cmd/agentscm-hook-intake")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build %s: %v\n%s", src, err, out)
	}
	e := &env{work: dir, hook: filepath.Join(bin, "agentscm-hook"), admin: filepath.Join(bin, "agentscm")}
	return e, nil
}

// gitSetup makes a checkout of files small Go files committed, then enable
// --local and a current Work (setup's one-step way).
func (e *env) gitSetup(name string, files int) (*checkout, error) {
	dir := filepath.Join(e.work, name)
	root := filepath.Join(dir, "repo")
	for i := range files {
		p := filepath.Join(root, fmt.Sprintf("pkg%02d", i%50), fmt.Sprintf("file%04d.go", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, []byte(fmt.Sprintf("package pkg%02d\n\n// file %d\nconst X%d = %d\n", i%50, i, i, i)), 0o644); err != nil {
			return nil, err
		}
	}
	gitEnv := append(os.Environ(), "GIT_AUTHOR_NAME=b", "GIT_AUTHOR_EMAIL=b@example.invalid", "GIT_COMMITTER_NAME=b", "GIT_COMMITTER_EMAIL=b@example.invalid")
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "."}, {"commit", "-qm", "init"}} {
		cmd := exec.Command("git", append([]string{"-C", root}, args...)...)
		cmd.Env = gitEnv
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("git %v: %v\n%s", args, err, out)
		}
	}
	c, err := e.setupAt(dir, root)
	if err != nil {
		return nil, err
	}
	// Enable keeps its settings out of the worktree status (local exclude).
	return c, nil
}

// setupAt is setup on an existing root.
func (e *env) setupAt(dir, root string) (*checkout, error) {
	c := &checkout{root: root, config: filepath.Join(dir, "config"), env: append(os.Environ(), "XDG_CONFIG_HOME="+filepath.Join(dir, "config"))}
	out, err := e.sh(c, "change-capture", "enable", "--root", c.root, "--local", "--format", "json")
	if err != nil {
		return nil, err
	}
	if c.spool = spoolOf(out); c.spool == "" {
		return nil, fmt.Errorf("enable output: %s", out)
	}
	if c.hook, err = installedHook(c.root); err != nil {
		return nil, err
	}
	if _, err := e.sh(c, "work", "start", "--root", c.root, "--title", "intakebench dirty"); err != nil {
		return nil, err
	}
	return c, nil
}

func spoolOf(out []byte) string {
	s := string(out)
	i := strings.Index(s, `"spool":"`)
	if i < 0 {
		i = strings.Index(s, `"spool": "`)
		if i < 0 {
			return ""
		}
		i += len(`"spool": "`)
	} else {
		i += len(`"spool":"`)
	}
	j := strings.IndexByte(s[i:], '"')
	if j < 0 {
		return ""
	}
	return s[i : i+j]
}

type dirtySubject struct {
	name string
	c    *checkout
	edit bool
	ts   []time.Duration
}

func dirty(e, base *env, o options, r int) (map[string]float64, error) {
	var subs []*dirtySubject
	for _, b := range []struct {
		tag string
		e   *env
	}{{"main", base}, {"new", e}} {
		if b.e == nil {
			continue
		}
		for _, kind := range []string{"clean", "dirty", "edited"} {
			c, err := b.e.gitSetup(fmt.Sprintf("dirty-%s-%s-%d", b.tag, kind, r), o.files)
			if err != nil {
				return nil, err
			}
			if kind != "clean" {
				for i := range o.dirtyFiles {
					p := filepath.Join(c.root, fmt.Sprintf("pkg%02d", i%50), fmt.Sprintf("file%04d.go", i))
					if err := os.WriteFile(p, []byte(fmt.Sprintf("package pkg%02d\n\n// edited %d\nconst X%d = %d\n", i%50, i, i, -i)), 0o644); err != nil {
						return nil, err
					}
				}
				if err := os.WriteFile(filepath.Join(c.root, "untracked.txt"), []byte("notes\n"), 0o644); err != nil {
					return nil, err
				}
			}
			subs = append(subs, &dirtySubject{name: b.tag + " " + kind, c: c, edit: kind == "edited"})
		}
	}
	bash := func(c *checkout, tag string, i int) []byte {
		return []byte(fmt.Sprintf(`{"session_id":"bench-%s","transcript_path":"/tmp/bench.jsonl","cwd":"%s","permission_mode":"default","hook_event_name":"PreToolUse","tool_name":"Bash","tool_use_id":"toolu_%s_%07d","tool_input":{"command":"go test ./..."}}`,
			tag, c.root, tag, i))
	}
	for i := range 3 { // warm-up: summary, ledger, tree cache
		for _, s := range subs {
			if _, err := once([]string{s.c.hook, "change-capture", "hook-claude"}, s.c.env, bash(s.c, fmt.Sprintf("w%d", r), i)); err != nil {
				return nil, err
			}
		}
	}
	var ref []time.Duration
	for i := range o.n {
		d, err := once([]string{e.ref, e.refDir}, os.Environ(), pre(subs[0].c, "Read", "ref", i))
		if err != nil {
			return nil, err
		}
		ref = append(ref, d)
		for k := range subs {
			// Rotated, so that no subject always follows the same one (and
			// its background deliverer).
			s := subs[(i+k)%len(subs)]
			if s.edit {
				p := filepath.Join(s.c.root, "pkg00", "file0000.go")
				if err := os.WriteFile(p, []byte(fmt.Sprintf("package pkg00\n\n// edit %d of run %d\n", i, r)), 0o644); err != nil {
					return nil, err
				}
			}
			d, err := once([]string{s.c.hook, "change-capture", "hook-claude"}, s.c.env, bash(s.c, fmt.Sprintf("m%d", r), i))
			if err != nil {
				return nil, err
			}
			s.ts = append(s.ts, d)
		}
	}
	p50 := func(ts []time.Duration) float64 {
		s := slices.Clone(ts)
		slices.Sort(s)
		return ms(s[len(s)/2])
	}
	res := map[string]float64{"fsyncref": p50(ref)}
	line := fmt.Sprintf("fsyncref p50 %.2f ms", p50(ref))
	for _, s := range subs {
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		err := capture.StateDir{Dir: filepath.Join(s.c.config, "agentscm")}.WaitDeliverer(ctx, s.c.spool)
		cancel()
		if err != nil {
			return nil, err
		}
		res[s.name] = p50(s.ts)
		line += fmt.Sprintf(" | %s p50 %.2f ms", s.name, res[s.name])
		// What the measured starts bound.
		retained, notRetained := 0, 0
		if sp, err := spool.OpenReadOnly(s.c.spool); err == nil {
			if evs, err := sp.Events(); err == nil {
				for _, ev := range evs {
					if ev.Kind == event.ActionStart && ev.Action != nil && ev.Action.Source != nil && ev.Action.Source.Dirty {
						if ev.Action.Source.Retained {
							retained++
						} else {
							notRetained++
						}
					}
				}
			}
		}
		if retained+notRetained > 0 {
			line += fmt.Sprintf(" (%d dirty starts retained, %d not)", retained, notRetained)
		}
	}
	fmt.Println(line)
	return res, nil
}

func printDirty(rs []map[string]float64) {
	var names []string
	for k := range rs[0] {
		names = append(names, k)
	}
	slices.Sort(names)
	med := func(k string) float64 {
		var v []float64
		for _, m := range rs {
			v = append(v, m[k])
		}
		return median(v)
	}
	fmt.Print("dirty: medians of the runs' p50:")
	for _, k := range names {
		fmt.Printf(" %s %.2f ms;", k, med(k))
	}
	fmt.Println()
	for _, kind := range []string{"clean", "dirty", "edited"} {
		if m, n := med("main "+kind), med("new "+kind); m > 0 && n > 0 {
			var ratios []float64
			for _, r := range rs {
				ratios = append(ratios, r["new "+kind]/r["main "+kind])
			}
			fmt.Printf("dirty: %s new/main: ratio of the medians %.2fx, median of the runs' ratios %.2fx (runs %.2f) (fsyncref %.2f ms)\n",
				kind, n/m, median(ratios), ratios, med("fsyncref"))
		}
	}
}
