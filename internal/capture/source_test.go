package capture

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/action"
	"github.com/agentscm/agentscm/internal/agent/claude"
	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/source"
	"github.com/agentscm/agentscm/internal/spool"
)

// TestConfigureBaseRef: configure refuses a base ref that does not
// resolve, naming it, and changes nothing; one that resolves is saved.
func TestConfigureBaseRef(t *testing.T) {
	f := newFixture(t)
	git(t, f.root, "init", "-q", "-b", "main")
	git(t, f.root, "commit", "-q", "--allow-empty", "-m", "one")
	o := binding.ConfigureOptions{Root: f.root, Spool: f.spool, Executable: f.exe, Now: time.Now(), BaseRef: "origin/nope"}
	_, err := binding.Configure(context.Background(), f.store, f.conns, o)
	if err == nil || !strings.Contains(err.Error(), `--base-ref: base ref "origin/nope" does not resolve to a commit`) {
		t.Fatalf("an unresolved base ref: %v", err)
	}
	if c, err := f.store.Bindings().Load(); err != nil || len(c.Bindings) != 0 {
		t.Fatalf("a refused configure saved a binding: %+v %v", c, err)
	}
	o.BaseRef = "main"
	res, err := binding.Configure(context.Background(), f.store, f.conns, o)
	if err != nil || res.BaseRef != "main" {
		t.Fatalf("%+v %v", res, err)
	}
}

// TestActionStartRetainsDirtySource: the hook's action start on a dirty
// checkout binds head, tree, merge-base and the manifest identity, with the
// working bytes and the manifest retained in the spool.
func TestActionStartRetainsDirtySource(t *testing.T) {
	f := newActionFixture(t)
	root := f.bd.Root
	git(t, root, "init", "-q", "-b", "main")
	git(t, root, "commit", "-q", "--allow-empty", "-m", "one")
	f.bd.BaseRef = "main"
	if err := os.WriteFile(filepath.Join(root, "dirty.txt"), []byte("dirty bytes\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	p := pre("t1")
	rec, _, err := claude.Map(p, event.ModeMetadataOnly, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rec.WorkID, rec.Generation, rec.CanonicalSession = "wrk_1", 1, "default"
	ss, err := f.sp.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ss.Append(rec); err != nil {
		t.Fatal(err)
	}
	got, err := recordAction(context.Background(), actionEnv{ss: ss, sp: f.sp, configDir: f.cfg, bd: f.bd, p: p, rec: rec, now: time.Now()})
	ss.Close()
	if got != action.Started || err != nil {
		t.Fatalf("%q %v", got, err)
	}
	acts := f.actions()
	sb := acts[len(acts)-1].Action.Source
	if sb == nil || len(sb.Head) != 40 || sb.MergeBase != sb.Head || !sb.Dirty || !sb.Retained || sb.Partial || sb.ManifestDigest == "" {
		t.Fatalf("start source %+v", sb)
	}
	m, err := source.ReadManifest(f.sp, sb)
	if err != nil || len(m.Entries) != 1 || m.Entries[0].Path != "dirty.txt" {
		t.Fatalf("%+v %v", m, err)
	}
	b, err := f.sp.ReadBlob(event.ArtifactRef{Digest: "sha256:" + m.Entries[0].SHA256, Bytes: m.Entries[0].Size})
	if err != nil || string(b) != "dirty bytes\n" {
		t.Fatalf("%q %v", b, err)
	}
	// The digest-only capture of the intake path names what it lacks.
	ib, err := captureSource(context.Background(), root, sourceOptions{baseRef: "main"})
	if err != nil || ib.ManifestDigest != sb.ManifestDigest || !slices.Equal(ib.Omissions, []string{source.OmissionNotRetained}) || !ib.Partial {
		t.Fatalf("%+v %v", ib, err)
	}
}

// TestIntakeStore: at receipt, bytes the spool holds cost nothing, small
// new ones go into the intake record, large ones (and those past the
// budget) are staged as files (admission of both: the real intake binary's
// TestIntakeHookRetainsDirtySource).
func TestIntakeStore(t *testing.T) {
	sp, err := spool.Init(filepath.Join(t.TempDir(), "spool"))
	if err != nil {
		t.Fatal(err)
	}
	held := []byte("already retained")
	if _, err := sp.PutBlobs(context.Background(), []spool.Blob{{Data: held}}); err != nil {
		t.Fatal(err)
	}
	st := newIntakeStore(sp)
	small, large := []byte("small change"), []byte(strings.Repeat("L", inlineBlobBytes+1))
	if _, err := st.PutBlobs([]spool.Blob{{Data: held}, {Data: small}, {Data: large}, {Data: small}}); err != nil {
		t.Fatal(err)
	}
	if len(st.inline) != 1 || string(st.inline[0].Data) != string(small) {
		t.Fatalf("inline %d blobs", len(st.inline))
	}
	if err := st.stage.Sync(); err != nil {
		t.Fatal(err)
	}
	staged, _ := filepath.Glob(filepath.Join(sp.Dir(), "intake-blobs", "*.art"))
	if len(staged) != 1 {
		t.Fatalf("staged %v", staged)
	}
	// A second capture of the same bytes adds nothing.
	st2 := newIntakeStore(sp)
	if _, err := st2.PutBlobs([]spool.Blob{{Data: held}, {Data: large}}); err != nil || len(st2.inline) != 0 || st2.stage.Sync() != nil {
		t.Fatalf("%d inline, %v", len(st2.inline), err)
	}
}
