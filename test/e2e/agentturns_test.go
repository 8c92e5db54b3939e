//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/test/e2e/scriptedgemini"
	"github.com/agentscm/agentscm/test/e2e/scriptedresponses"
)

// otherSessionTurn starts a turn of another session in the checkout, as
// its prompt hook does (run from the test, so no agent process is found
// and the turn lives on its lease).
func (c *checkout) otherSessionTurn(session string) {
	c.t.Helper()
	cmd := exec.Command(h.agentscm, "changelog", "hook-claude")
	cmd.Env = c.env()
	cmd.Stdin = strings.NewReader(`{"session_id":"` + session + `","cwd":"` + c.root + `","hook_event_name":"UserPromptSubmit","prompt":"x"}`)
	if out, err := cmd.CombinedOutput(); err != nil || len(out) != 0 {
		c.t.Fatalf("prompt hook of %s: %v %s", session, err, out)
	}
	ts := c.turnsStatus()
	if len(ts) != 1 || !ts[0].Running || ts[0].SessionID != session {
		c.t.Fatalf("turns %+v", ts)
	}
}

// runBlocked runs an agent CLI whose prompt the changelog refuses: it
// returns its combined output, its exit error and how long it ran.
func (c *checkout) runBlocked(bin string, args []string, env ...string) (string, error, time.Duration) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = c.root
	cmd.Env = append(c.env(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	return out.String(), err, time.Since(start)
}

// checkRefused asserts what a refused prompt leaves: it waited for the
// other turn, the refusal names that session and a worktree, the file the
// prompt asked for is not written, no position was taken, and only the
// other session's turn runs.
func (c *checkout) checkRefused(out string, waited time.Duration, file, other string, reasonShown bool) {
	c.t.Helper()
	c.t.Logf("refused run after %s:\n%s", waited, out)
	if waited < changelog.TurnWait {
		c.t.Fatalf("the prompt ended after %s, before the wait for the other turn", waited)
	}
	if reasonShown && (!strings.Contains(out, "session "+other+" (claude-code) is running a turn in "+c.root) || !strings.Contains(out, "git worktree add")) {
		c.t.Fatalf("the output does not carry the refusal:\n%s", out)
	}
	if exists(c.t, file) {
		c.t.Fatalf("the refused prompt wrote %s", file)
	}
	if l := c.changelogList(); len(l) != 0 {
		c.t.Fatalf("positions after a refused prompt: %+v", l)
	}
	if ts := c.turnsStatus(); len(ts) != 1 || ts[0].SessionID != other {
		c.t.Fatalf("turns %+v", ts)
	}
}

// Codex CLI: while another session's turn runs, a `codex exec` prompt is
// refused by its UserPromptSubmit hook ({"decision":"block"}): the model is
// never asked.
func TestCodexPromptRefusedDuringOtherTurn(t *testing.T) {
	bin := ensureCodex(t)
	c := newCheckout(t)
	c.agentscm("changelog", "enable", "--root", c.root, "--agent", "codex")
	a := filepath.Join(c.root, "a.txt")
	api, err := scriptedresponses.Start(scriptedresponses.Turn{Marker: "CODEX-BLOCKED", Steps: [][]scriptedresponses.Call{{{Shell: "echo a > a.txt"}}}, FinalText: "done"})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	c.configureCodex(api)
	c.otherSessionTurn("other-session")
	out, runErr, waited := c.runBlocked(bin, []string{"exec", "--color", "never", "--dangerously-bypass-approvals-and-sandbox", "--dangerously-bypass-hook-trust",
		"-c", fmt.Sprintf("model=%q", codexModel), "-c", `model_provider="local"`, "Run CODEX-BLOCKED."},
		"CODEX_HOME="+c.codexHome(), "LOCAL_OPENAI_KEY=sk-e2e-dummy")
	t.Logf("codex exit: %v", runErr)
	if !strings.Contains(out, "hook: UserPromptSubmit Blocked") {
		t.Fatalf("codex does not say its prompt hook blocked:\n%s", out)
	}
	// codex exec prints only that the hook blocked (the reason is shown
	// by the interactive Codex, and not written to the rollout), so the
	// reason is checked on the answer the hook gives
	// (hookrun.TestRefusedPromptAnswersEachHost).
	for _, r := range api.Requests() {
		if strings.Contains(string(r.Body), "CODEX-BLOCKED") {
			t.Fatalf("the refused prompt reached the model: %s", r.Path)
		}
	}
	c.checkRefused(out, waited, a, "other-session", false)
}

// Gemini CLI: while another session's turn runs, a `gemini -p` prompt is
// refused by its BeforeAgent hook ({"decision":"deny"}): no conversation
// request reaches the model.
func TestGeminiPromptRefusedDuringOtherTurn(t *testing.T) {
	bin := ensureGemini(t)
	c := newCheckout(t)
	c.agentscm("changelog", "enable", "--root", c.root, "--agent", "gemini")
	c.configureGemini()
	a := filepath.Join(c.root, "a.txt")
	api, err := scriptedgemini.Start(scriptedgemini.Turn{Marker: "GEMINI-BLOCKED", Steps: [][]scriptedgemini.Call{{{Name: "write_file", Args: map[string]any{"file_path": a, "content": "a\n"}}}}, FinalText: "done"})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	c.otherSessionTurn("other-session")
	out, runErr, waited := c.runBlocked(bin, []string{"--yolo", "--output-format", "json", "-p", "Run GEMINI-BLOCKED."},
		"GEMINI_API_KEY=e2e-dummy-key", "GOOGLE_GEMINI_BASE_URL="+api.URL, "GEMINI_CLI_TRUST_WORKSPACE=true")
	t.Logf("gemini exit: %v", runErr)
	for _, r := range api.Requests() {
		if r.Main {
			t.Fatalf("the refused prompt reached the model: %s", r.Path)
		}
	}
	c.checkRefused(out, waited, a, "other-session", true)
}
