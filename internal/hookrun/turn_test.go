package hookrun

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/agent/adapter"
	"github.com/agentscm/agentscm/internal/changelog"
)

// A second session's prompt, refused because another session's turn runs,
// gets its host's blocking answer on stdout (exit status 0, as the hosts
// read it): Claude Code and Codex CLI {"decision":"block","reason":…},
// Gemini CLI {"decision":"deny","reason":…}. The first session's prompt
// prints nothing.
func TestRefusedPromptAnswersEachHost(t *testing.T) {
	for _, tc := range []struct {
		agent    adapter.Adapter
		decision string
	}{
		{adapter.Claude{}, "block"},
		{adapter.Codex{}, "block"},
		{adapter.Gemini{}, "deny"},
	} {
		t.Run(tc.agent.Name(), func(t *testing.T) {
			base := t.TempDir()
			root, xdg := filepath.Join(base, "repo"), filepath.Join(base, "xdg")
			os.MkdirAll(root, 0o755)
			cfg := filepath.Join(xdg, "agentscm")
			os.MkdirAll(filepath.Join(cfg, "changelog"), 0o700)
			c, err := changelog.Open(changelog.DefaultDir(cfg, root), changelog.Options{Roots: []changelog.Root{{Name: "checkout", Path: root}}})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.SaveRoots(); err != nil {
				t.Fatal(err)
			}
			getenv := func(k string) string {
				if k == "XDG_CONFIG_HOME" {
					return xdg
				}
				return ""
			}
			hook := func(session string) (string, string) {
				var stdout, stderr bytes.Buffer
				in := `{"session_id":"` + session + `","cwd":"` + root + `","hook_event_name":"UserPromptSubmit","prompt":"p"}`
				code := ClaudeHook(context.Background(), strings.NewReader(in), &stdout, &stderr, getenv, time.Now(),
					Options{Parts: Parts{Changelog: true}, Agent: tc.agent, TurnWait: 300 * time.Millisecond})
				if code != 0 {
					t.Fatalf("exit status %d", code)
				}
				return stdout.String(), stderr.String()
			}
			if out, errOut := hook("first"); out != "" || errOut != "" {
				t.Fatalf("first prompt: stdout %q stderr %q", out, errOut)
			}
			out, _ := hook("second")
			var ans map[string]string
			if err := json.Unmarshal([]byte(out), &ans); err != nil || !strings.HasSuffix(out, "}\n") {
				t.Fatalf("answer %q: %v", out, err)
			}
			if len(ans) != 2 || ans["decision"] != tc.decision || !strings.Contains(ans["reason"], "session first ("+tc.agent.Name()+")") || !strings.Contains(ans["reason"], "git worktree add") {
				t.Fatalf("answer %v", ans)
			}
		})
	}
}
