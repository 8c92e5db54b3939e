package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/agent/adapter"
	"github.com/agentscm/agentscm/internal/agent/hookfile"
)

// TestInstalledChangelogEntriesRunLean: `changelog enable --agent codex`
// and `--agent gemini` install every changelog entry on the lean hook
// binary beside agentscm (as Claude Code's are), not on agentscm itself;
// and each installed command, run as the host runs it (sh -c, the payload
// on stdin), takes the tool call's increment, says nothing and exits 0.
// The lean binary here is this test binary (TestMain runs it as
// agentscm-hook's run), installed next to an agentscm that need not exist.
func TestInstalledChangelogEntriesRunLean(t *testing.T) {
	for _, tc := range []struct {
		agent     string
		pre, post func(root, file string) string
	}{
		{"codex", func(root, _ string) string {
			return `{"session_id":"codex-1","turn_id":"t1","transcript_path":null,"cwd":"` + root + `","hook_event_name":"PreToolUse","model":"gpt-5","tool_name":"Bash","tool_use_id":"call_1","tool_input":{"command":"echo hi > made.txt"}}`
		}, func(root, _ string) string {
			return `{"session_id":"codex-1","turn_id":"t1","transcript_path":null,"cwd":"` + root + `","hook_event_name":"PostToolUse","model":"gpt-5","tool_name":"Bash","tool_use_id":"call_1","tool_input":{"command":"echo hi > made.txt"},"tool_response":"ok"}`
		}},
		{"gemini", func(root, file string) string {
			return `{"session_id":"gemini-1","transcript_path":"","cwd":"` + root + `","hook_event_name":"BeforeTool","timestamp":"2026-12-02T10:00:00Z","tool_name":"write_file","tool_input":{"file_path":"` + file + `","content":"hi\n"}}`
		}, func(root, file string) string {
			return `{"session_id":"gemini-1","transcript_path":"","cwd":"` + root + `","hook_event_name":"AfterTool","timestamp":"2026-12-02T10:00:01Z","tool_name":"write_file","tool_input":{"file_path":"` + file + `","content":"hi\n"},"tool_response":{"llmContent":"ok","returnDisplay":"ok"}}`
		}},
	} {
		t.Run(tc.agent, func(t *testing.T) {
			dir := t.TempDir()
			f := &burstFixture{dir: dir, root: filepath.Join(dir, "repo"), vars: map[string]string{"XDG_CONFIG_HOME": filepath.Join(dir, "config")}}
			bin := filepath.Join(dir, "bin")
			for _, d := range []string{f.root, bin} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			lean := filepath.Join(bin, hookfile.HookBinary)
			if err := os.Symlink(os.Args[0], lean); err != nil {
				t.Fatal(err)
			}
			f.agentscm(t, "changelog", "enable", "--root", f.root, "--agent", tc.agent)
			a, err := adapter.For(tc.agent)
			if err != nil {
				t.Fatal(err)
			}
			hooks, err := hookfile.MarkedHooks(filepath.Join(f.root, filepath.FromSlash(a.HookFile())))
			if err != nil {
				t.Fatal(err)
			}
			command := map[string]string{} // event -> installed command
			for _, h := range hooks {
				if h.Subcommand != a.ChangelogSubcommand() {
					continue
				}
				if h.Executable != lean {
					t.Errorf("%s changelog entry runs %q, want the lean %s", h.Event, h.Executable, lean)
				}
				command[h.Event] = hookfile.CommandFor(h.Executable, h.Subcommand)
			}
			if len(command) != len(a.ChangelogEvents()) {
				t.Fatalf("changelog entries on %d events %v, want %v", len(command), command, a.ChangelogEvents())
			}
			file := filepath.Join(f.root, "made.txt")
			events := a.ChangelogEvents()
			run := func(payload string) {
				t.Helper()
				var ev struct {
					Event string `json:"hook_event_name"`
				}
				if err := json.Unmarshal([]byte(payload), &ev); err != nil || command[ev.Event] == "" {
					t.Fatalf("no installed changelog entry for %q (%v); entries on %v", ev.Event, err, events)
				}
				cmd := exec.Command("/bin/sh", "-c", command[ev.Event])
				cmd.Env = append(os.Environ(), envAsHook+"=1", "XDG_CONFIG_HOME="+f.vars["XDG_CONFIG_HOME"])
				cmd.Stdin = strings.NewReader(payload)
				out, err := cmd.CombinedOutput()
				if err != nil || len(out) != 0 {
					t.Fatalf("%s: %v, output %q", command[ev.Event], err, out)
				}
			}
			run(tc.pre(f.root, file))
			if err := os.WriteFile(file, []byte("hi\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			run(tc.post(f.root, file))
			var list struct {
				Increments []struct {
					Kind  string   `json:"kind"`
					Tool  string   `json:"tool"`
					Paths []string `json:"paths"`
				} `json:"increments"`
			}
			out := f.agentscm(t, "changelog", "list", "--root", f.root, "--format", "json")
			if err := json.Unmarshal([]byte(out), &list); err != nil {
				t.Fatal(err)
			}
			if len(list.Increments) != 1 {
				t.Fatalf("increments %s, want the tool call's one", out)
			}
		})
	}
}
