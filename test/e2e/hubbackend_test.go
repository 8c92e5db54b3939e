//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/agentscm/agentscm/internal/hub/objects/s3/s3test"
	"github.com/agentscm/agentscm/internal/hub/store/postgres/pgtest"
)

// HubBackendEnv selects the Hub every e2e test's `hub serve` runs:
//
//	""  or "sqlite"  one hub serve on its --data directory (SQLite, objects dir)
//	"pg-s3-2"        two hub serve processes on one PostgreSQL database and one
//	                 S3 bucket (versitygw) behind a loopback round-robin proxy
//
// Under pg-s3-2, h.agentscm is test/e2e/hubwrap, which runs the real
// agentscm for everything and turns each `hub ... --data DIR` into the
// database and bucket of DIR (see its doc comment). scripts/test.sh runs the
// suite once without and once with it.
const HubBackendEnv = "AGENTSCM_E2E_HUB"

// hubBackendPG is whether the suite runs against the two-instance Hub.
func hubBackendPG() bool { return os.Getenv(HubBackendEnv) == "pg-s3-2" }

// setupHubBackend prepares the backend HubBackendEnv names, pointing
// h.agentscm at the wrapper when needed; the returned function stops what
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
	wrapDir, err := os.MkdirTemp("", "agentscm-e2e-hubwrap-")
	if err != nil {
		stop()
		return nil, err
	}
	stops = append(stops, func() { os.RemoveAll(wrapDir) })
	build := exec.Command("go", "build", "-o", filepath.Join(wrapDir, "agentscm"), "github.com/agentscm/agentscm/test/e2e/hubwrap")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		stop()
		return nil, fmt.Errorf("build hubwrap: %w", err)
	}
	state := filepath.Join(wrapDir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		stop()
		return nil, err
	}
	cfg, _ := json.Marshal(map[string]any{"agentscm": filepath.Join(bin, "agentscm"), "admin_dsn": pg.DSN("postgres"),
		"s3": endpoint, "access_key": access, "secret_key": secret, "state": state, "instances": 2})
	if err := os.WriteFile(filepath.Join(wrapDir, "hubwrap.json"), cfg, 0o600); err != nil {
		stop()
		return nil, err
	}
	h.agentscm = filepath.Join(wrapDir, "agentscm")
	fmt.Fprintf(os.Stderr, "e2e: every hub serve is two instances on PostgreSQL + S3 (%s=pg-s3-2, S3 at %s)\n", HubBackendEnv, endpoint)
	return stop, nil
}
