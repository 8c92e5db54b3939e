package spool

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Quarantine lists the quarantined files (read-only, bounded by the scan
// bound). It works on a read-only spool too.
func (s *Spool) Quarantine() ([]QuarantineEntry, error) {
	budget := scanBound(DefaultLimits())
	if l, err := s.readLimits(); err == nil {
		budget = scanBound(l)
	}
	dir := filepath.Join(s.dir, quarantineDir)
	names, err := listBounded(dir, &budget)
	if err != nil {
		return nil, err
	}
	out := make([]QuarantineEntry, 0, len(names))
	for _, n := range names {
		fi, err := os.Lstat(filepath.Join(dir, n))
		if err != nil {
			continue
		}
		out = append(out, QuarantineEntry{Name: n, Bytes: fi.Size(), Mode: fi.Mode().String(), ModTime: fi.ModTime().UTC()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// PruneQuarantine deletes exactly the named quarantine entries, under the
// spool lock. Every name must be a plain name present in the quarantine;
// otherwise nothing is deleted.
func (s *Spool) PruneQuarantine(ctx context.Context, names []string) ([]string, error) {
	if len(names) == 0 {
		return nil, fmt.Errorf("prune-quarantine: no names given")
	}
	g, err := s.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer g.release()
	present := map[string]bool{}
	for _, q := range g.st.quarantine {
		present[q.Name] = true
	}
	for _, n := range names {
		if n == "" || n == "." || n == ".." || strings.ContainsRune(n, '/') || !present[n] {
			return nil, fmt.Errorf("prune-quarantine: %q: %w in the quarantine (nothing was deleted)", n, ErrNotFound)
		}
	}
	dir := filepath.Join(s.dir, quarantineDir)
	var done []string
	for _, n := range names {
		if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
			return done, fmt.Errorf("prune-quarantine %s: %w", n, err)
		}
		done = append(done, n)
	}
	return done, s.syncDir(dir)
}

// Recover runs recovery explicitly and also validates every envelope's
// content, quarantining malformed ones. It returns what it did.
func (s *Spool) Recover(ctx context.Context) (*RecoveryReport, error) {
	g, err := s.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer g.release()
	st := g.st
	if err := s.checkEvidence(st); err != nil {
		return nil, err
	}
	for d, size := range st.artifacts {
		n := artifactName(d, size)
		if fi, err := os.Lstat(filepath.Join(s.dir, artifactsDir, n)); err == nil && fi.Size() != size {
			if err := s.quarantine(st, artifactsDir, n); err != nil {
				return nil, err
			}
		}
	}
	for _, e := range st.outbox {
		if _, err := s.readEnvelopeFile(e); err != nil {
			if qerr := s.quarantine(st, outboxDir, e.name); qerr != nil {
				return nil, qerr
			}
		}
	}
	return &st.report, nil
}

// Status is a locked snapshot of usage and limits.
type Status struct {
	Limits Limits `json:"limits"`
	Usage  Usage  `json:"usage"`
	// Fraction is Usage as a fraction of each limit.
	Fraction Fractions      `json:"usage_fraction"`
	MaxSeq   uint64         `json:"max_seq"`
	Paused   bool           `json:"paused"`
	Report   RecoveryReport `json:"recovery"`
}

// Status acquires the spool (running recovery) and reports usage.
func (s *Spool) Status(ctx context.Context) (*Status, error) {
	g, err := s.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer g.release()
	st := g.st
	return &Status{Limits: st.limits, Usage: st.usage, Fraction: FractionsOf(st.usage, st.limits), MaxSeq: st.maxSeq, Paused: st.lastPause > st.lastOrdinary, Report: st.report}, nil
}
