package objects

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentscm/agentscm/internal/fsutil"
)

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestDir: what the suite cannot see from outside (file modes, symlinks).
func TestDir(t *testing.T) {
	ctx := context.Background()
	d, err := OpenDir(filepath.Join(t.TempDir(), "objects"))
	if err != nil {
		t.Fatal(err)
	}
	body := []byte("hello object")
	dg := digestOf(body)
	tests := []struct {
		name   string
		digest string
		body   []byte
		limit  int64
		want   error
	}{
		{"bad name", "../etc/passwd", body, 100, ErrBadName},
		{"uppercase name", "A" + dg[1:], body, 100, ErrBadName},
		{"wrong digest", digestOf([]byte("other")), body, 100, ErrDigest},
		{"over limit", dg, body, 3, fsutil.ErrTooLarge},
		{"ok", dg, body, 100, nil},
		{"again", dg, body, 100, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Verified(d).Put(ctx, tc.digest, bytes.NewReader(tc.body), tc.limit)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Put = %v, want %v", err, tc.want)
			}
		})
	}
	got, err := d.Get(ctx, dg, 100)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("Get = %q, %v", got, err)
	}
	fi, err := os.Stat(filepath.Join(d.root, dg[:2], dg))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("object mode: %v %v", fi.Mode(), err)
	}
	// A corrupted object is refused through Verified, not served.
	if err := os.WriteFile(filepath.Join(d.root, dg[:2], dg), []byte("tampered"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Verified(d).Get(ctx, dg, 100); !errors.Is(err, ErrDigest) {
		t.Fatalf("Get tampered = %v", err)
	}
	if ok, _ := d.Has(ctx, dg); !ok {
		t.Fatal("Has = false")
	}
	if err := d.Delete(ctx, dg); err != nil {
		t.Fatal(err)
	}
	if err := d.Delete(ctx, digestOf([]byte("never"))); err != nil {
		t.Fatalf("Delete missing: %v", err)
	}
	if _, err := d.Get(ctx, dg, 100); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get deleted = %v", err)
	}
	// A symlink in place of an object is not followed.
	if err := os.Symlink("/etc/hostname", filepath.Join(d.root, dg[:2], dg)); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Get(ctx, dg, 100); err == nil {
		t.Fatal("Get followed a symlink")
	}
}
