package objects_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/hub/objects"
	"github.com/agentscm/agentscm/internal/hub/objects/s3"
	"github.com/agentscm/agentscm/internal/hub/objects/s3/s3test"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// backend is one implementation under the suite, with a way to replace an
// object's stored bytes behind the store's back.
type backend struct {
	name string
	// open returns the store, a tamperer and a count of the multipart
	// part uploads so far (nil: not applicable).
	open func(t *testing.T) (objects.Store, func(t *testing.T, digest string, b []byte), func() int64)
}

// partCounter counts the requests that upload one part of a multipart upload.
type partCounter struct{ n atomic.Int64 }

func (c *partCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Query().Has("partNumber") {
		c.n.Add(1)
	}
	return http.DefaultTransport.RoundTrip(r)
}

var backends = []backend{
	{name: "dir", open: func(t *testing.T) (objects.Store, func(*testing.T, string, []byte), func() int64) {
		root := filepath.Join(t.TempDir(), "objects")
		d, err := objects.OpenDir(root)
		if err != nil {
			t.Fatal(err)
		}
		return d, func(t *testing.T, dg string, b []byte) {
			if err := os.WriteFile(filepath.Join(root, dg[:2], dg), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}, nil
	}},
	{name: "s3", open: func(t *testing.T) (objects.Store, func(*testing.T, string, []byte), func() int64) {
		cfg := s3test.Server(t, "hub", "team/objects")
		parts := &partCounter{}
		cfg.Transport = parts
		st, err := s3.Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := minio.New(cfg.Endpoint[len("http://"):], &minio.Options{Creds: cfg.Creds, Region: cfg.Region})
		if err != nil {
			t.Fatal(err)
		}
		return st, func(t *testing.T, dg string, b []byte) {
			_, err := cl.PutObject(context.Background(), cfg.Bucket, "team/objects/"+dg[:2]+"/"+dg, bytes.NewReader(b), int64(len(b)),
				minio.PutObjectOptions{DisableContentSha256: true})
			if err != nil {
				t.Fatal(err)
			}
		}, parts.n.Load
	}},
}

// TestSuite runs one object-store suite over every backend.
func TestSuite(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			st, tamper, parts := be.open(t)
			body := []byte("hello object")
			dg := digest(body)
			for _, tc := range []struct {
				name   string
				digest string
				limit  int64
				want   error
			}{
				{"bad name", "../etc/passwd", 100, objects.ErrBadName},
				{"uppercase name", "A" + dg[1:], 100, objects.ErrBadName},
				{"wrong digest", digest([]byte("other")), 100, objects.ErrDigest},
				{"over limit", dg, 3, fsutil.ErrTooLarge},
				{"ok", dg, 100, nil},
				{"again", dg, 100, nil},
			} {
				if err := st.Put(ctx, tc.digest, bytes.NewReader(body), tc.limit); !errors.Is(err, tc.want) {
					t.Fatalf("%s: Put = %v, want %v", tc.name, err, tc.want)
				}
			}
			if got, err := st.Get(ctx, dg, 100); err != nil || !bytes.Equal(got, body) {
				t.Fatalf("Get = %q, %v", got, err)
			}
			if _, err := st.Get(ctx, dg, 3); !errors.Is(err, fsutil.ErrTooLarge) {
				t.Fatalf("Get over its limit = %v", err)
			}
			if ok, err := st.Has(ctx, dg); !ok || err != nil {
				t.Fatalf("Has = %v, %v", ok, err)
			}
			missing := digest([]byte("never stored"))
			if ok, err := st.Has(ctx, missing); ok || err != nil {
				t.Fatalf("Has missing = %v, %v", ok, err)
			}
			if _, err := st.Get(ctx, missing, 100); !errors.Is(err, objects.ErrNotFound) {
				t.Fatalf("Get missing = %v", err)
			}
			if _, err := st.Get(ctx, "nothex", 100); !errors.Is(err, objects.ErrBadName) {
				t.Fatalf("Get bad name = %v", err)
			}
			// Bytes changed behind the store's back are refused, not served.
			tamper(t, dg, []byte("tampered"))
			if _, err := st.Get(ctx, dg, 100); !errors.Is(err, objects.ErrDigest) {
				t.Fatalf("Get tampered = %v", err)
			}
			if err := st.Delete(ctx, dg); err != nil {
				t.Fatal(err)
			}
			if err := st.Delete(ctx, missing); err != nil {
				t.Fatalf("Delete missing: %v", err)
			}
			if _, err := st.Get(ctx, dg, 100); !errors.Is(err, objects.ErrNotFound) {
				t.Fatalf("Get deleted = %v", err)
			}

			// A large object (multipart on S3: above s3.DefaultPartSize)
			// comes back byte for byte.
			big := make([]byte, 12<<20+12345)
			rand.Read(big)
			bd := digest(big)
			var before int64
			if parts != nil {
				before = parts()
			}
			if err := st.Put(ctx, bd, bytes.NewReader(big), int64(len(big))); err != nil {
				t.Fatal(err)
			}
			if got, err := st.Get(ctx, bd, int64(len(big))); err != nil || !bytes.Equal(got, big) {
				t.Fatalf("Get large: %d bytes, %v", len(got), err)
			}
			if parts != nil && parts()-before < 2 {
				t.Fatalf("a %d-byte object was uploaded in %d parts", len(big), parts()-before)
			}

			// Concurrent writers of the same object all succeed.
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			other := []byte("written by many")
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- st.Put(ctx, digest(other), bytes.NewReader(other), 100)
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatalf("concurrent Put: %v", err)
				}
			}
			if got, err := st.Get(ctx, digest(other), 100); err != nil || !bytes.Equal(got, other) {
				t.Fatalf("Get after concurrent Put = %q, %v", got, err)
			}
		})
	}
}

// TestS3WrongCredentials: the real server checks signatures, so a Hub with
// the wrong secret is refused when it opens the bucket, not later.
func TestS3WrongCredentials(t *testing.T) {
	cfg := s3test.Server(t, "hub", "team/objects")
	v, _ := cfg.Creds.Get()
	cfg.Creds = credentials.NewStaticV4(v.AccessKeyID, v.SecretAccessKey+"-wrong", "")
	_, err := s3.Open(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), cfg.Bucket) {
		t.Fatalf("opened a bucket with the wrong secret: %v", err)
	}
}
