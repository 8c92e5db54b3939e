package spool

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func stepOf(err error) string {
	var ee *ExportError
	if errors.As(err, &ee) {
		return ee.Step
	}
	return "?"
}

// findByID walks base (bounded depth) for the entry with identity id.
func findByID(t *testing.T, base string, id FileID) string {
	t.Helper()
	found := ""
	filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil || found != "" {
			return filepath.SkipDir
		}
		if strings.Count(strings.TrimPrefix(p, base), "/") > 3 {
			return filepath.SkipDir
		}
		if fi, err := os.Lstat(p); err == nil && fileID(fi) == id {
			found = p
			return filepath.SkipAll
		}
		return nil
	})
	return found
}

// TestExportRaceRenamedParent runs exports while a goroutine renames the
// destination parent away and back in a loop, sometimes putting a decoy
// directory at its name: the export writes only through its retained
// descriptors (anchor and archive are always siblings in the directory it
// opened, never in a decoy it did not open), never removes anything, a
// success is a complete verified archive, and a failure names every object
// it left by identity.
func TestExportRaceRenamedParent(t *testing.T) {
	src := exportSource(t)
	before := snapshot(t, src)
	base := t.TempDir()
	p, away := filepath.Join(base, "parent"), filepath.Join(base, "away")
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var decoys atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			if os.Rename(p, away) != nil {
				continue
			}
			if i%3 == 0 {
				// A decoy at the parent's name, then moved aside (it keeps
				// whatever an export that opened it wrote there).
				if os.Mkdir(p, 0o700) == nil {
					os.Rename(p, filepath.Join(base, fmt.Sprintf("decoy-%d", decoys.Add(1))))
				}
			}
			os.Rename(away, p)
			// Leave the parent at its name most of the time.
			time.Sleep(time.Duration(i%7) * 200 * time.Microsecond)
		}
	}()
	type outcome struct {
		res *ExportResult
		err error
	}
	var outs []outcome
	for i := range 25 {
		res, err := Export(context.Background(), ExportOptions{Spool: src, Destination: filepath.Join(p, fmt.Sprintf("d-%d", i))})
		outs = append(outs, outcome{res, err})
	}
	stop.Store(true)
	wg.Wait()
	if _, err := os.Lstat(p); err != nil {
		os.Rename(away, p)
	}
	sameSnapshot(t, "source", before, snapshot(t, src))
	ok, failed := 0, 0
	steps := map[string]int{}
	for i, o := range outs {
		if o.err == nil {
			ok++
			arch := findByID(t, base, o.res.DestinationIdentity)
			anchor := findByID(t, base, o.res.AnchorIdentity)
			if arch == "" || anchor == "" || filepath.Dir(arch) != filepath.Dir(anchor) {
				t.Fatalf("export %d: archive %q and anchor %q are not siblings", i, arch, anchor)
			}
			if _, err := VerifyExport(arch); err != nil {
				t.Fatalf("export %d: %v", i, err)
			}
			sameBytes(t, src, arch)
			continue
		}
		failed++
		steps[stepOf(o.err)]++
		var ee *ExportError
		if !errors.As(o.err, &ee) {
			t.Fatalf("export %d: not an *ExportError: %v", i, o.err)
		}
		var anchorDir string
		for _, a := range ee.Artifacts {
			if a.Identity == nil {
				continue
			}
			at := findByID(t, base, *a.Identity)
			if at == "" {
				t.Fatalf("export %d: %s %s (%v) was removed: %v", i, a.Role, a.Name, *a.Identity, o.err)
			}
			switch a.Role {
			case "anchor":
				anchorDir = filepath.Dir(at)
			case "destination":
				if filepath.Dir(at) != anchorDir {
					t.Fatalf("export %d: the archive %s is not beside its anchor in %s", i, at, anchorDir)
				}
				_, verr := VerifyExport(at)
				complete := strings.Contains(strings.Join(a.Uncertainty, ";"), "content: complete")
				if complete != (verr == nil) {
					t.Fatalf("export %d: the error says complete=%v, verification says %v", i, complete, verr)
				}
			}
		}
	}
	t.Logf("%d exports succeeded, %d failed and reported their objects (by step: %v), %d decoys", ok, failed, steps, decoys.Load())
	if ok == 0 || failed == 0 {
		t.Logf("the race produced no mix of outcomes this run")
	}
}

// Crash tests: a real export process (this test binary) killed with
// SIGKILL at each export failpoint.
const envExportScenario = "AGENTSCM_EXPORT_TEST_SCENARIO"

func TestExportHelperProcess(t *testing.T) {
	if os.Getenv(envExportScenario) == "" {
		t.Skip("helper process only")
	}
	_, err := Export(context.Background(), ExportOptions{Spool: os.Getenv(envDir), Destination: os.Getenv(envExportScenario)})
	if err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(3)
	}
	fmt.Println("exported")
	os.Exit(0)
}

func TestExportCrash(t *testing.T) {
	fps := []struct {
		name      string
		installed bool
		complete  bool
	}{
		{"export.anchor-created", false, false},
		{"export.child-created", false, false},
		{"export.installed", true, false},
		{"export.install-synced", true, false},
		{"export.copy-midway", true, false},
		{"export.copied", true, false},
		{"export.manifest-written", true, false},
		{"export.manifest-installed", true, true},
	}
	for _, fp := range fps {
		t.Run(fp.name, func(t *testing.T) {
			src := exportSource(t)
			before := snapshot(t, src)
			parent := t.TempDir()
			dest := filepath.Join(parent, "archive")
			cmd := exec.Command(os.Args[0], "-test.run=^TestExportHelperProcess$")
			cmd.Env = append(os.Environ(), envExportScenario+"="+dest, envDir+"="+src, FailpointEnv+"="+fp.name)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("the export was not killed at %s: %v %s", fp.name, err, out)
			}
			sameSnapshot(t, "source", before, snapshot(t, src))
			if a := anchors(t, parent); len(a) != 1 {
				t.Fatalf("anchors after the crash: %v", a)
			}
			_, lerr := os.Lstat(dest)
			if (lerr == nil) != fp.installed {
				t.Fatalf("destination after the crash at %s: %v", fp.name, lerr)
			}
			if fp.installed {
				_, verr := VerifyExport(dest)
				if (verr == nil) != fp.complete {
					t.Fatalf("verification after the crash at %s: %v", fp.name, verr)
				}
				if !fp.complete && !strings.Contains(verr.Error(), "an incomplete export, not evidence") {
					t.Fatal(verr)
				}
				// Nonresumable: the same destination is refused, untouched.
				if _, err := Export(context.Background(), ExportOptions{Spool: src, Destination: dest}); !errors.Is(err, ErrExportDestinationExists) {
					t.Fatalf("re-export over the crashed one: %v", err)
				}
			}
			// The source was not changed and is still a spool and
			// exportable.
			if _, err := Open(src); err != nil {
				t.Fatal(err)
			}
			fresh := filepath.Join(parent, "again")
			if _, err := Export(context.Background(), ExportOptions{Spool: src, Destination: fresh}); err != nil {
				t.Fatal(err)
			}
			if _, err := VerifyExport(fresh); err != nil {
				t.Fatal(err)
			}
		})
	}
}
