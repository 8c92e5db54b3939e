//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/test/e2e/scriptedapi"
)

func write(path, content string) scriptedapi.ToolCall {
	return scriptedapi.ToolCall{Name: "Write", Input: map[string]any{"file_path": path, "content": content}}
}

func bash(cmd string) scriptedapi.ToolCall {
	return scriptedapi.ToolCall{Name: "Bash", Input: map[string]any{"command": cmd, "description": "step"}}
}

func (c *checkout) changelogList() []changelog.Info {
	c.t.Helper()
	var out struct {
		Increments []changelog.Info `json:"increments"`
	}
	if err := json.Unmarshal([]byte(c.agentscm("changelog", "list", "--root", c.root, "--format", "json")), &out); err != nil {
		c.t.Fatal(err)
	}
	return out.Increments
}

func exists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Lstat(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return err == nil
}

func (c *checkout) runTurn(steps ...[]scriptedapi.ToolCall) {
	c.t.Helper()
	api, err := scriptedapi.Start(scriptedapi.Turn{Marker: "SCENARIO-CL", Steps: steps, FinalText: "ok"})
	if err != nil {
		c.t.Fatal(err)
	}
	defer api.Close()
	c.runClaude(api, "-p", "Run SCENARIO-CL.")
}

// checkPositions asserts one increment per tool call, in call order.
func checkPositions(t *testing.T, list []changelog.Info, tools []string, failed ...int) {
	t.Helper()
	if len(list) != len(tools) {
		t.Fatalf("%d increments %+v, want %d", len(list), list, len(tools))
	}
	for i, in := range list {
		if in.Position != i || in.Tool != tools[i] || in.Failed != slices.Contains(failed, i) {
			t.Fatalf("increment %d: %+v, want tool %s failed=%v", i, in, tools[i], slices.Contains(failed, i))
		}
	}
}

// The seed's live checks, on the real Claude Code CLI.
func TestChangelogRewindAfterThreeCalls(t *testing.T) {
	c := newCheckout(t)
	c.agentscm("changelog", "enable", "--root", c.root)
	one, two, three := filepath.Join(c.root, "one.txt"), filepath.Join(c.root, "two.txt"), filepath.Join(c.root, "three.txt")
	c.runTurn([]scriptedapi.ToolCall{write(one, "1\n")}, []scriptedapi.ToolCall{write(two, "2\n")}, []scriptedapi.ToolCall{write(three, "3\n")})
	checkPositions(t, c.changelogList(), []string{"Write", "Write", "Write"}, -1)
	out := c.agentscm("rewind", "--root", c.root, "--to", "1")
	if !exists(t, one) || !exists(t, two) || exists(t, three) {
		t.Fatalf("after rewind to 1: one=%v two=%v three=%v", exists(t, one), exists(t, two), exists(t, three))
	}
	// The rewind is itself undoable.
	undo := strings.TrimSpace(out[strings.LastIndex(out, "--to")+len("--to"):])
	c.agentscm("changelog", "apply", "--root", c.root, "--to", undo)
	if !exists(t, three) {
		t.Fatal("undoing the rewind did not bring three.txt back")
	}
	// No capture hook came back with the restored settings, and the
	// changelog hooks are still installed.
	b, _ := os.ReadFile(filepath.Join(c.root, ".claude", "settings.local.json"))
	if !strings.Contains(string(b), "changelog hook-claude") {
		t.Fatalf("changelog hooks lost: %s", b)
	}
}

func TestChangelogFailedMiddleCallKeepsItsPosition(t *testing.T) {
	c := newCheckout(t)
	c.agentscm("changelog", "enable", "--root", c.root)
	one, two, three := filepath.Join(c.root, "one.txt"), filepath.Join(c.root, "two.txt"), filepath.Join(c.root, "three.txt")
	c.runTurn([]scriptedapi.ToolCall{write(one, "1\n")}, []scriptedapi.ToolCall{bash("echo 2 > two.txt; exit 1")}, []scriptedapi.ToolCall{write(three, "3\n")})
	checkPositions(t, c.changelogList(), []string{"Write", "Bash", "Write"}, 1)
	c.agentscm("rewind", "--root", c.root, "--to", "1")
	if !exists(t, one) || !exists(t, two) || exists(t, three) {
		t.Fatalf("after rewind to the failed call: one=%v two=%v three=%v", exists(t, one), exists(t, two), exists(t, three))
	}
	c.agentscm("rewind", "--root", c.root, "--to", "0")
	if !exists(t, one) || exists(t, two) {
		t.Fatal("rewind to 0 kept the failed call's write")
	}
}

func TestChangelogRemovedRootIsGoneAfterReplay(t *testing.T) {
	c := newCheckout(t)
	extra := filepath.Join(c.dir, "agent-state")
	os.MkdirAll(filepath.Join(extra, "sub"), 0o755)
	os.WriteFile(filepath.Join(extra, "sub", "state.json"), []byte("{}\n"), 0o644)
	c.agentscm("changelog", "enable", "--root", c.root, "--extra-root", "state="+extra)
	one, three := filepath.Join(c.root, "one.txt"), filepath.Join(c.root, "three.txt")
	c.runTurn([]scriptedapi.ToolCall{write(one, "1\n")}, []scriptedapi.ToolCall{bash("rm -rf " + extra)}, []scriptedapi.ToolCall{write(three, "3\n")})
	list := c.changelogList()
	if len(list) != 3 || len(list[1].Removed) != 1 || list[1].Removed[0] != "state" {
		t.Fatalf("increments %+v: the removed root is not recorded at position 1", list)
	}
	c.agentscm("rewind", "--root", c.root, "--to", "0")
	if !exists(t, filepath.Join(extra, "sub", "state.json")) {
		t.Fatal("rewind to 0 did not restore the extra root")
	}
	c.agentscm("rewind", "--root", c.root, "--to", "1")
	if exists(t, extra) || !exists(t, one) || exists(t, three) {
		t.Fatalf("after rewind to 1: extra root exists=%v one=%v three=%v", exists(t, extra), exists(t, one), exists(t, three))
	}
}

func TestChangelogRefusedWhileTurnRuns(t *testing.T) {
	c := newCheckout(t)
	c.agentscm("changelog", "enable", "--root", c.root)
	c.runTurn([]scriptedapi.ToolCall{write(filepath.Join(c.root, "one.txt"), "1\n")})
	hook := func(event string) {
		cmd := exec.Command(h.agentscm, "changelog", "hook-claude")
		cmd.Env = c.env()
		cmd.Stdin = strings.NewReader(`{"session_id":"s-live","cwd":"` + c.root + `","hook_event_name":"` + event + `","prompt":"x"}`)
		if out, err := cmd.CombinedOutput(); err != nil || len(out) != 0 {
			t.Fatalf("hook %s: %v %s", event, err, out)
		}
	}
	hook("UserPromptSubmit")
	for _, args := range [][]string{{"rewind", "--root", c.root, "--to", "0"}, {"changelog", "enable", "--root", c.root}, {"changelog", "disable", "--root", c.root}} {
		cmd := exec.Command(h.agentscm, args...)
		cmd.Env = c.env()
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 5 || !strings.Contains(string(out), "an agent turn is running: session s-live (claude-code") {
			t.Fatalf("%v during a turn: %v %s", args, err, out)
		}
	}
	hook("Stop")
	c.agentscm("rewind", "--root", c.root, "--to", "0")
	c.agentscm("changelog", "disable", "--root", c.root)
	b, _ := os.ReadFile(filepath.Join(c.root, ".claude", "settings.local.json"))
	if strings.Contains(string(b), "hook-claude") {
		t.Fatalf("disable left hooks: %s", b)
	}
}

// TestChangelogResumeConversation: after a long conversation on one session
// and a tool call on another, rewinding to the second session's call and
// resuming continues that second conversation, including the call's result;
// rewinding into the first session cuts it right after that call's result.
func TestChangelogResumeConversation(t *testing.T) {
	c := newCheckout(t)
	c.agentscm("changelog", "enable", "--root", c.root)
	api, err := scriptedapi.Start(
		scriptedapi.Turn{Marker: "SCENARIO-LONG", Steps: [][]scriptedapi.ToolCall{
			{bash("echo LONG-RESULT-0")}, {bash("echo LONG-RESULT-1")}, {bash("echo LONG-RESULT-2")},
		}, FinalText: "long done"},
		scriptedapi.Turn{Marker: "SCENARIO-OTHER", Steps: [][]scriptedapi.ToolCall{
			{bash("echo OTHER-RESULT > other.txt; echo OTHER-RESULT")},
		}, FinalText: "other done"},
		scriptedapi.Turn{Marker: "SCENARIO-NEXT", FinalText: "continued"},
	)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	long := c.runClaude(api, "-p", "Run SCENARIO-LONG.")
	other := c.runClaude(api, "-p", "Run SCENARIO-OTHER.")
	list := c.changelogList()
	if len(list) != 4 || list[3].Session != other.SessionID || list[1].Session != long.SessionID {
		t.Fatalf("increments %+v", list)
	}

	resumeAt := func(pos string) string {
		var out struct {
			Resumed *changelog.Resumed `json:"resumed"`
		}
		if err := json.Unmarshal([]byte(c.agentscm("rewind", "--root", c.root, "--to", pos, "--resume-conversation", "--format", "json")), &out); err != nil {
			t.Fatal(err)
		}
		if out.Resumed == nil || !out.Resumed.IncludesResult || out.Resumed.Command != "claude --resume "+out.Resumed.SessionID {
			t.Fatalf("resumed %+v", out.Resumed)
		}
		before := len(api.Requests())
		res := c.runClaude(api, "-p", "--resume", out.Resumed.SessionID, "Now SCENARIO-NEXT.")
		if res.Result != "continued" {
			t.Fatalf("resumed result %q", res.Result)
		}
		var body string
		for _, r := range api.Requests()[before:] {
			if r.Main && strings.Contains(string(r.Body), "SCENARIO-NEXT") {
				body = string(r.Body)
			}
		}
		if body == "" {
			t.Fatal("the resumed conversation never reached the model")
		}
		return body
	}

	body := resumeAt("3")
	if !strings.Contains(body, "SCENARIO-OTHER") || !strings.Contains(body, "OTHER-RESULT") || strings.Contains(body, "SCENARIO-LONG") {
		t.Fatalf("resuming at the other session's call did not continue that conversation with its result:\n%.2000s", body)
	}
	body = resumeAt("1")
	if !strings.Contains(body, "LONG-RESULT-1") || strings.Contains(body, "LONG-RESULT-2") || strings.Contains(body, "SCENARIO-OTHER") {
		t.Fatalf("resuming at call 1 is not cut right after its result:\n%.3000s", body)
	}
}
