//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/action"
	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
	"github.com/agentscm/agentscm/test/e2e/scriptedapi"
)

// TestManagedRecipes: the real Claude Code CLI, given the SessionStart
// guidance, runs five registered recipes through its Bash tool with the
// exact runner command: a passing child, a failing child, a timeout, an
// output overflow and a child that sends SIGTERM to the runner. Each run is
// exactly one verification action on the Hub with the recipe digest,
// passed/failed from the child's real status and incomplete for every
// runner stop; the Bash hooks keep their lifecycle events but the generic
// Bash action is suppressed for the exact command, while an ordinary Bash
// call keeps its execution action.
func TestManagedRecipes(t *testing.T) {
	c := newCheckout(t)
	priv := filepath.Join(c.dir, "private")
	if err := os.MkdirAll(priv, 0o700); err != nil {
		t.Fatal(err)
	}
	recipes := []struct {
		id      string
		argv    []string
		timeout int
		max     int
	}{
		{"pass", []string{"/bin/sh", "-c", "echo recipe-pass"}, 60, 1 << 20},
		{"fail", []string{"/bin/sh", "-c", "echo recipe-fail; exit 7"}, 60, 1 << 20},
		{"slow", []string{"/bin/sleep", "30"}, 2, 1 << 20},
		{"loud", []string{"/bin/sh", "-c", "head -c 200000 /dev/zero | tr '\\000' x"}, 60, 4096},
		{"term", []string{"/bin/sh", "-c", "kill -TERM $PPID; sleep 30"}, 60, 1 << 20},
	}
	args := []string{"change-capture", "configure", "--root", c.root, "--spool", c.spool, "--capture-mode", "metadata-only",
		"--action-rule", "Bash=execution:partial:process_exit_code"}
	for _, r := range recipes {
		b, _ := json.Marshal(map[string]any{"id": r.id, "argv": r.argv, "coverage": "complete", "timeout_seconds": r.timeout, "max_output_bytes": r.max})
		p := filepath.Join(priv, r.id+".json")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--recipe-file", p)
	}
	c.agentscm("client", "setup", "--root", c.root, "--local")
	c.agentscm(args...)
	work := c.startWork("recipes")
	var steps [][]scriptedapi.ToolCall
	cmds := map[string]string{}
	// configure records the running agentscm as the runner: under the
	// two-instance Hub (hubbackend_test.go) that is the real binary the
	// wrapper runs.
	runner := h.agentscm
	if hubBackendPG() {
		runner = filepath.Join(filepath.Dir(h.agentscm), "agentscm-real")
	}
	for _, r := range recipes {
		cmds[r.id] = capture.RunnerCommand(runner, r.id)
		steps = append(steps, []scriptedapi.ToolCall{bash(cmds[r.id])})
	}
	steps = append(steps, []scriptedapi.ToolCall{bash("true")})
	api, err := scriptedapi.Start(scriptedapi.Turn{Marker: "SCENARIO-RECIPES", Steps: steps, FinalText: "recipes done"})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	res := c.runClaude(api, "-p", "Run SCENARIO-RECIPES.")

	// The SessionStart guidance reached the model's context with every
	// exact absolute command.
	var main []byte
	for _, r := range api.Requests() {
		if r.Main {
			main = append(main, r.Body...)
		}
	}
	for id, cmd := range cmds {
		if !strings.Contains(string(main), cmd) {
			t.Fatalf("the guidance for %s (%q) is not in the model's context", id, cmd)
		}
	}

	// Bash tool_use ids in order; each managed call has its lifecycle
	// events but no generic action records of its own in the spool.
	evs := c.inspect().Sessions[0].Events
	var tus []string
	kinds := map[string][]string{}
	for _, r := range evs {
		if r.ToolName != "Bash" {
			continue
		}
		if r.Kind == event.ToolStart {
			tus = append(tus, r.ToolUseID)
		}
		cls := ""
		if r.Action != nil {
			cls = r.Action.Class
		}
		kinds[r.ToolUseID] = append(kinds[r.ToolUseID], string(r.Kind)+":"+cls+":"+r.HookEvent)
	}
	if len(tus) != len(recipes)+1 {
		t.Fatalf("%d Bash calls, want %d: %v", len(tus), len(recipes)+1, kinds)
	}
	for i := range recipes {
		got := strings.Join(kinds[tus[i]], " ")
		// The child's nonzero status (every case but pass) makes Claude Code
		// report the Bash call as failed.
		post := "PostToolUseFailure"
		if recipes[i].id == "pass" {
			post = "PostToolUse"
		}
		want := "tool_start::PreToolUse action_start:verification:run-recipe action_finish:verification:run-recipe tool_finish::" + post
		if got != want {
			t.Fatalf("recipe %s: spool records %q, want %q", recipes[i].id, got, want)
		}
	}

	rec := c.record(work)
	want := []struct{ result, verification string }{
		{"succeeded", "passed"}, {"failed", "failed"}, {"incomplete", "incomplete"}, {"incomplete", "incomplete"}, {"incomplete", "incomplete"},
	}
	cfg := readBinding(t, c)
	stops := map[string]string{"slow": "timeout", "loud": "output_limit", "term": "cancelled"}
	for i, r := range recipes {
		id := action.ID("claude-code", res.SessionID, tus[i])
		found := false
		for _, x := range rec.Actions {
			if x.ActionID != id {
				continue
			}
			found = true
			b, _ := json.Marshal(x)
			t.Logf("%s: %s", r.id, b)
			if x.Status != "complete" || x.Start.Class != "verification" || x.Start.Tool != "Bash" || x.Start.RecipeDigest != cfg[r.id] ||
				x.Finish.Result != want[i].result || x.Finish.Verification != want[i].verification {
				t.Fatalf("recipe %s: hub action %s", r.id, b)
			}
			if r.id == "fail" && (x.Finish.ExitCode == nil || *x.Finish.ExitCode != 7) {
				t.Fatalf("the failing child's exit code: %s", b)
			}
			// The local run receipt: the stop reason, and how the occurrence
			// was chosen (Claude Code 2.1.328 exports no tool_use_id to the
			// command, so the single waiting marker of the session).
			files, _ := filepath.Glob(filepath.Join(c.config, "agentscm", "capture-actions", "*", "managed", id+".run.json"))
			if len(files) != 1 {
				t.Fatalf("recipe %s: run receipts %v", r.id, files)
			}
			var rr struct {
				Stop       string `json:"stop"`
				SelectedBy string `json:"selected_by"`
				Stdout     struct {
					Bytes    int64              `json:"bytes"`
					Artifact *event.ArtifactRef `json:"artifact"`
				} `json:"stdout"`
			}
			rb, _ := os.ReadFile(files[0])
			if err := json.Unmarshal(rb, &rr); err != nil || rr.Stop != stops[r.id] || rr.SelectedBy != "single_waiting_marker" {
				t.Fatalf("recipe %s: run receipt %s", r.id, rb)
			}
			if r.id == "loud" && rr.Stdout.Bytes != 4096 {
				t.Fatalf("the overflowing child's retained output: %s", rb)
			}
			// The output lives in the spool (its limits, its export).
			a := rr.Stdout.Artifact
			if a == nil || a.Availability != event.AvailabilityRetained || a.Bytes != rr.Stdout.Bytes {
				t.Fatalf("recipe %s: stdout not retained in the spool: %s", r.id, rb)
			}
			if sp, err := spool.OpenReadOnly(c.spool); err != nil {
				t.Fatal(err)
			} else if out, err := sp.ReadBlob(*a); err != nil || int64(len(out)) != a.Bytes {
				t.Fatalf("recipe %s: the spool's stdout artifact: %v", r.id, err)
			}
		}
		if !found {
			t.Fatalf("no Hub action for recipe %s (%s)", r.id, id)
		}
	}
	// The ordinary Bash call keeps its generic execution action.
	plain := action.ID("claude-code", res.SessionID, tus[len(recipes)])
	n := 0
	for _, x := range rec.Actions {
		if x.ActionID == plain && x.Start.Class == "execution" && x.Finish != nil && x.Finish.Verification == "unknown" {
			n++
		}
	}
	if n != 1 || len(rec.Actions) != len(recipes)+1 {
		t.Fatalf("%d actions on the Hub (plain Bash found %d times), want %d", len(rec.Actions), n, len(recipes)+1)
	}
	// No attempt is left unresolved by any of the stops.
	for _, r := range recipes {
		out := c.agentscmIn(c.root, "change-capture", "reconcile-recipe", "--id", r.id, "--format", "json")
		if strings.TrimSpace(out) != "[]" {
			t.Fatalf("reconcile-recipe --id %s: %s", r.id, out)
		}
	}
}

// readBinding returns the registered recipe digests by id.
func readBinding(t *testing.T, c *checkout) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.config, "agentscm", "capture.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg binding.Config
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, bd := range cfg.Bindings {
		for _, r := range bd.Recipes {
			out[r.ID] = r.Digest
		}
	}
	return out
}

// agentscmIn runs the built binary in dir and returns stdout.
func (c *checkout) agentscmIn(dir string, args ...string) string {
	c.t.Helper()
	cmd := exec.Command(h.agentscm, args...)
	cmd.Dir = dir
	cmd.Env = c.env()
	out, err := cmd.Output()
	if err != nil {
		c.t.Fatalf("agentscm %v: %v\n%s", args, err, out)
	}
	return string(out)
}
