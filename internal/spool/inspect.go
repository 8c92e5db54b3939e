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
// reports what it finds. limit bounds each projection (0: default). Each
// name is classified as recovery classifies it (classifyName), so what the
// report predicts is what recovery does.
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
	in := &inspector{dir: dir, limit: limit, s: &Spool{dir: dir, readOnly: true},
		r: &Report{Spool: dir, Completeness: "unknown", ExecutionAuthority: "none", AuthoritySafe: true, Problems: []string{}}}
	r := in.r
	c, _, cerr := readCommit(dir)
	if cerr == nil {
		r.Committed, r.FormatVersion, r.SpoolID = true, c.Version, c.SpoolID
		in.s.commit = c
	} else {
		in.problem("%v", cerr)
	}
	// Identity and authority are the health checks' (SetHealth), the very
	// functions the delivery path calls.
	for _, n := range rootFiles {
		in.count(filepath.Join(dir, n))
	}
	lim, lerr := in.s.readLimits()
	if lerr == nil {
		r.Limits = &lim
	} else if r.Committed {
		in.problem("%v", lerr)
		lim = DefaultLimits()
	} else {
		lim = DefaultLimits()
	}
	in.budget = scanBound(lim)
	in.names("") // the root: temporary files only
	in.outboxAndAcks()
	for _, n := range in.names(artifactsDir) {
		if n.class == nameWellFormed {
			r.Artifacts++
			r.Usage.Records++
			r.Usage.Bytes += n.artBytes
		}
	}
	in.compaction()
	in.queues()
	if in.budget < 0 {
		in.problem("%v", ErrScanBound)
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

// inspector holds one inspection's report while Inspect fills it in.
type inspector struct {
	dir    string
	limit  int
	s      *Spool // read-only
	r      *Report
	budget int
}

func (in *inspector) diag(format string, a ...any) {
	in.r.Diagnostics.add(in.limit, fmt.Sprintf(format, a...))
}

func (in *inspector) problem(format string, a ...any) {
	in.r.Problems = append(in.r.Problems, fmt.Sprintf(format, a...))
}

// count adds the file at path, when it exists, to the usage.
func (in *inspector) count(path string) {
	if fi, err := os.Lstat(path); err == nil {
		in.r.Usage.Records++
		in.r.Usage.Bytes += fi.Size()
	}
}

// names lists sub in name order within the scan budget and classifies
// each name; it counts the temporary files and reports the unexpected
// ones (a directory that does not exist lists nothing).
func (in *inspector) names(sub string) []spoolName {
	names, err := listBounded(filepath.Join(in.dir, sub), &in.budget)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) && !strings.Contains(err.Error(), "no such file") {
			in.problem("%s: %v", sub, err)
		}
		return nil
	}
	sort.Strings(names)
	out := make([]spoolName, 0, len(names))
	for _, n := range names {
		sn := classifyName(sub, n)
		switch {
		case sn.class == nameTemp:
			in.r.Temporary++
		case sn.class == nameUnexpected && sub != "" && sub != compactDir:
			in.diag("%s/%s: unexpected file (%s)", sub, n, unexpectedFate(sub))
		}
		out = append(out, sn)
	}
	return out
}

// outboxAndAcks reports the delivery attempts, the envelopes (pending,
// deferred or acknowledged), the acknowledgements and the pause state.
func (in *inspector) outboxAndAcks() {
	r, s := in.r, in.s
	cur, curErr := s.readCursor()
	if curErr != nil && r.Committed {
		in.diag("cursor: %v", curErr)
	}
	attempts := map[uint64]int{}
	for _, a := range cur.Recent {
		attempts[a.Seq]++
	}
	for i := len(cur.Recent) - 1; i >= 0; i-- {
		r.Attempts.add(in.limit, cur.Recent[i])
	}
	r.Attempts.Omitted += int(cur.AttemptsTotal) - len(cur.Recent)
	r.Attempts.Total = int(cur.AttemptsTotal)

	ackNames := map[uint64]string{}
	for _, n := range in.names(acksDir) {
		in.count(filepath.Join(in.dir, acksDir, n.name))
		if n.class == nameWellFormed {
			ackNames[n.ackSeq] = n.name
		}
	}
	var outbox []outboxEntry
	for _, n := range in.names(outboxDir) {
		if n.class == nameWellFormed {
			outbox = append(outbox, n.outbox)
			r.Usage.Records++
			r.Usage.Bytes += n.outbox.size
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
				in.diag("outbox/%s disappeared during inspection (concurrent compaction)", e.name)
			} else {
				in.diag("outbox/%s: %v", e.name, err)
			}
			continue
		}
		r.Envelopes++
		if n, ok := ackNames[e.seq]; ok {
			d, err := s.readAck(e.seq, n)
			if err != nil {
				r.DeliveryStopped = true
				in.diag("acknowledgement %s: %v; delivery and compaction stop", n, err)
			} else if d == env.Digest {
				r.Acknowledged++
				continue
			} else {
				in.diag("acknowledgement %s names %s, not the envelope digest %s", n, d, env.Digest)
			}
		}
		item := PendingItem{Seq: e.seq, Class: env.Class, Kind: env.Record.Kind, SessionID: env.Record.SessionID, Digest: env.Digest, Attempts: attempts[e.seq]}
		if e.seq <= cur.LastSeq {
			r.Deferred.add(in.limit, item)
		} else {
			r.Pending.add(in.limit, item)
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
				in.diag("acknowledgement %s: %v; delivery and compaction stop", n, err)
			}
		}
	}
}

// compaction reports the compaction indexes and the current one.
func (in *inspector) compaction() {
	r := in.r
	for _, n := range in.names(compactDir) {
		in.count(filepath.Join(in.dir, compactDir, n.name))
		if e := n.index; n.class == nameWellFormed && e.gen >= r.Compaction.Generation {
			r.Compaction.Generation, r.Compaction.HighSeq = e.gen, e.high
			r.Compaction.PendingCleanup = e.pending
		}
	}
	if ix, _, err := in.s.currentIndex(); err == nil {
		r.Compaction.Digests, r.Compaction.Receipts, r.Compaction.Replay = len(ix.Digests), len(ix.Receipts), len(ix.Replay)
		r.Compaction.ReplayBytes, r.Compaction.Runs, r.Compaction.History = ix.replayBytes(), ix.Runs, ix.History
	} else if r.Committed {
		in.diag("compaction index: %v", err)
	}
}

// queues reports the quarantine, the intake and the staged blobs, and
// what the temporary files present mean.
func (in *inspector) queues() {
	r := in.r
	for _, n := range in.names(quarantineDir) {
		fi, err := os.Lstat(filepath.Join(in.dir, quarantineDir, n.name))
		if err != nil {
			continue
		}
		r.Usage.Records++
		r.Usage.Bytes += fi.Size()
		r.Quarantine.add(in.limit, QuarantineEntry{Name: n.name, Bytes: fi.Size(), Mode: fi.Mode().String(), ModTime: fi.ModTime().UTC()})
	}
	for _, n := range in.names(intakeDir) {
		in.count(filepath.Join(in.dir, intakeDir, n.name))
		if n.class == nameWellFormed {
			r.Intake++
		}
	}
	staged := 0
	for _, n := range in.names(stagedDir) {
		in.count(filepath.Join(in.dir, stagedDir, n.name))
		staged++
	}
	if staged > 0 {
		in.diag("%d staged blob file(s) in %s: bytes hooks wrote for events not admitted yet, or debris the next admission with an empty intake removes", staged, stagedDir)
	}
	if r.Intake > 0 {
		in.diag("%d event(s) wait in the intake for the deliverer to admit them (change-capture deliver runs it now)", r.Intake)
	}
	if r.Temporary > 0 {
		in.diag("%d temporary file(s) present: an active writer, or crash debris that the next locked open recovers", r.Temporary)
	}
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
