// Package objectstest is the conformance suite of objects.Store, run by
// every implementation (the directory and the S3 bucket), as restic runs
// one suite over every backend:
//
//	func TestSuite(t *testing.T) { objectstest.Run(t, openHarness) }
//
// It checks the store as a byte mover (names, bounds, missing objects,
// idempotent and concurrent Put, large objects) and, through
// objects.Verified, that bytes which do not hash to their name are refused
// on the way in and on the way out.
package objectstest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync"
	"testing"

	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/hub/objects"
)

// Harness is one store under the suite.
type Harness struct {
	// Store is the implementation itself (not wrapped in Verified).
	Store objects.Store
	// Tamper replaces an object's stored bytes behind the store's back.
	Tamper func(t *testing.T, digest string, b []byte)
	// Parts, when not nil, counts the part uploads of multipart uploads so
	// far: a large object must take two or more.
	Parts func() int64
}

// Open returns a fresh, empty store.
type Open func(t *testing.T) Harness

// Run runs every test, each on a store of its own.
func Run(t *testing.T, open Open) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"ByteMover", testByteMover},
		{"Names", testNames},
		{"Limits", testLimits},
		{"Verified", testVerified},
		{"Large", testLarge},
		{"ConcurrentPut", testConcurrentPut},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

// Digest is the object name of b.
func Digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func testByteMover(t *testing.T, h Harness) {
	ctx := context.Background()
	st := h.Store
	body := []byte("hello object")
	dg := Digest(body)
	for range 2 { // a second Put of the same object succeeds
		if err := st.Put(ctx, dg, bytes.NewReader(body), 100); err != nil {
			t.Fatalf("Put: %v", err)
		}
	}
	if got, err := st.Get(ctx, dg, 100); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("Get = %q, %v", got, err)
	}
	if ok, err := st.Has(ctx, dg); !ok || err != nil {
		t.Fatalf("Has = %v, %v", ok, err)
	}
	missing := Digest([]byte("never stored"))
	if ok, err := st.Has(ctx, missing); ok || err != nil {
		t.Fatalf("Has(missing) = %v, %v", ok, err)
	}
	if _, err := st.Get(ctx, missing, 100); !errors.Is(err, objects.ErrNotFound) {
		t.Fatalf("Get(missing) = %v, want ErrNotFound", err)
	}
	if err := st.Delete(ctx, dg); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := st.Delete(ctx, missing); err != nil {
		t.Fatalf("Delete(missing): %v", err)
	}
	if _, err := st.Get(ctx, dg, 100); !errors.Is(err, objects.ErrNotFound) {
		t.Fatalf("Get(deleted) = %v, want ErrNotFound", err)
	}
	if ok, err := st.Has(ctx, dg); ok || err != nil {
		t.Fatalf("Has(deleted) = %v, %v", ok, err)
	}
	// An object already present is kept as it is: a store never replaces
	// bytes in place (a Put of other bytes under the name changes nothing).
	if err := st.Put(ctx, dg, bytes.NewReader(body), 100); err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctx, dg, bytes.NewReader([]byte("other bytes")), 100); err != nil {
		t.Fatalf("Put over a present object: %v", err)
	}
	if got, err := st.Get(ctx, dg, 100); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("Get after a second Put = %q, %v", got, err)
	}
}

// testNames: a name is a SHA-256 in lowercase hex, on the store itself
// (names become paths and keys) as through Verified.
func testNames(t *testing.T, h Harness) {
	ctx := context.Background()
	dg := Digest([]byte("x"))
	for _, st := range []objects.Store{h.Store, objects.Verified(h.Store)} {
		for _, name := range []string{"../etc/passwd", "A" + dg[1:], dg[:63], dg + "0", "", "nothex" + dg[6:]} {
			if err := st.Put(ctx, name, bytes.NewReader([]byte("x")), 10); !errors.Is(err, objects.ErrBadName) {
				t.Fatalf("Put(%q) = %v, want ErrBadName", name, err)
			}
			if _, err := st.Get(ctx, name, 10); !errors.Is(err, objects.ErrBadName) {
				t.Fatalf("Get(%q) = %v, want ErrBadName", name, err)
			}
			if _, err := st.Has(ctx, name); !errors.Is(err, objects.ErrBadName) {
				t.Fatalf("Has(%q) = %v, want ErrBadName", name, err)
			}
			if err := st.Delete(ctx, name); !errors.Is(err, objects.ErrBadName) {
				t.Fatalf("Delete(%q) = %v, want ErrBadName", name, err)
			}
		}
	}
}

func testLimits(t *testing.T, h Harness) {
	ctx := context.Background()
	body := []byte("hello object")
	dg := Digest(body)
	for _, st := range []objects.Store{h.Store, objects.Verified(h.Store)} {
		if err := st.Put(ctx, dg, bytes.NewReader(body), 3); !errors.Is(err, fsutil.ErrTooLarge) {
			t.Fatalf("Put over its limit = %v", err)
		}
		if ok, _ := st.Has(ctx, dg); ok {
			t.Fatal("an object over its limit was stored")
		}
	}
	if err := h.Store.Put(ctx, dg, bytes.NewReader(body), int64(len(body))); err != nil {
		t.Fatalf("Put at exactly its limit: %v", err)
	}
	for _, st := range []objects.Store{h.Store, objects.Verified(h.Store)} {
		if _, err := st.Get(ctx, dg, 3); !errors.Is(err, fsutil.ErrTooLarge) {
			t.Fatalf("Get over its limit = %v", err)
		}
		if got, err := st.Get(ctx, dg, int64(len(body))); err != nil || !bytes.Equal(got, body) {
			t.Fatalf("Get at exactly its limit = %q, %v", got, err)
		}
	}
}

// testVerified: bytes that do not hash to their name are refused with a
// *objects.DigestError, and nothing is stored.
func testVerified(t *testing.T, h Harness) {
	ctx := context.Background()
	v := objects.Verified(h.Store)
	if objects.Verified(v) != v {
		t.Fatal("Verified wrapped a verified store again")
	}
	body := []byte("hello object")
	dg := Digest(body)
	wrong := Digest([]byte("other"))
	err := v.Put(ctx, wrong, bytes.NewReader(body), 100)
	var de *objects.DigestError
	if !errors.As(err, &de) || !errors.Is(err, objects.ErrDigest) || de.Digest != wrong || de.Got != dg {
		t.Fatalf("Put under the wrong digest = %v, want a DigestError naming %s", err, dg)
	}
	if ok, _ := h.Store.Has(ctx, wrong); ok {
		t.Fatal("bytes refused for their digest were stored")
	}
	if err := v.Put(ctx, dg, bytes.NewReader(body), 100); err != nil {
		t.Fatal(err)
	}
	if got, err := v.Get(ctx, dg, 100); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("Get = %q, %v", got, err)
	}
	// Bytes changed behind the store's back are refused, not served.
	h.Tamper(t, dg, []byte("tampered"))
	_, err = v.Get(ctx, dg, 100)
	if !errors.As(err, &de) || de.Digest != dg || de.Got != Digest([]byte("tampered")) {
		t.Fatalf("Get of tampered bytes = %v, want a DigestError", err)
	}
	if _, err := v.Get(ctx, Digest([]byte("never")), 100); !errors.Is(err, objects.ErrNotFound) {
		t.Fatalf("Get(missing) through Verified = %v", err)
	}
	if err := v.Delete(ctx, dg); err != nil {
		t.Fatal(err)
	}
	if ok, err := v.Has(ctx, dg); ok || err != nil {
		t.Fatalf("Has(deleted) = %v, %v", ok, err)
	}
}

// testLarge: a large object (multipart on S3) comes back byte for byte.
func testLarge(t *testing.T, h Harness) {
	ctx := context.Background()
	v := objects.Verified(h.Store)
	big := make([]byte, 12<<20+12345)
	rand.Read(big)
	bd := Digest(big)
	var before int64
	if h.Parts != nil {
		before = h.Parts()
	}
	if err := v.Put(ctx, bd, bytes.NewReader(big), int64(len(big))); err != nil {
		t.Fatal(err)
	}
	if got, err := v.Get(ctx, bd, int64(len(big))); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("Get large: %d bytes, %v", len(got), err)
	}
	if h.Parts != nil && h.Parts()-before < 2 {
		t.Fatalf("a %d-byte object was uploaded in %d parts", len(big), h.Parts()-before)
	}
}

// testConcurrentPut: concurrent writers of the same object all succeed.
func testConcurrentPut(t *testing.T, h Harness) {
	ctx := context.Background()
	v := objects.Verified(h.Store)
	other := []byte("written by many")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- v.Put(ctx, Digest(other), bytes.NewReader(other), 100)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Put: %v", err)
		}
	}
	if got, err := v.Get(ctx, Digest(other), 100); err != nil || !bytes.Equal(got, other) {
		t.Fatalf("Get after concurrent Put = %q, %v", got, err)
	}
}
