package hookfile

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

// TestInstallPartsUsesTheIntakeBinary: with agentscm-hook-intake next to
// agentscm-hook, the capture-only events run it and the changelog's run
// agentscm-hook; an install whose first marked entry is the intake binary
// stands for the agentscm-hook next to it (disable, unconfigure keep it);
// without the intake binary, or for another executable, every entry runs
// the one given. Paths that need shell quoting round-trip.
func TestInstallPartsUsesTheIntakeBinary(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dir    string // under t.TempDir()
		intake bool   // an executable agentscm-hook-intake next to it
		exe    string // the executable's base name
		uses   bool   // the capture-only events run the intake binary
	}{
		{"next to agentscm-hook", "bin", true, HookBinary, true},
		{"a path with a quote and a space", "it's my bin", true, HookBinary, true},
		{"no intake binary", "bin", false, HookBinary, false},
		{"the agentscm binary itself", "bin", true, "agentscm", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), tc.dir)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			exe := filepath.Join(dir, tc.exe)
			intake := filepath.Join(dir, IntakeBinary)
			if tc.intake {
				if err := os.WriteFile(intake, []byte("#!/bin/sh\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			path := filepath.Join(t.TempDir(), "settings.local.json")
			check := func(p Parts) {
				t.Helper()
				got, _ := ourEntries(t, path)
				for _, ev := range HookEvents {
					on := p.Capture || p.Changelog && slices.Contains(ChangelogEvents[:], ev)
					if !on {
						continue
					}
					want := shellQuote(exe) + " " + HookSubcommand
					switch {
					case p.Changelog && slices.Contains(ChangelogEvents[:], ev):
						want = shellQuote(exe) + " " + subcommandFor(Parts{Capture: p.Capture && slices.Contains(HookEvents[:], ev), Changelog: true})
					case tc.uses:
						want = shellQuote(intake) + " " + HookSubcommand
					}
					if len(got[ev]) != 1 || got[ev][0] != want {
						t.Errorf("%+v: %s has %q, want [%q]", p, ev, got[ev], want)
					}
				}
			}
			if _, err := InstallParts(path, exe, Parts{Capture: true}); err != nil {
				t.Fatal(err)
			}
			check(Parts{Capture: true})
			// changelog enable, then disable, with the installed executable.
			for _, p := range []Parts{{Capture: true, Changelog: true}, {Capture: true}} {
				if _, err := InstallParts(path, "", p); err != nil {
					t.Fatal(err)
				}
				check(p)
			}
		})
	}
}

func TestShellUnquote(t *testing.T) {
	for _, s := range []string{"/opt/bin/agentscm-hook", "/it's here/agentscm-hook", "/a b/c", ""} {
		if got := shellUnquote(shellQuote(s)); got != s {
			t.Errorf("shellUnquote(shellQuote(%q)) = %q", s, got)
		}
	}
	for _, s := range []string{"'unterminated", "a b", `it's`} {
		if got := shellUnquote(s); got != "" {
			t.Errorf("shellUnquote(%q) = %q, want \"\"", s, got)
		}
	}
}
