package spool

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestPutBlobs: blobs are retained content-addressed, counted once, read
// back verified, survive a reopen (recovery counts them), and a bound is an
// explicit refusal.
func TestPutBlobs(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "spool")
	sp, err := InitWith(ctx, dir, Config{Limits: Limits{Records: 64, Bytes: 128 << 10, ArtifactBytes: 8 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	ss, err := sp.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := ss.Usage()
	refs, err := ss.PutBlobs([]Blob{{Data: []byte("one")}, {Data: []byte("two")}, {Data: []byte("one")}})
	if err != nil || len(refs) != 3 || refs[0] != refs[2] || refs[0].Digest == refs[1].Digest || refs[0].Retention != "local-private" {
		t.Fatalf("%+v %v", refs, err)
	}
	after, _ := ss.Usage()
	if after.Usage.Records != before.Usage.Records+2 || after.Usage.Bytes <= before.Usage.Bytes {
		t.Fatalf("usage %+v -> %+v", before.Usage, after.Usage)
	}
	// Above the per-artifact limit: refused, nothing counted.
	if _, err := ss.PutBlobs([]Blob{{Data: []byte(strings.Repeat("x", 9<<10))}}); !errors.Is(err, ErrBlobRefused) {
		t.Fatalf("an oversized blob: %v", err)
	}
	// Past the byte limit: refused after the blobs that fit.
	var many []Blob
	for i := range 40 {
		many = append(many, Blob{Data: []byte(strings.Repeat(string(rune('a'+i%26)), 7<<10) + string(rune('0'+i)))})
	}
	got, err := ss.PutBlobs(many)
	if !errors.Is(err, ErrBlobRefused) || len(got) == 0 || len(got) == len(many) {
		t.Fatalf("quota: %d retained, %v", len(got), err)
	}
	ss.Close()
	sp2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range append(refs, got...) {
		if b, err := sp2.ReadBlob(r); err != nil || int64(len(b)) != r.Bytes {
			t.Fatalf("read back %+v: %v", r, err)
		}
	}
	if _, err := sp2.PutBlobs(ctx, []Blob{{Data: []byte("one")}}); err != nil {
		t.Fatalf("an existing blob after reopen: %v", err)
	}
}
