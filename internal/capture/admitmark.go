package capture

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/spool"
)

// The admission mark makes the admission of an intake file resumable after
// a crash at any point. Before the lock holder admits a file it writes, in
// the ledger directory, the file's name, the spool's highest sequence at
// that moment (the floor) and the attempt number; after an event without
// provider identity reserved its sequence, the mark also keeps that
// reserved route. A holder that finds the mark naming the file it is
// about to admit knows an earlier admission of it was cut off: it re-runs
// the same steps with the spool Session resuming above the floor
// (spool.Tx.ResumeAfter: what the earlier attempt appended is found,
// not appended again), under the claim's or the mark's original route and
// sequence, so the file is admitted exactly once (event, gaps, action
// receipt). A file whose admission failed maxAdmitAttempts times (a crash
// each time, or an error; not an attempt its holder's own deadline cut
// off) is moved into the spool's quarantine and an
// admission_failed capture_interrupted gap names it, under its target and
// sequence when known: it never blocks the files behind it.
//
// The mark is derived state outside the spool (admitMarkName in the ledger
// directory, under the ledger lock the holder holds), rewritten in place:
// one pwrite of a fixed-size record (its JSON padded with spaces), no
// rename and no fsync, so it costs microseconds per admitted file where a
// rename cost about 2 ms on a loaded disk. A process crash cannot tear one
// small write; a machine crash can lose or tear it, and a mark that does
// not decode is no mark: the file is then re-admitted as new (what happened
// before this mark existed).
const (
	admitMarkName    = "admission"
	admitMarkVersion = 1
	admitMarkSize    = 2048
	// maxAdmitAttempts is how many admissions of one intake file may fail
	// before it is quarantined with a gap.
	maxAdmitAttempts = 3
	// GapReasonAdmissionFailed is the reason of the capture_interrupted gap
	// that names a quarantined intake file.
	GapReasonAdmissionFailed = "admission_failed"
)

// admitMark is the admission in progress (see above).
type admitMark struct {
	Version  int    `json:"version"`
	Intake   string `json:"intake"`
	Floor    uint64 `json:"floor"`
	Attempts int    `json:"attempts"`
	// Failures counts the attempts that crashed or failed (not those the
	// holder's own bound cut off: Cancelled); at maxAdmitAttempts the file
	// is quarantined.
	Failures  int  `json:"failures,omitempty"`
	Cancelled bool `json:"cancelled,omitempty"`
	// Route is the route and sequence an event without provider identity
	// reserved (a provider-identified one has its claim).
	Route *Route `json:"route,omitempty"`
	// LastError is the error that ended the previous attempt, if it
	// returned one (a crash leaves none).
	LastError string `json:"last_error,omitempty"`
	// Quarantine is set once a holder began to quarantine the file: a
	// holder that finds it resumes that quarantine with the same gap.
	Quarantine *quarantineStart `json:"quarantine,omitempty"`
}

// quarantineStart is what a quarantine's gap is made of, fixed when it
// began, so a quarantine cut off by a crash is resumed with the same gap
// (found above Floor, not appended twice).
type quarantineStart struct {
	Floor     uint64 `json:"floor"`
	Failures  int    `json:"failures"`
	LastError string `json:"last_error"`
}

// readAdmitMark returns the ledger directory's admission mark (zero when
// there is none or it does not decode: the next admission starts anew).
func (l *Ledger) readAdmitMark() admitMark {
	var m admitMark
	b, err := fsutil.ReadFileNoFollow(filepath.Join(l.dir, admitMarkName), admitMarkSize)
	if err != nil || json.Unmarshal(b, &m) != nil || m.Version != admitMarkVersion {
		return admitMark{}
	}
	return m
}

func (l *Ledger) writeAdmitMark(m *admitMark) error {
	m.Version = admitMarkVersion
	if len(m.LastError) > 500 {
		m.LastError = m.LastError[:500]
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if len(b) > admitMarkSize {
		return fmt.Errorf("admission mark of %d bytes exceeds %d", len(b), admitMarkSize)
	}
	if l.markFile == nil {
		f, err := os.OpenFile(filepath.Join(l.dir, admitMarkName), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, fsutil.FileMode)
		if err != nil {
			return fmt.Errorf("admission mark: %w", err)
		}
		l.markFile = f
	}
	buf := make([]byte, admitMarkSize)
	copy(buf, b)
	for i := len(b); i < len(buf); i++ {
		buf[i] = ' '
	}
	if _, err := l.markFile.WriteAt(buf, 0); err != nil {
		return fmt.Errorf("admission mark: %w", err)
	}
	return nil
}

// reservedRoute is, during a resumed admission, the route an event without
// provider identity reserved in the cut-off attempt; otherwise nil.
func (l *Ledger) reservedRoute() *Route {
	if l.admitting == nil || l.admitting.Route == nil {
		return nil
	}
	r := *l.admitting.Route
	return &r
}

// noteReserved keeps the route just reserved in the admission mark, so a
// re-admission after a crash uses the same sequence (no hole).
func (l *Ledger) noteReserved(r Route) error {
	if l.admitting == nil {
		return nil
	}
	l.admitting.Route = &r
	return l.writeAdmitMark(l.admitting)
}

// resuming reports whether an admission cut off earlier is being redone.
func (l *Ledger) resuming() bool { return l.admitting != nil && l.admitting.Attempts > 1 }

// quarantineIntakeFile appends a capture_interrupted gap (reason
// admission_failed) naming an intake file whose admission failed
// maxAdmitAttempts times, then moves the file into the spool's quarantine
// (kept for diagnosis, never deleted automatically). The gap goes under
// the event's original route and sequence when a claim or the mark holds
// one, else under the target the admission resolved, else as a local fact
// of the observed session.
func quarantineIntakeFile(led *Ledger, ss *spool.Tx, ir *intakeRecord, name string, m admitMark) error {
	if ir == nil {
		return ss.QuarantineIntake(name) // undecodable: the quarantine keeps it; nothing names a target
	}
	// The gap first, then the move: a crash between them leaves the file
	// in the intake and the mark's quarantine, which the next holder
	// resumes (the gap found above its floor); the other order left a
	// quarantined file whose loss no gap named.
	if m.Quarantine == nil {
		floor, err := ss.MaxSeq()
		if err != nil {
			return err
		}
		m.Quarantine = &quarantineStart{Floor: floor, Failures: m.Failures, LastError: lastErr(m)}
		if err := led.writeAdmitMark(&m); err != nil {
			return err
		}
	}
	q := m.Quarantine
	rec := ir.Record
	gap := &event.Record{
		Agent: rec.Agent, SessionID: rec.SessionID, Kind: event.KindGap, HookEvent: rec.HookEvent,
		ObservedAt: rec.ObservedAt, CaptureMode: rec.CaptureMode,
		Gap: &event.GapInfo{Kind: event.GapCaptureInterrupted, Reason: GapReasonAdmissionFailed, RefusedKind: rec.Kind,
			Detail: fmt.Sprintf("the intake file %s could not be admitted (%d attempts failed) and is kept in the spool's quarantine (change-capture quarantine); last error: %s",
				name, q.Failures, q.LastError)},
	}
	route := m.Route
	if occ, ok := ProviderOccurrence(&rec); ok {
		if r, _, found, err := led.Lookup(occ); err == nil && found {
			route = &r
		}
	}
	switch {
	case route != nil:
		gap.WorkID, gap.Generation, gap.CanonicalSession = route.Target.WorkID, route.Target.Generation, route.Target.Session
		gap.Association, gap.Deferred, gap.Sequenced, gap.SharedSeq, gap.Stream = route.Association, route.Deferred, true, route.SharedSeq, route.Stream
		gap.Gap.FromSeq, gap.Gap.ToSeq = route.SharedSeq, route.SharedSeq
	case ir.Resolved:
		// No sequence was reserved: the gap precedes none (range 0..0).
		gap.WorkID, gap.Generation, gap.CanonicalSession = ir.Target.WorkID, ir.Target.Generation, ir.Target.Session
		gap.Association, gap.Sequenced = AssocExact, true
	default:
		gap.Deferred, gap.Association = true, AssocUnassociated
	}
	ss.ResumeAfter(q.Floor)
	_, err := appendInStream(ss, led, gap)
	ss.ResumeAfter(0)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("intake %s not quarantined: recording its admission_failed gap failed: %w", name, err)
	}
	return ss.QuarantineIntake(name)
}

func lastErr(m admitMark) string {
	if m.LastError == "" {
		return "none recorded (the admitting process was killed)"
	}
	return m.LastError
}
