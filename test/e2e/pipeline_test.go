//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/test/e2e/scriptedapi"
)

// hookEntries maps each event of the checkout's Claude settings to the
// commands of its hook entries.
func (c *checkout) hookEntries() map[string][]string {
	c.t.Helper()
	b, err := os.ReadFile(filepath.Join(c.root, ".claude", "settings.local.json"))
	if err != nil {
		c.t.Fatal(err)
	}
	var s struct {
		Hooks map[string][]struct {
			Hooks []struct{ Command string } `json:"hooks"`
		} `json:"hooks"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		c.t.Fatal(err)
	}
	out := map[string][]string{}
	for ev, groups := range s.Hooks {
		for _, g := range groups {
			for _, h := range g.Hooks {
				out[ev] = append(out[ev], h.Command)
			}
		}
	}
	return out
}

// One hook pipeline (issue 18 item 1): with change capture and the
// changelog on, every Claude Code event starts exactly one hook process,
// which yields both the captured event and, after a tool call, the
// changelog increment. Counted on the real Claude Code CLI: the installed
// entries run a wrapper that logs each start and execs the real hook.
func TestOneHookProcessPerToolCall(t *testing.T) {
	c := newCheckout(t)
	c.configure(event.ModeMetadataOnly)
	c.startWork("one hook pipeline")
	c.agentscm("changelog", "enable", "--root", c.root)

	lean := filepath.Join(filepath.Dir(h.agentscm), "agentscm-hook")
	intake := filepath.Join(filepath.Dir(h.agentscm), "agentscm-hook-intake")
	entries := c.hookEntries()
	for _, ev := range []string{"SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "PostToolUseFailure", "Stop", "SessionEnd"} {
		want := intake + " change-capture hook-claude"
		switch ev {
		case "PreToolUse", "PostToolUse", "PostToolUseFailure", "UserPromptSubmit", "Stop", "SessionEnd":
			// PreToolUse too: the changelog captures outside work there.
			want = lean + " change-capture hook-claude --changelog"
		}
		if got := entries[ev]; len(got) != 1 || got[0] != want {
			t.Fatalf("%s has entries %q, want exactly [%q]", ev, got, want)
		}
	}

	// The wrappers, named as the binaries they run, side by side: one log
	// line per process Claude Code starts.
	log := filepath.Join(c.dir, "hook-starts.log")
	wdir := filepath.Join(c.dir, "wrappers")
	if err := os.Mkdir(wdir, 0o755); err != nil {
		t.Fatal(err)
	}
	wrapper, intakeWrapper := filepath.Join(wdir, "agentscm-hook"), filepath.Join(wdir, "agentscm-hook-intake")
	for w, real := range map[string]string{wrapper: lean, intakeWrapper: intake} {
		script := "#!/bin/sh\necho \"$(basename \"$0\") $*\" >> '" + log + "'\nexec '" + real + "' \"$@\"\n"
		if err := os.WriteFile(w, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	settings := filepath.Join(c.root, ".claude", "settings.local.json")
	b, err := os.ReadFile(settings)
	if err != nil {
		t.Fatal(err)
	}
	// The intake binary's path first: the full one's is its prefix.
	wrapped := strings.ReplaceAll(strings.ReplaceAll(string(b), intake+" ", intakeWrapper+" "), lean+" ", wrapper+" ")
	if err := os.WriteFile(settings, []byte(wrapped), 0o644); err != nil {
		t.Fatal(err)
	}

	c.runTurn(
		[]scriptedapi.ToolCall{write(filepath.Join(c.root, "one.txt"), "one\n")},
		[]scriptedapi.ToolCall{bash("echo two >> README.md")},
	)

	starts, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("hook processes started:\n%s", starts)
	lines := strings.Split(strings.TrimSpace(string(starts)), "\n")
	combined, captureOnly := 0, 0
	for _, l := range lines {
		switch l {
		case "agentscm-hook change-capture hook-claude --changelog":
			combined++
		case "agentscm-hook-intake change-capture hook-claude":
			captureOnly++
		default:
			t.Fatalf("a hook process with arguments %q", l)
		}
	}
	// Two PreToolUse, two PostToolUse, one UserPromptSubmit, one Stop
	// (SessionEnd may come as the process exits): one process each.
	if combined < 6 || combined > 7 {
		t.Fatalf("%d combined hook processes, want 6 or 7 (2 PreToolUse, 2 PostToolUse, prompt, Stop, maybe SessionEnd):\n%s", combined, starts)
	}
	if captureOnly < 1 {
		t.Fatalf("%d capture-only processes, want SessionStart at least:\n%s", captureOnly, starts)
	}

	// Both parts did their work in those processes. The test's own edit
	// of the settings file after changelog enable is work done outside
	// the agent: an outside position before the turn, then the calls.
	var kinds, tools []string
	for _, in := range c.changelogList() {
		kinds = append(kinds, in.Kind)
		if in.Kind == changelog.KindCall {
			tools = append(tools, in.Tool)
		}
	}
	if strings.Join(kinds, ",") != "outside,call,call" || strings.Join(tools, ",") != "Write,Bash" {
		t.Fatalf("increments of kinds %v, tools %v; want outside,call,call and Write,Bash", kinds, tools)
	}
	post := 0
	for _, s := range c.inspect().Sessions {
		for _, e := range s.Events {
			if e.HookEvent == "PostToolUse" {
				post++
			}
		}
	}
	if post != 2 {
		t.Fatalf("%d PostToolUse events captured, want 2", post)
	}

	// changelog disable keeps the capture in the same entries, now the
	// intake binary's (here its wrapper's) on every event.
	c.agentscm("changelog", "disable", "--root", c.root)
	entries = c.hookEntries()
	if got := entries["PostToolUse"]; len(got) != 1 || got[0] != intakeWrapper+" change-capture hook-claude" {
		t.Fatalf("after changelog disable PostToolUse has %q", got)
	}
}
