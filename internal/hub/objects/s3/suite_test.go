package s3_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentscm/agentscm/internal/hub/objects/objectstest"
	"github.com/agentscm/agentscm/internal/hub/objects/s3"
	"github.com/agentscm/agentscm/internal/hub/objects/s3/s3test"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// partCounter counts the requests that upload one part of a multipart upload.
type partCounter struct{ n atomic.Int64 }

func (c *partCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Query().Has("partNumber") {
		c.n.Add(1)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestSuite runs the object-store suite on a bucket of a real S3 server
// (versitygw).
func TestSuite(t *testing.T) {
	objectstest.Run(t, func(t *testing.T) objectstest.Harness {
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
		return objectstest.Harness{Store: st, Parts: parts.n.Load, Tamper: func(t *testing.T, dg string, b []byte) {
			_, err := cl.PutObject(context.Background(), cfg.Bucket, "team/objects/"+dg[:2]+"/"+dg, bytes.NewReader(b), int64(len(b)),
				minio.PutObjectOptions{DisableContentSha256: true})
			if err != nil {
				t.Fatal(err)
			}
		}}
	})
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
