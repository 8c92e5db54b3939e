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
	// A short-lived process holding a manifest: the collector runs only
	// when the heap nears a soft limit that keeps a 100,000-file run's peak
	// RSS under 64 MB (docs/performance.md, agentdiff). The limit sits above
	// that run's live peak (about 47 MB: the listing and the parsed base at
	// once), where every collection before it finds little to free: with
	// GOGC=400 and 52 MiB a run spent about 70 ms of its 430 ms of CPU on
	// two or three collections; with 44 MiB, five. GOGC and GOMEMLIMIT
	// override this; with GOMEMLIMIT set and GOGC unset, GOGC is 400.
	_, gogc := os.LookupEnv("GOGC")
	_, memlimit := os.LookupEnv("GOMEMLIMIT")
	switch {
	case !memlimit:
		debug.SetMemoryLimit(52 << 20)
		if !gogc {
			debug.SetGCPercent(-1)
		}
	case !gogc:
		debug.SetGCPercent(400)
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
