package hookroute

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/agent/adapter"
	"github.com/agentscm/agentscm/internal/agent/hookfile"
)

// installed are the hook command lines (after the executable) that any
// version wrote into users' settings files (git log -S of
// internal/agent/hookfile, internal/agent/codex and gemini, and of the
// capture package before them): each keeps its agent and parts.
var installed = []struct {
	command, agent string
	parts          Parts
}{
	{"change-capture hook-claude", "claude-code", Parts{Capture: true}},          // d3b13ec, the first form
	{"changelog hook-claude", "claude-code", Parts{Changelog: true}},             // 019dd88
	{"change-capture hook-claude --changelog", "claude-code", Parts{true, true}}, // one entry per event
	{"change-capture hook-codex", "codex", Parts{Capture: true}},                 // 73b7105
	{"changelog hook-codex", "codex", Parts{Changelog: true}},                    // 73b7105
	{"change-capture hook-gemini", "gemini", Parts{Capture: true}},               // 19bfacd
	{"changelog hook-gemini", "gemini", Parts{Changelog: true}},                  // 19bfacd
}

func TestEveryInstalledCommandHasItsRoute(t *testing.T) {
	for _, c := range installed {
		r, ok := Find(strings.Fields(c.command))
		if !ok {
			t.Errorf("%q: no route", c.command)
			continue
		}
		if r.Agent.Name() != c.agent || r.Parts != c.parts || r.Command() != c.command {
			t.Errorf("%q: route %q of %s runs %+v, want %s %+v", c.command, r.Command(), r.Agent.Name(), r.Parts, c.agent, c.parts)
		}
		if r.Guidance != (c.agent == "claude-code" && c.parts.Capture) {
			t.Errorf("%q: guidance %v", c.command, r.Guidance)
		}
	}
	for _, bad := range []string{"", "change-capture", "change-capture hook-claude --changelog --changelog", "changelog hook-claude --changelog",
		"change-capture hook-aider", "hook-claude", "change-capture deliver-spool"} {
		if r, ok := Find(strings.Fields(bad)); ok {
			t.Errorf("%q: routed to %q", bad, r.Command())
		}
	}
}

// TestAdaptersInstallOnlyRoutedCommands: every marked entry today's
// adapters install (each agent, each part, with agentscm-hook and
// agentscm-hook-intake next to agentscm so every executable form is
// written) runs a command line the route table has, of that agent.
func TestAdaptersInstallOnlyRoutedCommands(t *testing.T) {
	bin := t.TempDir()
	for _, name := range []string{"agentscm", hookfile.HookBinary, hookfile.IntakeBinary} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	seen := 0
	for _, a := range adapter.All() {
		path := filepath.Join(t.TempDir(), filepath.FromSlash(a.HookFile()))
		for _, part := range []adapter.Part{adapter.PartCapture, adapter.PartChangelog} {
			if _, err := a.InstallHooks(path, filepath.Join(bin, "agentscm"), part); err != nil {
				t.Fatal(err)
			}
		}
		hooks, err := hookfile.MarkedHooks(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hooks {
			r, ok := Find(strings.Fields(h.Subcommand))
			if !ok || r.Agent.Name() != a.Name() {
				t.Errorf("%s: installed %q (%s) has no route of its agent", a.Name(), h.Subcommand, h.Executable)
			}
			seen++
		}
	}
	if seen == 0 {
		t.Fatal("no marked entries installed")
	}
}
