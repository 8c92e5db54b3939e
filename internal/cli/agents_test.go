package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAgentHooksFailOpen: the Codex and Gemini hooks (capture and
// changelog) never block the agent: exit 0, nothing on stdout, at most one
// warning line.
func TestAgentHooksFailOpen(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"change-capture", "hook-codex"}, {"change-capture", "hook-gemini"},
		{"changelog", "hook-codex"}, {"changelog", "hook-gemini"},
	} {
		inputs := []string{"not json", ""}
		if strings.HasSuffix(args[1], "gemini") {
			// The session id names the order state file: refused.
			inputs = append(inputs, `{"session_id":"../x","cwd":"/r","hook_event_name":"BeforeTool","tool_name":"t"}`)
		}
		for _, stdin := range inputs {
			r := runMain(t, map[string]string{"XDG_CONFIG_HOME": dir, "HOME": dir}, stdin, args...)
			if r.code != 0 || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, "agentscm: warning: ") {
				t.Fatalf("%v < %q: exit %d stdout %q stderr %q", args, stdin, r.code, r.stdout, r.stderr)
			}
		}
		// A payload outside any binding or changelog is ignored silently.
		r := runMain(t, map[string]string{"XDG_CONFIG_HOME": dir, "HOME": dir}, `{"session_id":"s1","cwd":"/nowhere","hook_event_name":"SessionStart","source":"startup"}`, args...)
		if r.code != 0 || r.stdout != "" || r.stderr != "" {
			t.Fatalf("%v outside a binding: exit %d stdout %q stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
}

// TestEnableAgent: change-capture enable and changelog enable install the
// Codex or Gemini hooks in that agent's own file, keep the user's hooks,
// detect the agent when only its config directory exists, add Claude Code
// beside the binding's agent (each agent's hooks in its own file), and
// unconfigure removes every agent's again.
func TestEnableAgent(t *testing.T) {
	for _, tc := range []struct {
		agent, file, dir, timeout string
	}{
		{"codex", ".codex/hooks.json", ".codex", `"timeout": 20`},
		{"gemini", ".gemini/settings.json", ".gemini", `"timeout": 20000`},
	} {
		t.Run(tc.agent, func(t *testing.T) {
			cfg := t.TempDir()
			env := map[string]string{"XDG_CONFIG_HOME": cfg, "HOME": t.TempDir()}
			root := gitRepo(t, "repo")
			path := filepath.Join(root, filepath.FromSlash(tc.file))
			os.MkdirAll(filepath.Dir(path), 0o755)
			mine := `{"hooks":{"SessionStart":[{"hooks":[{"type":"command","command":"my-own-hook"}]}]},"theme":"dark"}`
			os.WriteFile(path, []byte(mine), 0o644)
			// No --agent: only this agent's config directory exists.
			mustRun(t, env, "client", "setup", "--root", root, "--local", "--repository", "proj")
			en := decode[map[string]any](t, mustRun(t, env, "change-capture", "enable", "--root", root, "--format", "json").stdout)
			if en["agent"] != tc.agent || en["claude_settings"] != path {
				t.Fatalf("enable detected %v into %v", en["agent"], en["claude_settings"])
			}
			if _, err := os.Stat(filepath.Join(root, ".claude")); err == nil {
				t.Fatal("Claude settings were created for another agent")
			}
			mustRun(t, env, "changelog", "enable", "--root", root, "--agent", tc.agent)
			b, _ := os.ReadFile(path)
			for _, want := range []string{"my-own-hook", `"theme": "dark"`, "change-capture hook-" + tc.agent, "changelog hook-" + tc.agent, tc.timeout} {
				if !strings.Contains(string(b), want) {
					t.Fatalf("%s lacks %q:\n%s", tc.file, want, b)
				}
			}
			both := decode[map[string]any](t, mustRun(t, env, "change-capture", "enable", "--root", root, "--agent", "claude-code", "--format", "json").stdout)
			if agents, _ := both["agents"].([]any); both["agent"] != "claude-code" || len(agents) != 2 {
				t.Fatalf("adding Claude Code: %v", both)
			}
			claudeFile := filepath.Join(root, ".claude", "settings.local.json")
			if c, _ := os.ReadFile(claudeFile); !strings.Contains(string(c), "change-capture hook-claude") {
				t.Fatalf("Claude Code hooks not added:\n%s", c)
			}
			if b, _ := os.ReadFile(path); !strings.Contains(string(b), "change-capture hook-"+tc.agent) {
				t.Fatalf("adding Claude Code removed the %s hooks:\n%s", tc.agent, b)
			}
			if r := runMain(t, env, "", "change-capture", "enable", "--root", root, "--agent", "nope"); r.code != ExitUsage {
				t.Fatalf("unknown agent: exit %d %s", r.code, r.stderr)
			}
			mustRun(t, env, "change-capture", "unconfigure", "--root", root)
			mustRun(t, env, "changelog", "disable", "--root", root, "--agent", tc.agent)
			b, _ = os.ReadFile(path)
			if strings.Contains(string(b), "hook-"+tc.agent) || !strings.Contains(string(b), "my-own-hook") {
				t.Fatalf("after unconfigure and disable:\n%s", b)
			}
			if c, _ := os.ReadFile(claudeFile); strings.Contains(string(c), "change-capture hook-claude") {
				t.Fatalf("unconfigure left the Claude Code hooks:\n%s", c)
			}
		})
	}
}

func TestCapabilitiesPerAgent(t *testing.T) {
	for agent, want := range map[string]string{"codex": "exit_codes", "gemini": "tool_call_ids", "claude-code": "thinking"} {
		r := mustRun(t, nil, "change-capture", "capabilities", "--agent", agent, "--format", "json")
		if !strings.Contains(r.stdout, `"agent": "`+agent+`"`) || !strings.Contains(r.stdout, want) {
			t.Fatalf("%s: %s", agent, r.stdout)
		}
	}
	if r := runMain(t, nil, "", "change-capture", "capabilities", "--agent", "x"); r.code != ExitUsage {
		t.Fatalf("exit %d", r.code)
	}
}

func TestRewindAgentFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"rewind", "--root", "/nowhere", "--to", "1", "--from-hub", "--resume-conversation", "--agent", "codex"}, ExitUsage, "resumes Claude Code conversations only"},
		{[]string{"rewind", "--root", "/nowhere", "--to", "1", "--from-hub", "--resume-conversation", "--agent", "bogus"}, ExitUsage, "unknown agent"},
	} {
		r := runMain(t, nil, "", tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.msg) {
			t.Fatalf("%v: exit %d %s", tc.args, r.code, r.stderr)
		}
	}
}

// TestChangelogFlagsGeminiFailedCalls: real changelog hook runs of Gemini
// CLI payloads: a shell call whose result states a non-zero exit code and a
// tool error are flagged failed in changelog list, a zero exit code is not
// (Codex's exit code from its rollout: test/e2e TestCodexCaptureRewindResume).
func TestChangelogFlagsGeminiFailedCalls(t *testing.T) {
	repo := gitRepo(t, "repo")
	env := map[string]string{"HOME": filepath.Join(filepath.Dir(repo), "home")}
	mustRun(t, env, "changelog", "enable", "--root", repo, "--agent", "gemini")
	shell := func(code int) string {
		return fmt.Sprintf(`{"llmContent":"<untrusted_context>\nOutput: x\nExit Code: %d\nProcess Group PGID: 1\n</untrusted_context>"}`, code)
	}
	for i, call := range []struct{ tool, resp string }{
		{"run_shell_command", shell(0)},
		{"run_shell_command", shell(3)},
		{"replace", `{"error":{"message":"no match","type":"edit_no_occurrence_found"}}`},
	} {
		for _, ev := range []string{"BeforeTool", "AfterTool"} {
			if ev == "AfterTool" {
				// The call's write, between its hooks (a write before
				// BeforeTool is outside work: a position of its own).
				os.WriteFile(filepath.Join(repo, fmt.Sprintf("f%d", i)), []byte("x"), 0o644)
			}
			p := fmt.Sprintf(`{"session_id":"g1","cwd":%q,"hook_event_name":%q,"tool_name":%q,"tool_response":%s}`, repo, ev, call.tool, call.resp)
			if r := runMain(t, env, p, "changelog", "hook-gemini"); r.code != 0 || r.stdout != "" || r.stderr != "" {
				t.Fatalf("hook %d %s: %d %q %q", i, ev, r.code, r.stdout, r.stderr)
			}
		}
	}
	var list struct {
		Increments []struct {
			Position int
			Tool     string
			Failed   bool
		} `json:"increments"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, env, "changelog", "list", "--root", repo, "--format", "json").stdout), &list); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, in := range list.Increments {
		got = append(got, fmt.Sprintf("%d %s %v", in.Position, in.Tool, in.Failed))
	}
	if want := "0 run_shell_command false,1 run_shell_command true,2 replace true"; strings.Join(got, ",") != want {
		t.Fatalf("changelog list: %s, want %s", strings.Join(got, ","), want)
	}
}
