// Command agentscm-hook-intake is the Claude Code capture hook's intake
// path alone: `change-capture hook-claude`, exactly as agentscm-hook runs
// it, in a binary that links neither the Hub's store and client nor the
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
)

const usage = `Usage:
  agentscm-hook-intake --version
  agentscm-hook-intake change-capture hook-claude < payload.json

The Claude Code capture hook, exactly as 'agentscm-hook change-capture
hook-claude' runs it, in a smaller binary that starts faster: it writes the
event durably into the spool's intake and starts the detached deliverer
from agentscm-hook, which must sit in the same directory. An event that
needs the Hub in the hook (the intake is full or cannot be written) is run
by agentscm-hook instead, with the same payload. It never blocks the agent:
whatever fails, it prints one warning line on stderr and exits 0. It prints
nothing on stdout, except on a SessionStart of a checkout with registered
recipes: then exactly the bounded recipe guidance as Claude Code's
additional context.
`

func main() {
	full := hookfile.HookBinary
	if exe, err := os.Executable(); err == nil {
		full = filepath.Join(filepath.Dir(exe), hookfile.HookBinary)
	}
	os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv, time.Now, full))
}

// run is the command; full is the agentscm-hook binary it hands the
// deliverer and every event that needs the Hub to.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string, now func() time.Time, full string) int {
	switch {
	case len(args) == 2 && args[0] == "change-capture" && args[1] == "hook-claude":
		return hookcore.IntakeHook(ctx, stdin, stdout, stderr, getenv, now(), full)
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
