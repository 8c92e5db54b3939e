// Command changelogbench measures the changelog hook as the host runs it (a
// fresh `agentscm-hook changelog hook-claude` process per tool call, as
// changelog enable installs it (-full: `agentscm changelog hook-claude`), one file
// changed before each) on generated git checkouts of -files files, against
// `git status --porcelain` (GIT_OPTIONAL_LOCKS=0) on the same tree in the
// same run, interleaved call by call:
//
//   - no watcher: every call lists every directory (the state is read from
//     disk by a new process: nothing is warm but the page cache);
//   - watcher, warm capture: the default (AGENTSCM_CHANGELOG_WATCH and
//     AGENTSCM_CHANGELOG_WARM unset), a watch server started on demand by
//     the first incremental call, which then takes each capture for the
//     hook (changelog.CaptureOps): the hook process only asks and waits;
//   - watcher, hook captures (AGENTSCM_CHANGELOG_WARM=0, the default before
//     issue 33): the same server, on the same checkout, interleaved call by
//     call with the warm capture, only answers what changed and the hook
//     process lists those directories and stores the increment itself;
//   - `agentscm-hook --help` (`agentscm --version` with -full): the process
//     start of the same binary, the part
//     of the watcher's hook that is not the capture's.
//
// Each subject's wall time and peak RSS (the child's ru_maxrss) are
// reported, median of -n calls.
//
//	go run ./bench/changelogbench [-files 100000] [-n 7]
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/watch"
)

func main() {
	files := flag.Int("files", 100_000, "files in each checkout (multiple of 100)")
	n := flag.Int("n", 7, "measured calls per subject")
	keep := flag.Bool("keep", false, "keep the generated trees")
	full := flag.Bool("full", false, "run the hook as the full `agentscm changelog hook-claude` instead of the installed lean `agentscm-hook changelog hook-claude`")
	flag.Parse()
	if err := run(*files, *n, *keep, *full); err != nil {
		fmt.Fprintln(os.Stderr, "changelogbench:", err)
		os.Exit(1)
	}
}

func sh(env []string, dir string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Env, cmd.Dir = env, dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %v: %v: %s", name, args, err, errb.String())
	}
	return out.String(), nil
}

// tree writes files/100 directories of 100 files (~200 bytes) under
// mod%02d/pkg%03d and commits them.
func tree(env []string, repo string, files int) error {
	content := strings.Repeat("package bench // generated line of source text\n", 4)
	n := 0
	for i := 0; n < files; i++ {
		for j := 0; j < 100 && n < files; j++ {
			dir := filepath.Join(repo, fmt.Sprintf("mod%02d", i), fmt.Sprintf("pkg%03d", j))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			for k := 0; k < 100 && n < files; k++ {
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("file%03d.go", k)), []byte(content+fmt.Sprint(n)), 0o644); err != nil {
					return err
				}
				n++
			}
		}
	}
	os.WriteFile(filepath.Join(repo, ".gitignore"), []byte("*.o\nbuild/\n"), 0o644)
	for _, args := range [][]string{
		{"init", "-q"}, {"add", "-A"},
		{"-c", "user.name=b", "-c", "user.email=b@example.com", "commit", "-q", "-m", "tree"},
		{"status", "--porcelain"}, // writes the refreshed index once
	} {
		if _, err := sh(env, repo, "git", args...); err != nil {
			return err
		}
	}
	return nil
}

type sample struct {
	d      time.Duration
	rssKB  int64
	minflt int64 // minor page faults
}

func timed(cmd *exec.Cmd) (sample, error) {
	var errb bytes.Buffer
	cmd.Stderr = &errb
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return sample{}, fmt.Errorf("%v: %v: %s", cmd.Args, err, errb.String())
	}
	d := time.Since(start)
	if errb.Len() > 0 {
		return sample{}, fmt.Errorf("%v warned: %s", cmd.Args, errb.String())
	}
	ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	var rss, flt int64
	if ru != nil {
		rss, flt = int64(ru.Maxrss), int64(ru.Minflt)
	}
	return sample{d: d, rssKB: rss, minflt: flt}, nil
}

func run(files, n int, keep, full bool) error {
	base, err := os.MkdirTemp("", "changelogbench-")
	if err != nil {
		return err
	}
	if !keep {
		defer os.RemoveAll(base)
	}
	bin := filepath.Join(base, "agentscm")
	// Both binaries side by side, as an install has them: changelog enable
	// installs the lean agentscm-hook, which starts the watch server from
	// the agentscm next to it.
	if _, err := sh(os.Environ(), "", "go", "build", "-o", base+string(filepath.Separator), "./cmd/agentscm", "./cmd/agentscm-hook"); err != nil {
		return err
	}
	hookBin := filepath.Join(base, "agentscm-hook")
	if full {
		hookBin = bin
	}
	fmt.Printf("# hook process: %s changelog hook-claude\n", filepath.Base(hookBin))
	env := append(os.Environ(), "HOME="+filepath.Join(base, "home"), "XDG_CONFIG_HOME="+filepath.Join(base, "config"), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	plain := append(env[:len(env):len(env)], "AGENTSCM_CHANGELOG_WATCH=0")
	watched := append(env[:len(env):len(env)], "AGENTSCM_CHANGELOG_WATCH=")                           // the default: on
	cold := append(env[:len(env):len(env)], "AGENTSCM_CHANGELOG_WATCH=", "AGENTSCM_CHANGELOG_WARM=0") // the hook captures
	repos := []string{filepath.Join(base, "a", "repo"), filepath.Join(base, "b", "repo")}
	t0 := time.Now()
	for _, r := range repos {
		if err := tree(env, r, files); err != nil {
			return err
		}
		if _, err := sh(env, "", bin, "changelog", "enable", "--root", r); err != nil {
			return err
		}
	}
	fmt.Printf("trees of %d files generated in %.0f s\n", files, time.Since(t0).Seconds())
	k := 0
	touch := func(repo string) {
		k++
		p := filepath.Join(repo, "mod00", "pkg050", fmt.Sprintf("file%03d.go", k%100))
		os.WriteFile(p, []byte(fmt.Sprintf("package bench // edit %d\n", k)), 0o644)
	}
	hook := func(repo string, env []string) (sample, error) {
		payload := fmt.Sprintf(`{"session_id":"bench","cwd":%q,"hook_event_name":"PostToolUse","tool_name":"Write","tool_use_id":"toolu_%d"}`, repo, k)
		cmd := exec.Command(hookBin, "changelog", "hook-claude")
		cmd.Env, cmd.Stdin = env, strings.NewReader(payload)
		return timed(cmd)
	}
	gitStatus := func(repo string) (sample, error) {
		cmd := exec.Command("git", "status", "--porcelain")
		cmd.Dir = repo
		cmd.Env = append(env[:len(env):len(env)], "GIT_OPTIONAL_LOCKS=0")
		cmd.Stdout = nil
		return timed(cmd)
	}
	// Warm-up: the full first increment of each; the watcher's first call
	// starts the server (and walks), its second takes a token (and walks).
	var first [2]sample
	for i, r := range repos {
		e := plain
		if i == 1 {
			e = watched
		}
		touch(r)
		if first[i], err = hook(r, e); err != nil {
			return err
		}
	}
	// The watcher's second call (the first that is not a full increment)
	// starts the server, waits for its first answer (given once the roots
	// are watched) and lists every directory; the calls after it are
	// watched. waitReady only checks that the server vouches.
	var tokenCall sample
	touch(repos[1])
	if tokenCall, err = hook(repos[1], watched); err != nil {
		return err
	}
	if err := waitReady(filepath.Join(base, "config"), repos[1]); err != nil {
		return err
	}
	var ours, git, watch, hookWatch, start []sample
	for i := range n {
		touch(repos[0])
		s, err := hook(repos[0], plain)
		if err != nil {
			return err
		}
		ours = append(ours, s)
		touch(repos[0])
		if s, err = gitStatus(repos[0]); err != nil {
			return err
		}
		git = append(git, s)
		// The two watched subjects alternate which runs first (each
		// hook leaves a detached deliverer running behind it).
		for j := range 2 {
			e, into := watched, &watch
			if (i+j)%2 == 1 {
				e, into = cold, &hookWatch
			}
			touch(repos[1])
			if s, err = hook(repos[1], e); err != nil {
				return err
			}
			*into = append(*into, s)
		}
		startArg := "--help"
		if full {
			startArg = "--version"
		}
		sc := exec.Command(hookBin, startArg)
		if s, err = timed(sc); err != nil {
			return err
		}
		start = append(start, s)
	}
	fmt.Printf("changelog hook, whole process, %d files, %d calls each, interleaved (median; per-call ratios in brackets)\n", files, n)
	fmt.Printf("first (full) increment: %.0f ms / %.0f ms; the call that starts the watch server (waits for it, lists every directory): %.0f ms\n", ms(first[0].d), ms(first[1].d), ms(tokenCall.d))
	line := func(name string, s []sample) {
		fmt.Printf("%-34s p50 %8.1f ms  max %8.1f ms  peak RSS p50 %6.1f MB  minor faults p50 %5d  ratio to git status %.2fx [", name, ms(med(s).d), ms(maxd(s)), float64(medRSS(s))/1024, medFlt(s), float64(med(s).d)/float64(med(git).d))
		for i := range s {
			if i > 0 {
				fmt.Print(" ")
			}
			fmt.Printf("%.2f", float64(s[i].d)/float64(git[i].d))
		}
		fmt.Println("]")
	}
	line("hook, no watcher (cold)", ours)
	line("git status --porcelain (reference)", git)
	line("hook, watcher, warm capture", watch)
	line("hook, watcher, hook captures", hookWatch)
	line(filepath.Base(hookBin)+" --help/--version (process start)", start)
	fmt.Printf("peak RSS ratio to git status: no watcher %.2fx, watcher (warm capture) %.2fx, watcher (hook captures) %.2fx\n", float64(medRSS(ours))/float64(medRSS(git)), float64(medRSS(watch))/float64(medRSS(git)), float64(medRSS(hookWatch))/float64(medRSS(git)))
	fmt.Printf("warm capture / hook captures: p50 ratio %.2fx [", float64(med(watch).d)/float64(med(hookWatch).d))
	for i := range watch {
		if i > 0 {
			fmt.Print(" ")
		}
		fmt.Printf("%.2f", float64(watch[i].d)/float64(hookWatch[i].d))
	}
	fmt.Println("]")
	// Every call stored its own increment.
	for i, r := range repos {
		out, err := sh(env, "", bin, "changelog", "list", "--root", r, "--format", "json")
		if err != nil {
			return err
		}
		want := n + 1
		if i == 1 {
			want = 2*n + 2
		}
		if c := strings.Count(out, `"position"`); c != want {
			return fmt.Errorf("%s holds %d increments, want %d", r, c, want)
		}
	}
	// The warm calls asked the server (their increments carry a capture
	// id); the others did not.
	incs, _ := filepath.Glob(filepath.Join(base, "config", "agentscm", "changelog", "*", "increments", "*.tgz"))
	asked := 0
	for _, p := range incs {
		if m, err := changelog.ReadMeta(p); err == nil && m.CaptureID != "" {
			asked++
		}
	}
	if asked != n+2 { // and the two warm-up calls of the watched checkout
		return fmt.Errorf("%d increments were asked of the watch server, want %d", asked, n+2)
	}
	return nil
}

// waitReady polls the watch server of the changelog under cfg until it
// vouches for root.
func waitReady(cfg, root string) error {
	deadline := time.Now().Add(2 * time.Minute)
	tok := ""
	for time.Now().Before(deadline) {
		dirs, _ := filepath.Glob(filepath.Join(cfg, "agentscm", "changelog", "*", "watch"))
		for _, d := range dirs {
			c := &watch.Client{Dir: d, Timeout: 5 * time.Second}
			next, ch, err := c.Since(context.Background(), []string{root}, tok)
			if err == nil && ch[0] != nil {
				return nil
			}
			if err == nil {
				tok = next
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("the watch server never vouched for %s", root)
}

func med(s []sample) sample {
	c := append([]sample(nil), s...)
	sort.Slice(c, func(a, b int) bool { return c[a].d < c[b].d })
	return c[len(c)/2]
}

func medFlt(s []sample) int64 {
	c := append([]sample(nil), s...)
	sort.Slice(c, func(a, b int) bool { return c[a].minflt < c[b].minflt })
	return c[len(c)/2].minflt
}

func medRSS(s []sample) int64 {
	c := append([]sample(nil), s...)
	sort.Slice(c, func(a, b int) bool { return c[a].rssKB < c[b].rssKB })
	return c[len(c)/2].rssKB
}

func maxd(s []sample) time.Duration {
	var m time.Duration
	for _, x := range s {
		m = max(m, x.d)
	}
	return m
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
