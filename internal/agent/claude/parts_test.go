package claude

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// ourEntries maps each event of path to the commands of its marked
// Claude Code entries, and counts the foreign entry kept on Stop.
func ourEntries(t *testing.T, path string) (map[string][]string, int) {
	t.Helper()
	v := readJSON(t, path)
	hooks, _ := v["hooks"].(map[string]any)
	out := map[string][]string{}
	foreign := 0
	for ev, groups := range hooks {
		for _, g := range groups.([]any) {
			for _, h := range g.(map[string]any)["hooks"].([]any) {
				cmd := h.(map[string]any)["command"].(string)
				if IsMarkedCommand(cmd) {
					out[ev] = append(out[ev], cmd)
				} else if cmd == "echo mine" {
					foreign++
				}
			}
		}
	}
	return out, foreign
}

// todaysInstall writes settings as the code before the one hook pipeline
// did: `change-capture configure` (the lean hook on the eleven events),
// then `changelog enable` (the full binary on its five events), next to an
// entry of the user's own.
func todaysInstall(t *testing.T, capture, changelog bool) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), ".claude", "settings.local.json")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	user := `{"permissions":{"allow":["Bash"]},"hooks":{"Stop":[{"hooks":[{"type":"command","command":"echo mine"}]}]}}`
	if err := os.WriteFile(path, []byte(user), 0o644); err != nil {
		t.Fatal(err)
	}
	if capture {
		if _, err := InstallHooks(path, CommandFor("/opt/bin/agentscm-hook", HookSubcommand), HookEvents[:]); err != nil {
			t.Fatal(err)
		}
	}
	if changelog {
		if _, err := InstallHooks(path, CommandFor("/opt/bin/agentscm", ChangelogSubcommand), ChangelogEvents[:]); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

func TestInstallPartsUpgradesTwoEntryInstall(t *testing.T) {
	path := todaysInstall(t, true, true)
	before, _ := ourEntries(t, path)
	if len(before["PostToolUse"]) != 2 {
		t.Fatalf("today's install should have two entries on PostToolUse: %v", before)
	}
	p, exe, err := InstalledParts(path)
	if err != nil || p != (Parts{Capture: true, Changelog: true}) || exe == "" {
		t.Fatalf("InstalledParts = %+v, %q, %v", p, exe, err)
	}
	// The next configure (or changelog enable) writes one entry per event.
	changed, err := InstallParts(path, "/opt/bin/agentscm-hook", Parts{Capture: true, Changelog: p.Changelog})
	if err != nil || !changed {
		t.Fatalf("InstallParts: changed=%v err=%v", changed, err)
	}
	got, foreign := ourEntries(t, path)
	if foreign != 1 {
		t.Fatalf("the user's own Stop entry was not kept exactly once (%d)", foreign)
	}
	if !strings.Contains(string(mustRead(t, path)), `"allow"`) {
		t.Fatal("other settings were lost")
	}
	for _, ev := range HookEvents {
		want := "/opt/bin/agentscm-hook " + HookSubcommand
		if slices.Contains(ChangelogEvents[:], ev) {
			want = "/opt/bin/agentscm-hook " + CombinedSubcommand
		}
		if len(got[ev]) != 1 || got[ev][0] != want {
			t.Errorf("%s: entries %q, want exactly [%q]", ev, got[ev], want)
		}
	}
	if len(got) != len(HookEvents) {
		t.Errorf("marked entries on %d events, want %d: %v", len(got), len(HookEvents), got)
	}
	// Again: nothing changes.
	if changed, err := InstallParts(path, "/opt/bin/agentscm-hook", Parts{Capture: true, Changelog: true}); err != nil || changed {
		t.Fatalf("reinstall: changed=%v err=%v", changed, err)
	}
	// Both queries still see their part through the combined entry.
	if ev, _ := MarkedEventsFor(path, ChangelogSubcommand); len(ev) != len(ChangelogEvents) {
		t.Errorf("changelog events %v", ev)
	}
	if ev, _ := MarkedEventsFor(path, HookSubcommand); len(ev) != len(HookEvents) {
		t.Errorf("capture events %v", ev)
	}
}

func TestInstallPartsRemovesOnlyOnePart(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remove string
		want   Parts
		events int
		sub    string
	}{
		{"changelog disable keeps the capture", "changelog", Parts{Capture: true}, len(HookEvents), HookSubcommand},
		{"capture unconfigure keeps the changelog", "capture", Parts{Changelog: true}, len(ChangelogEvents), ChangelogSubcommand},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := todaysInstall(t, true, true)
			if _, err := InstallParts(path, "/opt/bin/agentscm-hook", Parts{Capture: true, Changelog: true}); err != nil {
				t.Fatal(err)
			}
			// disable / unconfigure pass no executable: the installed one stays.
			changed, err := InstallParts(path, "", tc.want)
			if err != nil || !changed {
				t.Fatalf("changed=%v err=%v", changed, err)
			}
			got, foreign := ourEntries(t, path)
			if foreign != 1 || len(got) != tc.events {
				t.Fatalf("foreign %d, marked events %d (want %d): %v", foreign, len(got), tc.events, got)
			}
			for ev, cmds := range got {
				if len(cmds) != 1 || cmds[0] != "/opt/bin/agentscm-hook "+tc.sub {
					t.Errorf("%s: %q", ev, cmds)
				}
			}
			if p, _, _ := InstalledParts(path); p != tc.want {
				t.Errorf("parts %+v, want %+v", p, tc.want)
			}
			// Removing the last part leaves only the user's entry.
			if _, err := InstallParts(path, "", Parts{}); err != nil {
				t.Fatal(err)
			}
			if got, foreign := ourEntries(t, path); len(got) != 0 || foreign != 1 {
				t.Fatalf("left %v, foreign %d", got, foreign)
			}
		})
	}
}

func TestInstallPartsUpgradesOnePartInstalls(t *testing.T) {
	// A changelog-only install of today (the full binary) is moved to the
	// executable given; a capture-only one is unchanged.
	path := todaysInstall(t, false, true)
	if _, err := InstallParts(path, "/opt/bin/agentscm-hook", Parts{Changelog: true}); err != nil {
		t.Fatal(err)
	}
	got, _ := ourEntries(t, path)
	if len(got) != len(ChangelogEvents) || got["Stop"][0] != "/opt/bin/agentscm-hook "+ChangelogSubcommand {
		t.Fatalf("changelog-only: %v", got)
	}
	path = todaysInstall(t, true, false)
	if changed, err := InstallParts(path, "/opt/bin/agentscm-hook", Parts{Capture: true}); err != nil || changed {
		t.Fatalf("capture-only reinstall changed=%v err=%v", changed, err)
	}
	if _, err := InstallParts(filepath.Join(t.TempDir(), "none.json"), "", Parts{Capture: true}); err == nil {
		t.Fatal("installed without an executable")
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
