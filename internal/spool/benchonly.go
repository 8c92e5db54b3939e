//go:build agentscm_bench

package spool

import "context"

// This file exists only in builds with the agentscm_bench tag (bench/
// harnesses that populate large spools in-process); no shipped binary has
// these.

// BenchNoSync skips fsync while a benchmark populates a spool.
func (s *Spool) BenchNoSync(v bool) { s.noSync = v }

// BenchSetLimits rewrites the limits of an existing spool under its lock
// (one-step enable creates default limits, which cannot hold the large
// retained histories some benchmarks need).
func (s *Spool) BenchSetLimits(ctx context.Context, l Limits) error {
	g, err := s.acquire(ctx)
	if err != nil {
		return err
	}
	defer g.release()
	l = l.withDefaults()
	return s.writeReplace(s.dir, limitsFile, encodeFrame(typeLimits, "limits", mustJSON(l)), "limits")
}
