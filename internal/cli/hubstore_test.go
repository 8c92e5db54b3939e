package cli

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/hub"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/hub/objects/s3/s3test"
	"github.com/agentscm/agentscm/internal/hub/store/postgres/pgtest"
)

func TestHubBackendUsage(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"nothing", nil, nil, "--data must be an absolute directory"},
		{"store and store-file", nil, []string{"--store", "postgres://x/y", "--store-file", empty}, "not both"},
		{"not postgres", nil, []string{"--store", "mysql://x/y", "--objects", "/srv/o"}, "PostgreSQL DSN"},
		{"env not postgres", map[string]string{envHubStore: "sqlite:x"}, []string{"--objects", "/srv/o"}, "PostgreSQL DSN"},
		{"store without objects", nil, []string{"--store", "postgres://x/y"}, "--objects is required"},
		{"objects neither directory nor s3", nil, []string{"--store", "postgres://x/y", "--objects", "ftp://x/y"}, "--objects must be"},
		{"empty store-file", nil, []string{"--store-file", empty, "--objects", "/srv/o"}, "is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"hub", "admin", "list"}, tc.args...)
			r := runMain(t, tc.env, "", args...)
			if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("%v: %+v", args, r)
			}
		})
	}
}

// TestHubOnPostgresAndS3: the admin commands and the service work on
// PostgreSQL (the DSN from a file or the environment, never argv) and an S3
// bucket, and two processes' worth of Hubs on them see each other's writes.
func TestHubOnPostgresAndS3(t *testing.T) {
	pg := pgtest.Own(t)
	dsn := pg.Database(t)
	cfg := s3test.Server(t, "hub", "team/objects")
	dir := t.TempDir()
	dsnFile := filepath.Join(dir, "dsn")
	if err := os.WriteFile(dsnFile, []byte(dsn+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, kv := range s3test.Env(cfg) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	objects := s3test.URI(cfg)
	mustRun(t, env, "hub", "admin", "human", "create", "--store-file", dsnFile, "--objects", objects, "--name", "alice")
	envStore := map[string]string{envHubStore: dsn, envHubObjects: objects}
	for k, v := range env {
		envStore[k] = v
	}
	mustRun(t, envStore, "hub", "admin", "repository", "create", "--name", "proj")
	if r := runMain(t, envStore, "", "hub", "admin", "repository", "create", "--name", "proj"); r.code != 1 || !strings.Contains(r.stderr, "already exists") {
		t.Fatalf("second create: %+v", r)
	}
	secret := strings.TrimSpace(mustRun(t, envStore, "hub", "admin", "token", "create", "--human", "alice", "--repository", "proj").stdout)
	var list api.AdminList
	if err := json.Unmarshal([]byte(mustRun(t, envStore, "hub", "admin", "list", "--format", "json").stdout), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Humans) != 1 || len(list.Repositories) != 1 || len(list.Tokens) != 1 {
		t.Fatalf("list: %+v", list)
	}
	// A password in argv works, with a warning; the SQLite store with S3
	// objects works too.
	u, _ := url.Parse(dsn)
	u.User = url.UserPassword("postgres", "not-checked")
	if r := runMain(t, env, "", "hub", "admin", "list", "--store", u.String(), "--objects", objects); r.code != 0 || !strings.Contains(r.stderr, "carries a password") || strings.Contains(r.stderr, "not-checked") {
		t.Fatalf("password in argv: %+v", r)
	}
	if r := runMain(t, env, "", "hub", "admin", "list", "--store-file", dsnFile, "--objects", objects); strings.Contains(r.stderr, "password") {
		t.Fatalf("warned without a password: %+v", r)
	}
	sq := filepath.Join(dir, "sqlite-s3")
	mustRun(t, env, "hub", "admin", "human", "create", "--data", sq, "--objects", "s3://"+cfg.Bucket+"/sqlite", "--name", "dora")
	if _, err := os.Stat(filepath.Join(sq, "hub.db")); err != nil {
		t.Fatalf("SQLite store with S3 objects: %v", err)
	}
	if _, err := os.Stat(filepath.Join(sq, "objects")); err == nil {
		t.Fatal("an objects directory was made beside S3 objects")
	}
	// A wrong bucket is refused when the Hub opens.
	if r := runMain(t, env, "", "hub", "admin", "list", "--store-file", dsnFile, "--objects", "s3://missing/x"); r.code != 1 || !strings.Contains(r.stderr, "does not exist") {
		t.Fatalf("missing bucket: %+v", r)
	}

	// Two Hubs on the same stores: a token issued through one
	// authenticates on the other; a Work started on one is seen by both.
	ctx := context.Background()
	var svcs [2]*hub.Service
	for i := range svcs {
		fl := newFlags(&Env{Stderr: os.Stderr}, "t", "", "")
		b := addHubBackendFlags(fl)
		if err := fl.Parse([]string{"--store-file", dsnFile, "--objects", objects}); err != nil {
			t.Fatal(err)
		}
		svc, where, err := b.open(ctx, &Env{Getenv: func(k string) string { return env[k] }}, hub.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer svc.Close()
		if strings.Contains(where, "postgres://") || !strings.Contains(where, "PostgreSQL 127.0.0.1:") {
			t.Fatalf("describe: %q", where)
		}
		svcs[i] = svc
	}
	p, err := svcs[1].Authenticate(ctx, secret)
	if err != nil {
		t.Fatal(err)
	}
	w, err := svcs[0].StartWork(ctx, p, "proj", api.StartWorkRequest{WorktreeID: "wt"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := svcs[1].GetWork(ctx, p, "proj", w.ID); err != nil || got.ID != w.ID {
		t.Fatalf("work through the other Hub: %+v %v", got, err)
	}

	// hub migrate copies a single-node Hub into another database and a
	// directory, verified; a second copy into it is refused.
	data := filepath.Join(dir, "single")
	mustRun(t, nil, "hub", "admin", "human", "create", "--data", data, "--name", "bob")
	mustRun(t, nil, "hub", "admin", "repository", "create", "--data", data, "--name", "proj2")
	dsn2File := filepath.Join(dir, "dsn2")
	os.WriteFile(dsn2File, []byte(pg.Database(t)), 0o600)
	objDir := filepath.Join(dir, "copied-objects")
	out := mustRun(t, nil, "hub", "migrate", "--from", "sqlite", data, "--store-file", dsn2File, "--objects", objDir, "--format", "json").stdout
	var rep struct {
		Tables []struct {
			Table string
			Rows  int64
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Tables) == 0 {
		t.Fatalf("migrate output %q: %v", out, err)
	}
	for _, tc := range rep.Tables {
		if want := map[string]int64{"humans": 1, "repositories": 1}[tc.Table]; tc.Rows != want {
			t.Fatalf("migrated %s: %d rows, want %d", tc.Table, tc.Rows, want)
		}
	}
	list = api.AdminList{}
	json.Unmarshal([]byte(mustRun(t, nil, "hub", "admin", "list", "--store-file", dsn2File, "--objects", objDir, "--format", "json").stdout), &list)
	if len(list.Humans) != 1 || list.Humans[0].Name != "bob" || len(list.Repositories) != 1 {
		t.Fatalf("list of the copy: %+v", list)
	}
	if r := runMain(t, nil, "", "hub", "migrate", "--from", "sqlite", data, "--store-file", dsn2File, "--objects", objDir); r.code != 1 || !strings.Contains(r.stderr, "empty database only") {
		t.Fatalf("second migrate: %+v", r)
	}
	if r := runMain(t, nil, "", "hub", "migrate", "--from", "sqlite", data, "--objects", objDir); r.code != 2 {
		t.Fatalf("migrate without a destination: %+v", r)
	}
}
