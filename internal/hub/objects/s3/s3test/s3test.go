// Package s3test gives tests a bucket on a real S3-compatible server
// process, versitygw (`versitygw posix DIR`), on 127.0.0.1.
//
// The server is, in this order:
//   - the one scripts/test.sh started for the whole run: $AGENTSCM_S3_ENDPOINT
//     with $AGENTSCM_S3_ACCESS_KEY and $AGENTSCM_S3_SECRET_KEY;
//   - else a versitygw the test starts itself on a free port over a
//     t.TempDir(), stopped when the test ends: $AGENTSCM_VERSITYGW, else
//     ~/.cache/agentscm-ci/bin/versitygw, else versitygw on $PATH.
//
// With neither, the test is skipped — or failed under AGENTSCM_REQUIRE_S3=1
// (scripts/test.sh sets it once the server runs). Install the server
// outside the module, so go.mod stays lean:
//
//	cd "$(mktemp -d)" && GOBIN=$HOME/.cache/agentscm-ci/bin go install github.com/versity/versitygw/cmd/versitygw@v1.8.0
//
// Every call creates a fresh bucket, named after the bucket asked for plus
// a random suffix: tests sharing one server never see each other's objects.
// Callers use the returned Config's Bucket.
package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/hub/objects/s3"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Environment variables.
const (
	// RequireEnv, when 1, turns a missing server into a test failure.
	RequireEnv = "AGENTSCM_REQUIRE_S3"
	// EndpointEnv, AccessKeyEnv and SecretKeyEnv name a running server.
	EndpointEnv  = "AGENTSCM_S3_ENDPOINT"
	AccessKeyEnv = "AGENTSCM_S3_ACCESS_KEY"
	SecretKeyEnv = "AGENTSCM_S3_SECRET_KEY"
	// BinaryEnv names the versitygw binary to start.
	BinaryEnv = "AGENTSCM_VERSITYGW"
)

// Keys of a server this package starts.
const (
	AccessKey = "agentscm-test"
	SecretKey = "agentscm-test-secret"
)

// Server returns the Config of s3://BUCKET/prefix on a real S3-compatible
// server, BUCKET being a fresh empty bucket named bucket-<random>.
func Server(t testing.TB, bucket, prefix string) s3.Config {
	t.Helper()
	endpoint, access, secret := os.Getenv(EndpointEnv), os.Getenv(AccessKeyEnv), os.Getenv(SecretKeyEnv)
	if endpoint == "" {
		bin, err := Binary()
		if err != nil {
			if os.Getenv(RequireEnv) == "1" {
				t.Fatalf("%v (%s=1)", err, RequireEnv)
			}
			t.Skip(err)
		}
		endpoint, err = Start(t, bin, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		access, secret = AccessKey, SecretKey
	}
	suffix := make([]byte, 5)
	rand.Read(suffix)
	cfg := s3.Config{Bucket: bucket + "-" + hex.EncodeToString(suffix), Prefix: prefix, Endpoint: endpoint, Region: "us-east-1",
		Creds: credentials.NewStaticV4(access, secret, "")}
	if err := MakeBucket(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Env is the environment that points `agentscm hub ... --objects s3://...`
// at cfg's server.
func Env(cfg s3.Config) []string {
	v, _ := cfg.Creds.Get()
	return []string{"AWS_ENDPOINT_URL=" + cfg.Endpoint, "AWS_REGION=" + cfg.Region,
		"AWS_ACCESS_KEY_ID=" + v.AccessKeyID, "AWS_SECRET_ACCESS_KEY=" + v.SecretAccessKey}
}

// URI is s3://bucket/prefix of cfg.
func URI(cfg s3.Config) string {
	if cfg.Prefix == "" {
		return "s3://" + cfg.Bucket
	}
	return "s3://" + cfg.Bucket + "/" + cfg.Prefix
}

// MakeBucket creates cfg.Bucket (an existing one of ours is fine).
func MakeBucket(ctx context.Context, cfg s3.Config) error {
	cl, err := minio.New(strings.TrimPrefix(strings.TrimPrefix(cfg.Endpoint, "http://"), "https://"),
		&minio.Options{Creds: cfg.Creds, Region: cfg.Region, Secure: strings.HasPrefix(cfg.Endpoint, "https://")})
	if err != nil {
		return err
	}
	err = cl.MakeBucket(ctx, cfg.Bucket, minio.MakeBucketOptions{Region: cfg.Region})
	if err != nil && minio.ToErrorResponse(err).Code != "BucketAlreadyOwnedByYou" {
		return fmt.Errorf("create bucket %s on %s: %w", cfg.Bucket, cfg.Endpoint, err)
	}
	return nil
}

// Binary finds versitygw: $AGENTSCM_VERSITYGW, ~/.cache/agentscm-ci/bin,
// $PATH.
func Binary() (string, error) {
	if b := os.Getenv(BinaryEnv); b != "" {
		return b, nil
	}
	if home, err := os.UserHomeDir(); err == nil {
		b := filepath.Join(home, ".cache", "agentscm-ci", "bin", "versitygw")
		if _, err := os.Stat(b); err == nil {
			return b, nil
		}
	}
	if b, err := exec.LookPath("versitygw"); err == nil {
		return b, nil
	}
	return "", errors.New("no versitygw (the S3-compatible server of the object-store tests): " +
		"GOBIN=$HOME/.cache/agentscm-ci/bin go install github.com/versity/versitygw/cmd/versitygw@v1.8.0 from outside the module, or set " + BinaryEnv)
}

// Start runs `versitygw posix dir` on a free 127.0.0.1 port with AccessKey
// and SecretKey, waits until it accepts connections and returns its URL;
// it is stopped when t ends.
func Start(t testing.TB, bin, dir string) (string, error) {
	t.Helper()
	url, stop, err := StartProcess(bin, dir)
	if err != nil {
		return "", err
	}
	t.Cleanup(stop)
	return url, nil
}

// StartProcess is Start outside a test: the caller stops the server.
func StartProcess(bin, dir string) (url string, stop func(), err error) {
	for attempt := 0; ; attempt++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", nil, err
		}
		addr := ln.Addr().String()
		ln.Close()
		cmd := exec.Command(bin, "--port", addr, "--quiet", "posix", dir)
		cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+AccessKey, "ROOT_SECRET_KEY="+SecretKey)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			return "", nil, fmt.Errorf("start %s: %w", bin, err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		stop := func() {
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
				cmd.Process.Kill()
				<-exited
			}
		}
		deadline := time.Now().Add(20 * time.Second)
	wait:
		for {
			select {
			case err := <-exited:
				// Most likely another process took the port meanwhile.
				if attempt < 3 {
					break wait
				}
				return "", nil, fmt.Errorf("versitygw exited: %v\n%s", err, out.String())
			default:
			}
			if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
				c.Close()
				return "http://" + addr, stop, nil
			}
			if time.Now().After(deadline) {
				stop()
				return "", nil, fmt.Errorf("versitygw did not listen on %s within 20s\n%s", addr, out.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
