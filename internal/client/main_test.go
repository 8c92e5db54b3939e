package client_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/hub"
	"github.com/agentscm/agentscm/internal/hub/api"
)

// agentscmBin is the agentscm binary built once in TestMain.
var agentscmBin string

func TestMain(m *testing.M) {
	if os.Getenv("HUB_CLIENT_CHILD") != "" {
		os.Exit(m.Run()) // a child process of a multi-process test: no build
	}
	dir, err := os.MkdirTemp("", "agentscm-client-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	agentscmBin = filepath.Join(dir, "agentscm")
	build := exec.Command("go", "build", "-o", agentscmBin, "github.com/agentscm/agentscm/cmd/agentscm")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build agentscm:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// server is a real `agentscm hub serve` process on 127.0.0.1.
type server struct {
	URL    string
	cmd    *exec.Cmd
	done   chan error
	errb   *lockedWriter
	exited bool // set by stop and kill9 (test goroutine only)
}

func startServer(t testing.TB, dataDir string, args ...string) *server {
	t.Helper()
	cmd := exec.Command(agentscmBin, append([]string{"hub", "serve", "--listen", "127.0.0.1:0", "--data", dataDir}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errb := &lockedWriter{}
	cmd.Stderr = errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{cmd: cmd, done: make(chan error, 1), errb: errb}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		for sc.Scan() {
		}
	}()
	go func() { s.done <- cmd.Wait() }()
	select {
	case line, ok := <-lines:
		if !ok || !strings.HasPrefix(line, "listening on ") {
			cmd.Process.Kill()
			t.Fatalf("hub serve did not start: %q; stderr: %s", line, errb)
		}
		s.URL = strings.TrimPrefix(line, "listening on ")
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("hub serve did not start in time; stderr: %s", errb)
	}
	t.Cleanup(func() { s.stop(t) })
	return s
}

// stop sends SIGTERM and expects a clean exit (status 0); a process already
// gone is accepted.
func (s *server) stop(t testing.TB) {
	if s.exited {
		return
	}
	s.exited = true
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("hub serve exited with %v; stderr: %s", err, s.errb)
		}
	case <-time.After(40 * time.Second):
		s.cmd.Process.Kill()
		t.Errorf("hub serve did not stop after SIGTERM")
	}
}

// kill9 kills the server with SIGKILL and waits for it.
func (s *server) kill9() {
	s.exited = true
	s.cmd.Process.Kill()
	<-s.done
}

type lockedWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// secrets holds the tokens bootstrap issued.
type secrets struct {
	alice, bob, reader, carol, admin string
}

// bootstrap creates the fixture's humans, repositories and tokens in a data
// directory as the operator, the way `agentscm hub admin` does.
func bootstrap(t testing.TB, dataDir string) secrets {
	t.Helper()
	ctx := context.Background()
	svc, err := hub.Open(ctx, dataDir, hub.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	op := hub.Operator()
	for _, h := range []api.CreateHumanRequest{{Name: "alice"}, {Name: "bob"}, {Name: "carol"}, {Name: "root", Admin: true}} {
		if _, err := svc.CreateHuman(ctx, op, h); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []string{"proj", "other"} {
		if _, err := svc.CreateRepository(ctx, op, api.CreateRepositoryRequest{Name: r}); err != nil {
			t.Fatal(err)
		}
	}
	tok := func(human, repo, scope string) string {
		k, err := svc.CreateToken(ctx, op, api.CreateTokenRequest{Human: human, Repository: repo, Scope: scope})
		if err != nil {
			t.Fatal(err)
		}
		return k.Secret
	}
	return secrets{
		alice:  tok("alice", "proj", api.ScopeReadWrite),
		bob:    tok("bob", "proj", api.ScopeReadWrite),
		reader: tok("bob", "proj", api.ScopeReadOnly),
		carol:  tok("carol", "other", api.ScopeReadWrite),
		admin:  tok("root", "other", api.ScopeReadWrite),
	}
}

// fixture holds one connection per caller, all aimed at repository proj.
type fixture struct {
	alice, bob, reader, carol, admin client.Conn
}

type backend struct {
	name string
	open func(t *testing.T) *fixture
}

func backends() []backend {
	return []backend{
		{"in-process", func(t *testing.T) *fixture {
			dir := filepath.Join(t.TempDir(), "data")
			sec := bootstrap(t, dir)
			svc, err := hub.Open(context.Background(), dir, hub.Config{RetentionDays: 7})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { svc.Close() })
			conn := func(secret string) client.Conn {
				p, err := svc.Authenticate(context.Background(), secret)
				if err != nil {
					t.Fatal(err)
				}
				return client.NewLocal(svc, p, "proj")
			}
			return &fixture{conn(sec.alice), conn(sec.bob), conn(sec.reader), conn(sec.carol), conn(sec.admin)}
		}},
		{"served", func(t *testing.T) *fixture {
			dir := filepath.Join(t.TempDir(), "data")
			sec := bootstrap(t, dir)
			srv := startServer(t, dir, "--shared-conversation-retention-days", "7")
			conn := func(secret string) client.Conn {
				c, err := client.NewHTTP(srv.URL, "proj", secret, nil)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return c
			}
			return &fixture{conn(sec.alice), conn(sec.bob), conn(sec.reader), conn(sec.carol), conn(sec.admin)}
		}},
	}
}

func digest(parts ...any) string {
	sum := sha256.Sum256([]byte(fmt.Sprint(parts...)))
	return hex.EncodeToString(sum[:])
}

// eventsEnv builds an events envelope for a target.
func eventsEnv(tg api.Target, seed string, evs ...api.Event) *api.Envelope {
	return &api.Envelope{Identity: digest("events", seed), Type: api.TypeEvents, WorkID: tg.WorkID, Generation: tg.Generation,
		Session: tg.Session, NativeSessionID: tg.NativeSessionID, Events: evs}
}
