package capture

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/agent/hookfile"
)

// Configure installs the lean agentscm-hook next to the agentscm binary when
// it is there, and switches back to agentscm itself when it is gone; either
// way each event keeps exactly one marked capture hook.
func TestConfigureInstallsLeanHookBinary(t *testing.T) {
	f := newFixture(t)
	bin := t.TempDir()
	f.exe = filepath.Join(bin, "agentscm")
	lean := filepath.Join(bin, hookfile.HookBinary)
	if err := os.WriteFile(lean, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	check := func(wantExe string) {
		t.Helper()
		res := f.configure(t, "")
		b, err := os.ReadFile(res.ClaudeSettings)
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		want := hookfile.HookCommand(wantExe)
		if n := strings.Count(s, want+`"`); n != len(hookfile.HookEvents) {
			t.Fatalf("%d hooks run %q, want %d:\n%s", n, want, len(hookfile.HookEvents), s)
		}
		if n := strings.Count(s, hookfile.HookSubcommand); n != len(hookfile.HookEvents) {
			t.Fatalf("%d marked hooks, want %d:\n%s", n, len(hookfile.HookEvents), s)
		}
	}
	check(lean)
	if err := os.Remove(lean); err != nil {
		t.Fatal(err)
	}
	check(f.exe)
}
