package binding_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/spool"
)

// movable configures a checkout, gives its spool real capture state (a
// ledger) and disables the binding.
func movable(t *testing.T) fixture {
	t.Helper()
	f := newFixture(t)
	f.configure(t, "")
	led, err := f.store.OpenLedger(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	led.Close()
	if _, err := binding.Unconfigure(context.Background(), f.store, f.root); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f fixture) binding(t *testing.T) binding.Binding {
	t.Helper()
	c, err := f.store.Bindings().Load()
	if err != nil || len(c.Bindings) != 1 {
		t.Fatalf("config: %+v %v", c, err)
	}
	return c.Bindings[0]
}

func TestConfigureRecordsAndChecksSpoolIdentity(t *testing.T) {
	f := newFixture(t)
	f.configure(t, "")
	b := f.binding(t)
	sp, err := spool.OpenReadOnly(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	if b.SpoolIdentity == nil || *b.SpoolIdentity != sp.Identity() {
		t.Fatalf("recorded identity %+v, spool %+v", b.SpoolIdentity, sp.Identity())
	}
	// Recreated at the same path: refused before anything is created.
	if err := os.RemoveAll(f.spool); err != nil {
		t.Fatal(err)
	}
	_, err = binding.Configure(context.Background(), f.store, f.conns, binding.ConfigureOptions{Root: f.root, Spool: f.spool, Executable: f.exe, Now: time.Now()})
	if err == nil || !strings.Contains(err.Error(), "that path no longer holds it") || !strings.Contains(err.Error(), "never adopted or recreated") {
		t.Fatalf("configure over a removed spool: %v", err)
	}
	if _, err := os.Lstat(f.spool); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the refused configure recreated the spool")
	}
}

func TestMoveSpool(t *testing.T) {
	ctx := context.Background()
	f := movable(t)
	from := f.spool
	before := f.binding(t)
	oldLedger := filepath.Dir(f.store.SummaryPath(from))
	refuse := func(t *testing.T, o binding.MoveSpoolOptions, want string) {
		t.Helper()
		if _, err := binding.MoveSpool(ctx, f.store, o); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("move %+v: %v, want %q", o, err, want)
		}
		if b := f.binding(t); b.Spool != before.Spool || *b.SpoolIdentity != *before.SpoolIdentity {
			t.Fatalf("a refused move changed the binding: %+v", b)
		}
		if _, err := os.Lstat(oldLedger); err != nil {
			t.Fatalf("a refused move moved the ledger: %v", err)
		}
	}
	dir := filepath.Dir(from)
	t.Run("refusals", func(t *testing.T) {
		refuse(t, binding.MoveSpoolOptions{Root: f.root, To: "rel"}, "must be an absolute clean path")
		refuse(t, binding.MoveSpoolOptions{Root: f.root, To: filepath.Join(f.root, "sp")}, "inside the checkout")
		refuse(t, binding.MoveSpoolOptions{Root: f.root, To: from}, "is already at")
		refuse(t, binding.MoveSpoolOptions{Root: f.root, To: filepath.Join(dir, "no", "such")}, "create it first")
		refuse(t, binding.MoveSpoolOptions{Root: f.root, To: filepath.Join(from, "inner")}, "itself or beneath it")
		os.Mkdir(filepath.Join(dir, "taken"), 0o700)
		refuse(t, binding.MoveSpoolOptions{Root: f.root, To: filepath.Join(dir, "taken")}, "a move never adopts or replaces")
		if shm, err := os.MkdirTemp("/dev/shm", "agentscm-move-"); err == nil {
			defer os.RemoveAll(shm)
			var a, b syscall.Stat_t
			if syscall.Stat(shm, &a) == nil && syscall.Stat(dir, &b) == nil && a.Dev != b.Dev {
				refuse(t, binding.MoveSpoolOptions{Root: f.root, To: filepath.Join(shm, "sp")}, "a same-inode move stays on one filesystem")
			}
		}
	})
	t.Run("a copy is another identity", func(t *testing.T) {
		cp := filepath.Join(dir, "copy")
		if out, err := exec.Command("cp", "-a", from, cp).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v %s", err, out)
		}
		if err := os.Rename(from, from+".aside"); err != nil {
			t.Fatal(err)
		}
		refuse(t, binding.MoveSpoolOptions{Root: f.root, To: cp}, "a copied or restored spool has new inodes and is a different identity")
		os.RemoveAll(cp)
		os.Rename(from+".aside", from)
	})
	t.Run("agentscm renames it", func(t *testing.T) {
		to := filepath.Join(dir, "moved")
		res, err := binding.MoveSpool(ctx, f.store, binding.MoveSpoolOptions{Root: f.root, To: to})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Renamed || res.From != from || res.To != to || res.Identity != *before.SpoolIdentity || len(res.State) != 1 || res.State[0] != filepath.Dir(f.store.SummaryPath(to)) {
			t.Fatalf("%+v", res)
		}
		b := f.binding(t)
		if b.Spool != to || *b.SpoolIdentity != *before.SpoolIdentity || b.Enabled {
			t.Fatalf("binding %+v", b)
		}
		if _, err := os.Lstat(oldLedger); !errors.Is(err, os.ErrNotExist) {
			t.Fatal("the old ledger name remains")
		}
		sp, err := spool.Open(to)
		if err != nil || sp.Identity() != *before.SpoolIdentity {
			t.Fatalf("open the moved spool: %v", err)
		}
		// Re-enabling binds the moved spool.
		if _, err := binding.Configure(ctx, f.store, f.conns, binding.ConfigureOptions{Root: f.root, Spool: to, Executable: f.exe, Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
	})
}

// A binding saved before identities were recorded: an operator-moved spool
// is accepted only with the hook summary as a witness.
func TestMoveSpoolLegacyBinding(t *testing.T) {
	ctx := context.Background()
	f := movable(t)
	if err := f.store.Bindings().Update(func(c *binding.Config) (bool, error) { c.Bindings[0].SpoolIdentity = nil; return true, nil }); err != nil {
		t.Fatal(err)
	}
	// Such a binding's configure wrote no hook summary either.
	if err := os.Remove(f.store.SummaryPath(f.spool)); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	to := f.spool + "-moved"
	if err := os.Rename(f.spool, to); err != nil {
		t.Fatal(err)
	}
	_, err := binding.MoveSpool(ctx, f.store, binding.MoveSpoolOptions{Root: f.root, To: to})
	if !errors.Is(err, spool.ErrMoveRefused) || !strings.Contains(err.Error(), "records no spool identity") {
		t.Fatal(err)
	}
	// With the summary the hook keeps in the ledger directory as witness.
	sp, err := spool.OpenAppender(to)
	if err != nil {
		t.Fatal(err)
	}
	sp.SetSummaryPath(f.store.SummaryPath(f.spool))
	ss, err := sp.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ss.Close()
	res, err := binding.MoveSpool(ctx, f.store, binding.MoveSpoolOptions{Root: f.root, To: to})
	if err != nil || res.Renamed || res.Identity != sp.Identity() {
		t.Fatalf("%+v %v", res, err)
	}
}

const envMoveHelper = "AGENTSCM_MOVE_TEST"

func TestMoveSpoolHelperProcess(t *testing.T) {
	args := os.Getenv(envMoveHelper)
	if args == "" {
		t.Skip("helper process only")
	}
	p := strings.Split(args, "|")
	_, err := binding.MoveSpool(context.Background(), capture.StateDir{Dir: p[0]}, binding.MoveSpoolOptions{Root: p[1], To: p[2]})
	fmt.Println("move returned", err)
	os.Exit(0)
}

// A real move process killed right after the rename: the binding still
// names the old path; running the move again finishes it.
func TestMoveSpoolCrash(t *testing.T) {
	f := movable(t)
	before := f.binding(t)
	to := f.spool + "-moved"
	cmd := exec.Command(os.Args[0], "-test.run=^TestMoveSpoolHelperProcess$")
	cmd.Env = append(os.Environ(), envMoveHelper+"="+f.store.Dir+"|"+before.Root+"|"+to, spool.FailpointEnv+"=move.renamed")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the move was not killed: %v %s", err, out)
	}
	if b := f.binding(t); b.Spool != f.spool {
		t.Fatalf("binding after the crash: %+v", b)
	}
	if _, err := os.Lstat(f.spool); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the spool was not renamed before the kill")
	}
	res, err := binding.MoveSpool(context.Background(), f.store, binding.MoveSpoolOptions{Root: f.root, To: to})
	if err != nil || res.Renamed || len(res.State) != 1 {
		t.Fatalf("finishing the move: %+v %v", res, err)
	}
	if b := f.binding(t); b.Spool != to || *b.SpoolIdentity != *before.SpoolIdentity {
		t.Fatalf("binding %+v", b)
	}
	if _, err := spool.Open(to); err != nil {
		t.Fatal(err)
	}
}
