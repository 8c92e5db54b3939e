package source

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

// TestStagedCaptureAdmitted: a capture through the lock-free staging store
// (the intake hook) writes the changed files and the manifest without the
// spool lock; the lock holder's Admit retains them, verified, and the
// binding stays exact. A limit that refuses a blob at admission gives the
// binding a capture under the lock would have had (stopped spool_refused,
// no manifest identity); a staged blob that is gone gives
// bytes_not_retained. None of them claims bytes the spool lacks.
func TestStagedCaptureAdmitted(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		lim  spool.Limits
		// before runs between the staged capture and the admission.
		before func(t *testing.T, sp *spool.Spool)
		check  func(t *testing.T, sp *spool.Spool, staged, got *event.SourceBinding)
	}{
		{"admitted", spool.Limits{}, nil, func(t *testing.T, sp *spool.Spool, staged, got *event.SourceBinding) {
			if !got.Retained || got.Partial || got.Stopped != "" || len(got.Omissions) != 0 || got.ManifestDigest != staged.ManifestDigest {
				t.Fatalf("%+v", got)
			}
			m, err := ReadManifest(sp, got)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range m.Entries {
				b, err := sp.ReadBlob(event.ArtifactRef{Digest: "sha256:" + e.SHA256, Bytes: e.Size})
				if err != nil || !strings.Contains(string(b), "dirty") {
					t.Fatalf("%s: %q %v", e.Path, b, err)
				}
			}
		}},
		// No lock holder recorded usage (no summary), so the staging store
		// could not refuse the 60 KiB file the byte limit has no room for.
		{"refused by the byte limit", spool.Limits{Records: 64, Bytes: 64 << 10, ArtifactBytes: 63 << 10}, nil, func(t *testing.T, sp *spool.Spool, staged, got *event.SourceBinding) {
			if got.Stopped != StopSpoolRefused || got.ManifestDigest != "" || got.Retained || !got.Partial || len(got.Omissions) != 0 {
				t.Fatalf("%+v", got)
			}
		}},
		{"a staged blob lost", spool.Limits{}, func(t *testing.T, sp *spool.Spool) {
			names, _ := filepath.Glob(filepath.Join(sp.Dir(), "intake-blobs", "*.art"))
			if len(names) != 3 {
				t.Fatalf("staged %v", names)
			}
			os.Remove(names[0])
		}, func(t *testing.T, sp *spool.Spool, staged, got *event.SourceBinding) {
			if got != staged {
				t.Fatalf("%+v", got)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := newRepo(t, map[string]string{"a.txt": "one\n"})
			write(t, dir, "a.txt", "dirty tracked\n")
			n := 1 << 10
			if tc.lim.Bytes != 0 {
				n = 60 << 10 / 16 // above what the byte limit leaves
			}
			write(t, dir, "new.txt", strings.Repeat("dirty untracked ", n))
			sp, err := spool.InitWith(ctx, filepath.Join(t.TempDir(), "spool"), spool.Config{Limits: tc.lim})
			if err != nil {
				t.Fatal(err)
			}
			captured, err := Capture(ctx, dir, Options{Store: sp.Staging()})
			if err != nil || !captured.Retained || captured.ManifestDigest == "" {
				t.Fatalf("%+v %v", captured, err)
			}
			// Until admitted the binding claims nothing.
			staged := Staged(captured)
			if staged.Retained || !staged.Partial || !slices.Equal(staged.Omissions, []string{OmissionNotRetained}) {
				t.Fatalf("staged %+v", staged)
			}
			// Nothing is retained before admission.
			if _, err := ReadManifest(sp, staged); err == nil {
				t.Fatal("the staged manifest reads as retained before admission")
			}
			if tc.before != nil {
				tc.before(t, sp)
			}
			ss, err := sp.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := Admit(ss, staged, nil)
			ss.Close()
			tc.check(t, sp, staged, got)
			if got.Retained {
				if _, err := ReadManifest(sp, got); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestAdmitDigestOnly: a digest-only binding whose bytes the spool does not
// hold (an intake record of an older hook) is recorded as it is.
func TestAdmitDigestOnly(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t, map[string]string{"a.txt": "one\n"})
	write(t, dir, "a.txt", "dirty\n")
	sb, err := Capture(ctx, dir, Options{})
	if err != nil || !slices.Equal(sb.Omissions, []string{OmissionNotRetained}) {
		t.Fatalf("%+v %v", sb, err)
	}
	_, ss := newStore(t, spool.Limits{})
	if got := Admit(ss, sb, nil); got != sb {
		t.Fatalf("%+v", got)
	}
}

// TestStagedCaptureRefusedAtReceipt: a working file above the spool's
// per-artifact limit is refused by the staging store itself: the capture
// stops with spool_refused at receipt and nothing is written.
func TestStagedCaptureRefusedAtReceipt(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t, map[string]string{"a.txt": "one\n"})
	write(t, dir, "big.txt", strings.Repeat("x", 5000))
	sp, err := spool.InitWith(ctx, filepath.Join(t.TempDir(), "spool"), spool.Config{Limits: spool.Limits{ArtifactBytes: 4096}})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := Capture(ctx, dir, Options{Store: sp.Staging()})
	if err != nil || sb.Stopped != StopSpoolRefused || sb.Retained || sb.ManifestDigest != "" || !sb.Partial {
		t.Fatalf("%+v %v", sb, err)
	}
	if names, _ := filepath.Glob(filepath.Join(sp.Dir(), "intake-blobs", "*")); len(names) != 0 {
		t.Fatalf("a refused capture staged %v", names)
	}
}
