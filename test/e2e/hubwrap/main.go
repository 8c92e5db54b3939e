// Command hubwrap stands in for agentscm in the e2e suite's two-instance
// pass (AGENTSCM_E2E_HUB=pg-s3-2, test/e2e/hubbackend_test.go). It runs
// the real agentscm for every command, except that a Hub named by --data DIR
// becomes one PostgreSQL database and one S3 bucket (created on first use,
// the same ones for the same DIR):
//
//   - `hub serve --data DIR --listen ADDR ...` starts two real `agentscm hub
//     serve` processes on that database and bucket, serves a round-robin
//     reverse proxy in front of them on ADDR and prints "listening on
//     http://ADDR" as hub serve does; SIGTERM or SIGINT stops both, and so
//     does its own death (the children's parent-death signal is SIGKILL), so
//     a test that kills "the Hub" kills both instances;
//   - every other `hub ... --data DIR ...` command runs with --store-file and
//     --objects instead of --data.
//
// Its configuration is hubwrap.json next to the binary (written by the
// harness), so it needs nothing from the environment a test passes on.
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/hub/objects/s3"
	"github.com/agentscm/agentscm/internal/hub/objects/s3/s3test"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Config is hubwrap.json.
type Config struct {
	Agentscm  string `json:"agentscm"`   // the real binary
	AdminDSN  string `json:"admin_dsn"`  // a PostgreSQL database to CREATE DATABASE from
	S3        string `json:"s3"`         // the S3 server's URL
	AccessKey string `json:"access_key"` // its credentials
	SecretKey string `json:"secret_key"`
	State     string `json:"state"`     // where the DSN files go
	Instances int    `json:"instances"` // hub serve processes per Hub
}

func main() {
	// The children's parent-death signal belongs to the thread that
	// started them: keep main on one thread.
	runtime.LockOSThread()
	exe, err := os.Executable()
	if err != nil {
		fail(err)
	}
	var cfg Config
	b, err := os.ReadFile(filepath.Join(filepath.Dir(exe), "hubwrap.json"))
	if err == nil {
		err = json.Unmarshal(b, &cfg)
	}
	if err != nil {
		fail(fmt.Errorf("hubwrap.json: %w", err))
	}
	args := os.Args[1:]
	env := os.Environ()
	if len(args) >= 2 && args[0] == "hub" {
		if data, rest, ok := takeFlag(args[2:], "data"); ok {
			be, err := cfg.backend(data)
			if err != nil {
				fail(err)
			}
			env = append(env, be.env...)
			if args[1] == "serve" {
				os.Exit(serve(cfg, be, env, rest))
			}
			args = append(append([]string{"hub", args[1]}, rest...), "--store-file", be.dsnFile, "--objects", be.objects)
		}
	}
	fail(syscall.Exec(cfg.Agentscm, append([]string{cfg.Agentscm}, args...), env))
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "hubwrap: %v\n", err)
	os.Exit(1)
}

// takeFlag removes --name VALUE (or -name, =VALUE) from args.
func takeFlag(args []string, name string) (string, []string, bool) {
	for i, a := range args {
		if a == "--" {
			break
		}
		n := strings.TrimLeft(a, "-")
		if len(a)-len(n) < 1 || len(a)-len(n) > 2 {
			continue
		}
		if n == name && i+1 < len(args) {
			return args[i+1], append(append([]string{}, args[:i]...), args[i+2:]...), true
		}
		if v, ok := strings.CutPrefix(n, name+"="); ok {
			return v, append(append([]string{}, args[:i]...), args[i+1:]...), true
		}
	}
	return "", args, false
}

// backend is the PostgreSQL database and bucket of one --data directory.
type backend struct {
	dsnFile, objects string
	env              []string
}

func (c Config) backend(data string) (backend, error) {
	abs, err := filepath.Abs(data)
	if err != nil {
		return backend{}, err
	}
	sum := sha256.Sum256([]byte(abs))
	key := hex.EncodeToString(sum[:8])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.AdminDSN)
	if err != nil {
		return backend{}, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(ctx)
	db := "e2e_" + key
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		var pe *pgconn.PgError
		// 42P04: exists already; 23505: created concurrently by another call.
		if !errors.As(err, &pe) || (pe.Code != "42P04" && pe.Code != "23505") {
			return backend{}, fmt.Errorf("create database %s: %w", db, err)
		}
	}
	u, err := url.Parse(c.AdminDSN)
	if err != nil {
		return backend{}, err
	}
	u.Path = "/" + db
	dsnFile := filepath.Join(c.State, key+".dsn")
	if err := fsutil.WriteAtomic(dsnFile, []byte(u.String()+"\n"), 0o600); err != nil {
		return backend{}, err
	}
	s3c := s3.Config{Bucket: "e2e-" + key, Prefix: "agentscm", Endpoint: c.S3, Region: "us-east-1",
		Creds: credentials.NewStaticV4(c.AccessKey, c.SecretKey, "")}
	if err := s3test.MakeBucket(ctx, s3c); err != nil {
		return backend{}, err
	}
	return backend{dsnFile: dsnFile, objects: s3test.URI(s3c), env: s3test.Env(s3c)}, nil
}

// serve runs the instances and the proxy; it returns the exit code.
func serve(cfg Config, be backend, env, args []string) int {
	listen, rest, ok := takeFlag(args, "listen")
	if !ok {
		listen = "127.0.0.1:8420"
	}
	n := max(cfg.Instances, 2)
	cmds := make([]*exec.Cmd, 0, n)
	exited := make(chan error, n)
	stop := func() {
		for _, c := range cmds {
			c.Process.Signal(syscall.SIGTERM)
		}
		for range cmds {
			<-exited
		}
	}
	backends := make([]*url.URL, 0, n)
	for range n {
		cmd := exec.Command(cfg.Agentscm, append(append([]string{"hub", "serve", "--listen", "127.0.0.1:0"}, rest...),
			"--store-file", be.dsnFile, "--objects", be.objects)...)
		cmd.Env = env
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = dieWithParent()
		out, err := cmd.StdoutPipe()
		if err != nil {
			fmt.Fprintf(os.Stderr, "hubwrap: %v\n", err)
			stop()
			return 1
		}
		if err := cmd.Start(); err != nil {
			fmt.Fprintf(os.Stderr, "hubwrap: %v\n", err)
			stop()
			return 1
		}
		cmds = append(cmds, cmd)
		br := bufio.NewReader(out)
		line, err := br.ReadString('\n')
		addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
		if !ok {
			fmt.Fprintf(os.Stderr, "hubwrap: hub serve said %q (%v)\n", line, err)
			go func() { exited <- cmd.Wait() }()
			stop()
			return 1
		}
		go func() {
			io.Copy(os.Stdout, br) // the rest of its output, as hub serve's
			exited <- cmd.Wait()
		}()
		u, err := url.Parse(addr)
		if err != nil {
			fmt.Fprintf(os.Stderr, "hubwrap: %v\n", err)
			stop()
			return 1
		}
		backends = append(backends, u)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "hubwrap: listen: %v\n", err)
		stop()
		return 1
	}
	var next atomic.Uint64
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(backends[next.Add(1)%uint64(len(backends))])
			r.Out.Host = r.In.Host
		},
		FlushInterval: -1,
	}
	srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 30 * time.Second}
	go srv.Serve(ln)
	fmt.Printf("listening on http://%s\n", ln.Addr())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	code := 0
	select {
	case <-sigs:
	case err := <-exited:
		// One instance died on its own: the Hub is down.
		fmt.Fprintf(os.Stderr, "hubwrap: a hub serve instance exited: %v\n", err)
		exited <- err
		code = 1
	}
	ln.Close()
	stop()
	return code
}
