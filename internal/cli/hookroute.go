package cli

import (
	"context"

	"github.com/agentscm/agentscm/internal/hookroute"
	"github.com/agentscm/agentscm/internal/hookrun"
)

// runHookRoute runs hook route r (internal/hookroute) in this process: the
// one hook pipeline (hookrun.Run). When this is the agentscm binary itself
// (watchBinary), the detached deliverer is started from it (`agentscm
// change-capture deliver-spool`), so every agent's capture writes the
// intake and the hook neither delivers nor uploads; a binary standing in
// for agentscm (a test) delivers in-process. It always exits 0, and prints
// on stdout only an answer the host reads.
func runHookRoute(ctx context.Context, env *Env, r hookroute.Route) int {
	return hookrun.Run(ctx, r, env.Stdin, env.Stdout, env.Stderr, env.Getenv, env.Now(),
		hookrun.Options{Exe: watchBinary(env), Watch: changelogWatchSource(env)})
}

// runHookArgs runs the hook route of args (a hook subcommand of the
// command tree, reached when Main's fast path did not take it).
func runHookArgs(ctx context.Context, env *Env, args ...string) {
	if r, ok := hookroute.Find(args); ok {
		runHookRoute(ctx, env, r)
	}
}
