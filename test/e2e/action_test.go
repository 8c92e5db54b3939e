//go:build e2e

package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/action"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/test/e2e/scriptedapi"
)

// TestActionsFromExecutionRules: with Bash=execution:partial:process_exit_code
// and Write=execution:unknown:unverified, a real Claude Code session running
// Bash `true`, Bash `exit 3` and a Write leaves three complete actions on
// the Hub with exactly the results the rules allow: `true` is unknown
// (Claude Code 2.1.x reports no integer exit code on success), `exit 3` is
// failed (its failure hook; the "Exit code 3" text is not an integer
// field), the Write is unknown; verification is unknown for every one.
func TestActionsFromExecutionRules(t *testing.T) {
	c := newCheckout(t)
	setup := strings.Repeat("5e", 32)
	c.agentscm("client", "setup", "--root", c.root, "--local")
	c.agentscm("change-capture", "configure", "--root", c.root, "--spool", c.spool, "--capture-mode", "metadata-only",
		"--setup-digest", setup,
		"--action-rule", "Bash=execution:partial:process_exit_code",
		"--action-rule", "Write=execution:unknown:unverified")
	work := c.startWork("actions")
	api1, err := scriptedapi.Start(scriptedapi.Turn{Marker: "SCENARIO-ACTIONS", Steps: [][]scriptedapi.ToolCall{
		{bash("true")},
		{bash("exit 3")},
		{{Name: "Write", Input: map[string]any{"file_path": filepath.Join(c.root, "w.txt"), "content": "written\n"}}},
	}, FinalText: "actions done"})
	if err != nil {
		t.Fatal(err)
	}
	defer api1.Close()
	res := c.runClaude(api1, "-p", "Run SCENARIO-ACTIONS.")

	// The spool holds each action start right after its tool_start event
	// (appended by the PreToolUse hook, before the tool ran) and each
	// finish right after its tool_finish.
	evs := c.inspect().Sessions[0].Events
	var kinds []string
	preSeq := map[string]uint64{} // tool_use_id -> seq of its PreToolUse event
	var order []string
	for i, r := range evs {
		switch r.Kind {
		case event.ActionStart:
			if i == 0 || evs[i-1].Kind != event.ToolStart || evs[i-1].ToolUseID != r.ToolUseID {
				t.Fatalf("action start %d does not follow its tool_start: %+v", i, evs[i-1])
			}
			preSeq[r.ToolUseID] = evs[i-1].Seq
			order = append(order, r.ToolUseID)
		case event.ActionFinish:
			if evs[i-1].Kind != event.ToolFinish || evs[i-1].ToolUseID != r.ToolUseID {
				t.Fatalf("action finish %d does not follow its tool_finish: %+v", i, evs[i-1])
			}
		}
		if r.Kind != event.MessageDisplay {
			kinds = append(kinds, string(r.Kind)+" "+r.ToolName)
		}
	}
	if len(order) != 3 {
		t.Fatalf("%d action starts, want 3; spool: %v", len(order), kinds)
	}

	rec := c.record(work)
	// Action records take no number in the session's event sequence: no
	// hole, and the only gaps are the identity_uncertain ones of the events
	// the host gives no identity (at least the prompt's).
	if len(rec.Gaps) == 0 {
		t.Fatalf("no gaps at all: the prompt has no provider identity; %+v", rec.Coverage)
	}
	checkOnlyUncertain(t, rec, len(rec.Gaps))
	if len(rec.Actions) != 3 {
		t.Fatalf("hub actions %+v", rec.Actions)
	}
	want := []struct{ tool, result, coverage string }{
		{"Bash", "unknown", "partial"}, {"Bash", "failed", "partial"}, {"Write", "unknown", "unknown"},
	}
	for i, w := range want {
		id := action.ID("claude-code", res.SessionID, order[i])
		var found bool
		for _, a := range rec.Actions {
			if a.ActionID != id {
				continue
			}
			found = true
			b, _ := json.Marshal(a)
			if a.Status != "complete" || a.Start.Tool != w.tool || a.Start.Class != "execution" || a.Start.Coverage != w.coverage ||
				a.Finish.Result != w.result || a.Finish.Verification != "unknown" || a.Finish.ExitCode != nil || a.Finish.Stale ||
				a.Start.SetupDigest != setup || a.Finish.SetupDigest != setup || a.Start.Source == nil || len(a.Start.Source.Head) != 40 ||
				a.Start.ObservationScope == "" || a.Start.ObservationOrder != int64(preSeq[order[i]]) {
				t.Fatalf("action %d: %s", i, b)
			}
			if w.tool == "Write" && a.Finish.Drift != "changed" {
				t.Fatalf("the Write's finish reports drift %q: %s", a.Finish.Drift, b)
			}
			t.Logf("action %d: %s", i, b)
		}
		if !found {
			t.Fatalf("no Hub action %s for %s", id, order[i])
		}
	}
}
