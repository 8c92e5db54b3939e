// Package pgtest runs a throwaway PostgreSQL server for tests: Debian's
// server binaries, initdb into a private temporary directory, listening on
// 127.0.0.1 at a free port and on a Unix socket in that directory, stopped
// and removed when the test binary exits (Main).
//
// As root (CI on this image), initdb refuses to run, so the cluster belongs
// to the "postgres" user and the commands run through runuser.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// RequireEnv, when set to 1, turns a missing PostgreSQL into a test failure
// instead of a skip (scripts/test.sh sets it).
const RequireEnv = "AGENTSCM_REQUIRE_POSTGRES"

// Server is a running throwaway cluster.
type Server struct {
	dir    string
	bin    string
	port   int
	asUser string // "" runs the commands as ourselves
	n      atomic.Int64
}

// shared is the test binary's one server, started on first use. (Test
// infrastructure: one cluster per test process instead of one per test.)
var shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// Main runs the tests and stops the shared server, if one was started.
func Main(m *testing.M) {
	code := m.Run()
	if shared.srv != nil {
		shared.srv.Stop()
	}
	os.Exit(code)
}

// BinDir finds the server binaries: $AGENTSCM_PG_BIN, else the newest
// /usr/lib/postgresql/*/bin.
func BinDir() (string, error) {
	if d := os.Getenv("AGENTSCM_PG_BIN"); d != "" {
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries in /usr/lib/postgresql/*/bin (apt-get install postgresql-15, or set AGENTSCM_PG_BIN)")
}

func version(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// Start initialises and starts a cluster tuned for tests: fsync off, so a
// test's commits cost no disk flush.
func Start() (*Server, error) { return start(false) }

// StartDurable starts a cluster that flushes every commit to disk
// (fsync=on, synchronous_commit=on), as a production one: for benchmarks.
func StartDurable() (*Server, error) { return start(true) }

func start(durable bool) (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin}
	reapStale(bin)
	dir, err := os.MkdirTemp("", "agentscm-pg-")
	if err != nil {
		return nil, err
	}
	s.dir = dir
	// The owner's pid lets a later run stop this cluster if the test
	// binary is killed before Stop.
	if err := os.WriteFile(filepath.Join(dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("running as root needs the postgres user (from the postgresql package): %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		s.asUser = "postgres"
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s.port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	data := filepath.Join(dir, "data")
	if out, err := s.run("initdb", "--no-sync", "-A", "trust", "-U", "postgres", "-E", "UTF8", "-D", data); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c max_connections=300 -c shared_buffers=64MB", s.port, dir)
	if !durable {
		opts += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
	}
	if out, err := s.run("pg_ctl", "-D", data, "-w", "-t", "60", "-l", filepath.Join(dir, "log"), "-o", opts, "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pg_ctl start: %w\n%s\n%s", err, out, log)
	}
	return s, nil
}

// reapStale stops and removes the clusters of test binaries that died
// without stopping theirs.
func reapStale(bin string) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "agentscm-pg-*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "owner.pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(string(b))
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) == nil || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			continue // its owner is alive (or unknown)
		}
		st, err := os.Stat(d)
		if err != nil {
			continue
		}
		s := &Server{dir: d, bin: bin}
		if uid := st.Sys().(*syscall.Stat_t).Uid; uid != uint32(os.Getuid()) {
			s.asUser = "postgres"
		}
		s.Stop()
	}
}

func (s *Server) run(name string, args ...string) ([]byte, error) {
	path := filepath.Join(s.bin, name)
	var cmd *exec.Cmd
	if s.asUser != "" {
		cmd = exec.Command("runuser", append([]string{"-u", s.asUser, "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	cmd.Dir = s.dir
	return cmd.CombinedOutput()
}

// Stop stops the cluster at once and removes its directory.
func (s *Server) Stop() {
	s.run("pg_ctl", "-D", filepath.Join(s.dir, "data"), "-m", "immediate", "-w", "stop")
	os.RemoveAll(s.dir)
}

// Pid returns the postmaster's process id (the first line of
// postmaster.pid); every server process is its child.
func (s *Server) Pid() (int, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, "data", "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(line))
}

// DSN is the connection string of a database.
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, db)
}

// CreateDatabase creates a fresh empty database and returns its DSN.
func (s *Server) CreateDatabase(ctx context.Context) (string, error) {
	name := fmt.Sprintf("hub_%d_%d", os.Getpid(), s.n.Add(1))
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	return s.DSN(name), nil
}

// Shared returns the test binary's server, starting it on first use; it
// skips t (fails it when AGENTSCM_REQUIRE_POSTGRES=1) when PostgreSQL is not
// installed.
func Shared(t testing.TB) *Server {
	t.Helper()
	shared.once.Do(func() {
		start := time.Now()
		shared.srv, shared.err = Start()
		if shared.err == nil {
			fmt.Fprintf(os.Stderr, "pgtest: PostgreSQL ready in %v\n", time.Since(start).Round(time.Millisecond))
		}
	})
	if shared.err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("PostgreSQL is required (%s=1): %v", RequireEnv, shared.err)
		}
		t.Skipf("PostgreSQL not available, skipping: %v", shared.err)
	}
	return shared.srv
}

// Database returns the DSN of a fresh database on the shared server.
func Database(t testing.TB) string {
	t.Helper()
	return Shared(t).Database(t)
}

// Database returns the DSN of a fresh database on s.
func (s *Server) Database(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn, err := s.CreateDatabase(ctx)
	if err != nil {
		t.Fatalf("create test database: %v", err)
	}
	return dsn
}

// Own starts a server for t alone (for a package whose TestMain is not
// Main), stopped when t ends.
func Own(t testing.TB) *Server {
	t.Helper()
	s, err := Start()
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("PostgreSQL is required (%s=1): %v", RequireEnv, err)
		}
		t.Skipf("PostgreSQL not available, skipping: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}
