package client_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/connections"
	"github.com/agentscm/agentscm/internal/hub/api"
)

func TestConnectionsFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "agentscm")
	if _, err := connections.Lookup(dir, "/nowhere"); !errors.Is(err, connections.ErrNoConnection) {
		t.Fatalf("lookup in a missing file: %v", err)
	}
	c := connections.Connection{Root: "/r1", Kind: connections.KindHub, Hub: "http://h", Repository: "p", WorktreeID: "checkout_1", Token: "ascm_x"}
	if _, err := connections.Put(dir, c); err != nil {
		t.Fatal(err)
	}
	got, err := connections.Lookup(dir, "/r1")
	if err != nil || got.Token != "ascm_x" || got.WorktreeID != "checkout_1" {
		t.Fatalf("lookup = %+v, %v", got, err)
	}
	fi, err := os.Stat(connections.ConnectionsPath(dir))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("connections file mode: %v %v", fi.Mode(), err)
	}
	if _, err := connections.Remove(dir, "/r1"); err != nil {
		t.Fatal(err)
	}
	if _, err := connections.Remove(dir, "/r1"); !errors.Is(err, connections.ErrNoConnection) {
		t.Fatalf("second remove: %v", err)
	}

	for name, content := range map[string]string{
		"newer version": `{"version": 2, "connections": []}`,
		"unknown field": `{"version": 1, "connections": [], "extra": true}`,
		"garbage":       `not json`,
	} {
		t.Run(name, func(t *testing.T) {
			d := t.TempDir()
			os.WriteFile(connections.ConnectionsPath(d), []byte(content), 0o600)
			if _, err := connections.Load(d); err == nil {
				t.Fatal("loaded")
			}
			// A refused file is never rewritten.
			if _, err := connections.Put(d, c); err == nil {
				t.Fatal("Put over a refused file")
			}
			b, _ := os.ReadFile(connections.ConnectionsPath(d))
			if string(b) != content {
				t.Fatal("refused file was changed")
			}
		})
	}
	t.Run("symlink", func(t *testing.T) {
		d := t.TempDir()
		real := filepath.Join(t.TempDir(), "real.json")
		os.WriteFile(real, []byte(`{"version":1,"connections":[]}`), 0o600)
		os.Symlink(real, connections.ConnectionsPath(d))
		if _, err := connections.Load(d); err == nil {
			t.Fatal("followed a symlinked connections file")
		}
	})
}

// TestConcurrentUpdates puts many connections at once; the lock keeps every
// one of them.
func TestConcurrentUpdates(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "agentscm")
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := connections.Put(dir, connections.Connection{Root: fmt.Sprintf("/r%d", i), Kind: connections.KindLocal, Hub: connections.LocalHub, Repository: "p"}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	f, err := connections.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Connections) != 40 {
		t.Fatalf("%d connections kept, want 40", len(f.Connections))
	}
}

func TestSetupLocalKeepsWorktreeID(t *testing.T) {
	ctx := context.Background()
	cfg := filepath.Join(t.TempDir(), "agentscm")
	root := t.TempDir()
	c1, prev, err := client.SetupLocal(ctx, cfg, root, "proj", time.Now())
	if err != nil || prev != nil {
		t.Fatalf("first setup: %v %v", prev, err)
	}
	if !strings.HasPrefix(c1.WorktreeID, "checkout_") || len(c1.WorktreeID) != len("checkout_")+32 {
		t.Fatalf("worktree id %q", c1.WorktreeID)
	}
	c2, prev, err := client.SetupLocal(ctx, cfg, root, "proj", time.Now())
	if err != nil || prev == nil || c2.WorktreeID != c1.WorktreeID {
		t.Fatalf("same repository again: %+v prev %v err %v", c2, prev, err)
	}
	c3, _, err := client.SetupLocal(ctx, cfg, root, "other", time.Now())
	if err != nil || c3.WorktreeID == c1.WorktreeID {
		t.Fatalf("another repository keeps the worktree id: %+v %v", c3, err)
	}
	conn, err := client.Open(ctx, c3, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	who, err := conn.Whoami(ctx)
	if err != nil || who.Repository != "other" || who.Human != client.LocalHuman || who.SharedConversationRetentionDays != 30 {
		t.Fatalf("whoami = %+v, %v", who, err)
	}
	for _, name := range []string{"hub", "hub/objects"} {
		fi, err := os.Stat(filepath.Join(cfg, name))
		if err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s: %v %v", name, fi.Mode(), err)
		}
	}
}

func TestReadTokenAndURL(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(s), 0o600)
		return p
	}
	good := write("good", "ascm_abcDEF-_123\n")
	if tok, err := client.ReadToken(good); err != nil || tok != "ascm_abcDEF-_123" {
		t.Fatalf("ReadToken = %q, %v", tok, err)
	}
	for _, bad := range []string{write("empty", "\n"), write("foreign", "ghp_xyz\n"), write("spaces", "ascm_a b\n"), filepath.Join(dir, "missing")} {
		if _, err := client.ReadToken(bad); err == nil {
			t.Errorf("ReadToken(%s) accepted", filepath.Base(bad))
		}
	}
	os.Symlink(good, filepath.Join(dir, "link"))
	if _, err := client.ReadToken(filepath.Join(dir, "link")); err == nil {
		t.Error("ReadToken followed a symlink")
	}
	for in, want := range map[string]string{
		"http://127.0.0.1:8420/":  "http://127.0.0.1:8420",
		"https://hub.example/sub": "https://hub.example/sub",
		"ftp://x":                 "",
		"http://user:pw@h":        "",
		"http://h/?q=1":           "",
		"hub.example":             "",
	} {
		got, err := connections.NormalizeHubURL(in)
		if (want == "") != (err != nil) || got != want {
			t.Errorf("NormalizeHubURL(%q) = %q, %v", in, got, err)
		}
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want client.Outcome
	}{
		{nil, client.Acknowledged},
		{errors.New("connection refused"), client.Transient},
		{context.DeadlineExceeded, client.Transient},
		{&api.Error{Status: 409, Code: api.CodeConflict}, client.Rejected},
		{&api.Error{Status: 422, Code: api.CodeTargetRefused}, client.Rejected},
		{&api.Error{Status: 400, Code: api.CodeBadRequest}, client.Rejected},
		{&api.Error{Status: 403, Code: api.CodeForbidden}, client.Rejected},
		{&api.Error{Status: 401, Code: api.CodeUnauthenticated}, client.Transient},
		{&api.Error{Status: 503, Code: api.CodeUnavailable}, client.Transient},
		{fmt.Errorf("wrapped: %w", &api.Error{Status: 500}), client.Transient},
	} {
		if got := client.Classify(tc.err); got != tc.want {
			t.Errorf("Classify(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestFindContaining(t *testing.T) {
	f := &connections.File{Connections: []connections.Connection{{Root: "/a"}, {Root: "/a/b"}, {Root: "/ab"}}}
	for dir, want := range map[string]string{"/a": "/a", "/a/x/y": "/a", "/a/b": "/a/b", "/a/b/c": "/a/b", "/ab/c": "/ab", "/abc": "", "/": ""} {
		c, ok := f.FindContaining(dir)
		if ok != (want != "") || c.Root != want {
			t.Errorf("FindContaining(%q) = %q, %v; want %q", dir, c.Root, ok, want)
		}
	}
}
