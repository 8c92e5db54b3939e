package spool

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentscm/agentscm/internal/event"
)

// TestHealthCompactionCrash: after a compaction killed at any cleanup
// failpoint, the health report names the interrupted compaction and its
// fix (compact), and the fix leaves a healthy spool.
func TestHealthCompactionCrash(t *testing.T) {
	ctx := context.Background()
	for _, fp := range []string{"compact.committed", "compact.mid-cleanup", "compact.cleaned"} {
		t.Run(fp, func(t *testing.T) {
			t.Parallel()
			sp, _ := compactFixture(t)
			mustCrash(t, "compact", sp.dir, fp)
			// Recovery completes the interrupted compaction under the next
			// holder's acquisition before it lists the outbox and the
			// acknowledgements, so health reports no stop, and the
			// delivery path's own read agrees.
			h := CheckHealth(sp.dir)
			if !h.Healthy {
				t.Fatalf("health after a crash at %s: %+v", fp, h.Failing)
			}
			rep, err := Inspect(sp.dir, 0)
			if err != nil || rep.DeliveryStopped {
				t.Fatalf("inspect: %v %+v", err, rep)
			}
			sp2, err := Open(sp.dir)
			if err != nil {
				t.Fatal(err)
			}
			ss, err := sp2.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_, perr := ss.Pending(100)
			ss.Close()
			if perr != nil {
				t.Fatalf("delivery's read after a crash at %s: %v", fp, perr)
			}
			if h := CheckHealth(sp.dir); !h.Healthy {
				t.Fatalf("after the next acquisition: %+v", h.Failing)
			}
		})
	}
}

// TestHealthInstallLinkIsNotForeign: an envelope whose second link is the
// temporary name it was installed from (a crash between link and unlink)
// is crash debris the next recovery removes, not a foreign hard link.
func TestHealthInstallLinkIsNotForeign(t *testing.T) {
	sp := mustInit(t, Limits{})
	if _, err := sp.Append(tagged("one", event.PromptSubmit)); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(filepath.Join(sp.dir, outboxDir))
	if err != nil || len(ents) != 1 {
		t.Fatalf("outbox %v %v", ents, err)
	}
	env := filepath.Join(sp.dir, outboxDir, ents[0].Name())
	tmp := filepath.Join(sp.dir, outboxDir, ".tmp-0123456789abcdef")
	if err := os.Link(env, tmp); err != nil {
		t.Fatal(err)
	}
	if h := CheckHealth(sp.dir); !h.Healthy {
		t.Fatalf("an install link is reported: %+v", h.Failing)
	}
	if err := os.Remove(tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(env, filepath.Join(t.TempDir(), "foreign")); err != nil {
		t.Fatal(err)
	}
	h := CheckHealth(sp.dir)
	if h.Failing == nil || h.Failing.Name != CheckEvidence || h.Failing.Path != env {
		t.Fatalf("a foreign link is not reported: %+v", h.Failing)
	}
	if _, err := sp.Pending(context.Background(), 10); err == nil {
		t.Fatal("delivery reads an envelope with a foreign hard link")
	}
}

// TestRepair: repair replaces a hard-linked envelope by a private copy,
// quarantines a malformed marker and replaces a damaged cursor; delivery
// then goes on and the spool is healthy. It never touches modes.
func TestRepair(t *testing.T) {
	ctx := context.Background()
	sp := mustInit(t, Limits{})
	for _, tag := range []string{"a", "b", "c"} {
		if _, err := sp.Append(tagged(tag, event.PromptSubmit)); err != nil {
			t.Fatal(err)
		}
	}
	ents, _ := os.ReadDir(filepath.Join(sp.dir, outboxDir))
	foreign := filepath.Join(t.TempDir(), "foreign")
	if err := os.Link(filepath.Join(sp.dir, outboxDir, ents[0].Name()), foreign); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sp.dir, acksDir, ackName(2)), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sp.dir, cursorFile), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if h := CheckHealth(sp.dir); h.Healthy {
		t.Fatal("a tampered spool reports healthy")
	}
	rep, err := sp.Repair(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Relinked) != 1 || len(rep.Acknowledgements) != 1 || rep.Cursor == "" || !rep.Changed() {
		t.Fatalf("repair: %+v", rep)
	}
	if h := CheckHealth(sp.dir); !h.Healthy {
		t.Fatalf("after repair: %+v", h.Failing)
	}
	pend, err := sp.Pending(ctx, 10)
	if err != nil || len(pend) != 3 {
		t.Fatalf("pending after repair: %d %v", len(pend), err)
	}
	if fi, err := os.Stat(foreign); err != nil || fi.Sys() == nil {
		t.Fatalf("the foreign name: %v", err)
	}
	// Modes are the user's: repair refuses and changes nothing.
	if err := os.Chmod(filepath.Join(sp.dir, outboxDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Repair(ctx); err == nil {
		t.Fatal("repair went past an unsafe directory")
	}
	h := CheckHealth(sp.dir)
	if h.Failing == nil || h.Failing.Name != CheckAuthority || h.Failing.Fix != "chmod 700 "+filepath.Join(sp.dir, outboxDir) {
		t.Fatalf("unsafe directory: %+v", h.Failing)
	}
}
