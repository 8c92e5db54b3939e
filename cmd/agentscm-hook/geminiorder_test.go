package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

// geminiTool is a Gemini CLI BeforeTool (finish false) or AfterTool payload
// of call n of session (its own file, so that no two calls fingerprint
// alike).
func (f *burstFixture) geminiTool(session string, n int, finish bool) string {
	ev, resp := "BeforeTool", ""
	if finish {
		ev, resp = "AfterTool", `,"tool_response":{"llmContent":"ok `+fmt.Sprint(n)+`","returnDisplay":"ok"}`
	}
	return fmt.Sprintf(`{"session_id":%q,"transcript_path":"","cwd":%q,"hook_event_name":%q,"timestamp":"2026-12-02T10:00:00Z","tool_name":"read_file","tool_input":{"file_path":"/repo/f%d.txt"}%s}`,
		session, f.root, ev, n, resp)
}

// TestGeminiOrderSurvivesCrashes: the Gemini capture hook's order counters
// are written without an fsync. A hook killed after it counted its call
// and before anything reached the spool (failpoint hook.decoded) leaves the
// next call's ids where the counted call left them, as before; and a
// counter file an operating system crash left stale (the last durable
// version, stamped with another boot) is raised to the capture's durable
// record (the ledger's claims on the locked path; the waiting intake
// records on the intake path), so the next call gets a fresh order id
// instead of reusing one the spool already holds. Both paths.
func TestGeminiOrderSurvivesCrashes(t *testing.T) {
	for _, intake := range []bool{false, true} {
		t.Run(fmt.Sprintf("intake=%v", intake), func(t *testing.T) {
			f := newBurstFixture(t)
			release := func() {}
			if intake {
				f.detached = true
				t.Cleanup(func() { f.waitDeliverer(t) })
				release = f.holdDeliverLock(t)
				t.Cleanup(release)
			}
			const session = "gem-crash"
			hook := func(payload string, env ...string) error {
				cmd := f.hookCmd(payload)
				cmd.Args = []string{cmd.Args[0], "change-capture", "hook-gemini"}
				cmd.Env = append(cmd.Env, env...)
				out, err := cmd.CombinedOutput()
				if err == nil && len(out) != 0 {
					t.Fatalf("hook said %q", out)
				}
				return err
			}
			must := func(payload string) {
				if err := hook(payload); err != nil {
					t.Fatal(err)
				}
			}
			must(f.geminiTool(session, 1, false))
			must(f.geminiTool(session, 1, true))
			// Call 2's start: killed once it was counted, before the spool.
			var ee *exec.ExitError
			if err := hook(f.geminiTool(session, 2, false), spool.FailpointEnv+"=hook.decoded"); !errors.As(err, &ee) {
				t.Fatalf("the hook at the failpoint: %v, want killed", err)
			}
			must(f.geminiTool(session, 2, true))
			// An OS crash lost the updates since call 1 (never fsynced).
			state := filepath.Join(f.vars["XDG_CONFIG_HOME"], "agentscm", "agent-state", "gemini-capture", session+".json")
			if err := os.WriteFile(state, []byte(`{"starts":1,"finishes":1,"boot":"a-boot-before-the-crash"}`), 0o600); err != nil {
				t.Fatal(err)
			}
			must(f.geminiTool(session, 3, false))
			must(f.geminiTool(session, 3, true))
			if intake {
				release()
				f.waitDelivered(t)
			}
			sp, err := spool.OpenReadOnly(f.spool)
			if err != nil {
				t.Fatal(err)
			}
			evs, err := sp.Events()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range evs {
				if e.SessionID == session && (e.Kind == event.ToolStart || e.Kind == event.ToolFinish) {
					got = append(got, fmt.Sprintf("%s %s", e.Kind, e.ToolUseID))
				}
			}
			want := []string{"tool_start order-1", "tool_finish order-1", "tool_finish order-2", "tool_start order-3", "tool_finish order-3"}
			if !slices.Equal(got, want) {
				t.Fatalf("tool events %q, want %q", got, want)
			}
		})
	}
}
