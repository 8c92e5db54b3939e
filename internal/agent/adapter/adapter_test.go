package adapter

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/agentscm/agentscm/internal/agent/hookfile"
)

func TestTableNamesEveryAdapterOnce(t *testing.T) {
	names := Names()
	if !slices.Equal(names, []string{"claude-code", "codex", "gemini"}) {
		t.Fatalf("Names() = %v", names)
	}
	for _, a := range All() {
		got, err := For(a.Name())
		if err != nil || got.Name() != a.Name() {
			t.Errorf("For(%q) = %v, %v", a.Name(), got, err)
		}
		if IsDefault(a) != (a.Name() == "claude-code") {
			t.Errorf("IsDefault(%s) = %v", a.Name(), IsDefault(a))
		}
	}
	for _, alias := range []string{"", "claude"} {
		if a, err := For(alias); err != nil || a.Name() != "claude-code" {
			t.Errorf("For(%q) = %v, %v", alias, a, err)
		}
	}
	if _, err := For("cursor"); err == nil {
		t.Error("For(cursor) accepted an unknown agent")
	}
}

// TestInstallAndRemoveEachPart installs the capture and the changelog into
// one settings file per adapter and removes them one at a time: each part's
// removal keeps the other part's entries, with the host's timeout unit.
func TestInstallAndRemoveEachPart(t *testing.T) {
	for _, a := range All() {
		t.Run(a.Name(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), filepath.FromSlash(a.HookFile()))
			for _, p := range []Part{PartCapture, PartChangelog} {
				if changed, err := a.InstallHooks(path, "/opt/bin/agentscm", p); err != nil || !changed {
					t.Fatalf("install part %d: changed=%v err=%v", p, changed, err)
				}
			}
			if changed, err := a.InstallHooks(path, "/opt/bin/agentscm", PartChangelog); err != nil || changed {
				t.Fatalf("second install: changed=%v err=%v, want idempotent", changed, err)
			}
			installed := func(p Part) bool {
				if IsDefault(a) {
					parts, _, err := hookfile.InstalledParts(path)
					if err != nil {
						t.Fatal(err)
					}
					return map[Part]bool{PartCapture: parts.Capture, PartChangelog: parts.Changelog}[p]
				}
				sub, want := a.CaptureSubcommand(), a.CaptureEvents()
				if p == PartChangelog {
					sub, want = a.ChangelogSubcommand(), a.ChangelogEvents()
				}
				ev, err := hookfile.MarkedEventsFor(path, sub)
				if err != nil {
					t.Fatal(err)
				}
				return len(ev) == len(want)
			}
			if !installed(PartCapture) || !installed(PartChangelog) {
				t.Fatal("both parts installed, but not both found")
			}
			if removed, err := a.RemoveHooks(path, PartCapture); err != nil || !removed {
				t.Fatalf("remove capture: removed=%v err=%v", removed, err)
			}
			if installed(PartCapture) || !installed(PartChangelog) {
				t.Fatal("removing the capture did not keep exactly the changelog")
			}
			if removed, err := a.RemoveHooks(path, PartCapture); err != nil || removed {
				t.Fatalf("second capture removal: removed=%v err=%v", removed, err)
			}
			if removed, err := a.RemoveHooks(path, PartChangelog); err != nil || !removed || installed(PartChangelog) {
				t.Fatalf("remove changelog: removed=%v err=%v", removed, err)
			}
		})
	}
}

func TestHostDifferences(t *testing.T) {
	for _, tc := range []struct {
		a          Adapter
		timeout    int
		transcript bool
		trust      bool
		dir        string
	}{
		{Claude{}, 20, true, false, ".claude"},
		{Codex{}, 20, false, true, ".codex"},
		{Gemini{}, 20000, false, true, ".gemini"},
	} {
		a := tc.a
		if a.HookTimeout() != tc.timeout || a.ChangelogTranscript() != tc.transcript ||
			(a.TrustNote("/r") != "") != tc.trust || a.ConfigDir() != tc.dir {
			t.Errorf("%s: timeout %d transcript %v trust %q dir %q", a.Name(), a.HookTimeout(), a.ChangelogTranscript(), a.TrustNote("/r"), a.ConfigDir())
		}
	}
	g := Gemini{}.WithState("/cfg", "capture").(Gemini)
	if g.OrderDir != filepath.Join("/cfg", "agent-state", "gemini-capture") {
		t.Errorf("Gemini WithState: OrderDir = %q", g.OrderDir)
	}
	if kept := (Gemini{OrderDir: "/own"}).WithState("/cfg", "capture").(Gemini); kept.OrderDir != "/own" {
		t.Errorf("Gemini WithState replaced a set OrderDir: %q", kept.OrderDir)
	}
}
