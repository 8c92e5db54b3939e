// Package s3test serves an in-process S3-compatible server (gofakes3, in
// memory) on 127.0.0.1 for tests.
package s3test

import (
	"net/http/httptest"
	"testing"

	"github.com/agentscm/agentscm/internal/hub/objects/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Access key and secret the server accepts (gofakes3 does not check them).
const (
	AccessKey = "agentscm-test"
	SecretKey = "agentscm-test-secret"
)

// Server starts a server with an empty bucket and returns the Config of
// s3://bucket/prefix on it; it stops when t ends.
func Server(t testing.TB, bucket, prefix string) s3.Config {
	t.Helper()
	be := s3mem.New()
	if err := be.CreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(be, gofakes3.WithLogger(gofakes3.DiscardLog())).Server())
	t.Cleanup(srv.Close)
	return s3.Config{Bucket: bucket, Prefix: prefix, Endpoint: srv.URL, Region: "us-east-1",
		Creds: credentials.NewStaticV4(AccessKey, SecretKey, "")}
}
