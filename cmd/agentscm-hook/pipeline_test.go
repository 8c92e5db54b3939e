package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

// One PostToolUse of a checkout with change capture and the changelog on:
// the settings hold one entry for it, and the one hook process it starts
// (the detached path, as installed) yields both the captured event and the
// changelog increment, says nothing and exits 0; its deliverer, started
// after the increment, delivers the event.
func TestOneProcessCapturesAndTakesTheIncrement(t *testing.T) {
	f := newBurstFixture(t)
	f.detached = true
	t.Cleanup(func() { f.waitDelivered(t) })
	f.agentscm(t, "changelog", "enable", "--root", f.root, "--no-transcript-root")

	b, err := os.ReadFile(filepath.Join(f.root, ".claude", "settings.local.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Hooks map[string][]struct {
			Hooks []struct{ Command string } `json:"hooks"`
		} `json:"hooks"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	var post []string
	for _, g := range s.Hooks["PostToolUse"] {
		for _, h := range g.Hooks {
			post = append(post, h.Command)
		}
	}
	if len(post) != 1 || !strings.HasSuffix(post[0], " change-capture hook-claude --changelog") {
		t.Fatalf("PostToolUse entries %q, want one combined entry", post)
	}

	if err := os.WriteFile(filepath.Join(f.root, "made.txt"), []byte("by the tool\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	payload := `{"session_id":"s1","cwd":"` + f.root + `","hook_event_name":"PostToolUse","tool_name":"Write","tool_use_id":"toolu_1",` +
		`"tool_input":{"file_path":"` + filepath.Join(f.root, "made.txt") + `","content":"by the tool\n"},"tool_response":{"success":true}}`
	cmd := f.hookCmd(payload)
	cmd.Args = append(cmd.Args, "change-capture", "hook-claude", "--changelog")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("hook: %v (stderr %q)", err, stderr.String())
	}
	if stdout.Len() != 0 || stderr.Len() != 0 {
		t.Fatalf("hook said stdout %q stderr %q, want nothing", stdout.String(), stderr.String())
	}

	var list struct {
		Increments []struct {
			Position int    `json:"position"`
			Tool     string `json:"tool"`
		} `json:"increments"`
	}
	if err := json.Unmarshal([]byte(f.agentscm(t, "changelog", "list", "--root", f.root, "--format", "json")), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Increments) != 1 || list.Increments[0].Tool != "Write" {
		t.Fatalf("increments %+v, want one for the Write", list.Increments)
	}

	// No later hook: the deliverer this hook started after the increment
	// admits and delivers the event.
	f.waitDeliverer(t)
	sp, err := spool.OpenReadOnly(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := sp.Events()
	if err != nil {
		t.Fatal(err)
	}
	finishes := 0
	for _, e := range evs {
		if e.Kind == event.ToolFinish && e.ToolUseID == "toolu_1" {
			finishes++
		}
	}
	if finishes != 1 {
		t.Fatalf("%d captured PostToolUse events of toolu_1, want 1", finishes)
	}
	rep, err := spool.Inspect(f.spool, 1)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Intake != 0 || rep.Pending.Total != 0 {
		t.Fatalf("after the deferred deliverer: %d intake files, %d pending", rep.Intake, rep.Pending.Total)
	}
}

// One part failing does not stop the other, and the process still says at
// most one line: with the capture config unreadable, the combined hook
// warns once about the capture and still takes the increment.
func TestCombinedHookFailsOpenPerPart(t *testing.T) {
	f := newBurstFixture(t)
	t.Cleanup(func() { f.waitDeliverer(t) })
	f.agentscm(t, "changelog", "enable", "--root", f.root, "--no-transcript-root")
	cfg := filepath.Join(f.vars["XDG_CONFIG_HOME"], "agentscm", "capture.json")
	if err := os.WriteFile(cfg, []byte(`{"version":99}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.root, "x.txt"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := f.hookCmd(`{"session_id":"s1","cwd":"` + f.root + `","hook_event_name":"PostToolUse","tool_name":"Bash","tool_use_id":"toolu_2","tool_input":{"command":"true"},"tool_response":{}}`)
	cmd.Args = append(cmd.Args, "change-capture", "hook-claude", "--changelog")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("hook: %v", err)
	}
	if stdout.Len() != 0 || strings.Count(stderr.String(), "\n") != 1 || !strings.HasPrefix(stderr.String(), "agentscm: warning: capture hook failed: ") {
		t.Fatalf("stdout %q stderr %q, want one capture warning line", stdout.String(), stderr.String())
	}
	var list struct {
		Increments []struct{ Tool string } `json:"increments"`
	}
	if err := json.Unmarshal([]byte(f.agentscm(t, "changelog", "list", "--root", f.root, "--format", "json")), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Increments) != 1 || list.Increments[0].Tool != "Bash" {
		t.Fatalf("increments %+v, want the Bash call's", list.Increments)
	}
}
