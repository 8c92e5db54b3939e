package capture

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/spool"
)

// Capture turned off mid-session. Unconfigure (which disables the binding
// and removes the hooks) notes, in the spool's ledger directory, when
// capture was turned off and which observed sessions had an exact target
// then. Whatever those sessions did until capture is enabled again was
// never observed. When such a session's next event is captured (after a
// re-enable of the same spool), a capture_interrupted gap with reason
// capture_disabled is appended first, under the target the session had
// when capture was turned off, over one sequence reserved in that target's
// stream: the record names the window instead of reading as contiguous. A
// session that never comes back gets no gap (nothing says it was still
// running). The note lives beside the ledger (disabled.json) and is only
// read and written under the ledger lock.
const (
	disabledFile        = "disabled.json"
	disabledVersion     = 1
	maxDisabledWindows  = 16
	maxDisabledNoteSize = 8 << 20
)

type disabledWindow struct {
	At       time.Time         `json:"at"`
	Sessions map[string]Target `json:"sessions"`
}

type disabledNote struct {
	Version int              `json:"version"`
	Windows []disabledWindow `json:"windows"`
}

func readDisabled(dir string) (disabledNote, error) {
	var n disabledNote
	b, err := fsutil.ReadFileNoFollow(filepath.Join(dir, disabledFile), maxDisabledNoteSize)
	if errors.Is(err, fs.ErrNotExist) {
		return n, nil
	}
	if err != nil {
		return n, err
	}
	if err := json.Unmarshal(b, &n); err != nil || n.Version != disabledVersion {
		return disabledNote{}, fmt.Errorf("%s is unreadable (%v)", filepath.Join(dir, disabledFile), err)
	}
	return n, nil
}

func writeDisabled(dir string, n disabledNote) error {
	b, err := json.Marshal(n)
	if err != nil {
		return err
	}
	return fsutil.WriteAtomic(filepath.Join(dir, disabledFile), b, fsutil.FileMode)
}

// noteCaptureDisabled records, under the ledger lock, that capture of the
// spool was turned off at `at`, with every observed session that had an
// exact target then. It does nothing for a spool whose ledger was never
// written.
func (s StateDir) noteCaptureDisabled(spoolDir string, at time.Time) error {
	dir := s.ledgerDir(spoolDir)
	if _, err := fsutil.ReadFileNoFollow(filepath.Join(dir, ledgerFile), maxLedgerBytes); err != nil {
		return nil // no ledger: no session was ever captured here
	}
	led, err := s.OpenLedger(spoolDir)
	if err != nil {
		return err
	}
	defer led.Close()
	w := disabledWindow{At: at.UTC(), Sessions: map[string]Target{}}
	for observed, o := range led.st.Sessions {
		if o.Target != nil && o.Target.WorkID != "" {
			w.Sessions[observed] = *o.Target
		}
	}
	if len(w.Sessions) == 0 {
		return nil
	}
	n, err := readDisabled(dir)
	if err != nil {
		n = disabledNote{}
	}
	n.Version = disabledVersion
	n.Windows = append(n.Windows, w)
	if len(n.Windows) > maxDisabledWindows {
		n.Windows = n.Windows[len(n.Windows)-maxDisabledWindows:]
	}
	return writeDisabled(dir, n)
}

// publishDisabled appends, under the held spool and ledger locks, the
// capture_disabled gaps of the windows the observed session was open
// across (see above), before the session's first event after them, and
// forgets them once durable.
func publishDisabled(ss *spool.Tx, led *Ledger, rec *event.Record, observed string, now time.Time) error {
	n, err := readDisabled(led.dir)
	if err != nil || len(n.Windows) == 0 {
		return err
	}
	changed := false
	keep := n.Windows[:0]
	for _, w := range n.Windows {
		if t, ok := w.Sessions[observed]; ok {
			from, to, err := led.ReserveRange(t, 1)
			if err != nil {
				return err
			}
			if err := led.Flush(); err != nil {
				return err
			}
			gap := &event.Record{
				Agent: rec.Agent, SessionID: observed, Kind: event.KindGap, HookEvent: "capture_disabled",
				ObservedAt: now.UTC(), CaptureMode: rec.CaptureMode,
				WorkID: t.WorkID, Generation: t.Generation, CanonicalSession: t.Session, Association: AssocExact,
				Sequenced: true, SharedSeq: from, Stream: led.Stream(),
				Gap: &event.GapInfo{Kind: event.GapCaptureInterrupted, Reason: event.GapReasonCaptureDisabled, FromSeq: from, ToSeq: to,
					Detail: fmt.Sprintf("capture was turned off (unconfigure) at %s while this session was open and was on again by %s; what the session did in between was not observed",
						w.At.Format(time.RFC3339), now.UTC().Format(time.RFC3339))},
			}
			if _, err := ss.Append(gap); err != nil {
				return fmt.Errorf("record the capture_disabled gap of session %s: %w", observed, err)
			}
			delete(w.Sessions, observed)
			changed = true
		}
		if len(w.Sessions) > 0 {
			keep = append(keep, w)
		}
	}
	if !changed {
		return nil
	}
	n.Windows = keep
	return writeDisabled(led.dir, n)
}
