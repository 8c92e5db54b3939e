package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentscm/agentscm/test/e2e/scriptedapi"
	"github.com/agentscm/agentscm/test/e2e/scriptedgemini"
	"github.com/agentscm/agentscm/test/e2e/scriptedresponses"
)

// agent is one host CLI driven headless against its scripted model API.
type agent struct {
	name     string // claude, codex, gemini
	enableAs string // the --agent of change-capture enable / changelog enable
	bin      string
	hookFile string // the hook file enable writes, relative to the checkout
	// configure writes the checkout's private agent configuration (the
	// same for every variant).
	configure func(c *checkout) error
	// command is the headless session of marker in c.
	command func(ctx context.Context, c *checkout, marker string) *exec.Cmd
	// check reads the session's stdout and says whether the host reported
	// success.
	check func(stdout []byte) error

	claudeAPI *scriptedapi.Server
	codexAPI  *scriptedresponses.Server
	geminiAPI *scriptedgemini.Server
}

// fileName is the file call i of marker's session writes (calls 2k and 2k+1
// write it and read it back).
func fileName(marker string, i int) string {
	return fmt.Sprintf("%s-%02d.txt", strings.ToLower(marker), i/2)
}

func findCLI(glob string) (string, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	m, _ := filepath.Glob(filepath.Join(home, ".cache", "agentscm-e2e", glob, "node_modules", ".bin", "*"))
	m = slices.DeleteFunc(m, func(p string) bool {
		b := filepath.Base(p)
		return b != "claude" && b != "codex" && b != "gemini"
	})
	if len(m) == 0 {
		return "", fmt.Errorf("no CLI %s under ~/.cache/agentscm-e2e (run the agent's e2e test once)", glob)
	}
	slices.Sort(m)
	return m[len(m)-1], nil
}

// newAgents starts the scripted APIs with every session's turn (markers are
// known in advance) and returns the agents named in names.
func newAgents(names []string, markers map[string][]string, roots func(agent, marker string) string, calls int) ([]*agent, func(), error) {
	var agents []*agent
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	for _, n := range names {
		var a *agent
		var err error
		switch n {
		case "claude":
			a, err = claudeAgent(markers[n], func(m string) string { return roots(n, m) }, calls)
		case "codex":
			a, err = codexAgent(markers[n], calls)
		case "gemini":
			a, err = geminiAgent(markers[n], func(m string) string { return roots(n, m) }, calls)
		default:
			err = fmt.Errorf("unknown agent %q (want claude, codex, gemini)", n)
		}
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		agents = append(agents, a)
		switch {
		case a.claudeAPI != nil:
			closers = append(closers, func() { a.claudeAPI.Close() })
		case a.codexAPI != nil:
			closers = append(closers, func() { a.codexAPI.Close() })
		case a.geminiAPI != nil:
			closers = append(closers, func() { a.geminiAPI.Close() })
		}
	}
	return agents, closeAll, nil
}

func claudeAgent(markers []string, root func(string) string, calls int) (*agent, error) {
	bin, err := findCLI("claude-code-*")
	if err != nil {
		return nil, err
	}
	var turns []scriptedapi.Turn
	for _, m := range markers {
		t := scriptedapi.Turn{Marker: m, FinalText: "All done."}
		for i := range calls {
			name := filepath.Join(root(m), fileName(m, i))
			if i%2 == 0 {
				t.Steps = append(t.Steps, []scriptedapi.ToolCall{{Name: "Write", Input: map[string]any{"file_path": name, "content": fmt.Sprintf("line %d\n", i)}}})
			} else {
				t.Steps = append(t.Steps, []scriptedapi.ToolCall{{Name: "Bash", Input: map[string]any{"command": "cat " + name, "description": "read it back"}}})
			}
		}
		turns = append(turns, t)
	}
	api, err := scriptedapi.Start(turns...)
	if err != nil {
		return nil, err
	}
	return &agent{
		name: "claude", enableAs: "claude-code", bin: bin, hookFile: filepath.Join(".claude", "settings.local.json"),
		configure: func(*checkout) error { return nil },
		command: func(ctx context.Context, c *checkout, marker string) *exec.Cmd {
			cmd := exec.CommandContext(ctx, bin, "--output-format", "json", "--allowedTools", "Write,Edit,Bash,Read", "-p", "Please run "+marker+".")
			cmd.Env = append(c.env(),
				"ANTHROPIC_BASE_URL="+api.URL,
				"ANTHROPIC_API_KEY=sk-ant-bench-dummy-key",
				"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
				"DISABLE_AUTOUPDATER=1",
				"DISABLE_TELEMETRY=1",
			)
			return cmd
		},
		check: func(stdout []byte) error {
			var out struct {
				IsError bool `json:"is_error"`
			}
			if err := json.Unmarshal(stdout, &out); err != nil || out.IsError {
				return fmt.Errorf("claude reported an error (%v)", err)
			}
			return nil
		},
		claudeAPI: api,
	}, nil
}

// codexModel is a model Codex 0.169.0 ships (an unknown name drops
// apply_patch); the same as test/e2e.
const codexModel = "gpt-5.5"

func codexAgent(markers []string, calls int) (*agent, error) {
	bin, err := findCLI("codex-*")
	if err != nil {
		return nil, err
	}
	var turns []scriptedresponses.Turn
	for _, m := range markers {
		t := scriptedresponses.Turn{Marker: m, FinalText: "All done."}
		for i := range calls {
			name := fileName(m, i)
			if i%2 == 0 {
				t.Steps = append(t.Steps, []scriptedresponses.Call{{Patch: fmt.Sprintf("*** Begin Patch\n*** Add File: %s\n+line %d\n*** End Patch\n", name, i)}})
			} else {
				t.Steps = append(t.Steps, []scriptedresponses.Call{{Shell: "cat " + name}})
			}
		}
		turns = append(turns, t)
	}
	api, err := scriptedresponses.Start(turns...)
	if err != nil {
		return nil, err
	}
	return &agent{
		name: "codex", enableAs: "codex", bin: bin, hookFile: filepath.Join(".codex", "hooks.json"),
		configure: func(c *checkout) error {
			home := filepath.Join(c.home, ".codex")
			cfg := fmt.Sprintf("[model_providers.local]\nname = \"local\"\nbase_url = %q\nwire_api = \"responses\"\nenv_key = \"LOCAL_OPENAI_KEY\"\n\n[projects.%q]\ntrust_level = \"trusted\"\n", api.URL, c.root)
			if err := os.MkdirAll(home, 0o700); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(home, "config.toml"), []byte(cfg), 0o600)
		},
		command: func(ctx context.Context, c *checkout, marker string) *exec.Cmd {
			cmd := exec.CommandContext(ctx, bin, "exec", "--json", "--color", "never", "--dangerously-bypass-approvals-and-sandbox", "--dangerously-bypass-hook-trust",
				"-c", fmt.Sprintf("model=%q", codexModel), "-c", `model_provider="local"`, "Please run "+marker+".")
			cmd.Env = append(c.env(), "CODEX_HOME="+filepath.Join(c.home, ".codex"), "LOCAL_OPENAI_KEY=sk-bench-dummy")
			return cmd
		},
		check: func(stdout []byte) error {
			sc := bufio.NewScanner(bytes.NewReader(stdout))
			sc.Buffer(make([]byte, 1<<20), 16<<20)
			for sc.Scan() {
				var l struct {
					Type string `json:"type"`
				}
				if json.Unmarshal(sc.Bytes(), &l) == nil && (l.Type == "turn.failed" || l.Type == "error") {
					return fmt.Errorf("codex reported %s", sc.Text())
				}
			}
			return nil
		},
		codexAPI: api,
	}, nil
}

func geminiAgent(markers []string, root func(string) string, calls int) (*agent, error) {
	bin, err := findCLI("gemini-cli-*")
	if err != nil {
		return nil, err
	}
	var turns []scriptedgemini.Turn
	for _, m := range markers {
		t := scriptedgemini.Turn{Marker: m, FinalText: "All done."}
		for i := range calls {
			name := filepath.Join(root(m), fileName(m, i))
			if i%2 == 0 {
				t.Steps = append(t.Steps, []scriptedgemini.Call{{Name: "write_file", Args: map[string]any{"file_path": name, "content": fmt.Sprintf("line %d\n", i)}}})
			} else {
				t.Steps = append(t.Steps, []scriptedgemini.Call{{Name: "run_shell_command", Args: map[string]any{"command": "cat " + name, "description": "read it back"}}})
			}
		}
		turns = append(turns, t)
	}
	api, err := scriptedgemini.Start(turns...)
	if err != nil {
		return nil, err
	}
	return &agent{
		name: "gemini", enableAs: "gemini", bin: bin, hookFile: filepath.Join(".gemini", "settings.json"),
		configure: func(c *checkout) error {
			dir := filepath.Join(c.home, ".gemini")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			s := `{"security":{"auth":{"selectedType":"gemini-api-key"}},"general":{"enableAutoUpdate":false,"enableAutoUpdateNotification":false},"privacy":{"usageStatisticsEnabled":false},"telemetry":{"enabled":false}}`
			return os.WriteFile(filepath.Join(dir, "settings.json"), []byte(s), 0o600)
		},
		command: func(ctx context.Context, c *checkout, marker string) *exec.Cmd {
			cmd := exec.CommandContext(ctx, bin, "--yolo", "--output-format", "json", "-p", "Please run "+marker+".")
			cmd.Env = append(c.env(), "GEMINI_API_KEY=bench-dummy-key", "GOOGLE_GEMINI_BASE_URL="+api.URL, "GEMINI_CLI_TRUST_WORKSPACE=true")
			return cmd
		},
		check: func(stdout []byte) error {
			var res struct {
				SessionID string `json:"session_id"`
			}
			if err := json.Unmarshal(stdout, &res); err != nil || res.SessionID == "" {
				return fmt.Errorf("gemini output has no session id (%v)", err)
			}
			return nil
		},
		geminiAPI: api,
	}, nil
}
