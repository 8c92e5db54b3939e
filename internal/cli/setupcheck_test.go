package cli

import (
	"context"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/hub"
)

// TestSetupChecksRepository: client setup refuses a repository the Hub does
// not have (an admin token's whoami does not say), stores a connection with
// a warning when the Hub does not answer, and client status --check then
// says the repository does not exist (issue 19).
func TestSetupChecksRepository(t *testing.T) {
	data := filepath.Join(t.TempDir(), "hub")
	env := map[string]string{"XDG_CONFIG_HOME": t.TempDir()}
	mustRun(t, env, "hub", "admin", "human", "create", "--data", data, "--name", "root", "--admin")
	mustRun(t, env, "hub", "admin", "repository", "create", "--data", data, "--name", "proj")
	tok := filepath.Join(t.TempDir(), "admin.token")
	mustRun(t, env, "hub", "admin", "token", "create", "--data", data, "--human", "root", "--repository", "proj", "--output", tok)

	// Reserve an address with nothing listening on it yet.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	url := "http://" + addr

	root := gitRepo(t, "a")
	r := runMain(t, env, "", "client", "setup", "--root", root, "--hub", url, "--repository", "nope", "--token-file", tok)
	if r.code != 0 || !strings.Contains(r.stderr, "warning: the connection is stored but not checked") {
		t.Fatalf("setup with the Hub down: %+v", r)
	}
	// agentscm status with the Hub down: one screen, the Hub named as not
	// answering, within the short timeout.
	start := time.Now()
	r = runMain(t, env, "", "status", "--root", root)
	if r.code != 0 || !strings.Contains(r.stdout, "Hub NOT reachable") || !strings.Contains(r.stdout, "warning: the Hub "+url+" does not answer") {
		t.Fatalf("status with the Hub down: %+v", r)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("status with the Hub down took %v", d)
	}

	svc, err := hub.Open(context.Background(), data, hub.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	srv := httptest.NewUnstartedServer(hub.NewHandler(svc, nil))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the reserved address %s was taken meanwhile: %v", addr, err)
	}
	srv.Listener = l
	srv.Start()
	defer srv.Close()

	r = runMain(t, env, "", "client", "status", "--root", root, "--check")
	if r.code != 1 || !strings.Contains(r.stdout, `repository "nope" does not exist on `+url) {
		t.Fatalf("status --check of a missing repository: %+v", r)
	}
	r = runMain(t, env, "", "client", "setup", "--root", root, "--hub", url, "--repository", "nope", "--token-file", tok)
	if r.code != 1 || !strings.Contains(r.stderr, `repository "nope" does not exist on `+url) {
		t.Fatalf("setup of a missing repository: %+v", r)
	}
	mustRun(t, env, "client", "setup", "--root", root, "--hub", url, "--repository", "proj", "--token-file", tok)
	if r := runMain(t, env, "", "client", "status", "--root", root, "--check"); r.code != 0 || !strings.Contains(r.stdout, "hub check:   ok") {
		t.Fatalf("status --check: %+v", r)
	}
	if _, err := os.Stat(tok); err != nil {
		t.Fatal(err)
	}
}
