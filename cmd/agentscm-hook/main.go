// Command agentscm-hook is the hook pipeline alone: every route of the
// route table (internal/hookroute: `change-capture hook-AGENT
// [--changelog]`, `changelog hook-AGENT` for Claude Code, Codex CLI and
// Gemini CLI), with the same behaviour as agentscm runs them, in a binary
// that links only what the hook needs, so that the process started on
// every agent tool call starts faster. change-capture configure and enable
// install it in the hook command when it sits next to the agentscm binary.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/agentscm/agentscm/internal/buildinfo"
	"github.com/agentscm/agentscm/internal/hookroute"
	"github.com/agentscm/agentscm/internal/hookrun"
)

const usage = `Usage:
  agentscm-hook --version
  agentscm-hook change-capture hook-claude|hook-codex|hook-gemini [--changelog] < payload.json
  agentscm-hook changelog hook-claude|hook-codex|hook-gemini < payload.json
  agentscm-hook change-capture deliver-spool --config-dir DIR --spool DIR [--lock-fd N]

The agent hooks (Claude Code, Codex CLI, Gemini CLI), exactly as
'agentscm change-capture hook-AGENT' and 'agentscm changelog hook-AGENT'
run them, in a smaller binary that starts faster. With --changelog (the
one entry of an event on which change capture and the changelog are both
on) one process captures the event and then takes the changelog
increment, before it hands delivery on. agentscm
change-capture configure and enable install it in the hook command when it
is next to the agentscm binary. It never blocks the agent: whatever fails,
it prints one warning line on stderr and exits 0. It prints nothing on
stdout, except on a Claude Code SessionStart of a checkout with registered
recipes (the bounded recipe guidance as Claude Code's additional context)
and for a prompt the changelog refuses (the host's blocking answer).

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
// capture, so that admission and delivery are off the hook's critical path
// for every agent.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string, now func() time.Time, exe string) int {
	if r, ok := hookroute.Find(args); ok {
		return hookrun.Run(ctx, r, stdin, stdout, stderr, getenv, now(), hookrun.Options{Exe: exe})
	}
	switch {
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
