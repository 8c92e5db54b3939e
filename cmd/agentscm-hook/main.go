// Command agentscm-hook is the Claude Code hook pipeline alone: the same
// behaviour as `agentscm change-capture hook-claude [--changelog]` and
// `agentscm changelog hook-claude`, in a binary that links only what the
// hook needs, so that the process started on every agent tool
// call starts faster. change-capture configure and enable install it in the
// hook command when it sits next to the agentscm binary.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/agentscm/agentscm/internal/agent/adapter"
	"github.com/agentscm/agentscm/internal/buildinfo"
	"github.com/agentscm/agentscm/internal/hookrun"
)

const usage = `Usage:
  agentscm-hook --version
  agentscm-hook change-capture hook-claude [--changelog] < payload.json
  agentscm-hook changelog hook-claude < payload.json
  agentscm-hook change-capture hook-codex < payload.json
  agentscm-hook change-capture hook-gemini < payload.json
  agentscm-hook change-capture deliver-spool --config-dir DIR --spool DIR [--lock-fd N]

The Claude Code hooks, exactly as 'agentscm change-capture hook-claude'
and 'agentscm changelog hook-claude' run them, in a smaller binary that
starts faster. With --changelog (the one entry of an event on which change
capture and the changelog are both on) one process captures the event and
then takes the changelog increment, before it hands delivery on. agentscm
change-capture configure and enable install it in the hook command when it
is next to the agentscm binary. It never blocks the agent: whatever fails,
it prints one warning line on stderr and exits 0. It prints nothing on
stdout, except on a SessionStart of a checkout with registered recipes: then
exactly the bounded recipe guidance as Claude Code's additional context.

The hook writes each event durably into the spool's intake (without the
spool lock and without opening the Hub) and hands the rest to one detached
deliverer per spool (deliver-spool, started by the hook itself; at most one
runs per spool, bounded to 20 s, ending with one status line on stderr and
in the spool's deliver status): it resolves the Work, admits the event into
the spool and delivers it, so the agent waits for neither. When the intake
write fails the hook appends under the spool lock instead; when no
deliverer can be started, it delivers in-process as before.
`

func main() {
	exe, err := os.Executable()
	if err != nil {
		exe = "" // no detached deliverer: the hook delivers in-process
	}
	os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv, time.Now, exe))
}

// run is the command; exe, when not empty, is this binary, started again
// as the detached deliverer (change-capture deliver-spool) after a hook's
// append, so that delivery is off the hook's critical path.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string, now func() time.Time, exe string) int {
	switch {
	case len(args) == 2 && args[0] == "change-capture" && args[1] == "hook-claude":
		return hookrun.ClaudeCaptureDetached(ctx, stdin, stdout, stderr, getenv, now(), exe)
	case len(args) == 3 && args[0] == "change-capture" && args[1] == "hook-claude" && args[2] == "--changelog":
		return hookrun.ClaudeHook(ctx, stdin, stdout, stderr, getenv, now(), hookrun.Options{Parts: hookrun.Parts{Capture: true, Changelog: true}, Exe: exe})
	case len(args) == 2 && args[0] == "changelog" && args[1] == "hook-claude":
		return hookrun.ClaudeHook(ctx, stdin, stdout, stderr, getenv, now(), hookrun.Options{Parts: hookrun.Parts{Changelog: true}, Exe: exe})
	case len(args) == 2 && args[0] == "change-capture" && args[1] == "hook-codex":
		return hookrun.AgentCapture(ctx, adapter.Codex{}, stdin, stderr, getenv, now())
	case len(args) == 2 && args[0] == "change-capture" && args[1] == "hook-gemini":
		return hookrun.AgentCapture(ctx, adapter.Gemini{}, stdin, stderr, getenv, now())
	case len(args) >= 2 && args[0] == "change-capture" && args[1] == "deliver-spool":
		return hookrun.DeliverSpool(ctx, args[2:], stderr)
	case len(args) == 1 && args[0] == "--version":
		fmt.Fprintln(stdout, buildinfo.Version("agentscm-hook"))
		return 0
	case len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help"):
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprint(stderr, usage)
	return 2
}
