package binding_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/agent/adapter"
	"github.com/agentscm/agentscm/internal/agent/hookfile"
	"github.com/agentscm/agentscm/internal/binding"
)

// oldBinding is a binding line of a version 5 to 7 file with the given extra
// fields.
func oldBinding(extra string) string {
	return `{"root": "/r", "spool": "/s", "capture_mode": "metadata-only", "enabled": true, "configured_at": "2026-01-01T00:00:00Z", "limits": {"records": 4096, "bytes": 67108864, "artifact_bytes": 16777216}` + extra + `}`
}

// TestConfigAgentsField: files of versions 5 to 7 keep loading and mean
// their one agent; version 8 lists several; a malformed list is refused.
func TestConfigAgentsField(t *testing.T) {
	compaction := `, "compaction": {"threshold_percent": 50, "chosen_by": "enable", "chosen_at": "2026-01-01T00:00:00Z"}`
	cases := []struct {
		name    string
		file    string
		want    []binding.AgentHooks
		wantErr string
	}{
		{"v5 claude", `{"version": 5, "bindings": [` + oldBinding("") + `]}`,
			[]binding.AgentHooks{{Agent: "claude-code", Settings: ".claude/settings.local.json"}}, ""},
		{"v6 claude settings", `{"version": 6, "bindings": [` + oldBinding(`, "claude_settings": ".claude/settings.json"`) + `]}`,
			[]binding.AgentHooks{{Agent: "claude-code", Settings: ".claude/settings.json"}}, ""},
		{"v6 codex", `{"version": 6, "bindings": [` + oldBinding(`, "agent": "codex", "claude_settings": ".codex/hooks.json"`) + `]}`,
			[]binding.AgentHooks{{Agent: "codex", Settings: ".codex/hooks.json"}}, ""},
		{"v7 gemini", `{"version": 7, "bindings": [` + oldBinding(`, "agent": "gemini", "claude_settings": ".gemini/settings.json"`+compaction) + `]}`,
			[]binding.AgentHooks{{Agent: "gemini", Settings: ".gemini/settings.json"}}, ""},
		{"v8 three", `{"version": 8, "bindings": [` + oldBinding(`, "agents": [{"agent": "codex", "settings": ".codex/hooks.json"}, {"agent": "gemini", "settings": ".gemini/settings.json"}, {"agent": "claude-code", "settings": ".claude/settings.local.json"}]`) + `]}`,
			[]binding.AgentHooks{{Agent: "codex", Settings: ".codex/hooks.json"}, {Agent: "gemini", Settings: ".gemini/settings.json"}, {Agent: "claude-code", Settings: ".claude/settings.local.json"}}, ""},
		{"v8 without agents", `{"version": 8, "bindings": [` + oldBinding(`, "agent": "codex", "claude_settings": ".codex/hooks.json"`) + `]}`,
			[]binding.AgentHooks{{Agent: "codex", Settings: ".codex/hooks.json"}}, ""},
		{"v7 with agents", `{"version": 7, "bindings": [` + oldBinding(`, "agents": [{"agent": "codex", "settings": ".codex/hooks.json"}, {"agent": "gemini", "settings": ".gemini/settings.json"}]`) + `]}`,
			nil, "cannot hold a binding of several agents"},
		{"one agent listed", `{"version": 8, "bindings": [` + oldBinding(`, "agents": [{"agent": "codex", "settings": ".codex/hooks.json"}]`) + `]}`,
			nil, "fewer than two agents"},
		{"agents and agent", `{"version": 8, "bindings": [` + oldBinding(`, "agent": "codex", "agents": [{"agent": "codex", "settings": ".codex/hooks.json"}, {"agent": "gemini", "settings": ".gemini/settings.json"}]`) + `]}`,
			nil, "both set"},
		{"unknown agent", `{"version": 8, "bindings": [` + oldBinding(`, "agents": [{"agent": "cursor", "settings": ".cursor/hooks.json"}, {"agent": "gemini", "settings": ".gemini/settings.json"}]`) + `]}`,
			nil, `unknown agent "cursor"`},
		{"agent twice", `{"version": 8, "bindings": [` + oldBinding(`, "agents": [{"agent": "gemini", "settings": ".gemini/a.json"}, {"agent": "gemini", "settings": ".gemini/settings.json"}]`) + `]}`,
			nil, "listed twice"},
		{"one file twice", `{"version": 8, "bindings": [` + oldBinding(`, "agents": [{"agent": "codex", "settings": "hooks.json"}, {"agent": "gemini", "settings": "hooks.json"}]`) + `]}`,
			nil, "listed twice"},
		{"settings escapes", `{"version": 8, "bindings": [` + oldBinding(`, "agents": [{"agent": "codex", "settings": "../hooks.json"}, {"agent": "gemini", "settings": ".gemini/settings.json"}]`) + `]}`,
			nil, "codex"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, configFile), []byte(tc.file), 0o600)
			c, err := binding.Registry{Dir: dir}.Load()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Load: %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Bindings[0].Hooks(); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Hooks() = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// hookState is, per agent, whether its hook file holds its marked capture
// hooks.
func hookState(t *testing.T, root string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, a := range adapter.All() {
		evs, err := hookfile.MarkedEventsFor(filepath.Join(root, filepath.FromSlash(a.HookFile())), a.CaptureSubcommand())
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		out[a.Name()] = len(evs) == len(a.CaptureEvents())
	}
	return out
}

// savedVersion is the version of the capture config file on disk.
func savedVersion(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, configFile))
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ Version int }
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v.Version
}

// TestBindingAgentsAddRemove: one binding gains agents one by one, each
// agent's hooks installed where it reads them and the others' kept; an
// agent is removed alone; the last one turns capture off; a re-enable puts
// every remaining agent's hooks back; the file is version 8 only while a
// binding lists several agents.
func TestBindingAgentsAddRemove(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	root, _ := filepath.EvalSymlinks(f.root)
	enable := func(agent string) *binding.EnableResult {
		t.Helper()
		res, err := binding.EnableCapture(ctx, f.store, f.conns, binding.EnableOptions{Root: f.root, ConfigDir: f.store.Dir, Executable: f.exe, Now: time.Now(), Agent: agent})
		if err != nil {
			t.Fatalf("enable --agent %q: %v", agent, err)
		}
		return res
	}
	agentsOf := func() []string {
		t.Helper()
		c, err := f.store.Bindings().Load()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, h := range c.Find(root).Hooks() {
			out = append(out, h.Agent)
		}
		return out
	}
	steps := []struct {
		name    string
		do      func()
		agents  []string
		hooks   map[string]bool
		version int
		enabled bool
	}{
		{"codex", func() { enable("codex") }, []string{"codex"},
			map[string]bool{"claude-code": false, "codex": true, "gemini": false}, 7, true},
		{"add gemini", func() {
			res := enable("gemini")
			if res.Action != "mode-changed" || res.Agent != "gemini" || len(res.Agents) != 2 || !res.SettingsCreated {
				t.Fatalf("enable gemini: %+v", res.ConfigureResult)
			}
		}, []string{"codex", "gemini"}, map[string]bool{"claude-code": false, "codex": true, "gemini": true}, 8, true},
		{"add claude", func() { enable("claude-code") }, []string{"codex", "gemini", "claude-code"},
			map[string]bool{"claude-code": true, "codex": true, "gemini": true}, 8, true},
		{"again without agent keeps all", func() { enable("") }, []string{"codex", "gemini", "claude-code"},
			map[string]bool{"claude-code": true, "codex": true, "gemini": true}, 8, true},
		{"remove gemini", func() {
			res, err := binding.RemoveAgent(ctx, f.store, f.root, "gemini")
			if err != nil || !res.HooksRemoved || !reflect.DeepEqual(res.Remaining, []string{"codex", "claude-code"}) || res.Capture != nil {
				t.Fatalf("remove gemini: %+v %v", res, err)
			}
		}, []string{"codex", "claude-code"}, map[string]bool{"claude-code": true, "codex": true, "gemini": false}, 8, true},
		{"remove gemini again", func() {
			if _, err := binding.RemoveAgent(ctx, f.store, f.root, "gemini"); !errors.Is(err, binding.ErrAgentNotBound) {
				t.Fatalf("err = %v, want ErrAgentNotBound", err)
			}
		}, []string{"codex", "claude-code"}, map[string]bool{"claude-code": true, "codex": true, "gemini": false}, 8, true},
		{"remove claude", func() {
			if _, err := binding.RemoveAgent(ctx, f.store, f.root, "claude"); err != nil {
				t.Fatal(err)
			}
		}, []string{"codex"}, map[string]bool{"claude-code": false, "codex": true, "gemini": false}, 7, true},
		{"add gemini back", func() { enable("gemini") }, []string{"codex", "gemini"},
			map[string]bool{"claude-code": false, "codex": true, "gemini": true}, 8, true},
		{"unconfigure removes all", func() {
			un, err := binding.Unconfigure(ctx, f.store, f.root)
			if err != nil || !un.HooksRemoved || len(un.HookFiles) != 2 {
				t.Fatalf("unconfigure: %+v %v", un, err)
			}
		}, []string{"codex", "gemini"}, map[string]bool{"claude-code": false, "codex": false, "gemini": false}, 8, false},
		{"re-enable puts all back", func() {
			if res := enable(""); res.Action != "re-enabled" {
				t.Fatalf("re-enable: %s", res.Action)
			}
		}, []string{"codex", "gemini"}, map[string]bool{"claude-code": false, "codex": true, "gemini": true}, 8, true},
		{"remove codex", func() {
			if _, err := binding.RemoveAgent(ctx, f.store, f.root, "codex"); err != nil {
				t.Fatal(err)
			}
		}, []string{"gemini"}, map[string]bool{"claude-code": false, "codex": false, "gemini": true}, 7, true},
		{"remove the last agent turns capture off", func() {
			res, err := binding.RemoveAgent(ctx, f.store, f.root, "gemini")
			if err != nil || res.Capture == nil || len(res.Remaining) != 0 || !res.HooksRemoved {
				t.Fatalf("remove last: %+v %v", res, err)
			}
		}, []string{"gemini"}, map[string]bool{"claude-code": false, "codex": false, "gemini": false}, 7, false},
	}
	for _, st := range steps {
		st.do()
		if got := agentsOf(); !reflect.DeepEqual(got, st.agents) {
			t.Fatalf("%s: agents %v, want %v", st.name, got, st.agents)
		}
		if got := hookState(t, root); !reflect.DeepEqual(got, st.hooks) {
			t.Fatalf("%s: hooks %v, want %v", st.name, got, st.hooks)
		}
		if v := savedVersion(t, f.store.Dir); v != st.version {
			t.Fatalf("%s: capture.json version %d, want %d", st.name, v, st.version)
		}
		c, _ := f.store.Bindings().Load()
		if b := c.Find(root); b.Enabled != st.enabled {
			t.Fatalf("%s: enabled %v", st.name, b.Enabled)
		}
	}
}

// TestConfigureAddsAgent: change-capture configure with --agent on a bound
// checkout adds the agent beside the binding's (it was refused), keeps the
// others' hooks, and refuses a hook file another agent of the binding
// uses; without --agent it keeps the binding's agents.
func TestConfigureAddsAgent(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	root, _ := filepath.EvalSymlinks(f.root)
	configure := func(agent, settings string) (*binding.ConfigureResult, error) {
		return binding.Configure(ctx, f.store, f.conns, binding.ConfigureOptions{Root: f.root, Spool: f.spool, Executable: f.exe, Now: time.Now(), Agent: agent, ClaudeSettings: settings})
	}
	if _, err := configure("codex", ""); err != nil {
		t.Fatal(err)
	}
	res, err := configure("gemini", "")
	if err != nil || res.Agent != "gemini" || len(res.Agents) != 2 {
		t.Fatalf("configure gemini: %+v %v", res, err)
	}
	if _, err := configure("claude-code", ".codex/hooks.json"); err == nil || !strings.Contains(err.Error(), "already in .codex/hooks.json") {
		t.Fatalf("shared hook file: %v", err)
	}
	if res, err = configure("", ""); err != nil || res.Agent != "codex" || len(res.Agents) != 2 || res.SettingsChange {
		t.Fatalf("configure without --agent: %+v %v", res, err)
	}
	if got := hookState(t, root); !reflect.DeepEqual(got, map[string]bool{"claude-code": false, "codex": true, "gemini": true}) {
		t.Fatalf("hooks %v", got)
	}
	set, err := binding.CaptureSetting(f.store, f.conns, root)
	if err != nil || len(set.Agents) != 2 || set.Agents[1].Agent != "gemini" || len(set.Agents[1].Installed) != len(set.Agents[1].Events) {
		t.Fatalf("setting: %+v %v", set, err)
	}
}
