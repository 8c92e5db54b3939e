package capture

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/agentscm/agentscm/internal/agent/claude"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/spool"
)

// Disk full and I/O errors. When a hook cannot append its record (ENOSPC,
// EIO) and the spool could not record its capture_interrupted gap either, the
// loss is kept in a preallocated slot file in the spool's private ledger
// directory: a fixed-size file created (zero-filled and fsynced) while there
// was space, rewritten in place with pwrite and fsync, so noting a loss needs
// no new block or inode on a full disk. The next hook that holds the spool
// lock publishes one capture_interrupted gap per lost stream (reason
// no_space or io_error) naming the reserved sequence range the lost events
// had (from_seq..to_seq) and the receipt interval, then clears the slot.
// Events that failed before any sequence was reserved (the ledger itself
// could not be written) are covered by a gap without a range.
const (
	lostSlotName = "interrupted.slot"
	lostSlotSize = 4096
	maxLostRuns  = 16
)

type lostRun struct {
	Target      Target    `json:"target"`
	Association string    `json:"association,omitempty"`
	Observed    string    `json:"observed"`
	Sequenced   bool      `json:"sequenced,omitempty"`
	Deferred    bool      `json:"deferred,omitempty"`
	From        uint64    `json:"from,omitempty"`
	To          uint64    `json:"to,omitempty"`
	Count       int       `json:"count"`
	FirstAt     time.Time `json:"first_at"`
	LastAt      time.Time `json:"last_at"`
	Reason      string    `json:"reason"`
	Detail      string    `json:"detail,omitempty"`
	// Stream is the ledger stream of a sequenced run's range (empty in
	// notes written before it: the publishing Session's stream).
	Stream string `json:"stream,omitempty"`
}

type lostNote struct {
	Runs []lostRun `json:"runs"`
}

// lossReason classifies err: no_space, io_error, record_limit or
// byte_limit (a quota refusal), or "" (not a loss this file names).
func lossReason(err error) string {
	var qe *spool.QuotaError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return event.GapReasonNoSpace
	case errors.Is(err, syscall.EIO):
		return event.GapReasonIOError
	case errors.As(err, &qe):
		return qe.Bound
	}
	return ""
}

// noteLostAtReceipt notes the loss of a record that was never given a
// sequence (its hook could not take the spool lock, or could not write
// the intake): under the session's target at receipt when it had one (its
// session record's, as an intake record would have carried it), so that
// the gap publishLost makes of it reaches the Hub under that target over
// sequences reserved then; unassociated otherwise.
func (s StateDir) noteLostAtReceipt(spoolDir string, rec *event.Record, observed string, atReceipt *receiptTarget, reason, detail string, at time.Time) error {
	t, ok := atReceipt.target()
	return noteLost(s.ledgerDir(spoolDir), rec, observed, t, ok, reason, detail, at)
}

// ensureLostSlot creates the slot when it is missing (while there is space).
func ensureLostSlot(dir string) error {
	p := filepath.Join(dir, lostSlotName)
	if fi, err := os.Lstat(p); err == nil {
		if !fi.Mode().IsRegular() || fi.Size() != lostSlotSize {
			return fmt.Errorf("%s is not a %d-byte regular file", p, lostSlotSize)
		}
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	err := fsutil.WriteNew(p, make([]byte, lostSlotSize), fsutil.FileMode)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	return err
}

func readLostSlot(f *os.File) (lostNote, error) {
	var n lostNote
	buf := make([]byte, lostSlotSize)
	if _, err := f.ReadAt(buf, 0); err != nil {
		return n, err
	}
	end := 0
	for end < len(buf) && buf[end] != 0 {
		end++
	}
	if end == 0 {
		return n, nil
	}
	if err := json.Unmarshal(buf[:end], &n); err != nil {
		return lostNote{}, fmt.Errorf("interrupted slot: %w", err)
	}
	return n, nil
}

func writeLostSlot(f *os.File, n lostNote) error {
	buf := make([]byte, lostSlotSize)
	if len(n.Runs) > 0 {
		b, err := json.Marshal(n)
		if err != nil {
			return err
		}
		for len(b) > lostSlotSize && len(n.Runs) > 1 {
			// Bounded: merge the two oldest runs (a wider gap, never a
			// narrower one).
			a, c := n.Runs[0], n.Runs[1]
			a.Count += c.Count
			a.From, a.To = min(nz(a.From, c.From), nz(c.From, a.From)), max(a.To, c.To)
			a.LastAt = c.LastAt
			a.Detail = "several streams lost records; this run covers more than one"
			n.Runs = append([]lostRun{a}, n.Runs[2:]...)
			if b, err = json.Marshal(n); err != nil {
				return err
			}
		}
		if len(b) > lostSlotSize {
			return errors.New("interrupted slot: note does not fit")
		}
		copy(buf, b)
	}
	if _, err := f.WriteAt(buf, 0); err != nil {
		return err
	}
	return f.Sync()
}

func nz(a, b uint64) uint64 {
	if a == 0 {
		return b
	}
	return a
}

func openLostSlot(dir string) (*os.File, error) {
	return os.OpenFile(filepath.Join(dir, lostSlotName), os.O_RDWR|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
}

// noteLost records one lost record in the slot (in place, no allocation).
// The caller holds the ledger or spool lock, or accepts a lost update race
// with another failing hook (both then fail on the same full disk).
func noteLost(dir string, rec *event.Record, observed string, t Target, resolved bool, reason, detail string, at time.Time) error {
	f, err := openLostSlot(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	n, err := readLostSlot(f)
	if err != nil {
		n = lostNote{}
	}
	r := lostRun{Observed: observed, Reason: reason, Count: 1, FirstAt: at.UTC(), LastAt: at.UTC()}
	if rec.Sequenced {
		r.Target = Target{WorkID: rec.WorkID, Generation: rec.Generation, Session: rec.CanonicalSession}
		r.Association, r.Deferred, r.Sequenced = rec.Association, rec.Deferred, true
		r.From, r.To, r.Stream = rec.SharedSeq, rec.SharedSeq, rec.Stream
	} else if resolved {
		r.Target, r.Association = t, AssocExact
	}
	if len(detail) > 200 {
		detail = detail[:200]
	}
	r.Detail = detail
	merged := false
	for i := range n.Runs {
		o := &n.Runs[i]
		if o.Target == r.Target && o.Observed == r.Observed && o.Reason == r.Reason && o.Sequenced == r.Sequenced && o.Stream == r.Stream {
			o.Count++
			o.LastAt = r.LastAt
			if r.Sequenced {
				o.From, o.To = min(o.From, r.From), max(o.To, r.To)
			}
			merged = true
			break
		}
	}
	if !merged {
		if len(n.Runs) >= maxLostRuns {
			n.Runs[len(n.Runs)-1].Count++
			n.Runs[len(n.Runs)-1].LastAt = r.LastAt
		} else {
			n.Runs = append(n.Runs, r)
		}
	}
	return writeLostSlot(f, n)
}

// publishLost appends the capture_interrupted gaps of the noted losses under
// the held spool lock and clears the slot once they are durable. A run
// that was noted with a target but without sequences (the record never
// reached the ledger) first gets its count of sequences reserved in that
// target's stream, so the Hub sees the holes and the gap covering them; the
// reservation is written into the slot before the gap is appended, so a
// crash in between publishes the same range again, never a hole without a
// gap. While ordinary capture has no room (quota pressure), nothing is
// published: the gaps would spend the headroom that acknowledgement and
// compaction need (the slot keeps the runs, merging them when full).
func publishLost(dir string, ss *spool.Tx, led *Ledger, now time.Time) (int, error) {
	f, err := openLostSlot(dir)
	if err != nil {
		return 0, nil // no slot: nothing noted
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return 0, err
	}
	n, err := readLostSlot(f)
	if err != nil || len(n.Runs) == 0 {
		return 0, err
	}
	if !ss.OrdinaryRoom(len(n.Runs)) {
		return 0, nil
	}
	reserved := false
	for i := range n.Runs {
		r := &n.Runs[i]
		if r.Sequenced || r.Target.WorkID == "" || led == nil || led.Stream() == "" {
			continue
		}
		from, to, err := led.ReserveRange(r.Target, r.Count)
		if err != nil {
			return 0, fmt.Errorf("reserve the sequences of lost records: %w", err)
		}
		r.Sequenced, r.From, r.To, r.Stream = true, from, to, led.Stream()
		reserved = true
	}
	if reserved {
		if err := led.Flush(); err != nil {
			return 0, err
		}
		if err := writeLostSlot(f, n); err != nil {
			return 0, err
		}
	}
	for _, r := range n.Runs {
		detail := fmt.Sprintf("%d record(s) received %s..%s could not be appended (%s)", r.Count,
			r.FirstAt.Format(time.RFC3339), r.LastAt.Format(time.RFC3339), r.Detail)
		if len(detail) > 400 {
			detail = detail[:400]
		}
		gap := &event.Record{
			Agent: claude.AgentName, SessionID: r.Observed, Kind: event.KindGap, HookEvent: "append_failed",
			ObservedAt: now.UTC(),
			WorkID:     r.Target.WorkID, Generation: r.Target.Generation, CanonicalSession: r.Target.Session,
			Association: r.Association, Deferred: r.Deferred || r.Target.WorkID == "",
			Gap: &event.GapInfo{Kind: event.GapCaptureInterrupted, Reason: r.Reason, Detail: detail},
		}
		if r.Sequenced {
			gap.Sequenced, gap.SharedSeq, gap.Stream = true, r.From, r.Stream
			gap.Gap.FromSeq, gap.Gap.ToSeq = r.From, r.To
		}
		// A run's own stream, else (a note from before streams were noted)
		// the Session's.
		if _, err := ss.Append(gap); err != nil {
			return 0, fmt.Errorf("publish the capture_interrupted gap of lost records: %w", err)
		}
	}
	return len(n.Runs), writeLostSlot(f, lostNote{})
}
