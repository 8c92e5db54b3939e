// Command agentdiff wraps one command in an evidence transaction (a capsule)
// and verifies, inspects and safely rolls back those capsules. See
// docs/agentdiff.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	becomeSubreaper()
	// A short-lived process holding a manifest: trade memory for less GC
	// work, up to a soft limit that keeps a 100,000-file run's peak RSS
	// under 64 MB (docs/performance.md, agentdiff); GOMEMLIMIT overrides it.
	// The limit sits above that run's live peak (about 47 MB: the listing
	// and the parsed base at once), so the collector does not run cycle
	// after cycle that cannot free anything (44 MiB: five cycles a run).
	debug.SetGCPercent(400)
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(52 << 20)
	}
	// Hidden, for measuring (docs/performance.md, agentdiff): a CPU profile
	// of the whole command written to this file.
	stopProfile := func() {}
	if p := os.Getenv("AGENTDIFF_CPUPROFILE"); p != "" {
		if f, err := os.Create(p); err != nil {
			fmt.Fprintln(os.Stderr, "agentdiff: AGENTDIFF_CPUPROFILE:", err)
		} else if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "agentdiff: AGENTDIFF_CPUPROFILE:", err)
			f.Close()
		} else {
			stopProfile = func() { pprof.StopCPUProfile(); f.Close() }
		}
	}
	wd, _ := os.Getwd()
	code := run(ctx, &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, environ: os.Environ(), wd: wd}, os.Args[1:])
	stopProfile()
	os.Exit(code)
}
