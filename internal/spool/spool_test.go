package spool_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func rec(kind event.Kind, session string) *event.Record {
	return &event.Record{Agent: "claude-code", SessionID: session, Kind: kind, HookEvent: string(kind), ObservedAt: t0, CaptureMode: event.ModeMetadataOnly}
}

func newSpool(t *testing.T, cfg spool.Config) (*spool.Spool, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "spool")
	sp, err := spool.InitWith(context.Background(), dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return sp, dir
}

// treeDigest fingerprints every name, mode and byte under dir.
func treeDigest(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	var names []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, p)
		return nil
	})
	sort.Strings(names)
	for _, p := range names {
		fi, _ := os.Lstat(p)
		h.Write([]byte(p + fi.Mode().String()))
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			h.Write(b)
		}
	}
	return string(h.Sum(nil))
}

func TestInitLayoutAndModes(t *testing.T) {
	sp, dir := newSpool(t, spool.Config{})
	if sp.Dir() != dir {
		t.Fatalf("Dir = %s", sp.Dir())
	}
	want := []string{"acks", "artifacts", "capture.lock", "compact", "cursor.json", "format.json", "limits.json", "outbox", "quarantine", "scope.json", "spool.lock"}
	ents, _ := os.ReadDir(dir)
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
		fi, _ := e.Info()
		if e.IsDir() && fi.Mode().Perm() != 0o700 || !e.IsDir() && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v", e.Name(), fi.Mode())
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("layout %v, want %v", got, want)
	}
	// Init again opens the committed spool as it is.
	sp2, err := spool.Init(dir)
	if err != nil || sp2.ID() != sp.ID() {
		t.Fatalf("re-init: %v", err)
	}
}

func TestConcurrentInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spool")
	ids := make(chan string, 6)
	for range 6 {
		go func() {
			sp, err := spool.Init(dir)
			if err != nil {
				t.Error(err)
				ids <- ""
				return
			}
			ids <- sp.ID()
		}()
	}
	first := <-ids
	for range 5 {
		if id := <-ids; id != first || id == "" {
			t.Fatalf("concurrent initialisers disagree: %q vs %q", id, first)
		}
	}
}

func TestAppendEventsRoundTrip(t *testing.T) {
	sp, _ := newSpool(t, spool.Config{})
	r1 := rec(event.SessionStart, "s1")
	r2 := rec(event.PromptSubmit, "s1")
	r2.CaptureMode = event.ModeLocalConversation
	r2.Body = &event.Body{Prompt: "hello"}
	for i, r := range []*event.Record{r1, r2} {
		seq, err := sp.Append(r)
		if err != nil || seq != uint64(i+1) || r.Seq != seq {
			t.Fatalf("append %d: seq %d err %v", i, seq, err)
		}
	}
	evs, err := sp.Events()
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[1].Body == nil || evs[1].Body.Prompt != "hello" || evs[1].BodyRef.Availability != event.AvailabilityRetained {
		t.Fatalf("events %+v", evs)
	}
}

func TestRefusesNonEmptyWithoutCommit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(dir string)
	}{
		{"foreign file", func(dir string) { os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o600) }},
		{"old format", func(dir string) {
			os.WriteFile(filepath.Join(dir, "format.json"), []byte(`{"format":"agentscm-spool","version":1}`), 0o600)
			os.Mkdir(filepath.Join(dir, "events"), 0o700)
		}},
		{"partial init", func(dir string) {
			os.WriteFile(filepath.Join(dir, "spool.lock"), nil, 0o600)
			os.WriteFile(filepath.Join(dir, "capture.lock"), nil, 0o600)
			os.Mkdir(filepath.Join(dir, "outbox"), 0o700)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "sp")
			os.Mkdir(dir, 0o700)
			tc.setup(dir)
			before := treeDigest(t, dir)
			if _, err := spool.Init(dir); !errors.Is(err, spool.ErrNotSpool) {
				t.Fatalf("Init: %v, want ErrNotSpool", err)
			}
			if _, err := spool.Open(dir); !errors.Is(err, spool.ErrNotSpool) {
				t.Fatalf("Open: %v, want ErrNotSpool", err)
			}
			if treeDigest(t, dir) != before {
				t.Fatal("refusal changed bytes")
			}
			if _, err := spool.Inspect(dir, 0); err != nil {
				t.Fatalf("inspect of refused spool: %v", err)
			}
		})
	}
}

func TestIdentity(t *testing.T) {
	ctx := context.Background()
	t.Run("offline same-inode move is accepted", func(t *testing.T) {
		_, dir := newSpool(t, spool.Config{})
		moved := dir + "-moved"
		if err := os.Rename(dir, moved); err != nil {
			t.Fatal(err)
		}
		sp, err := spool.Open(moved)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sp.Append(rec(event.SessionStart, "s")); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("copied spool at the same path is refused", func(t *testing.T) {
		sp, dir := newSpool(t, spool.Config{})
		sp.Append(rec(event.SessionStart, "s"))
		old := dir + "-old"
		os.Rename(dir, old)
		copyTree(t, old, dir)
		if _, err := spool.Open(dir); !errors.Is(err, spool.ErrIdentityChanged) {
			t.Fatalf("Open of copy: %v", err)
		}
		// An already open handle revalidates at its next guarded acquisition.
		if _, err := sp.Append(rec(event.PromptSubmit, "s")); !errors.Is(err, spool.ErrIdentityChanged) {
			t.Fatalf("append through old handle: %v", err)
		}
	})
	t.Run("replaced lock file is refused", func(t *testing.T) {
		for _, n := range []string{"spool.lock", "capture.lock"} {
			sp, dir := newSpool(t, spool.Config{})
			p := filepath.Join(dir, n)
			// Create the replacement before the old inode is freed, so
			// the filesystem cannot hand out the same inode number.
			os.WriteFile(p+".new", nil, 0o600)
			os.Rename(p+".new", p)
			if _, err := sp.Pending(ctx, 10); !errors.Is(err, spool.ErrIdentityChanged) {
				t.Fatalf("%s replaced: %v", n, err)
			}
		}
	})
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.Mkdir(dst, 0o700)
		}
		b, _ := os.ReadFile(p)
		return os.WriteFile(dst, b, 0o600)
	})
}

func TestAuthority(t *testing.T) {
	sp, dir := newSpool(t, spool.Config{})
	sp.Append(rec(event.SessionStart, "s"))
	for _, tc := range []struct {
		path string
		mode os.FileMode
	}{{"", 0o750}, {"outbox", 0o705}, {"limits.json", 0o640}} {
		p := filepath.Join(dir, tc.path)
		fi, _ := os.Lstat(p)
		orig := fi.Mode().Perm()
		os.Chmod(p, tc.mode)
		if _, err := spool.Open(dir); !errors.Is(err, spool.ErrUnsafeAuthority) {
			t.Fatalf("%q mode %o: Open %v", tc.path, tc.mode, err)
		}
		fi2, _ := os.Lstat(p)
		if fi2.Mode().Perm() != tc.mode {
			t.Fatal("agentscm changed the mode")
		}
		ro, err := spool.OpenReadOnly(dir)
		if err != nil {
			t.Fatalf("read-only open: %v", err)
		}
		if evs, err := ro.Events(); err != nil || len(evs) != 1 {
			t.Fatalf("read-only events: %v %d", err, len(evs))
		}
		rep, err := spool.Inspect(dir, 0)
		if err != nil || rep.AuthoritySafe {
			t.Fatalf("inspect: %v safe=%v", err, rep != nil && rep.AuthoritySafe)
		}
		os.Chmod(p, orig)
	}
	if _, err := spool.Open(dir); err != nil {
		t.Fatal(err)
	}
	// An evidence file with unsafe modes stops delivery, compaction and
	// full recovery; it is neither repaired nor quarantined.
	ents, _ := os.ReadDir(filepath.Join(dir, "outbox"))
	p := filepath.Join(dir, "outbox", ents[0].Name())
	os.Chmod(p, 0o644)
	ctx := context.Background()
	if _, err := sp.Pending(ctx, 10); !errors.Is(err, spool.ErrUnsafeAuthority) {
		t.Fatalf("pending: %v", err)
	}
	if _, err := sp.Compact(ctx); !errors.Is(err, spool.ErrUnsafeAuthority) {
		t.Fatalf("compact: %v", err)
	}
	if _, err := sp.Recover(ctx); !errors.Is(err, spool.ErrUnsafeAuthority) {
		t.Fatalf("recover: %v", err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o644 {
		t.Fatal("mode repaired")
	}
}

func TestLimitsFloor(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sp")
	for _, l := range []spool.Limits{{Records: 47}, {Bytes: 64<<10 - 1}, {Records: 48, Bytes: 64 << 10, ArtifactBytes: 1 << 20}} {
		if _, err := spool.InitWith(context.Background(), dir, spool.Config{Limits: l}); !errors.Is(err, spool.ErrBelowFloor) {
			t.Fatalf("%+v: %v", l, err)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("refused configuration created the spool")
	}
	if _, err := spool.InitWith(context.Background(), dir, spool.Config{Limits: spool.Limits{Records: 48, Bytes: 64 << 10}}); err != nil {
		t.Fatal(err)
	}
	if _, err := spool.InitWith(context.Background(), filepath.Join(t.TempDir(), "m"), spool.Config{MetadataOnly: true, Limits: spool.Limits{Records: 30, Bytes: 32 << 10}}); err != nil {
		t.Fatalf("metadata-only below the action floor: %v", err)
	}
}
