package spool

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/fsutil"
)

// DefaultProjection bounds each projection of an inspection report.
const DefaultProjection = 20

// Projection is a bounded list with an explicit count of what it omits.
type Projection[T any] struct {
	Items   []T `json:"items"`
	Total   int `json:"total"`
	Omitted int `json:"omitted"`
}

func (p *Projection[T]) add(limit int, v T) {
	p.Total++
	if len(p.Items) < limit {
		p.Items = append(p.Items, v)
	} else {
		p.Omitted++
	}
}

// PendingItem is one envelope awaiting delivery.
type PendingItem struct {
	Seq       uint64     `json:"seq"`
	Class     string     `json:"class"`
	Kind      event.Kind `json:"kind"`
	SessionID string     `json:"session_id,omitempty"`
	Digest    string     `json:"digest"`
	Attempts  int        `json:"attempts"`
}

// Report is a bounded, read-only classification of a spool. It reports
// unknown completeness and grants no execution authority.
type Report struct {
	Spool              string `json:"spool"`
	Completeness       string `json:"completeness"`
	ExecutionAuthority string `json:"execution_authority"`

	Committed       bool     `json:"committed"`
	FormatVersion   int      `json:"format_version,omitempty"`
	SpoolID         string   `json:"spool_id,omitempty"`
	IdentityMatches bool     `json:"identity_matches"`
	AuthoritySafe   bool     `json:"authority_safe"`
	Problems        []string `json:"problems"`
	// Health runs the delivery path's own checks (ownership, modes, link
	// counts, identities, limits, an interrupted compaction,
	// acknowledgements, the cursor) and names the first that fails with
	// the command that fixes it. A failing check sets DeliveryStopped and
	// adds a problem; an authority or evidence failure clears
	// AuthoritySafe.
	Health Health `json:"health"`

	Limits *Limits `json:"limits,omitempty"`
	Usage  Usage   `json:"usage"`
	// UsageFraction is Usage as a fraction of each limit (when the limits
	// are readable).
	UsageFraction   *Fractions `json:"usage_fraction,omitempty"`
	AboveCap        bool       `json:"above_cap"`
	Paused          bool       `json:"capture_paused"`
	DeliveryStopped bool       `json:"delivery_stopped"`

	Envelopes    int `json:"envelopes"`
	Acknowledged int `json:"acknowledged"`
	Artifacts    int `json:"artifacts"`
	Temporary    int `json:"temporary_files"`
	// Intake counts the events hooks wrote durably that the deliverer (or
	// the next spool lock holder) has not admitted yet (counted in Usage).
	Intake int `json:"intake"`

	Pending     Projection[PendingItem]     `json:"pending"`
	Deferred    Projection[PendingItem]     `json:"deferred"`
	Quarantine  Projection[QuarantineEntry] `json:"quarantine"`
	Attempts    Projection[Attempt]         `json:"attempts"`
	Diagnostics Projection[string]          `json:"diagnostics"`

	Compaction struct {
		Generation     uint64 `json:"generation"`
		HighSeq        uint64 `json:"high_seq"`
		Digests        int    `json:"digests"`
		Receipts       int    `json:"receipts"`
		Replay         int    `json:"replay"`
		PendingCleanup bool   `json:"pending_cleanup"`
		// ReplayLimit and ReplayBytes/ReplayBytesLimit show how full the
		// replay index is.
		ReplayLimit      int64 `json:"replay_limit,omitempty"`
		ReplayBytes      int64 `json:"replay_bytes"`
		ReplayBytesLimit int64 `json:"replay_bytes_limit,omitempty"`
		// Runs counts compactions that changed the spool; History lists
		// the newest of them, manual or automatic (by policy).
		Runs    uint64          `json:"runs"`
		History []CompactionRun `json:"history"`
	} `json:"compaction"`
}

// Inspect classifies the spool at dir without writing, locking or requiring
// safe authority: it works on uncommitted, damaged or unsafe spools too and
// reports what it finds. limit bounds each projection (0: default).
func Inspect(dir string, limit int) (*Report, error) {
	if err := checkAbs(dir); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = DefaultProjection
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("inspect: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("inspect: %s is not a directory", dir)
	}
	r := &Report{Spool: dir, Completeness: "unknown", ExecutionAuthority: "none", AuthoritySafe: true, Problems: []string{}}
	diag := func(format string, a ...any) { r.Diagnostics.add(limit, fmt.Sprintf(format, a...)) }
	problem := func(format string, a ...any) { r.Problems = append(r.Problems, fmt.Sprintf(format, a...)) }

	s := &Spool{dir: dir, readOnly: true}
	c, _, cerr := readCommit(dir)
	if cerr == nil {
		r.Committed, r.FormatVersion, r.SpoolID = true, c.Version, c.SpoolID
		s.commit = c
	} else {
		problem("%v", cerr)
	}
	// Identity and authority are the health checks' (SetHealth), the very
	// functions the delivery path calls.
	for _, n := range rootFiles {
		if fi, err := os.Lstat(filepath.Join(dir, n)); err == nil {
			r.Usage.Records++
			r.Usage.Bytes += fi.Size()
		}
	}
	lim, lerr := s.readLimits()
	if lerr == nil {
		r.Limits = &lim
	} else if r.Committed {
		problem("%v", lerr)
		lim = DefaultLimits()
	} else {
		lim = DefaultLimits()
	}
	budget := scanBound(lim)
	list := func(sub string) []string {
		names, err := listBounded(filepath.Join(dir, sub), &budget)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) && !strings.Contains(err.Error(), "no such file") {
				problem("%s: %v", sub, err)
			}
			return nil
		}
		sort.Strings(names)
		return names
	}
	for _, n := range list("") {
		if strings.HasPrefix(n, fsutil.TempPrefix) {
			r.Temporary++
		}
	}

	cur, curErr := s.readCursor()
	if curErr != nil && r.Committed {
		diag("cursor: %v", curErr)
	}
	attempts := map[uint64]int{}
	for _, a := range cur.Recent {
		attempts[a.Seq]++
	}
	for i := len(cur.Recent) - 1; i >= 0; i-- {
		r.Attempts.add(limit, cur.Recent[i])
	}
	r.Attempts.Omitted += int(cur.AttemptsTotal) - len(cur.Recent)
	r.Attempts.Total = int(cur.AttemptsTotal)

	ackNames := map[uint64]string{}
	for _, n := range list(acksDir) {
		fi, _ := os.Lstat(filepath.Join(dir, acksDir, n))
		if fi != nil {
			r.Usage.Records++
			r.Usage.Bytes += fi.Size()
		}
		if seq, ok := parseAckName(n); ok {
			ackNames[seq] = n
		} else if strings.HasPrefix(n, fsutil.TempPrefix) {
			r.Temporary++
		} else {
			diag("acks/%s: unexpected file (recovery will quarantine it)", n)
		}
	}
	var outbox []outboxEntry
	for _, n := range list(outboxDir) {
		if e, ok := parseOutboxName(n); ok {
			outbox = append(outbox, e)
			r.Usage.Records++
			r.Usage.Bytes += e.size
		} else if strings.HasPrefix(n, fsutil.TempPrefix) {
			r.Temporary++
		} else {
			diag("outbox/%s: unexpected file (recovery will quarantine it)", n)
		}
	}
	var lastOrdinary, lastPause uint64
	for _, e := range outbox {
		switch e.class {
		case classEvent, classStart:
			lastOrdinary = e.seq
		case classPause:
			lastPause = e.seq
		}
		env, err := s.readEnvelopeFile(e)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				diag("outbox/%s disappeared during inspection (concurrent compaction)", e.name)
			} else {
				diag("outbox/%s: %v", e.name, err)
			}
			continue
		}
		r.Envelopes++
		if n, ok := ackNames[e.seq]; ok {
			d, err := s.readAck(e.seq, n)
			if err != nil {
				r.DeliveryStopped = true
				diag("acknowledgement %s: %v; delivery and compaction stop", n, err)
			} else if d == env.Digest {
				r.Acknowledged++
				continue
			} else {
				diag("acknowledgement %s names %s, not the envelope digest %s", n, d, env.Digest)
			}
		}
		item := PendingItem{Seq: e.seq, Class: env.Class, Kind: env.Record.Kind, SessionID: env.Record.SessionID, Digest: env.Digest, Attempts: attempts[e.seq]}
		if e.seq <= cur.LastSeq {
			r.Deferred.add(limit, item)
		} else {
			r.Pending.add(limit, item)
		}
	}
	r.Paused = lastPause > lastOrdinary
	for seq, n := range ackNames {
		found := false
		for _, e := range outbox {
			if e.seq == seq {
				found = true
				break
			}
		}
		if !found {
			if _, err := s.readAck(seq, n); err != nil {
				r.DeliveryStopped = true
				diag("acknowledgement %s: %v; delivery and compaction stop", n, err)
			}
		}
	}
	for _, n := range list(artifactsDir) {
		if _, size, ok := parseArtifactName(n); ok {
			r.Artifacts++
			r.Usage.Records++
			r.Usage.Bytes += size
		} else if strings.HasPrefix(n, fsutil.TempPrefix) {
			r.Temporary++
		} else {
			diag("artifacts/%s: unexpected file (recovery will quarantine it)", n)
		}
	}
	for _, n := range list(compactDir) {
		fi, _ := os.Lstat(filepath.Join(dir, compactDir, n))
		if fi != nil {
			r.Usage.Records++
			r.Usage.Bytes += fi.Size()
		}
		if e, ok := parseIndexName(n); ok {
			if e.gen >= r.Compaction.Generation {
				r.Compaction.Generation, r.Compaction.HighSeq = e.gen, e.high
				r.Compaction.PendingCleanup = e.pending
			}
		} else if strings.HasPrefix(n, fsutil.TempPrefix) {
			r.Temporary++
		}
	}
	if ix, _, err := s.currentIndex(); err == nil {
		r.Compaction.Digests, r.Compaction.Receipts, r.Compaction.Replay = len(ix.Digests), len(ix.Receipts), len(ix.Replay)
		r.Compaction.ReplayBytes, r.Compaction.Runs, r.Compaction.History = ix.replayBytes(), ix.Runs, ix.History
	} else if r.Committed {
		diag("compaction index: %v", err)
	}
	for _, n := range list(quarantineDir) {
		fi, err := os.Lstat(filepath.Join(dir, quarantineDir, n))
		if err != nil {
			continue
		}
		r.Usage.Records++
		r.Usage.Bytes += fi.Size()
		r.Quarantine.add(limit, QuarantineEntry{Name: n, Bytes: fi.Size(), Mode: fi.Mode().String(), ModTime: fi.ModTime().UTC()})
	}
	for _, n := range list(intakeDir) {
		if fi, err := os.Lstat(filepath.Join(dir, intakeDir, n)); err == nil {
			r.Usage.Records++
			r.Usage.Bytes += fi.Size()
		}
		if _, ok := parseIntakeName(n); ok {
			r.Intake++
		} else if strings.HasPrefix(n, fsutil.TempPrefix) {
			r.Temporary++
		} else {
			diag("intake/%s: unexpected file (the next lock holder will quarantine it)", n)
		}
	}
	staged := 0
	for _, n := range list(stagedDir) {
		if fi, err := os.Lstat(filepath.Join(dir, stagedDir, n)); err == nil {
			r.Usage.Records++
			r.Usage.Bytes += fi.Size()
		}
		staged++
	}
	if staged > 0 {
		diag("%d staged blob file(s) in %s: bytes hooks wrote for events not admitted yet, or debris the next admission with an empty intake removes", staged, stagedDir)
	}
	if r.Intake > 0 {
		diag("%d event(s) wait in the intake for the deliverer to admit them (change-capture deliver runs it now)", r.Intake)
	}
	if r.Temporary > 0 {
		diag("%d temporary file(s) present: an active writer, or crash debris that the next locked open recovers", r.Temporary)
	}
	if budget < 0 {
		problem("%v", ErrScanBound)
	}
	if r.Limits != nil {
		r.AboveCap = r.Usage.Records > lim.Records-HeadroomRecords || r.Usage.Bytes > lim.Bytes-HeadroomBytes
		f := FractionsOf(r.Usage, lim)
		r.UsageFraction = &f
		r.Compaction.ReplayLimit, r.Compaction.ReplayBytesLimit = lim.ReplayEntries, lim.ReplayBytes
	}
	if r.Compaction.History == nil {
		r.Compaction.History = []CompactionRun{}
	}
	r.SetHealth(CheckHealth(dir))
	return r, nil
}

// SetHealth records h as the report's health: a failing check stops
// delivery, is the report's one "delivery stopped: ..." problem (replacing
// an earlier one), and an authority or evidence failure makes authority
// unsafe. The capture layer calls it with the health that includes the hook
// summary's view and intake admission.
func (r *Report) SetHealth(h Health) {
	r.Health = h
	r.IdentityMatches = r.Committed
	for _, c := range h.Checks {
		switch {
		case c.OK:
		case c.Name == CheckIdentity:
			r.IdentityMatches = false
		case c.Name == CheckAuthority || c.Name == CheckEvidence:
			r.AuthoritySafe = false
		}
	}
	kept := r.Problems[:0]
	for _, p := range r.Problems {
		if !strings.HasPrefix(p, deliveryStoppedProblem) {
			kept = append(kept, p)
		}
	}
	r.Problems = kept
	f := h.Failing
	if f == nil {
		return
	}
	r.DeliveryStopped = true
	if f.Name != CheckCommit {
		r.Problems = append(r.Problems, deliveryStoppedProblem+f.String())
	}
}

const deliveryStoppedProblem = "delivery stopped: "
