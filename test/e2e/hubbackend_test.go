//go:build e2e

package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/hub/objects/s3"
	"github.com/agentscm/agentscm/internal/hub/objects/s3/s3test"
	"github.com/agentscm/agentscm/internal/hub/store/postgres/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// HubBackendEnv selects the Hub every e2e test's `hub serve` runs:
//
//	""  or "sqlite"  one hub serve on its --data directory (SQLite, objects dir)
//	"pg-s3-2"        two hub serve processes on one PostgreSQL database and one
//	                 S3 bucket (versitygw) behind a loopback round-robin proxy
//
// Under pg-s3-2, h.agentscm is test/e2e/hubwrap, which runs the real
// agentscm (agentscm-real beside it) for everything and turns each `hub ... --data DIR` into the
// database and bucket of DIR (see its doc comment). scripts/test.sh runs the
// suite once without and once with it.
const HubBackendEnv = "AGENTSCM_E2E_HUB"

// hubBackend is what setupHubBackend started (zero without the switch).
var hubBackend struct {
	adminDSN string
	state    string    // hubwrap's DSN files: KEY.dsn
	s3       s3.Config // Bucket empty: the server only
}

// hubBackendPG is whether the suite runs against the two-instance Hub.
func hubBackendPG() bool { return os.Getenv(HubBackendEnv) == "pg-s3-2" }

// setupHubBackend prepares the backend HubBackendEnv names, putting the
// wrapper in place of bin/agentscm when needed; the returned function stops what
// it started.
func setupHubBackend(bin string) (func(), error) {
	switch v := os.Getenv(HubBackendEnv); v {
	case "", "sqlite":
		return func() {}, nil
	case "pg-s3-2":
	default:
		return nil, fmt.Errorf("%s=%q: want sqlite or pg-s3-2", HubBackendEnv, v)
	}
	var stops []func()
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	pg, err := pgtest.Start()
	if err != nil {
		return nil, fmt.Errorf("%s=pg-s3-2 needs PostgreSQL: %w", HubBackendEnv, err)
	}
	stops = append(stops, pg.Stop)
	endpoint, access, secret := os.Getenv(s3test.EndpointEnv), os.Getenv(s3test.AccessKeyEnv), os.Getenv(s3test.SecretKeyEnv)
	if endpoint == "" {
		vgw, err := s3test.Binary()
		if err != nil {
			stop()
			return nil, fmt.Errorf("%s=pg-s3-2 needs an S3 server: %w", HubBackendEnv, err)
		}
		dir, err := os.MkdirTemp("", "agentscm-e2e-s3-")
		if err != nil {
			stop()
			return nil, err
		}
		stops = append(stops, func() { os.RemoveAll(dir) })
		url, stopS3, err := s3test.StartProcess(vgw, dir)
		if err != nil {
			stop()
			return nil, err
		}
		stops = append(stops, stopS3)
		endpoint, access, secret = url, s3test.AccessKey, s3test.SecretKey
	}
	// The wrapper takes agentscm's place in bin, the real binary moves to
	// agentscm-real beside it: agentscm-hook stays next to both, where
	// configure (and the tests) expect it.
	real := filepath.Join(bin, "agentscm-real")
	if err := os.Rename(filepath.Join(bin, "agentscm"), real); err != nil {
		stop()
		return nil, err
	}
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "agentscm"), "github.com/agentscm/agentscm/test/e2e/hubwrap")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		stop()
		return nil, fmt.Errorf("build hubwrap: %w", err)
	}
	state := filepath.Join(bin, "hubwrap-state")
	if err := os.Mkdir(state, 0o700); err != nil {
		stop()
		return nil, err
	}
	cfg, _ := json.Marshal(map[string]any{"agentscm": real, "admin_dsn": pg.DSN("postgres"),
		"s3": endpoint, "access_key": access, "secret_key": secret, "state": state, "instances": 2})
	if err := os.WriteFile(filepath.Join(bin, "hubwrap.json"), cfg, 0o600); err != nil {
		stop()
		return nil, err
	}
	hubBackend.adminDSN, hubBackend.state = pg.DSN("postgres"), state
	hubBackend.s3 = s3.Config{Endpoint: endpoint, Region: "us-east-1", Creds: credentials.NewStaticV4(access, secret, "")}
	fmt.Fprintf(os.Stderr, "e2e: every hub serve is two instances on PostgreSQL + S3 (%s=pg-s3-2, S3 at %s)\n", HubBackendEnv, endpoint)
	return stop, nil
}

// hubBackendKey names the database (e2e_KEY) and bucket (e2e-KEY) hubwrap
// gives the Hub of the data directory data (as hubwrap's backend does).
func hubBackendKey(t *testing.T, data string) string {
	abs, err := filepath.Abs(data)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(abs))
	return hex.EncodeToString(sum[:8])
}

// hubBackendServes says whether data names a Hub that hubwrap keeps in
// PostgreSQL + S3 (under pg-s3-2, once a hub command named it).
func hubBackendServes(t *testing.T, data string) bool {
	if !hubBackendPG() {
		return false
	}
	_, err := os.Stat(filepath.Join(hubBackend.state, hubBackendKey(t, data)+".dsn"))
	return err == nil
}

// hubBackendBytes is hubBytes under pg-s3-2: every byte that reached the
// two-instance Hub of data — every row of every table of its PostgreSQL
// database (as text), every object of its bucket (gzip ones also
// decompressed) — and the log output.
func hubBackendBytes(t *testing.T, data string, log []byte) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	key := hubBackendKey(t, data)
	out := map[string][]byte{"hub serve output": log}
	u, err := url.Parse(hubBackend.adminDSN)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/e2e_" + key
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT tablename FROM pg_tables WHERE schemaname='public' ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, tab := range tables {
		rows, err := conn.Query(ctx, "SELECT t::text FROM "+pgx.Identifier{tab}.Sanitize()+" t")
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		out["table "+tab] = []byte(strings.Join(lines, "\n"))
	}
	cfg := hubBackend.s3
	cl, err := minio.New(strings.TrimPrefix(cfg.Endpoint, "http://"), &minio.Options{Creds: cfg.Creds, Region: cfg.Region})
	if err != nil {
		t.Fatal(err)
	}
	bucket := "e2e-" + key
	for obj := range cl.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		r, err := cl.GetObject(ctx, bucket, obj.Key, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		p := "s3://" + bucket + "/" + obj.Key
		out[p] = b
		if len(b) > 2 && b[0] == 0x1f && b[1] == 0x8b {
			if gz, err := gzip.NewReader(bytes.NewReader(b)); err == nil {
				if plain, err := io.ReadAll(gz); err == nil {
					out[p+" (gunzipped)"] = plain
				}
			}
		}
	}
	return out
}
