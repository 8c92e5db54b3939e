// Command agentdiff wraps one command in an evidence transaction (a capsule)
// and verifies, inspects and safely rolls back those capsules. See
// docs/agentdiff.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	becomeSubreaper()
	// A short-lived process holding a manifest: trade memory for less GC
	// work, up to a soft limit that keeps a 100,000-file run's peak RSS
	// under 64 MB (docs/performance.md, agentdiff); GOMEMLIMIT overrides it.
	debug.SetGCPercent(400)
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(44 << 20)
	}
	wd, _ := os.Getwd()
	os.Exit(run(ctx, &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, environ: os.Environ(), wd: wd}, os.Args[1:]))
}
