//go:build e2e

// Package e2e drives the real Claude Code CLI against a scripted Messages
// API on 127.0.0.1, with agentscm's hooks installed in a temporary git
// checkout, and checks what agentscm captured.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/test/e2e/scriptedapi"
)

// ClaudeCodeVersion is the Claude Code release the suite qualifies.
const ClaudeCodeVersion = "2.1.328"

// harness holds what TestMain prepared once for every test.
type harness struct {
	claude   string // path of the claude executable
	agentscm string // path of the built agentscm binary
}

var h harness // set once by TestMain, read-only afterwards

func TestMain(m *testing.M) {
	code, err := setup()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e setup: %v\n", err)
		os.Exit(1)
	}
	if code == 0 {
		stopHubBackend, err := setupHubBackend(filepath.Dir(h.agentscm)) // hubbackend_test.go
		if err != nil {
			fmt.Fprintf(os.Stderr, "e2e setup: %v\n", err)
			os.Exit(1)
		}
		code = m.Run()
		stopHubBackend()
	}
	os.Exit(code)
}

func setup() (int, error) {
	claude, err := ensureClaude()
	if err != nil {
		return 1, err
	}
	bin, err := os.MkdirTemp("", "agentscm-e2e-bin-")
	if err != nil {
		return 1, err
	}
	// Built as the README says: agentscm and, next to it, the lean
	// agentscm-hook and agentscm-hook-intake that configure installs as the
	// hooks (the intake binary on the events whose capture runs without
	// the changelog).
	agentscm := filepath.Join(bin, "agentscm")
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator),
		"github.com/agentscm/agentscm/cmd/agentscm", "github.com/agentscm/agentscm/cmd/agentscm-hook", "github.com/agentscm/agentscm/cmd/agentscm-hook-intake")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return 1, fmt.Errorf("build agentscm: %w", err)
	}
	h = harness{claude: claude, agentscm: agentscm}
	return 0, nil
}

// cacheDir is where the pinned Claude Code is installed, outside the
// repository: $AGENTSCM_E2E_CACHE, else ~/.cache/agentscm-e2e.
func cacheDir() (string, error) {
	if d := os.Getenv("AGENTSCM_E2E_CACHE"); d != "" {
		return d, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".cache", "agentscm-e2e"), nil
}

// ensureClaude installs @anthropic-ai/claude-code at the pinned version with
// npm when it is missing, and checks that it runs and reports that version.
func ensureClaude() (string, error) {
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	prefix := filepath.Join(cache, "claude-code-"+ClaudeCodeVersion)
	claude := filepath.Join(prefix, "node_modules", ".bin", "claude")
	if _, err := os.Stat(claude); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: installing @anthropic-ai/claude-code@%s into %s\n", ClaudeCodeVersion, prefix)
		if err := os.MkdirAll(prefix, 0o755); err != nil {
			return "", err
		}
		cmd := exec.Command("npm", "install", "--no-audit", "--no-fund", "--prefix", prefix, "@anthropic-ai/claude-code@"+ClaudeCodeVersion)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("npm install claude-code: %w", err)
		}
	}
	out, err := exec.Command(claude, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), ClaudeCodeVersion) {
		// npm may have skipped the package's postinstall, leaving the stub.
		pkg := filepath.Join(prefix, "node_modules", "@anthropic-ai", "claude-code")
		fix := exec.Command("node", "install.cjs")
		fix.Dir = pkg
		fix.Stdout, fix.Stderr = os.Stderr, os.Stderr
		_ = fix.Run()
		out, err = exec.Command(claude, "--version").CombinedOutput()
	}
	if err != nil || !strings.Contains(string(out), ClaudeCodeVersion) {
		return "", fmt.Errorf("%s --version: %v: %s", claude, err, out)
	}
	return claude, nil
}

// checkout is a temporary git checkout with its own HOME and config dir.
type checkout struct {
	t      *testing.T
	dir    string
	root   string
	home   string
	config string
	spool  string
	// claudeEnv is added to the Claude Code CLI's environment (its hooks
	// inherit it).
	claudeEnv []string
}

func newCheckout(t *testing.T) *checkout {
	t.Helper()
	dir := t.TempDir()
	c := &checkout{
		t: t, dir: dir,
		root:   filepath.Join(dir, "repo"),
		home:   filepath.Join(dir, "home"),
		config: filepath.Join(dir, "config"),
		spool:  filepath.Join(dir, "private", "spool"),
	}
	for _, d := range []string{c.root, c.home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(c.waitDelivered) // registered after TempDir: runs before its removal
	c.git("init", "-q", "-b", "main")
	c.write("b.txt", "to be deleted\n")
	c.write("README.md", "scratch checkout\n")
	c.git("add", ".")
	c.git("-c", "user.email=e2e@example.invalid", "-c", "user.name=e2e", "commit", "-qm", "init")
	return c
}

func (c *checkout) write(rel, content string) {
	c.t.Helper()
	if err := os.WriteFile(filepath.Join(c.root, rel), []byte(content), 0o644); err != nil {
		c.t.Fatal(err)
	}
}

func (c *checkout) git(args ...string) {
	c.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = c.root
	cmd.Env = c.env()
	if out, err := cmd.CombinedOutput(); err != nil {
		c.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

// env is the environment of every process the test starts: a private HOME
// and config dir, and nothing that could reach a real provider.
func (c *checkout) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "ANTHROPIC_") || strings.HasPrefix(k, "CLAUDE") || k == "HOME" || k == "XDG_CONFIG_HOME" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME="+c.home, "XDG_CONFIG_HOME="+c.config)
}

// agentscm runs the built binary and returns stdout, failing on error.
func (c *checkout) agentscm(args ...string) string {
	c.t.Helper()
	cmd := exec.Command(h.agentscm, args...)
	cmd.Env = c.env()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		c.t.Fatalf("agentscm %v: %v\nstdout: %s\nstderr: %s", args, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func (c *checkout) configure(mode string) {
	c.t.Helper()
	c.agentscm("client", "setup", "--root", c.root, "--local")
	c.agentscm("change-capture", "configure", "--root", c.root, "--spool", c.spool, "--capture-mode", mode)
	// The capture-only hooks run the intake binary built next to agentscm
	// (and agentscm-hook).
	lean := filepath.Join(filepath.Dir(h.agentscm), "agentscm-hook-intake") + " change-capture hook-claude"
	if b, _ := os.ReadFile(filepath.Join(c.root, ".claude", "settings.local.json")); !strings.Contains(string(b), lean) {
		c.t.Fatalf("configure did not install %q:\n%s", lean, b)
	}
}

// claudeResult is the part of `claude -p --output-format json` we read.
type claudeResult struct {
	SessionID string `json:"session_id"`
	Result    string `json:"result"`
	IsError   bool   `json:"is_error"`
	NumTurns  int    `json:"num_turns"`
}

// runClaude runs the real Claude Code CLI in the checkout against api.
func (c *checkout) runClaude(api *scriptedapi.Server, args ...string) claudeResult {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	full := append([]string{"--output-format", "json", "--allowedTools", "Write,Edit,Bash,Read"}, args...)
	cmd := exec.CommandContext(ctx, h.claude, full...)
	cmd.Dir = c.root
	cmd.Env = append(c.env(),
		"ANTHROPIC_BASE_URL="+api.URL,
		"ANTHROPIC_API_KEY=sk-ant-e2e-dummy-key",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_AUTOUPDATER=1",
		"DISABLE_TELEMETRY=1",
	)
	cmd.Env = append(cmd.Env, c.claudeEnv...)
	cmd.Stdin = nil
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	c.waitDelivered() // deliverwait_test.go: the hooks' background deliverers
	if err != nil {
		c.t.Fatalf("claude %v: %v\nstdout: %s\nstderr: %s", full, err, stdout.String(), stderr.String())
	}
	var res claudeResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		c.t.Fatalf("claude output is not JSON: %v\n%s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	if res.IsError || res.SessionID == "" {
		c.t.Fatalf("claude reported an error: %s\nstderr: %s", stdout.String(), stderr.String())
	}
	return res
}

type inspectOutput struct {
	Events   int `json:"events"`
	Sessions []struct {
		SessionID string         `json:"session_id"`
		Events    []event.Record `json:"events"`
	} `json:"sessions"`
}

func (c *checkout) inspect() inspectOutput {
	c.t.Helper()
	var out inspectOutput
	if err := json.Unmarshal([]byte(c.agentscm("change-capture", "events", "--spool", c.spool, "--format", "json")), &out); err != nil {
		c.t.Fatal(err)
	}
	return out
}
