// Command agentdiffbench measures `agentdiff run` of a one-file change on a
// generated tree (default 100,000 files, 100 per directory) against
// `git status --porcelain` over the same tree in the same run, interleaved
// call by call: wall time, peak RSS (the child's ru_maxrss) and what the run
// leaves on disk (bytes of the new capsule that are not hard links into the
// object store, and the growth of .agentdiff outside the capsules).
//
// The git repository lives outside the tree (--git-dir/--work-tree), so the
// tree holds exactly the generated files. Before measuring, agentdiff runs
// twice (the first fills the object store and the stat cache; after the
// stat cache's racy window has passed the second refreshes the cache), as a
// user's second and later runs on a root do.
//
//	go run ./bench/agentdiffbench -files 100000 -rounds 9
//	go run ./bench/agentdiffbench -bin /path/to/old/agentdiff   (compare a build of main)
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
)

func main() {
	if len(os.Args) > 2 && os.Args[1] == spawnArg {
		os.Exit(spawn(os.Args[2:]))
	}
	files := flag.Int("files", 100000, "files in the generated tree (100 per directory)")
	rounds := flag.Int("rounds", 9, "interleaved rounds (git status, agentdiff run); medians are reported")
	bin := flag.String("bin", "", "agentdiff binary to measure (default: build ./cmd/agentdiff of this module)")
	dir := flag.String("dir", "", "work directory (default: a new temporary directory, removed afterwards)")
	keepRuns := flag.Bool("keep-runs", true, "keep every capsule (false: remove the older capsules between rounds, outside the timer)")
	flag.Parse()
	if err := run(*files, *rounds, *bin, *dir, *keepRuns); err != nil {
		fmt.Fprintln(os.Stderr, "agentdiffbench:", err)
		os.Exit(1)
	}
}

type sample struct {
	wall    time.Duration
	maxRSS  int64 // bytes
	written int64 // bytes of new files in .agentdiff (hard links excluded)
}

func run(n, rounds int, bin, work string, keepRuns bool) error {
	if work == "" {
		d, err := os.MkdirTemp("", "agentdiffbench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		work = d
	}
	if bin == "" {
		bin = filepath.Join(work, "agentdiff")
		cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/agentscm/agentscm/cmd/agentdiff")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build: %v\n%s", err, out)
		}
	}
	root := filepath.Join(work, "tree")
	if _, err := os.Stat(root); errors.Is(err, fs.ErrNotExist) {
		t0 := time.Now()
		if err := makeTree(root, n); err != nil {
			return err
		}
		fmt.Printf("tree: %d files in %s\n", n, time.Since(t0).Round(time.Millisecond))
	}
	gitDir := filepath.Join(work, "gitdir")
	git := func(args ...string) *exec.Cmd {
		return exec.Command("git", append([]string{"--git-dir=" + gitDir, "--work-tree=" + root, "-c", "user.name=b", "-c", "user.email=b@example.com",
			"-c", "gc.auto=0", "-c", "maintenance.auto=false"}, args...)...)
	}
	if _, err := os.Stat(gitDir); errors.Is(err, fs.ErrNotExist) {
		for _, a := range [][]string{{"init", "-q"}, {"add", "-A"}, {"commit", "-q", "-m", "tree"}} {
			if out, err := git(a...).CombinedOutput(); err != nil {
				return fmt.Errorf("git %v: %v\n%s", a, err, out)
			}
		}
		if err := os.WriteFile(filepath.Join(gitDir, "info", "exclude"), []byte(".agentdiff/\n"), 0o644); err != nil {
			return err
		}
	}
	config := filepath.Join(work, "config")
	script := "echo $$ >> d000/e00/f00.txt"
	agentdiff := func() *exec.Cmd {
		c := exec.Command(bin, "run", "--root", root, "--fail-on", "never", "--format", "json", "--", "sh", "-c", script)
		c.Env = append(os.Environ(), "AGENTDIFF_CONFIG_DIR="+config)
		return c
	}
	state := filepath.Join(root, ".agentdiff")
	t0 := time.Now()
	if _, err := measure(agentdiff(), state); err != nil {
		return err
	}
	fmt.Printf("first run (object store filled): %s\n", time.Since(t0).Round(time.Millisecond))
	time.Sleep(2100 * time.Millisecond) // past the stat cache's racy window
	if _, err := measure(agentdiff(), state); err != nil {
		return err
	}
	var gs, ad []sample
	for range rounds {
		if err := dropRuns(state, keepRuns); err != nil {
			return err
		}
		g, err := measure(git("status", "--porcelain"), "")
		if err != nil {
			return err
		}
		a, err := measure(agentdiff(), state)
		if err != nil {
			return err
		}
		gs, ad = append(gs, g), append(ad, a)
		fmt.Printf("round: git status %6.1f ms %5.1f MB | agentdiff run %6.1f ms %5.1f MB, wrote %s\n",
			ms(g.wall), mb(g.maxRSS), ms(a.wall), mb(a.maxRSS), human(a.written))
	}
	gw, aw := median(gs, func(s sample) float64 { return ms(s.wall) }), median(ad, func(s sample) float64 { return ms(s.wall) })
	gm, am := median(gs, func(s sample) float64 { return mb(s.maxRSS) }), median(ad, func(s sample) float64 { return mb(s.maxRSS) })
	wr := median(ad, func(s sample) float64 { return float64(s.written) })
	fmt.Printf("\n%d files, %d rounds, medians (load average %s):\n", n, rounds, loadavg())
	fmt.Printf("  git status --porcelain  %8.1f ms  peak %6.1f MB\n", gw, gm)
	fmt.Printf("  agentdiff run           %8.1f ms  peak %6.1f MB  written per run %s\n", aw, am, human(int64(wr)))
	fmt.Printf("  ratio (agentdiff / git status): time %.2fx, peak memory %.2fx\n", aw/gw, am/gm)
	return nil
}

// spawnArg makes this program a small spawner: it runs the command, and
// writes its wall time and peak RSS to fd 3. A child's ru_maxrss includes the
// resident size of the process that spawned it at exec time (Linux keeps the
// old mm's high-water mark; os/exec shares the parent's mm until exec), so
// the measuring process must stay small: this spawner, not the benchmark
// holding its maps, starts the measured command.
const spawnArg = "-spawn"

func spawn(argv []string) int {
	c := exec.Command(argv[0], argv[1:]...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	t := time.Now()
	err := c.Run()
	wall := time.Since(t)
	var rss int64
	if ru, ok := c.ProcessState.SysUsage().(*syscall.Rusage); ok {
		rss = ru.Maxrss * 1024
	}
	out := os.NewFile(3, "result")
	fmt.Fprintf(out, "%d %d\n", wall.Nanoseconds(), rss)
	out.Close()
	if err != nil {
		return 1
	}
	return 0
}

// measure runs c to completion and returns its wall time, peak RSS and, when
// state is set, the bytes of regular files below state that the run created
// or rewrote: a new name for an inode that already existed (a hard link to
// the shared base manifest or an object) is not a write.
func measure(c *exec.Cmd, state string) (sample, error) {
	var before map[string]fileID
	inodes := map[[2]uint64]bool{}
	if state != "" {
		before = files(state)
		for _, id := range before {
			inodes[[2]uint64{id.dev, id.ino}] = true
		}
	}
	self, err := os.Executable()
	if err != nil {
		return sample{}, err
	}
	sp := exec.Command(self, append([]string{spawnArg, c.Path}, c.Args[1:]...)...)
	sp.Env, sp.Dir = c.Env, c.Dir
	r, w, err := os.Pipe()
	if err != nil {
		return sample{}, err
	}
	sp.ExtraFiles = []*os.File{w}
	var stderr bytes.Buffer
	sp.Stdout, sp.Stderr = nil, &stderr
	err = sp.Run()
	w.Close()
	res, _ := io.ReadAll(r)
	r.Close()
	var s sample
	var wallNS int64
	if _, perr := fmt.Sscan(string(res), &wallNS, &s.maxRSS); perr != nil && err == nil {
		err = perr
	}
	s.wall = time.Duration(wallNS)
	if err != nil {
		return s, fmt.Errorf("%s: %v\n%.2000s", strings.Join(c.Args, " "), err, stderr.String())
	}
	if state != "" {
		for p, id := range files(state) {
			old, existed := before[p]
			switch {
			case !existed && inodes[[2]uint64{id.dev, id.ino}]:
			case !existed, old != id:
				s.written += id.size
			}
		}
	}
	return s, nil
}

type fileID struct {
	dev, ino    uint64
	size, mtime int64
}

func files(dir string) map[string]fileID {
	out := map[string]fileID{}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			out[p] = fileID{dev: uint64(st.Dev), ino: st.Ino, size: st.Size, mtime: fsutil.SysMtimeNS(st)}
		}
		return nil
	})
	return out
}

func dropRuns(state string, keep bool) error {
	if keep {
		return nil
	}
	ents, err := os.ReadDir(filepath.Join(state, "runs"))
	if err != nil {
		return err
	}
	// Keep the newest capsule: a base manifest it links stays in use.
	for i, e := range ents {
		if i == len(ents)-1 {
			break
		}
		if err := os.RemoveAll(filepath.Join(state, "runs", e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func makeTree(root string, n int) error {
	for i := range n {
		dir := filepath.Join(root, fmt.Sprintf("d%03d", i/1000), fmt.Sprintf("e%02d", i/100%10))
		if i%100 == 0 {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d.txt", i%100)), fmt.Appendf(nil, "file %d\n%s", i, strings.Repeat("x", 200)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func median(xs []sample, f func(sample) float64) float64 {
	v := make([]float64, len(xs))
	for i, x := range xs {
		v[i] = f(x)
	}
	slices.Sort(v)
	if len(v) == 0 {
		return 0
	}
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
func mb(b int64) float64         { return float64(b) / (1 << 20) }

func human(b int64) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
