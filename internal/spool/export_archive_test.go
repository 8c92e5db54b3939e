package spool

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/fsutil"
)

// exportSource builds a real spool with envelopes, a body artifact, an
// acknowledgement, a cursor attempt and a quarantined file.
func exportSource(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	sp := mustInit(t, Limits{})
	for i := range 6 {
		r := tagged(fmt.Sprintf("export-%d", i), event.PromptSubmit)
		if i == 2 {
			r.Kind = event.ToolFinish
			r.Body = &event.Body{ToolResponse: []byte(`"some output"`)}
		}
		if _, err := sp.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	pend, err := sp.Pending(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := sp.Ack(ctx, pend[0].Record.Seq, pend[0].Digest); err != nil {
		t.Fatal(err)
	}
	if err := sp.RecordAttempt(ctx, Attempt{Seq: pend[1].Record.Seq, Outcome: "failed"}); err != nil {
		t.Fatal(err)
	}
	// Debris that recovery quarantines.
	if err := os.WriteFile(filepath.Join(sp.Dir(), outboxDir, "garbage"), []byte("not a record"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	return sp.Dir()
}

// snapshot describes every entry under dir: type, mode, size, mtime, ctime,
// identity and content digest. Equal snapshots mean nothing changed.
func snapshot(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		desc := fmt.Sprintf("mode=%o size=%d ino=%d mtime=%d ctime=%d", st.Mode, st.Size, st.Ino, fsutil.SysMtimeNS(&st), fsutil.SysCtimeNS(&st))
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s := sha256.Sum256(b)
			desc += " sha256=" + hex.EncodeToString(s[:])
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameSnapshot(t testing.TB, what string, a, b map[string]string) {
	t.Helper()
	for k, v := range a {
		if b[k] != v {
			t.Errorf("%s: %s changed: %q -> %q", what, k, v, b[k])
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			t.Errorf("%s: %s appeared", what, k)
		}
	}
}

// sameBytes compares the source tree with the archive's copy, byte for
// byte, and checks the archive's private modes.
func sameBytes(t testing.TB, src, archive string) int {
	t.Helper()
	tree := filepath.Join(archive, ExportTreeName)
	n := 0
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		cp := filepath.Join(tree, rel)
		fi, err := os.Lstat(cp)
		if err != nil {
			return fmt.Errorf("%s not archived: %w", rel, err)
		}
		if d.IsDir() {
			if !fi.IsDir() || fi.Mode().Perm() != 0o700 {
				return fmt.Errorf("%s: archived as %v", rel, fi.Mode())
			}
			return nil
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
			return fmt.Errorf("%s: archived as %v", rel, fi.Mode())
		}
		a, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(cp)
		if err != nil {
			return err
		}
		if !bytes.Equal(a, b) {
			return fmt.Errorf("%s differs", rel)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func anchors(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), exportAnchorPrefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestExportArchivesByteForByte(t *testing.T) {
	src := exportSource(t)
	before := snapshot(t, src)
	parent := t.TempDir()
	dest := filepath.Join(parent, "archive")
	res, err := Export(context.Background(), ExportOptions{Spool: src, Destination: dest})
	if err != nil {
		t.Fatal(err)
	}
	sameSnapshot(t, "source", before, snapshot(t, src))
	files := sameBytes(t, src, dest)
	if files != res.Files || files < 10 {
		t.Fatalf("archived %d files, result says %d", files, res.Files)
	}
	m, err := VerifyExport(dest)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Committed || m.SpoolID == "" || !m.SpoolLockHeld || m.Files != res.Files {
		t.Fatalf("manifest: %+v", m)
	}
	fi, err := os.Lstat(dest)
	if err != nil || fileID(fi) != res.DestinationIdentity || fi.Mode().Perm() != 0o700 {
		t.Fatalf("destination %v %v", fi, err)
	}
	// The anchor is left in place, verified empty.
	if a := anchors(t, parent); len(a) != 1 || filepath.Join(parent, a[0]) != res.Anchor || len(a[0]) != len(exportAnchorPrefix)+32 {
		t.Fatalf("anchors %v, result %s", a, res.Anchor)
	}
	if names, _ := readNames(res.Anchor, 4); len(names) != 0 {
		t.Fatalf("anchor not empty: %v", names)
	}
	// The copy is a different identity: inspectable read-only, never
	// openable for capture.
	rep, err := Inspect(filepath.Join(dest, ExportTreeName), 5)
	if err != nil || !rep.Committed || rep.IdentityMatches {
		t.Fatalf("inspect of the archive: %+v %v", rep, err)
	}
	if _, err := Open(filepath.Join(dest, ExportTreeName)); !errors.Is(err, ErrIdentityChanged) {
		t.Fatalf("open of the archived copy: %v", err)
	}
	// Nonresumable, never adopting: the same destination again is refused.
	_, err = Export(context.Background(), ExportOptions{Spool: src, Destination: dest})
	if !errors.Is(err, ErrExportDestinationExists) {
		t.Fatalf("second export: %v", err)
	}
	if _, err := VerifyExport(dest); err != nil {
		t.Fatalf("the refused export touched the archive: %v", err)
	}
	// A tampered archive does not verify.
	if err := os.WriteFile(filepath.Join(dest, ExportTreeName, cursorFile), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyExport(dest); !errors.Is(err, ErrExportVerify) {
		t.Fatalf("tampered archive verified: %v", err)
	}
}

func TestExportRefusals(t *testing.T) {
	type fixture struct{ src, parent string }
	cases := []struct {
		name   string
		setup  func(t *testing.T, f fixture) ExportOptions
		want   error
		substr string
	}{
		{"relative spool", func(t *testing.T, f fixture) ExportOptions {
			return ExportOptions{Spool: "spool", Destination: filepath.Join(f.parent, "d")}
		}, nil, "--spool \"spool\" is not an absolute clean path"},
		{"relative destination", func(t *testing.T, f fixture) ExportOptions {
			return ExportOptions{Spool: f.src, Destination: "d"}
		}, nil, "--destination \"d\" is not an absolute clean path"},
		{"existing directory", func(t *testing.T, f fixture) ExportOptions {
			os.Mkdir(filepath.Join(f.parent, "d"), 0o755)
			return ExportOptions{Spool: f.src, Destination: filepath.Join(f.parent, "d")}
		}, ErrExportDestinationExists, "never adopted"},
		{"existing file", func(t *testing.T, f fixture) ExportOptions {
			os.WriteFile(filepath.Join(f.parent, "d"), []byte("mine"), 0o644)
			return ExportOptions{Spool: f.src, Destination: filepath.Join(f.parent, "d")}
		}, ErrExportDestinationExists, "already exists"},
		{"existing dangling symlink", func(t *testing.T, f fixture) ExportOptions {
			os.Symlink("/nonexistent/target", filepath.Join(f.parent, "d"))
			return ExportOptions{Spool: f.src, Destination: filepath.Join(f.parent, "d")}
		}, ErrExportDestinationExists, "already exists"},
		{"destination is the source", func(t *testing.T, f fixture) ExportOptions {
			return ExportOptions{Spool: f.src, Destination: f.src}
		}, ErrExportNested, "refused before anything is created"},
		{"destination beneath the source", func(t *testing.T, f fixture) ExportOptions {
			return ExportOptions{Spool: f.src, Destination: filepath.Join(f.src, "quarantine", "d")}
		}, ErrExportNested, "refused before anything is created"},
		{"destination beneath the source through a symlink", func(t *testing.T, f fixture) ExportOptions {
			os.Symlink(filepath.Join(f.src, "outbox"), filepath.Join(f.parent, "link"))
			return ExportOptions{Spool: f.src, Destination: filepath.Join(f.parent, "link", "d")}
		}, ErrExportNested, "beneath the source spool"},
		{"file above 64 MiB", func(t *testing.T, f fixture) ExportOptions {
			big, _ := os.OpenFile(filepath.Join(f.src, "artifacts", "big"), os.O_CREATE|os.O_WRONLY, 0o600)
			big.Truncate(MaxExportEntryBytes + 1) // sparse
			big.Close()
			return ExportOptions{Spool: f.src, Destination: filepath.Join(f.parent, "d")}
		}, ErrExportEntryTooLarge, "67108865 bytes; files above 67108864 bytes are refused, never copied by size only"},
		{"symlink in the spool", func(t *testing.T, f fixture) ExportOptions {
			os.Symlink("/etc/passwd", filepath.Join(f.src, "outbox", "link"))
			return ExportOptions{Spool: f.src, Destination: filepath.Join(f.parent, "d")}
		}, ErrExportUnreadable, "outbox/link is a symbolic link"},
		{"named pipe in the spool", func(t *testing.T, f fixture) ExportOptions {
			syscall.Mkfifo(filepath.Join(f.src, "fifo"), 0o600)
			return ExportOptions{Spool: f.src, Destination: filepath.Join(f.parent, "d")}
		}, ErrExportUnreadable, "is a named pipe"},
		{"spool is a symlink", func(t *testing.T, f fixture) ExportOptions {
			os.Symlink(f.src, filepath.Join(f.parent, "spoollink"))
			return ExportOptions{Spool: filepath.Join(f.parent, "spoollink"), Destination: filepath.Join(f.parent, "d")}
		}, ErrExportUnreadable, "spoollink"},
		{"entry bound", func(t *testing.T, f fixture) ExportOptions {
			return ExportOptions{Spool: f.src, Destination: filepath.Join(f.parent, "d"), MaxEntries: 5}
		}, ErrExportBound, "more than 5 entries"},
		{"missing parent", func(t *testing.T, f fixture) ExportOptions {
			return ExportOptions{Spool: f.src, Destination: filepath.Join(f.parent, "no", "d")}
		}, nil, "destination parent"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := fixture{src: exportSource(t), parent: t.TempDir()}
			o := c.setup(t, f)
			before, parentBefore := snapshot(t, f.src), snapshot(t, f.parent)
			res, err := Export(context.Background(), o)
			if err == nil {
				t.Fatalf("exported: %+v", res)
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("error %v, want %v", err, c.want)
			}
			var ee *ExportError
			if !errors.As(err, &ee) || len(ee.Artifacts) != 0 {
				t.Fatalf("want an *ExportError with nothing created: %#v", err)
			}
			for _, s := range []string{c.substr, "nothing was created", "the source spool was not changed"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			sameSnapshot(t, "source", before, snapshot(t, f.src))
			sameSnapshot(t, "destination parent", parentBefore, snapshot(t, f.parent))
		})
	}
}

// artifact returns the named role's artifact of an export error.
func artifact(t *testing.T, err error, role string) ExportArtifact {
	t.Helper()
	var ee *ExportError
	if !errors.As(err, &ee) {
		t.Fatalf("not an *ExportError: %v", err)
	}
	for _, a := range ee.Artifacts {
		if a.Role == role {
			return a
		}
	}
	t.Fatalf("no %s artifact in %v", role, err)
	return ExportArtifact{}
}

// present checks that an artifact is where the error says, with its
// identity, and was not removed.
func present(t *testing.T, a ExportArtifact) {
	t.Helper()
	fi, err := os.Lstat(a.Name)
	if err != nil || a.Identity == nil || fileID(fi) != *a.Identity || a.State != "present at this name" && !strings.HasPrefix(a.State, "present at this name;") {
		t.Fatalf("artifact %+v: lstat %v %v", a, fi, err)
	}
}

func TestExportFailuresReportEverything(t *testing.T) {
	ctx := context.Background()
	t.Run("collision budget", func(t *testing.T) {
		src, parent := exportSource(t), t.TempDir()
		for i := range exportAnchorAttempts {
			os.Mkdir(filepath.Join(parent, fmt.Sprintf("taken-%d", i)), 0o700)
		}
		_, err := Export(ctx, ExportOptions{Spool: src, Destination: filepath.Join(parent, "d"),
			hooks: &exportHooks{anchorName: func(i int) string { return fmt.Sprintf("taken-%d", i) }}})
		if !errors.Is(err, ErrExportAnchor) || !strings.Contains(err.Error(), "16 random anchor names already existed") || !strings.Contains(err.Error(), "nothing was created") {
			t.Fatal(err)
		}
	})
	t.Run("foreign entry in the anchor", func(t *testing.T) {
		src, parent := exportSource(t), t.TempDir()
		_, err := Export(ctx, ExportOptions{Spool: src, Destination: filepath.Join(parent, "d"),
			hooks: &exportHooks{afterAnchor: func(p string) { os.WriteFile(filepath.Join(p, "planted"), []byte("x"), 0o600) }}})
		if !errors.Is(err, ErrExportAnchor) || !strings.Contains(err.Error(), "is not empty (planted)") {
			t.Fatal(err)
		}
		a := artifact(t, err, "anchor")
		present(t, a)
		if b, rerr := os.ReadFile(filepath.Join(a.Name, "planted")); rerr != nil || string(b) != "x" {
			t.Fatalf("the foreign entry was touched: %q %v", b, rerr)
		}
		if f := artifact(t, err, "foreign_entries"); !strings.Contains(f.Name, "planted") || !strings.Contains(f.State, "left untouched") {
			t.Fatalf("%+v", f)
		}
		if _, err := os.Lstat(filepath.Join(parent, "d")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatal("destination created")
		}
	})
	t.Run("anchor with group access", func(t *testing.T) {
		src, parent := exportSource(t), t.TempDir()
		_, err := Export(ctx, ExportOptions{Spool: src, Destination: filepath.Join(parent, "d"),
			hooks: &exportHooks{afterAnchor: func(p string) { os.Chmod(p, 0o750) }}})
		if !errors.Is(err, ErrExportAnchor) || !strings.Contains(err.Error(), "has mode 0750") || !strings.Contains(err.Error(), "privacy: its type, ownership and mode were not verified") {
			t.Fatal(err)
		}
		present(t, artifact(t, err, "anchor"))
	})
	t.Run("anchor replaced before it is opened", func(t *testing.T) {
		src, parent := exportSource(t), t.TempDir()
		_, err := Export(ctx, ExportOptions{Spool: src, Destination: filepath.Join(parent, "d"),
			hooks: &exportHooks{afterAnchor: func(p string) {
				os.Rename(p, p+".moved")
				os.WriteFile(p, []byte("a replacement"), 0o600)
			}}})
		if !errors.Is(err, ErrExportAnchor) || !strings.Contains(err.Error(), "not a directory") {
			t.Fatal(err)
		}
		a := artifact(t, err, "anchor")
		if b, _ := os.ReadFile(a.Name); string(b) != "a replacement" {
			t.Fatal("the replacement was touched")
		}
	})
	t.Run("racing destination", func(t *testing.T) {
		src, parent := exportSource(t), t.TempDir()
		dest := filepath.Join(parent, "d")
		_, err := Export(ctx, ExportOptions{Spool: src, Destination: dest,
			hooks: &exportHooks{beforeInstall: func() { os.Mkdir(dest, 0o755); os.WriteFile(filepath.Join(dest, "theirs"), nil, 0o644) }}})
		if !errors.Is(err, ErrExportDestinationExists) || !strings.Contains(err.Error(), "appeared during the export") {
			t.Fatal(err)
		}
		for _, s := range []string{"; source " + src + " (dev ", "present at this name; not changed", "; destination parent " + parent + " (dev "} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%v does not name %q", err, s)
			}
		}
		present(t, artifact(t, err, "anchor"))
		child := artifact(t, err, "owned_child")
		present(t, child)
		if !strings.Contains(strings.Join(child.Uncertainty, ";"), "incomplete archive") {
			t.Fatalf("%+v", child)
		}
		fi, _ := os.Lstat(dest)
		names, _ := readNames(dest, 4)
		if fi.Mode().Perm() != 0o755 || len(names) != 1 || names[0] != "theirs" {
			t.Fatalf("the racing destination was touched: %v %v", fi.Mode(), names)
		}
	})
	t.Run("digest changes during copying", func(t *testing.T) {
		src, parent := exportSource(t), t.TempDir()
		dest := filepath.Join(parent, "d")
		_, err := Export(ctx, ExportOptions{Spool: src, Destination: dest,
			hooks: &exportHooks{beforeRehash: func(rel string) {
				if rel == cursorFile {
					f, _ := os.OpenFile(filepath.Join(src, rel), os.O_WRONLY, 0)
					f.WriteAt([]byte("Z"), 0)
					f.Close()
				}
			}}})
		if !errors.Is(err, ErrExportChanged) || !strings.Contains(err.Error(), "the digest of "+filepath.Join(src, cursorFile)+" changed while it was copied") {
			t.Fatal(err)
		}
		d := artifact(t, err, "destination")
		present(t, d)
		if _, err := VerifyExport(dest); !errors.Is(err, ErrExportVerify) {
			t.Fatalf("an incomplete archive verified: %v", err)
		}
	})
	for _, fp := range []string{"export.install-sync", "export.tree-sync", "export.manifest-sync", "export.manifest-dir-sync"} {
		t.Run("sync failure "+fp, func(t *testing.T) {
			t.Setenv(FailpointEnv, fp+"=eio")
			src, parent := exportSource(t), t.TempDir()
			dest := filepath.Join(parent, "d")
			_, err := Export(ctx, ExportOptions{Spool: src, Destination: dest})
			if !errors.Is(err, ErrExportSync) || !strings.Contains(err.Error(), "crash: a sync failed, so this may not survive a machine crash") {
				t.Fatal(err)
			}
			d := artifact(t, err, "destination")
			present(t, d)
			// A sync failure never claims success: even an installed
			// manifest is reported as crash-uncertain.
			if fp == "export.manifest-dir-sync" {
				if _, verr := VerifyExport(dest); verr != nil || !strings.Contains(err.Error(), "manifest.json is installed but its directory was not synced") {
					t.Fatal(verr, err)
				}
			} else if _, verr := VerifyExport(dest); verr == nil {
				t.Fatal("an archive whose sync failed verified without a manifest")
			}
		})
	}
	t.Run("destination renamed after install", func(t *testing.T) {
		src, parent := exportSource(t), t.TempDir()
		dest := filepath.Join(parent, "d")
		_, err := Export(ctx, ExportOptions{Spool: src, Destination: dest,
			hooks: &exportHooks{afterInstall: func() {
				os.Rename(dest, dest+".moved")
				os.Mkdir(dest, 0o755)
			}}})
		if !errors.Is(err, ErrExportLocation) {
			t.Fatal(err)
		}
		d := artifact(t, err, "destination")
		if !strings.Contains(d.State, "current location and existence are unknown") || !strings.Contains(strings.Join(d.Uncertainty, ";"), "content: complete") {
			t.Fatalf("%+v", d)
		}
		// The replacement is untouched; the archive, wherever it went, is
		// complete.
		if names, _ := readNames(dest, 4); len(names) != 0 {
			t.Fatalf("the replacement was written: %v", names)
		}
		if _, err := VerifyExport(dest + ".moved"); err != nil {
			t.Fatal(err)
		}
	})
}
