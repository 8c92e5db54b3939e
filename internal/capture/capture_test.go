package capture

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/agent/claude"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

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
		got, err := ConfigDir(func(k string) string { return tc.env[k] })
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ConfigDir(%v) = %q, %v", tc.env, got, err)
		}
	}
}

type fixture struct {
	store Store
	root  string
	spool string
	exe   string
}

func newFixture(t *testing.T) fixture {
	dir := t.TempDir()
	f := fixture{store: Store{Dir: filepath.Join(dir, "config", "agentscm")}, root: filepath.Join(dir, "repo"), spool: filepath.Join(dir, "spool"), exe: "/usr/local/bin/agentscm"}
	if err := os.MkdirAll(f.root, 0o755); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f fixture) configure(t *testing.T, mode string) *ConfigureResult {
	t.Helper()
	res, err := Configure(context.Background(), f.store, ConfigureOptions{Root: f.root, Spool: f.spool, CaptureMode: mode, Executable: f.exe, Now: time.Now()})
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
		o    ConfigureOptions
		want string
	}{
		{"relative root", ConfigureOptions{Root: "repo", Spool: f.spool}, "not an absolute path"},
		{"missing root", ConfigureOptions{Root: f.root + "-missing", Spool: f.spool}, "does not exist"},
		{"root is a file", ConfigureOptions{Root: file, Spool: f.spool}, "not a directory"},
		{"relative spool", ConfigureOptions{Root: f.root, Spool: "spool"}, "--spool \"spool\" is not an absolute path"},
		{"spool inside checkout", ConfigureOptions{Root: f.root, Spool: filepath.Join(f.root, "sp")}, "inside the checkout"},
		{"bad mode", ConfigureOptions{Root: f.root, Spool: f.spool, CaptureMode: "shared-everything"}, "not supported"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Executable = f.exe
			_, err := Configure(context.Background(), f.store, tc.o)
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
	cfg, err := f.store.Load()
	if err != nil || len(cfg.Bindings) != 1 || cfg.Bindings[0].CaptureMode != event.ModeLocalConversation {
		t.Fatalf("config after reconfigure: %+v %v", cfg, err)
	}
	// Another spool for the same checkout is refused.
	_, err = Configure(context.Background(), f.store, ConfigureOptions{Root: f.root, Spool: f.spool + "2", Executable: f.exe, Now: time.Now()})
	if err == nil || !strings.Contains(err.Error(), "cannot adopt another spool") {
		t.Fatalf("second spool: %v", err)
	}
	un, err := Unconfigure(context.Background(), f.store, f.root)
	if err != nil || !un.HooksRemoved || !un.SpoolRetained {
		t.Fatalf("unconfigure: %+v %v", un, err)
	}
	if evs, _ := claude.MarkedEvents(filepath.Join(f.root, DefaultClaudeSettings)); len(evs) != 0 {
		t.Fatalf("hooks left: %v", evs)
	}
	cfg, _ = f.store.Load()
	if len(cfg.Bindings) != 1 || cfg.Bindings[0].Enabled {
		t.Fatalf("binding after unconfigure: %+v", cfg.Bindings)
	}
	if _, err := spool.Open(f.spool); err != nil {
		t.Fatalf("spool not retained: %v", err)
	}
	if _, err := Unconfigure(context.Background(), f.store, "/nowhere"); !errors.Is(err, ErrNoBinding) {
		t.Fatalf("unconfigure of unknown root: %v", err)
	}
}

func TestConfigVersionRefused(t *testing.T) {
	dir := t.TempDir()
	s := Store{Dir: dir}
	for _, content := range []string{`{"version": 6, "bindings": []}`, `{"version": 4}`, `{"bindings": []}`, `{"version": 5, "bindings": [], "extra": 1}`, `nope`} {
		os.WriteFile(filepath.Join(dir, configFile), []byte(content), 0o600)
		if _, err := s.Load(); err == nil {
			t.Errorf("Load accepted %s", content)
		}
		if err := s.Update(func(*Config) (bool, error) { return true, nil }); err == nil {
			t.Errorf("Update accepted %s", content)
		}
		b, _ := os.ReadFile(filepath.Join(dir, configFile))
		if string(b) != content {
			t.Errorf("refused config was rewritten: %s", b)
		}
	}
	os.WriteFile(filepath.Join(dir, configFile), []byte(`{"version": 6}`), 0o600)
	if _, err := s.Load(); !errors.Is(err, ErrUnknownVersion) {
		t.Fatalf("err = %v, want ErrUnknownVersion", err)
	}
}

func TestForPath(t *testing.T) {
	c := &Config{Bindings: []Binding{
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

func TestHandleClaudeHook(t *testing.T) {
	f := newFixture(t)
	f.configure(t, event.ModeMetadataOnly)
	sub := filepath.Join(f.root, "sub")
	os.Mkdir(sub, 0o755)
	payloads := []string{
		`{"session_id":"s","cwd":"` + f.root + `","hook_event_name":"SessionStart","source":"startup"}`,
		`{"session_id":"s","cwd":"` + sub + `","hook_event_name":"UserPromptSubmit","prompt":"TOP SECRET"}`,
		`{"session_id":"s","cwd":"` + f.root + `","hook_event_name":"Notification"}`,
		`{"session_id":"s","cwd":"/elsewhere","hook_event_name":"Stop"}`,
	}
	var results []*HookResult
	for _, p := range payloads {
		r, err := HandleClaudeHook(context.Background(), f.store, strings.NewReader(p), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, r)
	}
	if results[0].Seq != 1 || results[1].Seq != 2 || !results[2].Ignored || !results[3].Ignored {
		t.Fatalf("results %+v %+v %+v %+v", results[0], results[1], results[2], results[3])
	}
	sp, _ := spool.Open(f.spool)
	recs, err := sp.Events()
	if err != nil || len(recs) != 2 || recs[1].Body != nil {
		t.Fatalf("records %+v %v", recs, err)
	}
}
