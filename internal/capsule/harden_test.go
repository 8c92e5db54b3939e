package capsule

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// Verify and rollback refuse a symlinked .agentdiff/runs as run does, and
// rollback writes nothing through it.
func TestSymlinkedRunsRefused(t *testing.T) {
	for _, which := range []string{StateDir + "/runs", StateDir} {
		t.Run(which, func(t *testing.T) {
			root := project(t)
			out := runIn(t, root, allowAll(), 0, `echo changed > a.txt`)
			id := filepath.Base(out.dir)
			moved := filepath.Join(t.TempDir(), "moved")
			if err := os.Rename(filepath.Join(root, which), moved); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(moved, filepath.Join(root, which)); err != nil {
				t.Fatal(err)
			}
			if _, err := CapsuleDir(root, id); !errors.Is(err, ErrStateSymlink) {
				t.Fatalf("CapsuleDir through a symlinked %s: %v", which, err)
			}
			if _, err := Inspect(context.Background(), root, id); !errors.Is(err, ErrStateSymlink) {
				t.Fatalf("Inspect: %v", err)
			}
			if _, _, err := Rollback(context.Background(), root, id, RollbackOptions{}); !errors.Is(err, ErrStateSymlink) {
				t.Fatalf("Rollback: %v", err)
			}
			if got := read(t, filepath.Join(root, "a.txt")); got != "changed\n" {
				t.Fatalf("a.txt rolled back through a symlink: %q", got)
			}
			_ = filepath.WalkDir(moved, func(p string, d fs.DirEntry, err error) error {
				if err == nil && (d.Name() == FileRollbackResult || p == filepath.Join(moved, dirTmp)) {
					t.Errorf("rollback wrote %s through the symlink", p)
				}
				return nil
			})
			if _, _, err := Run(context.Background(), RunOptions{Root: root, Argv: []string{"true"}, Env: os.Environ()}); err == nil {
				t.Fatal("run accepted the symlinked state directory")
			}
		})
	}
}

// rollbackHelperEnv makes the test binary a rollback process (see TestMain).
const rollbackHelperEnv = "AGENTDIFF_TEST_ROLLBACK_HELPER"

// runHelperEnv makes the test binary a run process on the named root.
const runHelperEnv = "AGENTDIFF_TEST_RUN_HELPER"

// listenHelperEnv makes the test binary a TCP listener that writes its
// address to the named file and then waits to be killed.
const listenHelperEnv = "AGENTDIFF_TEST_LISTEN_HELPER"

func TestMain(m *testing.M) {
	if p := os.Getenv(listenHelperEnv); p != "" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			os.Exit(4)
		}
		os.WriteFile(p+".tmp", []byte(l.Addr().String()), 0o600)
		os.Rename(p+".tmp", p)
		select {}
	}
	if root := os.Getenv(runHelperEnv); root != "" {
		_, _, err := Run(context.Background(), RunOptions{Root: root, Policy: allowAll(), Argv: []string{"sh", "-c", "echo crash >> a.txt"}, Env: os.Environ(), KeyDir: root + ".key"})
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(3)
		}
		os.Exit(0)
	}
	if v := os.Getenv(rollbackHelperEnv); v != "" {
		root, id, _ := strings.Cut(v, "\n")
		if _, _, err := Rollback(context.Background(), root, id, RollbackOptions{}); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// rollbackKilledAt runs a rollback in a child process that kills itself at
// the failpoint and reports whether it died of SIGKILL.
func rollbackKilledAt(t *testing.T, root, id, point string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), rollbackHelperEnv+"="+root+"\n"+id, RollbackFailpointEnv+"="+point)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("rollback at failpoint %s: %v\n%s", point, err, out)
	}
}

// An interrupted rollback keeps its temporary copies inside .agentdiff, never
// in the workspace; the next verify (or rollback) reports and clears them.
func TestInterruptedRollbackTemporaries(t *testing.T) {
	for _, next := range []string{"verify", "rollback"} {
		t.Run(next, func(t *testing.T) {
			root := project(t)
			write(t, filepath.Join(root, "sub/c.txt"), "gamma\n")
			out := runIn(t, root, allowAll(), 0, `echo changed > a.txt; rm sub/c.txt`)
			id := filepath.Base(out.dir)
			rollbackKilledAt(t, root, id, "temp-written")
			// Nothing of the rollback is in the workspace.
			err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				if d.IsDir() && d.Name() == StateDir {
					return filepath.SkipDir
				}
				if strings.Contains(d.Name(), "rollback-") || strings.HasPrefix(d.Name(), ".tmp-") {
					t.Errorf("rollback temporary in the workspace: %s", p)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			left, _ := os.ReadDir(filepath.Join(root, StateDir, dirTmp))
			if len(left) != 1 {
				t.Fatalf("want one temporary copy in .agentdiff/tmp, found %d", len(left))
			}
			var cleared []string
			switch next {
			case "verify":
				rep := verifyOK(t, out.dir)
				cleared = rep.ClearedTemporaries
			case "rollback":
				att, _, err := Rollback(context.Background(), root, id, RollbackOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if att.Status != RollbackComplete {
					t.Fatalf("rollback after the crash: %+v", att)
				}
				cleared = att.ClearedTemporaries
			}
			if len(cleared) != 1 || !strings.HasPrefix(cleared[0], dirTmp+"/"+rollbackTempPrefix+id) {
				t.Fatalf("cleared %q", cleared)
			}
			if left, _ := os.ReadDir(filepath.Join(root, StateDir, dirTmp)); len(left) != 0 {
				t.Fatalf("temporaries left after %s: %d", next, len(left))
			}
			if next == "verify" {
				if rep := verifyOK(t, out.dir); len(rep.ClearedTemporaries) != 0 {
					t.Fatalf("second verify cleared %q", rep.ClearedTemporaries)
				}
				att, _, err := Rollback(context.Background(), root, id, RollbackOptions{})
				if err != nil || att.Status != RollbackComplete {
					t.Fatalf("rollback: %+v %v", att, err)
				}
			}
			if read(t, filepath.Join(root, "a.txt")) != "alpha\n" || read(t, filepath.Join(root, "sub/c.txt")) != "gamma\n" {
				t.Fatal("before-state not restored")
			}
			verifyOK(t, out.dir)
		})
	}
}

// A rollback killed after restoring every path but before recording the
// attempt leaves a capsule that verifies; the next rollback finds the paths
// already rolled back.
func TestRollbackKilledBeforeSeal(t *testing.T) {
	root := project(t)
	out := runIn(t, root, allowAll(), 0, `echo changed > a.txt`)
	id := filepath.Base(out.dir)
	rollbackKilledAt(t, root, id, "before-seal")
	if read(t, filepath.Join(root, "a.txt")) != "alpha\n" {
		t.Fatal("a.txt not restored before the failpoint")
	}
	verifyOK(t, out.dir)
	att, _, err := Rollback(context.Background(), root, id, RollbackOptions{})
	if err != nil || att.Status != RollbackComplete || att.Items[0].Outcome != OutcomeAlready {
		t.Fatalf("%+v %v", att, err)
	}
}

// A listener the command leaves behind (`server &`) is observed before the
// process group is cleaned up, attributed to the group, and then killed.
func TestBackgroundServerPortObserved(t *testing.T) {
	root := project(t)
	addrFile := filepath.Join(t.TempDir(), "addr")
	var stdout, stderr strings.Builder
	res, dir, err := Run(context.Background(), RunOptions{Root: root, Policy: allowAll(), PolicySource: "test",
		Argv: []string{"sh", "-c", `"$1" & while [ ! -s "$2" ]; do sleep 0.01; done`, "sh", os.Args[0], addrFile},
		Env:  append(os.Environ(), listenHelperEnv+"="+addrFile), Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		t.Fatalf("%v %s", err, stderr.String())
	}
	addr, err := os.ReadFile(addrFile)
	if err != nil {
		t.Fatal(err)
	}
	want := "tcp4 " + string(addr)
	if !slices.Contains(res.Runtime.PortsOpened, want) {
		t.Fatalf("ports opened %q, want %q", res.Runtime.PortsOpened, want)
	}
	var rt Runtime
	if err := readJSON(dir, FileRuntime, &rt); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(rt.Ports.After, want) {
		t.Fatalf("listener still open after cleanup: %q", rt.Ports.After)
	}
	if !slices.ContainsFunc(rt.Ports.GroupListeners, func(g GroupListener) bool { return g.Addr == want && g.PID > 0 }) {
		t.Fatalf("group listeners %+v, want %s", rt.Ports.GroupListeners, want)
	}
	if rt.Ports.Samples < 1 || res.Runtime.Descendants < 1 {
		t.Fatalf("samples %d, descendants %d", rt.Ports.Samples, res.Runtime.Descendants)
	}
	// The command's own listener is the command's: it warns and counts.
	if res.Status != StatusReview || !slices.ContainsFunc(res.ObservationWarnings, func(w Warning) bool {
		return w.Code == "listening_ports_opened" && strings.Contains(w.Message, want)
	}) {
		t.Fatalf("status %s, warnings %+v", res.Status, res.ObservationWarnings)
	}
	if !slices.ContainsFunc(res.BlastRadius.Components, func(c Component) bool { return c.Name == "listening_ports_opened" && c.Count >= 1 }) {
		t.Fatalf("blast radius %+v", res.BlastRadius.Components)
	}
	verifyOK(t, dir)
}

func TestParseProcNetInodes(t *testing.T) {
	in := "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
		"   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0000000000000000 100 0 0 10 0\n" +
		"   1: 0100007F:1F91 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 4243 1 0000000000000000 100 0 0 10 0\n"
	ls, err := parseProcNetReader(strings.NewReader(in), "tcp", "tcp4")
	if err != nil || len(ls) != 1 || ls[0].addr != "tcp4 127.0.0.1:8080" || ls[0].inode != 4242 {
		t.Fatalf("%+v %v", ls, err)
	}
}

// A run killed after its capsule files and the seal's temporary file are
// durable but before the seal is linked leaves an unsealed capsule that
// verify refuses (never "ok"), holds no lock, and the next run seals.
func TestRunKilledBeforeSealLinked(t *testing.T) {
	root := project(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), runHelperEnv+"="+root, RunFailpointEnv+"=seal-synced")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("run at failpoint seal-synced: %v\n%s", err, out)
	}
	runs, err := os.ReadDir(filepath.Join(root, StateDir, "runs"))
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs: %v %v", runs, err)
	}
	dir := filepath.Join(root, StateDir, "runs", runs[0].Name())
	if _, err := os.Lstat(filepath.Join(dir, FileIntegrity)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("integrity.json after a kill before the link: %v", err)
	}
	rep, err := Verify(context.Background(), dir, runs[0].Name())
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK || !slices.ContainsFunc(rep.Problems, func(p string) bool { return strings.Contains(p, "not sealed") }) {
		t.Fatalf("verify of the unsealed capsule: %+v", rep)
	}
	next := runIn(t, root, allowAll(), 0, "echo again >> a.txt")
	verifyOK(t, next.dir)
}
