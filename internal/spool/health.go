package spool

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// The health report runs, read-only and without the lock, the very checks
// the delivery path runs under it (the same functions: checkPrivateDirs,
// checkRetainedFiles, checkIdentities, readLimits, checkEvidence, ackedSet,
// readCursor), in the order that path meets them, and names the first that
// fails with the command that fixes it. A report that says "healthy" while
// delivery stops would be worse than none: every condition that stops
// delivery is one check function shared by both.

// Check names, in the order the delivery path meets them.
const (
	CheckCommit           = "commit"
	CheckAuthority        = "authority"
	CheckIdentity         = "identity"
	CheckLimits           = "limits"
	CheckRecovery         = "recovery"
	CheckCompaction       = "compaction"
	CheckEvidence         = "evidence"
	CheckAcknowledgements = "acknowledgements"
	CheckCursor           = "cursor"
	// CheckIntake is added by the capture layer (admission needs the
	// capture ledger and the Hub): an intake file the deliverer could not
	// admit.
	CheckIntake = "intake"
)

// Check is one condition delivery depends on.
type Check struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Problem says what is wrong (empty when OK); Path names the file or
	// directory when one is at fault.
	Problem string `json:"problem,omitempty"`
	Path    string `json:"path,omitempty"`
	// Fix is the command that fixes it, or a sentence saying why there
	// is none.
	Fix string `json:"fix,omitempty"`
}

// Health is the outcome of every check; Failing is the first that fails
// (nil when Healthy).
type Health struct {
	Healthy bool    `json:"healthy"`
	Failing *Check  `json:"failing,omitempty"`
	Checks  []Check `json:"checks"`
}

// Add appends c and keeps Failing and Healthy.
func (h *Health) Add(c Check) {
	h.Checks = append(h.Checks, c)
	if !c.OK && h.Failing == nil {
		cc := c
		h.Failing = &cc
	}
	h.Healthy = h.Failing == nil
}

// String is the one-line form: "CHECK: PROBLEM; fix: FIX".
func (c Check) String() string {
	s := c.Name + ": " + c.Problem
	if c.Fix != "" {
		s += "; fix: " + c.Fix
	}
	return s
}

// healthSettle is how long Inspect waits before it checks a failing spool
// again: it takes no lock, so a writer between two steps (a hard link
// before the temporary name is removed, a marker a compaction removes) may
// be seen half-way once.
const healthSettle = 50 * time.Millisecond

// CheckHealth runs the delivery path's checks on the spool at dir without
// writing or locking. A check that cannot run because an earlier one
// failed (no commit, unreadable limits) is skipped.
func CheckHealth(dir string) Health { return CheckHealthWith(dir, HealthOptions{}) }

// HealthOptions are what the spool alone does not know.
type HealthOptions struct {
	// SummaryPath is where the hook summary is kept (SetSummaryPath): a
	// hook or deliverer that trusts it stops on the malformed marker it
	// remembers, so the check reads it the way they do.
	SummaryPath string
}

// CheckHealthWith is CheckHealth with the hook summary's view.
func CheckHealthWith(dir string, o HealthOptions) Health {
	h := checkHealth(dir, o)
	if !h.Healthy {
		time.Sleep(healthSettle)
		h = checkHealth(dir, o)
	}
	return h
}

func checkHealth(dir string, o HealthOptions) Health {
	h := Health{Healthy: true, Checks: []Check{}}
	repair := fmt.Sprintf("agentscm change-capture repair --spool %s", dir)
	c, sum, cerr := readCommit(dir)
	if cerr != nil {
		h.Add(Check{Name: CheckCommit, Problem: cerr.Error(), Path: filepath.Join(dir, commitFile),
			Fix: "none: agentscm never repairs or migrates a spool without its commit; enable capture with a new spool (change-capture enable --root ROOT --spool NEW)"})
	} else {
		h.Add(Check{Name: CheckCommit, OK: true})
	}
	s := &Spool{dir: dir, readOnly: true, commit: c, commitSum: sum}

	// Authority: what opening the spool (checkRetainedFiles) and every
	// lock acquisition (revalidate: checkPrivateDirs) check. It is checked
	// (and reported) without a commit too.
	if err := checkPrivateDirs(dir); err != nil {
		h.Add(authorityCheck(CheckAuthority, dir, err))
	} else if err := s.checkRetainedFiles(); err != nil && cerr == nil {
		h.Add(authorityCheck(CheckAuthority, dir, err))
	} else {
		h.Add(Check{Name: CheckAuthority, OK: true})
	}
	if cerr != nil {
		return h
	}

	lock, err := os.Lstat(filepath.Join(dir, spoolLockFile))
	if err == nil {
		err = checkIdentities(dir, c, lock)
	}
	if err != nil {
		h.Add(Check{Name: CheckIdentity, Problem: err.Error(),
			Fix: "none: agentscm never repairs a replaced or restored spool; export it (change-capture export) and enable capture with a new spool"})
	} else {
		h.Add(Check{Name: CheckIdentity, OK: true})
	}

	lim, err := s.readLimits()
	if err != nil {
		h.Add(Check{Name: CheckLimits, Problem: err.Error(), Path: filepath.Join(dir, limitsFile),
			Fix: "none: agentscm never repairs a damaged limits file; export the spool (change-capture export) and enable capture with a new spool"})
		return h
	}
	h.Add(Check{Name: CheckLimits, OK: true})

	// Recovery's scan: the fixed files present, every directory listed
	// within the scan bound, a compaction index.
	st, pendingIndex, err := s.listEvidence(lim)
	if err == nil {
		for _, n := range rootFiles {
			if _, lerr := os.Lstat(filepath.Join(dir, n)); lerr != nil {
				err = fmt.Errorf("%w: %s: %v", ErrDamaged, n, lerr)
				break
			}
		}
	}
	if err == nil && st.index.name == "" {
		err = fmt.Errorf("%w: no compaction index", ErrDamaged)
	}
	if err != nil {
		fix := "none: agentscm never repairs a damaged layout; export the spool (change-capture export) and enable capture with a new spool"
		if errors.Is(err, ErrScanBound) {
			fix = "none known: the spool holds more entries than recovery scans; remove the files that are not agentscm's"
		}
		h.Add(Check{Name: CheckRecovery, Problem: err.Error() + "; every lock holder stops", Fix: fix})
		return h
	}
	h.Add(Check{Name: CheckRecovery, OK: true})
	// An interrupted compaction (pendingIndex) does not stop delivery:
	// recovery completes it before it lists the outbox and the
	// acknowledgements, under the next lock holder's acquisition, as the
	// delivery path runs it. What a trusted hook summary remembers of a
	// marker the cleanup removed is the acknowledgements check's.
	_ = pendingIndex
	h.Add(Check{Name: CheckCompaction, OK: true})

	if err := s.checkEvidence(st); err != nil {
		h.Add(authorityCheck(CheckEvidence, dir, err))
	} else {
		h.Add(Check{Name: CheckEvidence, OK: true})
	}

	if _, err := s.ackedSet(st); err != nil {
		h.Add(Check{Name: CheckAcknowledgements, Problem: err.Error() + "; delivery and compaction stop", Fix: repair})
	} else if name := s.summaryMalformedAck(o.SummaryPath, lim); name != "" {
		h.Add(Check{Name: CheckAcknowledgements, Path: filepath.Join(dir, acksDir, name),
			Problem: fmt.Sprintf("%v: %s: the hook summary the hooks and the deliverer trust remembers it, so every delivery attempt stops on it until a full scan rebuilds the summary", ErrMalformedAck, name),
			Fix:     repair})
	} else {
		h.Add(Check{Name: CheckAcknowledgements, OK: true})
	}

	if _, err := s.readCursor(); err != nil {
		h.Add(Check{Name: CheckCursor, Problem: err.Error() + "; delivery stops", Path: filepath.Join(dir, cursorFile), Fix: repair})
	} else {
		h.Add(Check{Name: CheckCursor, OK: true})
	}
	return h
}

// summaryMalformedAck is the malformed marker a trusted hook summary at
// path makes every Pending stop on (pendingIndexed), decided by the same
// fastState the hook's acquisition runs: "" when there is no trusted
// summary or it remembers none.
func (s *Spool) summaryMalformedAck(path string, lim Limits) string {
	if path == "" {
		return ""
	}
	r := &Spool{dir: s.dir, readOnly: true, commit: s.commit, commitSum: s.commitSum, summaryPath: path}
	sr, size, err := r.readSummary()
	if err != nil {
		return ""
	}
	st, err := r.fastState(sr, size, r.bootID(), lim)
	if err != nil || st == nil {
		return ""
	}
	return st.malformedAck
}

// listEvidence lists the outbox, acknowledgements and artifacts into a
// state for checkEvidence and ackedSet, as recovery does, and returns the
// name of a pending (interrupted) compaction index, if any.
func (s *Spool) listEvidence(lim Limits) (*state, string, error) {
	st := &state{limits: lim, acks: map[uint64]string{}, artifacts: map[string]int64{}}
	budget := scanBound(lim)
	list := func(sub string) ([]string, error) {
		names, err := listBounded(filepath.Join(s.dir, sub), &budget)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return names, err
	}
	names, err := list(outboxDir)
	if err != nil {
		return nil, "", err
	}
	for _, n := range names {
		if e, ok := parseOutboxName(n); ok {
			st.outbox = append(st.outbox, e)
		}
	}
	if names, err = list(acksDir); err != nil {
		return nil, "", err
	}
	for _, n := range names {
		if seq, ok := parseAckName(n); ok {
			st.acks[seq] = n
		}
	}
	if names, err = list(artifactsDir); err != nil {
		return nil, "", err
	}
	for _, n := range names {
		if d, size, ok := parseArtifactName(n); ok {
			st.artifacts[d] = size
		}
	}
	if names, err = list(compactDir); err != nil {
		return nil, "", err
	}
	var idx []indexEntry
	for _, n := range names {
		if e, ok := parseIndexName(n); ok {
			idx = append(idx, e)
		}
	}
	sort.Slice(idx, func(i, j int) bool {
		if idx[i].gen != idx[j].gen {
			return idx[i].gen < idx[j].gen
		}
		return !idx[i].pending && idx[j].pending
	})
	if len(idx) > 0 {
		st.index = idx[len(idx)-1]
	}
	pending := ""
	// recoverIndex's rule: the newest generation's .pending index is an
	// interrupted compaction unless a committed index of that generation
	// exists too.
	if n := len(idx); n > 0 && idx[n-1].pending && (n == 1 || idx[n-2].gen != idx[n-1].gen) {
		pending = idx[n-1].name
	}
	return st, pending, nil
}

// authorityCheck turns an authority failure into a check with the command
// that fixes it. agentscm never changes ownership or modes itself: the
// user runs chown or chmod; a file with a second hard link is replaced by
// a private copy by change-capture repair.
func authorityCheck(name, dir string, err error) Check {
	c := Check{Name: name, Problem: err.Error() + "; delivery stops"}
	var ae *AuthorityError
	if !errors.As(err, &ae) {
		c.Fix = "none known: see the problem"
		return c
	}
	c.Path = ae.Path
	var st syscall.Stat_t
	if err := syscall.Lstat(ae.Path, &st); err != nil {
		c.Fix = "none known: " + err.Error()
		return c
	}
	euid := os.Geteuid()
	typ := st.Mode & syscall.S_IFMT
	isDir := typ == syscall.S_IFDIR
	if !isDir && typ != syscall.S_IFREG {
		c.Fix = fmt.Sprintf("mv %s %s/ (it is not spool data; the quarantine keeps it until prune-quarantine)", shellQuote(ae.Path), shellQuote(filepath.Join(dir, quarantineDir)))
		return c
	}
	var cmds []string
	if int(st.Uid) != euid {
		sudo := ""
		if euid != 0 {
			sudo = "sudo "
		}
		cmds = append(cmds, fmt.Sprintf("%schown %d %s", sudo, euid, shellQuote(ae.Path)))
	}
	if fs.FileMode(st.Mode).Perm()&0o077 != 0 {
		mode := "600"
		if isDir {
			mode = "700"
		}
		cmds = append(cmds, fmt.Sprintf("chmod %s %s", mode, shellQuote(ae.Path)))
	}
	if len(cmds) == 0 && !isDir && st.Nlink > 1 {
		cmds = append(cmds, "agentscm change-capture repair --spool "+shellQuote(dir))
	}
	if len(cmds) == 0 {
		c.Fix = "none known: see the problem"
		return c
	}
	c.Fix = strings.Join(cmds, " && ")
	return c
}

// shellQuote quotes p for a POSIX shell when it needs it.
func shellQuote(p string) string {
	if p != "" && strings.IndexFunc(p, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+=:,@", r))
	}) < 0 {
		return p
	}
	return "'" + strings.ReplaceAll(p, "'", `'\''`) + "'"
}

// Unacknowledged returns every retained envelope of the spool at dir that
// no acknowledgement marker with its exact digest hides, in sequence
// order, without writing or locking (a snapshot, as Inspect). Unreadable
// envelopes are skipped (recovery quarantines them).
func Unacknowledged(dir string) ([]Envelope, error) {
	if err := checkAbs(dir); err != nil {
		return nil, err
	}
	s := &Spool{dir: dir, readOnly: true}
	lim, err := s.readLimits()
	if err != nil {
		return nil, err
	}
	st, _, err := s.listEvidence(lim)
	if err != nil {
		return nil, err
	}
	var out []Envelope
	for _, e := range st.sortOutbox() {
		env, err := s.readEnvelopeFile(e)
		if err != nil {
			continue
		}
		if n, ok := st.acks[e.seq]; ok {
			if d, err := s.readAck(e.seq, n); err == nil && d == env.Digest {
				continue
			}
		}
		out = append(out, *env)
	}
	return out, nil
}

// WaitingFile is one installed intake file waiting for admission.
type WaitingFile struct {
	Name       string    `json:"name"`
	ReceivedAt time.Time `json:"received_at"`
}

// WaitingIntake lists the installed intake files of the spool at dir in
// receipt order (the order admission takes them), without writing or
// locking.
func WaitingIntake(dir string) ([]WaitingFile, error) {
	if err := checkAbs(dir); err != nil {
		return nil, err
	}
	s := &Spool{dir: dir, readOnly: true}
	budget := MaxIntakeFiles*2 + 256
	es, _, _, err := s.listIntake(&budget)
	if err != nil {
		return nil, err
	}
	out := make([]WaitingFile, 0, len(es))
	for _, e := range es {
		out = append(out, WaitingFile{Name: e.name, ReceivedAt: time.Unix(0, e.ns).UTC()})
	}
	return out, nil
}
