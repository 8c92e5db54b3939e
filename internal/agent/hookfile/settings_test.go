package hookfile

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const exe = "/opt/agent scm/bin/agentscm"

func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, b)
	}
	return v
}

func TestInstallAndRemoveKeepUnrelatedSettings(t *testing.T) {
	cases := []struct {
		name    string
		initial string // "" means no file
	}{
		{"missing file", ""},
		{"empty object", "{}"},
		{"unrelated keys and hooks", `{
  "permissions": {"allow": ["Bash(ls:*)"], "deny": []},
  "hooks": {
    "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "echo pre", "timeout": 5}]}],
    "Notification": [{"hooks": [{"type": "command", "command": "notify-send hi"}]}]
  },
  "model": "opus",
  "nested": {"z": 1, "a": [1, 2.50, "x"]}
}`},
		{"foreign hook in the same group as ours", `{"hooks": {"Stop": [{"hooks": [
  {"type": "command", "command": "echo mine"},
  {"type": "command", "command": "/old/agentscm change-capture hook-claude", "timeout": 20}
]}]}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), ".claude", "settings.local.json")
			if tc.initial != "" {
				os.MkdirAll(filepath.Dir(path), 0o755)
				if err := os.WriteFile(path, []byte(tc.initial), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			changed, err := InstallHooks(path, HookCommand(exe), HookEvents[:])
			if err != nil || !changed {
				t.Fatalf("install: changed=%v err=%v", changed, err)
			}
			got := readJSON(t, path)
			evs, err := MarkedEvents(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) != len(HookEvents) {
				t.Fatalf("marked events %v, want all %d", evs, len(HookEvents))
			}
			// Each event holds exactly one marked entry with a 20 s timeout.
			hooks := got["hooks"].(map[string]any)
			for _, ev := range HookEvents {
				n := 0
				for _, g := range hooks[ev].([]any) {
					for _, e := range g.(map[string]any)["hooks"].([]any) {
						m := e.(map[string]any)
						if IsMarkedCommand(m["command"].(string)) {
							n++
							if m["command"] != `'/opt/agent scm/bin/agentscm' change-capture hook-claude` || m["timeout"] != float64(20) {
								t.Errorf("%s: entry %v", ev, m)
							}
						}
					}
				}
				if n != 1 {
					t.Errorf("%s has %d marked entries", ev, n)
				}
			}
			// A second install changes nothing.
			before, _ := os.ReadFile(path)
			changed, err = InstallHooks(path, HookCommand(exe), HookEvents[:])
			if err != nil || changed {
				t.Fatalf("second install: changed=%v err=%v", changed, err)
			}
			after, _ := os.ReadFile(path)
			if string(before) != string(after) {
				t.Fatal("second install rewrote the file")
			}
			// Remove restores the unrelated content exactly (as JSON values).
			if _, err := RemoveHooks(path); err != nil {
				t.Fatal(err)
			}
			removed := readJSON(t, path)
			want := map[string]any{}
			if tc.initial != "" {
				json.Unmarshal([]byte(tc.initial), &want)
			}
			stripMarked(want)
			if !reflect.DeepEqual(removed, want) {
				t.Fatalf("after remove:\n%v\nwant:\n%v", removed, want)
			}
		})
	}
}

// stripMarked removes marked entries from a decoded settings value the way
// RemoveHooks should, for the expected result.
func stripMarked(v map[string]any) {
	hooks, ok := v["hooks"].(map[string]any)
	if !ok {
		return
	}
	for ev, gs := range hooks {
		var keptGroups []any
		for _, g := range gs.([]any) {
			gm := g.(map[string]any)
			var kept []any
			for _, e := range gm["hooks"].([]any) {
				if !IsMarkedCommand(e.(map[string]any)["command"].(string)) {
					kept = append(kept, e)
				}
			}
			if len(kept) > 0 {
				gm["hooks"] = kept
				keptGroups = append(keptGroups, gm)
			}
		}
		if len(keptGroups) == 0 {
			delete(hooks, ev)
		} else {
			hooks[ev] = keptGroups
		}
	}
	if len(hooks) == 0 {
		delete(v, "hooks")
	}
}

func TestInstallKeepsKeyOrder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "settings.json")
	os.WriteFile(path, []byte(`{"zeta": 1, "alpha": {"y": 2, "b": 3}, "hooks": {}}`), 0o644)
	if _, err := InstallHooks(path, HookCommand("/bin/agentscm"), []string{"Stop"}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	s := string(b)
	if !(strings.Index(s, `"zeta"`) < strings.Index(s, `"alpha"`) && strings.Index(s, `"y"`) < strings.Index(s, `"b"`)) {
		t.Fatalf("key order changed:\n%s", s)
	}
}

func TestInstallReplacesStaleMarkedEntry(t *testing.T) {
	path := filepath.Join(t.TempDir(), "settings.json")
	os.WriteFile(path, []byte(`{"hooks": {"Stop": [
		{"hooks": [{"type": "command", "command": "/old/agentscm change-capture hook-claude", "timeout": 20}]},
		{"hooks": [{"type": "command", "command": "/older/agentscm change-capture hook-claude"}]}]}}`), 0o644)
	if _, err := InstallHooks(path, HookCommand("/new/agentscm"), []string{"Stop"}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if strings.Contains(string(b), "/old/") || strings.Contains(string(b), "/older/") || strings.Count(string(b), "hook-claude") != 1 {
		t.Fatalf("stale entries kept:\n%s", b)
	}
}

func TestSettingsRefusals(t *testing.T) {
	cases := map[string]string{
		"not json":        `{"hooks": `,
		"not an object":   `[1,2]`,
		"hooks not obj":   `{"hooks": []}`,
		"event not array": `{"hooks": {"Stop": {}}}`,
		"duplicate key":   `{"a": 1, "a": 2}`,
		"trailing data":   `{} {}`,
	}
	for name, content := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "settings.json")
			os.WriteFile(path, []byte(content), 0o644)
			if _, err := InstallHooks(path, HookCommand("/bin/agentscm"), []string{"Stop"}); err == nil {
				t.Fatal("install accepted a broken settings file")
			}
			b, _ := os.ReadFile(path)
			if string(b) != content {
				t.Fatal("a refused install changed the file")
			}
		})
	}
}

func TestIsMarkedCommand(t *testing.T) {
	cases := map[string]bool{
		"/usr/bin/agentscm change-capture hook-claude":          true,
		"'/a b/agentscm' change-capture hook-claude":            true,
		"change-capture hook-claude":                            false,
		" change-capture hook-claude":                           false,
		"/usr/bin/agentscm change-capture hook-claude --x":      false,
		"/usr/bin/agentscm change-capture hook-claude-other":    false,
		"echo /usr/bin/agentscm change-capture hook-claude-not": false,
	}
	for cmd, want := range cases {
		if got := IsMarkedCommand(cmd); got != want {
			t.Errorf("IsMarkedCommand(%q) = %v, want %v", cmd, got, want)
		}
	}
}

func TestRemoveMissingFile(t *testing.T) {
	changed, err := RemoveHooks(filepath.Join(t.TempDir(), "nope.json"))
	if err != nil || changed {
		t.Fatalf("changed=%v err=%v", changed, err)
	}
}

func TestCaptureAndChangelogMarkersAreIndependent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "settings.json")
	if _, err := InstallHooks(path, HookCommand("/bin/agentscm"), HookEvents[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := InstallHooks(path, CommandFor("/bin/agentscm", ChangelogSubcommand), []string{"PostToolUse", "Stop"}); err != nil {
		t.Fatal(err)
	}
	// Reinstalling capture keeps the changelog entries, and vice versa.
	if changed, err := InstallHooks(path, HookCommand("/bin/agentscm"), HookEvents[:]); err != nil || changed {
		t.Fatalf("reinstall: changed=%v err=%v", changed, err)
	}
	if ev, _ := MarkedEventsFor(path, ChangelogSubcommand); len(ev) != 2 {
		t.Fatalf("changelog events %v", ev)
	}
	if _, err := RemoveHooksFor(path, HookSubcommand); err != nil {
		t.Fatal(err)
	}
	if ev, _ := MarkedEventsFor(path, HookSubcommand); len(ev) != 0 {
		t.Fatalf("capture hooks left: %v", ev)
	}
	if ev, _ := MarkedEvents(path); len(ev) != 2 {
		t.Fatalf("removing capture hooks touched the changelog's: %v", ev)
	}
	if _, err := InstallHooks(path, "echo not ours", []string{"Stop"}); err == nil {
		t.Fatal("an unmarked command was installed as a marked hook")
	}
	if _, err := RemoveHooks(path); err != nil {
		t.Fatal(err)
	}
	if ev, _ := MarkedEvents(path); len(ev) != 0 {
		t.Fatalf("RemoveHooks left %v", ev)
	}
}

func TestHookExecutable(t *testing.T) {
	cases := []struct {
		name  string
		setup func(dir string) // creates the sibling agentscm-hook, or not
		lean  bool
	}{
		{"no sibling", func(string) {}, false},
		{"executable sibling", func(d string) { os.WriteFile(filepath.Join(d, HookBinary), []byte("#!/bin/sh\n"), 0o755) }, true},
		{"sibling not executable", func(d string) { os.WriteFile(filepath.Join(d, HookBinary), []byte("x"), 0o644) }, false},
		{"sibling is a directory", func(d string) { os.Mkdir(filepath.Join(d, HookBinary), 0o755) }, false},
		{"sibling is a dangling symlink", func(d string) { os.Symlink(filepath.Join(d, "missing"), filepath.Join(d, HookBinary)) }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			exe := filepath.Join(dir, "agentscm")
			c.setup(dir)
			want := exe
			if c.lean {
				want = filepath.Join(dir, HookBinary)
			}
			got := HookExecutable(exe)
			if got != want {
				t.Fatalf("HookExecutable(%s) = %s, want %s", exe, got, want)
			}
			// Either way the installed command stays a marked capture hook.
			if cmd := HookCommand(got); markerOf(cmd) != HookSubcommand {
				t.Fatalf("hook command %q is not marked", cmd)
			}
		})
	}
	if got := HookExecutable("agentscm"); got != "agentscm" {
		t.Fatalf("relative exe: got %s", got)
	}
}

// TestIntakeExecutable: a capture-only entry runs the intake binary only
// when it and the lean hook binary it hands the Hub paths to both sit next
// to agentscm; otherwise what HookExecutable chooses.
func TestIntakeExecutable(t *testing.T) {
	exec := func(d, name string) { os.WriteFile(filepath.Join(d, name), []byte("#!/bin/sh\n"), 0o755) }
	for _, c := range []struct {
		name  string
		setup func(dir string)
		want  string
	}{
		{"neither", func(string) {}, "agentscm"},
		{"lean only", func(d string) { exec(d, HookBinary) }, HookBinary},
		{"intake only", func(d string) { exec(d, IntakeBinary) }, "agentscm"},
		{"both", func(d string) { exec(d, HookBinary); exec(d, IntakeBinary) }, IntakeBinary},
		{"intake not executable", func(d string) {
			exec(d, HookBinary)
			os.WriteFile(filepath.Join(d, IntakeBinary), []byte("x"), 0o644)
		}, HookBinary},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			c.setup(dir)
			if got := IntakeExecutable(filepath.Join(dir, "agentscm")); got != filepath.Join(dir, c.want) {
				t.Fatalf("IntakeExecutable = %s, want %s", got, filepath.Join(dir, c.want))
			}
		})
	}
}
