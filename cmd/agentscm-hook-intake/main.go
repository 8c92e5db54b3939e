// Command agentscm-hook-intake is the capture hooks' intake path alone:
// the capture-only routes of the route table (internal/hookroute:
// `change-capture hook-AGENT`), exactly as agentscm-hook runs them, in a
// binary that links neither the Hub's store and client nor the
// changelog, so that the process Claude Code starts on each event whose
// capture runs without the changelog (PreToolUse, SessionStart, ...)
// starts faster. change-capture configure and enable install it on those
// events when it sits next to agentscm-hook, which it hands the rest to:
// the detached deliverer, and any event that needs the Hub in the hook.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/agentscm/agentscm/internal/agent/hookfile"
	"github.com/agentscm/agentscm/internal/buildinfo"
	"github.com/agentscm/agentscm/internal/hookcore"
	"github.com/agentscm/agentscm/internal/hookroute"
)

const usage = `Usage:
  agentscm-hook-intake --version
  agentscm-hook-intake change-capture hook-claude|hook-codex|hook-gemini < payload.json

The capture hook, exactly as 'agentscm-hook change-capture hook-AGENT'
runs it, in a smaller binary that starts faster: it writes the
event durably into the spool's intake and starts the detached deliverer
from agentscm-hook, which must sit in the same directory. An event that
needs the Hub in the hook (the intake is full or cannot be written) is run
by agentscm-hook instead, with the same payload, as is every route that
runs the changelog. It never blocks the agent:
whatever fails, it prints one warning line on stderr and exits 0. It prints
nothing on stdout, except on a Claude Code SessionStart of a checkout with
registered recipes: then exactly the bounded recipe guidance as Claude
Code's additional context.
`

func main() {
	full := hookfile.HookBinary
	if exe, err := os.Executable(); err == nil {
		full = filepath.Join(filepath.Dir(exe), hookfile.HookBinary)
	}
	os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv, time.Now, full))
}

// run is the command; full is the agentscm-hook binary it hands the
// deliverer, every event that needs the Hub and every route that runs the
// changelog to.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string, now func() time.Time, full string) int {
	if r, ok := hookroute.Find(args); ok {
		if r.Parts == (hookroute.Parts{Capture: true}) {
			return hookcore.IntakeHook(ctx, r, stdin, stdout, stderr, getenv, now(), full)
		}
		// The changelog is not linked here: the full hook binary runs the
		// route, with the payload still unread on stdin.
		return hookcore.ExecRoute(full, r, stderr)
	}
	switch {
	case len(args) == 1 && args[0] == "--version":
		fmt.Fprintln(stdout, buildinfo.Version("agentscm-hook-intake"))
		return 0
	case len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help"):
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprint(stderr, usage)
	return 2
}
