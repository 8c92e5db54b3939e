package binding_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/agent/hookfile"
	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/connections"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

// configFile is the capture config's file name in the config directory.
const configFile = "capture.json"

func TestConfigDir(t *testing.T) {
	cases := []struct {
		env     map[string]string
		want    string
		wantErr bool
	}{
		{map[string]string{"XDG_CONFIG_HOME": "/x", "HOME": "/h"}, "/x/agentscm", false},
		{map[string]string{"HOME": "/h"}, "/h/.config/agentscm", false},
		{map[string]string{"XDG_CONFIG_HOME": "rel", "HOME": "/h"}, "", true},
		{map[string]string{}, "", true},
	}
	for _, tc := range cases {
		got, err := binding.ConfigDir(func(k string) string { return tc.env[k] })
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ConfigDir(%v) = %q, %v", tc.env, got, err)
		}
	}
}

type fixture struct {
	store capture.StateDir
	conns conns
	root  string
	spool string
	exe   string
}

// conns reads the real client connections file of a config directory.
type conns struct{ dir string }

func (c conns) Lock() (func() error, error) {
	l, err := connections.Lock(c.dir)
	if err != nil {
		return nil, err
	}
	return l.Unlock, nil
}

func (c conns) Current(root string) (binding.Lineage, error) {
	conn, err := connections.Lookup(c.dir, root)
	if errors.Is(err, connections.ErrNoConnection) {
		return binding.Lineage{}, binding.ErrNoConnection
	}
	return binding.Lineage{Hub: conn.Hub, Repository: conn.Repository, WorktreeID: conn.WorktreeID}, err
}

// newFixture makes a checkout connected to a Hub repository through a real
// connections file.
func newFixture(t *testing.T) fixture {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config", "agentscm")
	f := fixture{store: capture.StateDir{Dir: cfg}, conns: conns{cfg}, root: filepath.Join(dir, "repo"), spool: filepath.Join(dir, "spool"), exe: "/usr/local/bin/agentscm"}
	if err := os.MkdirAll(f.root, 0o755); err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.EvalSymlinks(f.root)
	if _, err := connections.Put(cfg, connections.Connection{Root: root, Kind: connections.KindHub, Hub: "http://127.0.0.1:1", Repository: "demo", WorktreeID: connections.NewWorktreeID()}); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f fixture) configure(t *testing.T, mode string) *binding.ConfigureResult {
	t.Helper()
	res, err := binding.Configure(context.Background(), f.store, f.conns, binding.ConfigureOptions{Root: f.root, Spool: f.spool, CaptureMode: mode, Executable: f.exe, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestConfigureRefusals(t *testing.T) {
	f := newFixture(t)
	file := filepath.Join(f.root, "file")
	os.WriteFile(file, nil, 0o644)
	cases := []struct {
		name string
		o    binding.ConfigureOptions
		want string
	}{
		{"relative root", binding.ConfigureOptions{Root: "repo", Spool: f.spool}, "not an absolute path"},
		{"missing root", binding.ConfigureOptions{Root: f.root + "-missing", Spool: f.spool}, "does not exist"},
		{"root is a file", binding.ConfigureOptions{Root: file, Spool: f.spool}, "not a directory"},
		{"relative spool", binding.ConfigureOptions{Root: f.root, Spool: "spool"}, "--spool \"spool\" is not an absolute path"},
		{"spool inside checkout", binding.ConfigureOptions{Root: f.root, Spool: filepath.Join(f.root, "sp")}, "inside the checkout"},
		{"bad mode", binding.ConfigureOptions{Root: f.root, Spool: f.spool, CaptureMode: "shared-everything"}, "not supported"},
		{"bad worktree id", binding.ConfigureOptions{Root: f.root, Spool: f.spool, WorktreeID: "a b"}, "--worktree-id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Executable = f.exe
			_, err := binding.Configure(context.Background(), f.store, f.conns, tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if _, err := os.Stat(f.spool); !os.IsNotExist(err) {
				t.Fatal("a refused configure created the spool")
			}
			if _, err := os.Stat(filepath.Join(f.store.Dir, configFile)); !os.IsNotExist(err) {
				t.Fatal("a refused configure wrote the config")
			}
		})
	}
}

func TestConfigureTwiceAndUnconfigure(t *testing.T) {
	f := newFixture(t)
	res := f.configure(t, "")
	if res.CaptureMode != event.ModeMetadataOnly || !res.SettingsChange {
		t.Fatalf("first configure: %+v", res)
	}
	fi, err := os.Stat(f.spool)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("spool mode: %v %v", fi, err)
	}
	cfgFile := filepath.Join(f.store.Dir, configFile)
	if fi, err := os.Stat(cfgFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("config file: %v %v", fi, err)
	}
	res = f.configure(t, event.ModeLocalConversation)
	if res.SettingsChange {
		t.Fatal("second configure changed the settings file")
	}
	cfg, err := f.store.Bindings().Load()
	if err != nil || len(cfg.Bindings) != 1 || cfg.Bindings[0].CaptureMode != event.ModeLocalConversation {
		t.Fatalf("config after reconfigure: %+v %v", cfg, err)
	}
	// Another spool for the same checkout is refused.
	_, err = binding.Configure(context.Background(), f.store, f.conns, binding.ConfigureOptions{Root: f.root, Spool: f.spool + "2", Executable: f.exe, Now: time.Now()})
	if err == nil || !strings.Contains(err.Error(), "cannot adopt another spool") {
		t.Fatalf("second spool: %v", err)
	}
	un, err := binding.Unconfigure(context.Background(), f.store, f.root)
	if err != nil || !un.HooksRemoved || !un.SpoolRetained {
		t.Fatalf("unconfigure: %+v %v", un, err)
	}
	if evs, _ := hookfile.MarkedEvents(filepath.Join(f.root, binding.DefaultClaudeSettings)); len(evs) != 0 {
		t.Fatalf("hooks left: %v", evs)
	}
	cfg, _ = f.store.Bindings().Load()
	if len(cfg.Bindings) != 1 || cfg.Bindings[0].Enabled {
		t.Fatalf("binding after unconfigure: %+v", cfg.Bindings)
	}
	if _, err := spool.Open(f.spool); err != nil {
		t.Fatalf("spool not retained: %v", err)
	}
	if _, err := binding.Unconfigure(context.Background(), f.store, "/nowhere"); !errors.Is(err, binding.ErrNoBinding) {
		t.Fatalf("unconfigure of unknown root: %v", err)
	}
}

func TestConfigVersionRefused(t *testing.T) {
	dir := t.TempDir()
	s := binding.Registry{Dir: dir}
	for _, content := range []string{`{"version": 9, "bindings": []}`, `{"version": 6, "bindings": [{"root": "/r", "spool": "/s", "capture_mode": "metadata-only", "enabled": true, "configured_at": "2026-01-01T00:00:00Z", "limits": {"records": 4096, "bytes": 67108864, "artifact_bytes": 16777216}, "compaction": {"threshold_percent": 50, "chosen_by": "enable", "chosen_at": "2026-01-01T00:00:00Z"}}]}`, `{"version": 4}`, `{"bindings": []}`, `{"version": 5, "bindings": [], "extra": 1}`, `nope`} {
		os.WriteFile(filepath.Join(dir, configFile), []byte(content), 0o600)
		if _, err := s.Load(); err == nil {
			t.Errorf("Load accepted %s", content)
		}
		if err := s.Update(func(*binding.Config) (bool, error) { return true, nil }); err == nil {
			t.Errorf("Update accepted %s", content)
		}
		b, _ := os.ReadFile(filepath.Join(dir, configFile))
		if string(b) != content {
			t.Errorf("refused config was rewritten: %s", b)
		}
	}
	os.WriteFile(filepath.Join(dir, configFile), []byte(`{"version": 9}`), 0o600)
	if _, err := s.Load(); !errors.Is(err, binding.ErrUnknownVersion) {
		t.Fatalf("err = %v, want ErrUnknownVersion", err)
	}
}

func TestForPath(t *testing.T) {
	c := &binding.Config{Bindings: []binding.Binding{
		{Root: "/a", Enabled: true},
		{Root: "/a/b", Enabled: true},
		{Root: "/c", Enabled: false},
	}}
	cases := map[string]string{"/a": "/a", "/a/x": "/a", "/a/b/c": "/a/b", "/ab": "", "/c/d": "", "/": ""}
	for path, want := range cases {
		got := ""
		if b := c.ForPath(path); b != nil {
			got = b.Root
		}
		if got != want {
			t.Errorf("ForPath(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestConcurrentConfigureAndEnableLoseNoBinding(t *testing.T) {
	base := newFixture(t)
	const n = 8
	var roots []string
	for i := range n {
		r := filepath.Join(filepath.Dir(base.root), "co"+string(rune('a'+i)))
		os.MkdirAll(r, 0o755)
		real, _ := filepath.EvalSymlinks(r)
		if _, err := connections.Put(base.store.Dir, connections.Connection{Root: real, Kind: connections.KindHub, Hub: "http://127.0.0.1:1", Repository: "demo", WorktreeID: connections.NewWorktreeID()}); err != nil {
			t.Fatal(err)
		}
		roots = append(roots, real)
	}
	errs := make(chan error, n)
	for i, r := range roots {
		go func() {
			var err error
			if i%2 == 0 {
				_, err = binding.Configure(context.Background(), base.store, base.conns, binding.ConfigureOptions{Root: r, Spool: r + "-spool", Executable: base.exe, Now: time.Now()})
			} else {
				_, err = binding.EnableCapture(context.Background(), base.store, base.conns, binding.EnableOptions{Root: r, ConfigDir: base.store.Dir, Executable: base.exe, Now: time.Now()})
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := base.store.Bindings().Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Bindings) != n {
		t.Fatalf("%d bindings after %d concurrent setups", len(cfg.Bindings), n)
	}
	for _, r := range roots {
		if b := cfg.Find(r); b == nil || !b.Enabled {
			t.Fatalf("binding of %s lost", r)
		}
	}
}
