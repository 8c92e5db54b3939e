package changelog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestMain lets the test binary act as a hook process (see helperMain).
func TestMain(m *testing.M) {
	if mode := os.Getenv("AGENTSCM_CHANGELOG_HELPER"); mode == "watch-serve" {
		os.Exit(serveMain())
	} else if mode != "" {
		os.Exit(helperMain(mode))
	}
	code := m.Run()
	if benchTreeOnce != nil && os.Getenv("AGENTSCM_BENCH_100K") == "1" {
		if bt := benchTreeOnce(); bt.base != "" {
			os.RemoveAll(bt.base)
		}
	}
	os.Exit(code)
}

// helperMain runs in a child process: it reserves or captures against the
// files named in the environment and prints how many attempts succeeded.
func helperMain(mode string) int {
	n, _ := strconv.Atoi(os.Getenv("HELPER_N"))
	maxObj, _ := strconv.ParseInt(os.Getenv("HELPER_MAX_OBJECTS"), 10, 64)
	maxBytes, _ := strconv.ParseInt(os.Getenv("HELPER_MAX_BYTES"), 10, 64)
	res := &Reservation{Path: os.Getenv("HELPER_RESERVATION"), Grant: Grant{MaxObjects: maxObj, MaxBytes: maxBytes}}
	ok, refused := 0, 0
	switch mode {
	case "reserve":
		for range n {
			err := res.Reserve(1, 10)
			switch {
			case err == nil:
				ok++
			case errors.Is(err, ErrLimit):
				refused++
			default:
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
	case "crash":
		// Edit and capture until killed (TestStateSurvivesKilledCaptures).
		root := os.Getenv("HELPER_ROOT")
		c, err := Open(os.Getenv("HELPER_DIR"), Options{Roots: []Root{{Name: "r", Path: root}}})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		for i := 0; ; i++ {
			dir := filepath.Join(root, fmt.Sprintf("d%d", i%7))
			os.MkdirAll(dir, 0o755)
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d", i%13)), []byte(fmt.Sprint(os.Getpid(), i)), 0o644)
			if i%5 == 0 {
				os.Remove(filepath.Join(dir, fmt.Sprintf("f%d", (i+3)%13)))
			}
			if _, err := c.Capture(context.Background(), CaptureRequest{Position: -1}); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
	case "capture":
		root := os.Getenv("HELPER_ROOT")
		c, err := Open(os.Getenv("HELPER_DIR"), Options{Roots: []Root{{Name: "r", Path: root}}, Reservation: res})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		for i := range n {
			os.WriteFile(filepath.Join(root, fmt.Sprintf("%d-%d", os.Getpid(), i)), []byte("x"), 0o644)
			pos, err := c.NextPosition()
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			_, err = c.Capture(context.Background(), CaptureRequest{Position: pos})
			switch {
			case err == nil:
				ok++
			case errors.Is(err, ErrLimit), errors.Is(err, ErrPosition):
				refused++
			default:
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
	}
	fmt.Printf("%d %d\n", ok, refused)
	return 0
}

func runHelpers(t *testing.T, procs int, env ...string) (ok int) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), env...)
			out, err := cmd.Output()
			if err != nil {
				t.Errorf("helper: %v %s", err, out)
				return
			}
			var a, b int
			fmt.Sscan(strings.TrimSpace(string(out)), &a, &b)
			mu.Lock()
			ok += a
			mu.Unlock()
		}()
	}
	wg.Wait()
	return ok
}

func TestReservationLimitsHoldAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	resPath := filepath.Join(dir, "reservation")
	ok := runHelpers(t, 4, "AGENTSCM_CHANGELOG_HELPER=reserve", "HELPER_N=10", "HELPER_MAX_OBJECTS=25",
		"HELPER_RESERVATION="+resPath)
	if ok != 25 {
		t.Errorf("%d reservations granted across processes, want exactly 25", ok)
	}
	u, err := (&Reservation{Path: resPath}).Used()
	if err != nil || u.Objects != 25 || u.Bytes != 250 {
		t.Errorf("usage = %+v, %v; want 25 objects, 250 bytes", u, err)
	}
	// A byte limit refuses too.
	resPath2 := filepath.Join(dir, "reservation2")
	ok = runHelpers(t, 3, "AGENTSCM_CHANGELOG_HELPER=reserve", "HELPER_N=5", "HELPER_MAX_BYTES=75",
		"HELPER_RESERVATION="+resPath2)
	if ok != 7 {
		t.Errorf("%d reservations of 10 bytes granted under 75 bytes, want 7", ok)
	}
}

func TestCaptureLimitsHoldAcrossHookProcesses(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	os.MkdirAll(root, 0o755)
	cl := filepath.Join(dir, "cl")
	resPath := filepath.Join(dir, "reservation")
	ok := runHelpers(t, 3, "AGENTSCM_CHANGELOG_HELPER=capture", "HELPER_N=4", "HELPER_MAX_OBJECTS=5",
		"HELPER_RESERVATION="+resPath, "HELPER_ROOT="+root, "HELPER_DIR="+cl)
	if ok != 5 {
		t.Errorf("%d captures stored, want exactly the grant's 5", ok)
	}
	c, err := Open(cl, Options{Roots: []Root{{Name: "r", Path: root}}})
	if err != nil {
		t.Fatal(err)
	}
	list, _ := c.List()
	if len(list) != 5 {
		t.Errorf("%d increments stored, want 5", len(list))
	}
	// Every file written by every process is either in an increment or
	// still pending for the next one: a final unlimited capture plus the
	// stored ones replay the whole tree.
	pos, _ := c.NextPosition()
	mustCapture(t, c, pos)
	var paths []string
	ps, _ := c.positions()
	for _, p := range ps {
		paths = append(paths, c.incrementPath(p))
	}
	fresh := filepath.Join(t.TempDir(), "root")
	if err := Replay(context.Background(), paths, []Root{{Name: "r", Path: fresh}}); err != nil {
		t.Fatal(err)
	}
	if d := diffTrees(snapshot(t, root, false, nil), snapshot(t, fresh, false, nil)); d != "" {
		t.Errorf("replay lost writes:\n%s", d)
	}
}
