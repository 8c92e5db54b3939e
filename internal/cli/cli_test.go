package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type run struct {
	code           int
	stdout, stderr string
}

func runMain(t *testing.T, envVars map[string]string, stdin string, args ...string) run {
	t.Helper()
	var out, errb bytes.Buffer
	env := &Env{
		Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb,
		Getenv: func(k string) string { return envVars[k] }, Now: time.Now,
		Executable: "/usr/local/bin/agentscm",
	}
	code := Main(context.Background(), env, args)
	return run{code, out.String(), errb.String()}
}

func TestHookFailsOpen(t *testing.T) {
	dir := t.TempDir()
	brokenCfg := filepath.Join(dir, "broken")
	os.MkdirAll(filepath.Join(brokenCfg, "agentscm"), 0o700)
	os.WriteFile(filepath.Join(brokenCfg, "agentscm", "capture.json"), []byte(`{"version": 99}`), 0o600)
	good := `{"session_id":"s","cwd":"/repo","hook_event_name":"Stop"}`
	cases := []struct {
		name  string
		env   map[string]string
		stdin string
		warn  bool
	}{
		{"garbage", map[string]string{"XDG_CONFIG_HOME": dir}, "not json", true},
		{"empty", map[string]string{"XDG_CONFIG_HOME": dir}, "", true},
		{"oversized", map[string]string{"XDG_CONFIG_HOME": dir}, `{"prompt":"` + strings.Repeat("x", 16<<20) + `"}`, true},
		{"no config dir", map[string]string{}, good, true},
		{"unknown config version", map[string]string{"XDG_CONFIG_HOME": brokenCfg}, good, true},
		{"no binding", map[string]string{"XDG_CONFIG_HOME": dir}, good, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := runMain(t, tc.env, tc.stdin, "change-capture", "hook-claude")
			if r.code != 0 || r.stdout != "" {
				t.Fatalf("exit %d stdout %q", r.code, r.stdout)
			}
			lines := strings.Count(r.stderr, "\n")
			if tc.warn && (lines != 1 || !strings.HasPrefix(r.stderr, "agentscm: warning: ")) {
				t.Fatalf("stderr %q, want one warning line", r.stderr)
			}
			if !tc.warn && r.stderr != "" {
				t.Fatalf("stderr %q, want nothing", r.stderr)
			}
		})
	}
}

func TestUsageAndHelp(t *testing.T) {
	cases := []struct {
		args     []string
		code     int
		inStdout string
		inStderr string
	}{
		{nil, ExitUsage, "Commands:", ""},
		{[]string{"--help"}, ExitOK, "change-capture", ""},
		{[]string{"nope"}, ExitUsage, "", `unknown command "nope"`},
		{[]string{"change-capture", "configure", "--help"}, ExitOK, "--capture-mode", ""},
		{[]string{"change-capture", "configure"}, ExitUsage, "", "--spool is required"},
		{[]string{"change-capture", "configure", "--root", "/x", "--spool", "/y", "--format", "xml"}, ExitUsage, "", "--format must be text or json"},
		{[]string{"change-capture", "configure", "--bogus"}, ExitUsage, "", "flag provided but not defined"},
		{[]string{"change-capture", "configure", "--root", "rel", "--spool", "/y"}, ExitError, "", "internal/cli/rel"},
		{[]string{"change-capture", "configure", "--root", "/x", "--spool", "/y", "--max-records", "x"}, ExitUsage, "", `invalid value "x" for flag -max-records`},
		{[]string{"change-capture", "enable", "--root", "/x", "--mode", "nope"}, ExitUsage, "", `--mode "nope" is not supported`},
		{[]string{"change-capture", "hook-claude", "--help"}, ExitOK, "never blocks the agent", ""},
		{[]string{"change-capture", "inspect"}, ExitUsage, "", "--spool is required"},
		{[]string{"change-capture", "events"}, ExitUsage, "", "--spool is required"},
		{[]string{"change-capture", "unconfigure", "--root", "/no/such/checkout"}, ExitError, "", "no capture binding for this checkout"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := runMain(t, map[string]string{"XDG_CONFIG_HOME": t.TempDir()}, "", tc.args...)
			if r.code != tc.code || !strings.Contains(r.stdout, tc.inStdout) || !strings.Contains(r.stderr, tc.inStderr) {
				t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
			}
		})
	}
}

func TestConfigureHookInspectInProcess(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "repo")
	os.Mkdir(root, 0o755)
	spoolDir := filepath.Join(dir, "spool")
	env := map[string]string{"XDG_CONFIG_HOME": filepath.Join(dir, "cfg")}
	if r := runMain(t, env, "", "client", "setup", "--root", root, "--local"); r.code != 0 {
		t.Fatalf("client setup: %+v", r)
	}
	if r := runMain(t, env, "", "change-capture", "configure", "--root", root, "--spool", spoolDir, "--format", "json"); r.code != 0 || !strings.Contains(r.stdout, `"capture_mode": "metadata-only"`) {
		t.Fatalf("configure: %+v", r)
	}
	for _, ev := range []string{"SessionStart", "Stop", "SessionEnd"} {
		if r := runMain(t, env, `{"session_id":"s1","cwd":"`+root+`","hook_event_name":"`+ev+`","source":"startup"}`, "change-capture", "hook-claude"); r.code != 0 || r.stderr != "" {
			t.Fatalf("hook %s: %+v", ev, r)
		}
	}
	r := runMain(t, env, "", "change-capture", "events", "--spool", spoolDir)
	// SessionEnd has no provider identity: its identity_uncertain gap is
	// the fourth record.
	if r.code != 0 || !strings.Contains(r.stdout, "4 events in 1 sessions") || !strings.Contains(r.stdout, "session_end") {
		t.Fatalf("inspect: %+v", r)
	}
}
