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
	// A short-lived process holding two manifests: trade memory for less GC work.
	debug.SetGCPercent(400)
	wd, _ := os.Getwd()
	os.Exit(run(ctx, &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, environ: os.Environ(), wd: wd}, os.Args[1:]))
}
