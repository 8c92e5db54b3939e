package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/cli"
)

func TestArgsAndFailOpen(t *testing.T) {
	dir := t.TempDir()
	getenv := func(k string) string {
		if k == "XDG_CONFIG_HOME" {
			return dir
		}
		return ""
	}
	cases := []struct {
		name      string
		args      []string
		stdin     string
		code      int
		stdout    string // substring
		stderrOne bool   // exactly one warning line
		stderr    string // substring
	}{
		{"hook, garbage payload", []string{"change-capture", "hook-claude"}, "not json", 0, "", true, "agentscm: warning: "},
		{"hook, no binding", []string{"change-capture", "hook-claude"}, `{"session_id":"s","cwd":"/repo","hook_event_name":"Stop"}`, 0, "", false, ""},
		{"help", []string{"--help"}, "", 0, "agentscm-hook change-capture hook-claude", false, ""},
		{"codex hook, garbage payload", []string{"change-capture", "hook-codex"}, "not json", 0, "", true, "agentscm: warning: "},
		{"codex hook, no binding", []string{"change-capture", "hook-codex"}, `{"session_id":"s","cwd":"/repo","hook_event_name":"Stop"}`, 0, "", false, ""},
		{"gemini hook, garbage payload", []string{"change-capture", "hook-gemini"}, "not json", 0, "", true, "agentscm: warning: "},
		{"gemini hook, no binding", []string{"change-capture", "hook-gemini"}, `{"session_id":"s","cwd":"/repo","hook_event_name":"AfterAgent"}`, 0, "", false, ""},
		{"no args", nil, "", 2, "", false, "Usage:"},
		{"changelog hook, garbage payload", []string{"changelog", "hook-claude"}, "not json", 0, "", true, "agentscm: warning: changelog hook failed: "},
		{"changelog hook, no changelog", []string{"changelog", "hook-claude"}, `{"session_id":"s","cwd":"/repo","hook_event_name":"PostToolUse","tool_name":"Bash"}`, 0, "", false, ""},
		{"combined hook, garbage payload", []string{"change-capture", "hook-claude", "--changelog"}, "not json", 0, "", true, "agentscm: warning: capture hook failed: "},
		{"combined hook, nothing configured", []string{"change-capture", "hook-claude", "--changelog"}, `{"session_id":"s","cwd":"/repo","hook_event_name":"PostToolUse","tool_name":"Bash"}`, 0, "", false, ""},
		{"other command", []string{"changelog", "upload"}, "", 2, "", false, "Usage:"},
		{"other changelog flag", []string{"change-capture", "hook-claude", "--changelog", "x"}, "", 2, "", false, "Usage:"},
		{"extra argument", []string{"change-capture", "hook-claude", "x"}, "", 2, "", false, "Usage:"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), tc.args, strings.NewReader(tc.stdin), &out, &errb, getenv, time.Now, "")
			if code != tc.code {
				t.Fatalf("exit %d, want %d (stderr %q)", code, tc.code, errb.String())
			}
			if tc.stdout == "" && out.Len() != 0 || !strings.Contains(out.String(), tc.stdout) {
				t.Fatalf("stdout %q, want %q", out.String(), tc.stdout)
			}
			if tc.stderrOne && strings.Count(errb.String(), "\n") != 1 {
				t.Fatalf("stderr %q, want one line", errb.String())
			}
			if tc.stderr == "" && errb.Len() != 0 || !strings.Contains(errb.String(), tc.stderr) {
				t.Fatalf("stderr %q, want %q", errb.String(), tc.stderr)
			}
		})
	}
}

// The lean binary's hook captures and delivers exactly as agentscm's does:
// on a solo checkout (embedded Hub, current Work) each event is appended and
// acknowledged by the Hub.
func TestHookCapturesAndDelivers(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "repo")
	spool := filepath.Join(dir, "spool")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"XDG_CONFIG_HOME": filepath.Join(dir, "config")}
	getenv := func(k string) string { return vars[k] }
	agentscm := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		env := &cli.Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: getenv, Now: time.Now, Executable: filepath.Join(dir, "bin", "agentscm")}
		if code := cli.Main(context.Background(), env, args); code != 0 {
			t.Fatalf("agentscm %v: exit %d: %s", args, code, errb.String())
		}
		return out.String()
	}
	agentscm("client", "setup", "--root", root, "--local")
	agentscm("change-capture", "configure", "--root", root, "--spool", spool)
	agentscm("work", "start", "--root", root, "--title", "lean hook")
	for _, p := range []string{
		`{"session_id":"lean-1","cwd":"` + root + `","hook_event_name":"SessionStart","source":"startup"}`,
		`{"session_id":"lean-1","cwd":"` + root + `","hook_event_name":"PreToolUse","tool_name":"Bash","tool_use_id":"toolu_1","tool_input":{"command":"true"}}`,
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{"change-capture", "hook-claude"}, strings.NewReader(p), &out, &errb, getenv, time.Now, ""); code != 0 || out.Len() != 0 || errb.Len() != 0 {
			t.Fatalf("hook: exit %d stdout %q stderr %q", code, out.String(), errb.String())
		}
	}
	events := agentscm("change-capture", "events", "--spool", spool)
	for _, want := range []string{"session_start", "tool_start"} {
		if !strings.Contains(events, want) {
			t.Fatalf("events lack %s:\n%s", want, events)
		}
	}
	var insp struct {
		Envelopes    int `json:"envelopes"`
		Acknowledged int `json:"acknowledged"`
	}
	if err := json.Unmarshal([]byte(agentscm("change-capture", "inspect", "--spool", spool, "--format", "json")), &insp); err != nil {
		t.Fatal(err)
	}
	if insp.Envelopes != 2 || insp.Acknowledged != 2 {
		t.Fatalf("%d envelopes, %d acknowledged by the Hub; want 2 and 2", insp.Envelopes, insp.Acknowledged)
	}
}
