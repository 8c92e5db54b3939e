package changelog

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/agentscm/agentscm/internal/watch"
)

// The 100,000-file benchmarks are gated: AGENTSCM_BENCH_100K=1 go test
// -run '^$' -bench 100k -count 5 ./internal/changelog/
const benchFiles = 100_000

type benchTree struct {
	base string // holds repo/ (a committed git checkout)
	repo string
	err  error
}

var benchTreeOnce = sync.OnceValue(func() *benchTree {
	bt := &benchTree{}
	base, err := os.MkdirTemp("", "agentscm-bench-100k-")
	if err != nil {
		bt.err = err
		return bt
	}
	bt.base = base
	bt.repo = filepath.Join(base, "repo")
	// 10 top directories x 100 subdirectories x 100 files, ~200 bytes each.
	content := strings.Repeat("package bench // generated line of source text\n", 4)
	n := 0
	for i := 0; i < 10 && n < benchFiles; i++ {
		for j := 0; j < 100 && n < benchFiles; j++ {
			dir := filepath.Join(bt.repo, fmt.Sprintf("mod%02d", i), fmt.Sprintf("pkg%03d", j))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				bt.err = err
				return bt
			}
			for k := 0; k < 100 && n < benchFiles; k++ {
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("file%03d.go", k)), []byte(content+fmt.Sprint(n)), 0o644); err != nil {
					bt.err = err
					return bt
				}
				n++
			}
		}
	}
	os.WriteFile(filepath.Join(bt.repo, ".gitignore"), []byte("*.o\nbuild/\n"), 0o644)
	for _, args := range [][]string{
		{"init", "-q"}, {"add", "-A"},
		{"-c", "user.name=b", "-c", "user.email=b@example.com", "commit", "-q", "-m", "tree"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = bt.repo
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			bt.err = fmt.Errorf("git %v: %v %s", args, err, out)
			return bt
		}
	}
	return bt
})

func needBenchTree(b *testing.B) *benchTree {
	b.Helper()
	if os.Getenv("AGENTSCM_BENCH_100K") != "1" {
		b.Skip("set AGENTSCM_BENCH_100K=1 to run the 100,000-file benchmarks")
	}
	bt := benchTreeOnce()
	if bt.err != nil {
		b.Fatal(bt.err)
	}
	return bt
}

// touchOne changes one file's content, as a tool call editing one file does.
func touchOne(b *testing.B, bt *benchTree, i int) {
	p := filepath.Join(bt.repo, "mod05", "pkg050", "file050.go")
	if err := os.WriteFile(p, []byte(fmt.Sprintf("package bench // edit %d\n", i)), 0o644); err != nil {
		b.Fatal(err)
	}
}

func gitCmd(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_OPTIONAL_LOCKS=0", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	return cmd
}

// BenchmarkCapture100k measures a tool call's capture of a one-file change
// on the 100,000-file checkout against GNU tar --listed-incremental and
// git status on the same tree, in the same run.
func BenchmarkCapture100k(b *testing.B) {
	bt := needBenchTree(b)
	b.Run("changelog", func(b *testing.B) {
		c, err := Open(filepath.Join(b.TempDir(), "cl"), Options{Roots: []Root{{Name: "checkout", Path: bt.repo, Git: true}}})
		if err != nil {
			b.Fatal(err)
		}
		mustCaptureB(b, c, 0) // the full first increment is not what a call pays
		var size int64
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			touchOne(b, bt, i)
			b.StartTimer()
			inc := mustCaptureB(b, c, i+1)
			size = inc.Size
		}
		b.ReportMetric(float64(size), "increment-bytes")
	})
	b.Run("gnutar", func(b *testing.B) {
		dir := b.TempDir()
		snap := filepath.Join(dir, "snap")
		tarCmd := func(i int) *exec.Cmd {
			cmd := exec.Command("tar", "--listed-incremental="+snap, "--exclude=.git", "-czf", filepath.Join(dir, fmt.Sprintf("%06d.tgz", i)), "repo")
			cmd.Dir = bt.base
			return cmd
		}
		if out, err := tarCmd(0).CombinedOutput(); err != nil {
			b.Fatalf("%v %s", err, out)
		}
		var size int64
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			touchOne(b, bt, i)
			b.StartTimer()
			if out, err := tarCmd(i + 1).CombinedOutput(); err != nil {
				b.Fatalf("%v %s", err, out)
			}
			b.StopTimer()
			if fi, err := os.Stat(filepath.Join(dir, fmt.Sprintf("%06d.tgz", i+1))); err == nil {
				size = fi.Size()
			}
			b.StartTimer()
		}
		b.ReportMetric(float64(size), "increment-bytes")
	})
	b.Run("gitstatus", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			touchOne(b, bt, i)
			b.StartTimer()
			if out, err := gitCmd(bt.repo, "status", "--porcelain").CombinedOutput(); err != nil {
				b.Fatalf("%v %s", err, out)
			}
		}
	})
}

// BenchmarkCaptureInterleaved100k measures the same three subjects as
// BenchmarkCapture100k, interleaved call by call (a one-file change before
// each), so a shared machine's load changes hit all three alike. It reports
// each subject's mean seconds per call and the ratios.
func BenchmarkCaptureInterleaved100k(b *testing.B) {
	bt := needBenchTree(b)
	c, err := Open(filepath.Join(b.TempDir(), "cl"), Options{Roots: []Root{{Name: "checkout", Path: bt.repo, Git: true}}})
	if err != nil {
		b.Fatal(err)
	}
	pos := 0
	mustCaptureB(b, c, pos)
	dir := b.TempDir()
	snap := filepath.Join(dir, "snap")
	tarCmd := func(i int) *exec.Cmd {
		cmd := exec.Command("tar", "--listed-incremental="+snap, "--exclude=.git", "-czf", filepath.Join(dir, fmt.Sprintf("%06d.tgz", i)), "repo")
		cmd.Dir = bt.base
		return cmd
	}
	if out, err := tarCmd(0).CombinedOutput(); err != nil {
		b.Fatalf("%v %s", err, out)
	}
	var ours, tar, git time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		touchOne(b, bt, 10_000+3*i)
		t0 := time.Now()
		pos++
		mustCaptureB(b, c, pos)
		ours += time.Since(t0)
		touchOne(b, bt, 10_001+3*i)
		t0 = time.Now()
		if out, err := tarCmd(i + 1).CombinedOutput(); err != nil {
			b.Fatalf("%v %s", err, out)
		}
		tar += time.Since(t0)
		touchOne(b, bt, 10_002+3*i)
		t0 = time.Now()
		if out, err := gitCmd(bt.repo, "status", "--porcelain").CombinedOutput(); err != nil {
			b.Fatalf("%v %s", err, out)
		}
		git += time.Since(t0)
	}
	n := float64(b.N)
	b.ReportMetric(ours.Seconds()/n, "changelog-s/call")
	b.ReportMetric(tar.Seconds()/n, "gnutar-s/call")
	b.ReportMetric(git.Seconds()/n, "gitstatus-s/call")
	b.ReportMetric(ours.Seconds()/git.Seconds(), "x-gitstatus")
	b.ReportMetric(ours.Seconds()/tar.Seconds(), "x-gnutar")
}

func mustCaptureB(b *testing.B, c *Changelog, pos int) *Increment {
	b.Helper()
	inc, err := c.Capture(context.Background(), CaptureRequest{Position: pos})
	if err != nil {
		b.Fatalf("capture %d: %v", pos, err)
	}
	return inc
}

// BenchmarkRewind100k measures rewinding the 100,000-file checkout to a
// tool call (increments 0..3, the first one full) against GNU tar
// extracting the same increments over the same tree.
func BenchmarkRewind100k(b *testing.B) {
	bt := needBenchTree(b)
	dir := b.TempDir()
	c, err := Open(filepath.Join(dir, "cl"), Options{Roots: []Root{{Name: "checkout", Path: bt.repo, Git: true}}})
	if err != nil {
		b.Fatal(err)
	}
	mustCaptureB(b, c, 0)
	for i := 1; i <= 5; i++ {
		touchOne(b, bt, 1000+i)
		mustCaptureB(b, c, i)
	}
	var incs []string
	for p := 0; p <= 3; p++ {
		incs = append(incs, c.incrementPath(p))
	}
	b.Run("changelog", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			touchOne(b, bt, 2000+i)
			b.StartTimer()
			if _, err := c.Apply(context.Background(), ApplyRequest{To: 3, Force: true}); err != nil { // the touched file was not captured
				b.Fatal(err)
			}
		}
	})
	b.Run("replay-only", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			touchOne(b, bt, 3000+i)
			b.StartTimer()
			if err := Replay(context.Background(), incs, []Root{{Name: "checkout", Path: bt.repo, Git: true}}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("gnutar", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			touchOne(b, bt, 4000+i)
			b.StartTimer()
			for _, ip := range incs {
				cmd := exec.Command("tar", "--incremental", "--anchored", "--exclude="+incmeta.Dir, "-xzf", ip, "-C", "/")
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("%v %s", err, out)
				}
			}
		}
	})
}

// BenchmarkCaptureWatched100k measures a tool call's capture of a one-file
// change on the 100,000-file checkout, in process, with a watch.Tracker
// answering what changed (the capture lists only the changed directory and
// its parent), against the same capture without a watcher and git status,
// interleaved call by call.
func BenchmarkCaptureWatched100k(b *testing.B) {
	bt := needBenchTree(b)
	cookies := filepath.Join(b.TempDir(), "cookies")
	os.Mkdir(cookies, 0o700)
	tr, err := watch.New(cookies, watch.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	roots := []Root{{Name: "checkout", Path: bt.repo, Git: true}}
	cw, err := Open(filepath.Join(b.TempDir(), "clw"), Options{Roots: roots, Watch: trackerSource{tr}})
	if err != nil {
		b.Fatal(err)
	}
	cp, err := Open(filepath.Join(b.TempDir(), "clp"), Options{Roots: roots})
	if err != nil {
		b.Fatal(err)
	}
	wpos, ppos := 0, 0
	mustCaptureB(b, cw, wpos)
	mustCaptureB(b, cp, ppos)
	for range 50 { // until the watch is set up and a token is stored
		if _, ready, _ := tr.Status(bt.repo); ready {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	wpos++
	mustCaptureB(b, cw, wpos)
	hinted := cw.hintedRoots
	var watched, plain, git time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		touchOne(b, bt, 20_000+3*i)
		t0 := time.Now()
		wpos++
		mustCaptureB(b, cw, wpos)
		watched += time.Since(t0)
		touchOne(b, bt, 20_001+3*i)
		t0 = time.Now()
		ppos++
		mustCaptureB(b, cp, ppos)
		plain += time.Since(t0)
		touchOne(b, bt, 20_002+3*i)
		t0 = time.Now()
		if out, err := gitCmd(bt.repo, "status", "--porcelain").CombinedOutput(); err != nil {
			b.Fatalf("%v %s", err, out)
		}
		git += time.Since(t0)
	}
	if cw.hintedRoots-hinted != b.N {
		b.Fatalf("the watcher answered %d of %d captures", cw.hintedRoots-hinted, b.N)
	}
	n := float64(b.N)
	b.ReportMetric(watched.Seconds()*1000/n, "watched-ms/call")
	b.ReportMetric(plain.Seconds()*1000/n, "nowatch-ms/call")
	b.ReportMetric(git.Seconds()*1000/n, "gitstatus-ms/call")
	b.ReportMetric(plain.Seconds()/git.Seconds(), "nowatch-x-gitstatus")
}

// BenchmarkHookWatched100k measures the changelog hook's own work for a
// one-file change on the 100,000-file checkout with the default watcher:
// HandleClaudeHookWith (payload, checkout, state, the socket round trip to
// a real watch server hosted in this process, the listing of what it
// reports, the increment with its two fsyncs, the journal record) as both
// hook entry points run it, without the process start.
func BenchmarkHookWatched100k(b *testing.B) {
	bt := needBenchTree(b)
	cfg := filepath.Join(b.TempDir(), "cfg")
	os.MkdirAll(filepath.Join(cfg, "changelog"), 0o700)
	dir := DefaultDir(cfg, bt.repo)
	c, err := Open(dir, Options{Roots: []Root{{Name: "checkout", Path: bt.repo, Git: true}}})
	if err != nil {
		b.Fatal(err)
	}
	if err := c.SaveRoots(); err != nil {
		b.Fatal(err)
	}
	wd := filepath.Join(dir, WatchDir)
	os.Mkdir(wd, 0o700)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- watch.Serve(ctx, wd, []string{bt.repo}, watch.ServeOptions{}) }()
	defer func() { cancel(); <-done }()
	k := 0
	hook := func() *Increment {
		p := fmt.Sprintf(`{"session_id":"s","cwd":%q,"hook_event_name":"PostToolUse","tool_name":"Write","tool_use_id":"t%d"}`, bt.repo, k)
		res, err := HandleClaudeHookWith(context.Background(), cfg, strings.NewReader(p), time.Now(), HookOptions{Watch: HookWatch(func(string) string { return "" }, "")})
		if err != nil || res.Increment == nil {
			b.Fatal(res, err)
		}
		return res.Increment
	}
	touch := func() { k++; touchOne(b, bt, 40_000+k) }
	touch()
	hook() // the full first increment
	for i := 0; ; i++ {
		touch()
		if hook().Watched {
			break
		}
		if i > 100 {
			b.Fatal("the watcher never vouched")
		}
		time.Sleep(100 * time.Millisecond)
	}
	var ds []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		touch()
		t0 := time.Now()
		inc := hook()
		ds = append(ds, time.Since(t0))
		if !inc.Watched {
			b.Fatal("a call was not watched")
		}
	}
	b.StopTimer()
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "p50-ms/call")
}
