package capture

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/fsutil"
)

// sessionsDir holds, per spool, one small record per observed native
// session: the capture mode it started under (sharing follows it), whether
// its original start was observed, and its exact target as last resolved
// (what an intake-first hook records as the event's target at receipt).
const sessionsDir = "capture-sessions"

// sessionRecord is what the adapter remembers of a native session.
type sessionRecord struct {
	Mode string `json:"mode"`
	// OriginalStart is true when a startup SessionStart was the session's
	// first observed event.
	OriginalStart bool `json:"original_start"`
	// Target is the session's exact target as a lock holder last resolved
	// it (rememberTarget): the Work, generation and canonical session the
	// session's next event belongs to as far as this machine knows, read
	// by the hook at receipt without the Hub or the spool lock. Absent
	// before the session's first resolution (and in records written
	// before it was kept).
	Target *receiptTarget `json:"target,omitempty"`
	// WorkEpoch is the spool's current-work epoch (workEpoch) when Target
	// was recorded: a Target recorded before this checkout started or
	// took over a Work since is not the session's target any more.
	WorkEpoch string `json:"work_epoch,omitempty"`
}

// workEpochName is the file, in a spool's session-record directory, whose
// content changes each time this checkout gets a new current Work or
// generation (NoteWorkChanged). No session id can name it: ids have no
// space.
const workEpochName = "current work"

// checkoutTargetName is the file, in a spool's session-record directory,
// that keeps the checkout's current Work and generation as a lock holder
// last resolved them for any of its sessions (rememberCheckoutTarget): the
// target at receipt of a brand-new session's events, which no resolution
// of their own has given a target yet. No session id can name it: ids have
// no space.
const checkoutTargetName = "checkout target"

// checkoutRecord is the content of the checkout target file.
type checkoutRecord struct {
	// Target is the exact target a lock holder last resolved for one of
	// the checkout's sessions: its Work and generation are the checkout's,
	// and its canonical session exists on the Hub at that generation (so a
	// gap can name it there).
	Target *receiptTarget `json:"target"`
	// WorkEpoch is the spool's current-work epoch when Target was
	// recorded: after a local work start or takeover it is not the
	// checkout's any more.
	WorkEpoch string `json:"work_epoch,omitempty"`
}

// sessionsDirOf is the session-record directory of a spool.
func (s StateDir) sessionsDirOf(spoolDir string) string {
	sum := sha256.Sum256([]byte(spoolDir))
	return filepath.Join(s.Dir, sessionsDir, hex.EncodeToString(sum[:8]))
}

// workEpoch returns the spool's current-work epoch: "" before any change
// was noted, "?" when it cannot be read (which no record's epoch matches).
func (s StateDir) workEpoch(spoolDir string) string {
	b, err := fsutil.ReadFileNoFollow(filepath.Join(s.sessionsDirOf(spoolDir), workEpochName), 64)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return ""
	case err != nil || len(b) == 0:
		return "?"
	}
	return string(b)
}

// NoteWorkChanged tells capture that the checkout at root got a new
// current Work or generation (agentscm work start, work takeover from this
// checkout): the targets its sessions' records keep are then no longer
// what their next events belong to, so the intake hook records none at
// receipt (admission resolves those events) until a lock holder resolves
// each session again. It writes a new random epoch for every binding of
// root, enabled or not.
func (s StateDir) NoteWorkChanged(root string) error {
	return s.noteWork(root, nil)
}

// NoteWorkStarted is NoteWorkChanged for a new current Work and generation
// whose exact target the caller has from the Hub: t names the alias
// canonical session the Hub created at that generation (work start's
// --session-alias or "default", a takeover's "default"). Every binding of
// root also records t as the checkout's target under the new epoch, so a
// brand-new session's events carry it from receipt even when no lock
// holder resolved any session since (a Hub outage right after the start):
// they are delivered under it, or named by a gap there, never unassociated.
func (s StateDir) NoteWorkStarted(root string, t Target) error {
	if t.WorkID == "" || t.Generation < 1 || t.Session == "" {
		return fmt.Errorf("capture: note the new current Work: incomplete target %+v", t)
	}
	return s.noteWork(root, &t)
}

// noteWork writes a new epoch for every binding of root and, with t, the
// checkout target under it.
func (s StateDir) noteWork(root string, t *Target) error {
	cfg, err := s.Bindings().Load()
	if err != nil {
		return err
	}
	for i := range cfg.Bindings {
		b := &cfg.Bindings[i]
		if b.Root != root {
			continue
		}
		dir := s.sessionsDirOf(b.Spool)
		if err := fsutil.MkdirPrivate(dir); err != nil {
			return err
		}
		var epoch [16]byte
		if _, err := rand.Read(epoch[:]); err != nil {
			return err
		}
		if err := fsutil.WriteAtomic(filepath.Join(dir, workEpochName), []byte(hex.EncodeToString(epoch[:])), fsutil.FileMode); err != nil {
			return fmt.Errorf("capture: note the new current Work: %w", err)
		}
		if t == nil {
			continue
		}
		if err := s.rememberCheckoutTarget(b, *t); err != nil {
			return fmt.Errorf("capture: note the new current Work: %w", err)
		}
	}
	return nil
}

// receiptTarget is a Target as the session record and the intake record
// keep it.
type receiptTarget struct {
	WorkID     string `json:"work_id"`
	Generation int64  `json:"generation"`
	Session    string `json:"session"`
}

// target returns the Target, false when it is absent or incomplete.
func (r *receiptTarget) target() (Target, bool) {
	if r == nil || r.WorkID == "" || r.Generation < 1 || r.Session == "" {
		return Target{}, false
	}
	return Target{WorkID: r.WorkID, Generation: r.Generation, Session: r.Session}, true
}

func toReceiptTarget(t Target) *receiptTarget {
	return &receiptTarget{WorkID: t.WorkID, Generation: t.Generation, Session: t.Session}
}

// Observation is how one event of a session is to be captured.
type Observation struct {
	// Mode is the capture mode to apply to the event.
	Mode string
	// StartedLate is true for the first observed event of a session whose
	// original start was not observed: the adapter records one
	// adapter_started_late gap then.
	StartedLate bool
	// Reason explains StartedLate.
	Reason string
	// target is the session's exact target recorded in its session record
	// (nil before its first resolution): the target at receipt. It is not
	// part of the intake record's observation (unexported); the intake
	// record keeps it in its own field.
	target *receiptTarget
	// checkout is, for a session without a target (target nil), the
	// checkout's current Work and generation as a lock holder last
	// resolved them under the current work epoch (checkoutAtReceipt): a
	// brand-new session's target at receipt, as far as this machine knows.
	checkout *receiptTarget
}

// sessionPath returns the record of one native session of a spool. Session
// ids were validated by the adapter; a path separator is still refused.
func (s StateDir) sessionPath(spoolDir, session string) (string, bool) {
	if session == "" || strings.ContainsAny(session, `/\`) || session == "." || session == ".." {
		return "", false
	}
	sum := sha256.Sum256([]byte(spoolDir))
	return filepath.Join(s.Dir, sessionsDir, hex.EncodeToString(sum[:8]), session), true
}

// Observe returns how to capture an event of session. Only a startup
// SessionStart as a session's first observed event establishes an original
// start; any other first event (a resume, clear, compact or fork start, or
// no SessionStart at all) is reported as started late, once. The mode is the
// binding's current one, except that a session which did not start shared
// never starts sharing mid-session: its bodies stay local until the next
// session. Lowering the mode applies at once.
func (s StateDir) Observe(b *binding.Binding, session, hookEvent, source string) (Observation, error) {
	obs := Observation{Mode: b.CaptureMode}
	p, ok := s.sessionPath(b.Spool, session)
	if !ok {
		return obs, nil
	}
	data, err := fsutil.ReadFileNoFollow(p, 4096)
	if errors.Is(err, fs.ErrNotExist) {
		rec := sessionRecord{Mode: b.CaptureMode, OriginalStart: hookEvent == "SessionStart" && source == "startup"}
		if !rec.OriginalStart {
			obs.StartedLate = true
			obs.Reason = "first_event_" + hookEvent
			if hookEvent == "SessionStart" {
				obs.Reason = "session_start_" + source
			}
		}
		if err := fsutil.MkdirPrivate(filepath.Dir(p)); err != nil {
			return obs, err
		}
		enc, _ := json.Marshal(rec)
		err := fsutil.WriteNew(p, enc, fsutil.FileMode)
		if err == nil {
			obs.checkout = s.checkoutAtReceipt(b.Spool)
			return obs, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return obs, err
		}
		// A concurrent hook of the same session recorded it first.
		obs = Observation{Mode: b.CaptureMode}
		if data, err = fsutil.ReadFileNoFollow(p, 4096); err != nil {
			return obs, err
		}
	} else if err != nil {
		return obs, err
	}
	var rec sessionRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return obs, fmt.Errorf("session record %s: %w", p, err)
	}
	if b.CaptureMode == event.ModeSharedConversation && rec.Mode != event.ModeSharedConversation {
		obs.Mode = event.ModeLocalConversation
	}
	if _, ok := rec.Target.target(); ok && rec.WorkEpoch == s.workEpoch(b.Spool) {
		obs.target = rec.Target
	} else {
		obs.checkout = s.checkoutAtReceipt(b.Spool)
	}
	return obs, nil
}

// checkoutAtReceipt returns the checkout's target as the checkout target
// file keeps it, nil when there is none, it cannot be read, or it was
// recorded under another current-work epoch (a local work start or
// takeover since). Two small reads, no write.
func (s StateDir) checkoutAtReceipt(spoolDir string) *receiptTarget {
	b, err := fsutil.ReadFileNoFollow(filepath.Join(s.sessionsDirOf(spoolDir), checkoutTargetName), 4096)
	if err != nil {
		return nil
	}
	var rec checkoutRecord
	if json.Unmarshal(b, &rec) != nil {
		return nil
	}
	if _, ok := rec.Target.target(); !ok || rec.WorkEpoch != s.workEpoch(spoolDir) {
		return nil
	}
	return rec.Target
}

// rememberCheckoutTarget records t, an exact target a lock holder just
// resolved for one of the checkout's sessions, as the checkout's target
// (checkoutAtReceipt). It writes only when the file holds another target
// or epoch (once per generation), atomically and durably; callers hold
// the spool lock, which serialises the writers.
func (s StateDir) rememberCheckoutTarget(b *binding.Binding, t Target) error {
	dir := s.sessionsDirOf(b.Spool)
	p := filepath.Join(dir, checkoutTargetName)
	epoch := s.workEpoch(b.Spool)
	if data, err := fsutil.ReadFileNoFollow(p, 4096); err == nil {
		var rec checkoutRecord
		if json.Unmarshal(data, &rec) == nil && rec.WorkEpoch == epoch {
			if cur, ok := rec.Target.target(); ok && cur.WorkID == t.WorkID && cur.Generation == t.Generation {
				return nil // the same Work and generation: any session of it will do
			}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := fsutil.MkdirPrivate(dir); err != nil {
		return err
	}
	enc, err := json.Marshal(checkoutRecord{Target: toReceiptTarget(t), WorkEpoch: epoch})
	if err != nil {
		return err
	}
	if err := fsutil.WriteAtomic(p, enc, fsutil.FileMode); err != nil {
		return fmt.Errorf("checkout target %s: %w", p, err)
	}
	return nil
}

// rememberTarget records t, the exact target a lock holder just resolved
// for session, in the session's record, so that the session's next events
// carry it from receipt (writeIntake). It writes only when the record
// holds another target (once per session and generation), atomically and
// durably, and never creates a record (Observe decides what a new one
// says). It also records t as the checkout's target
// (rememberCheckoutTarget), which a brand-new session's events carry at
// receipt. Callers hold the spool lock, which serialises the writers;
// readers see the old or the new record whole.
func (s StateDir) rememberTarget(b *binding.Binding, session string, t Target) error {
	if err := s.rememberCheckoutTarget(b, t); err != nil {
		return err
	}
	p, ok := s.sessionPath(b.Spool, session)
	if !ok {
		return nil
	}
	data, err := fsutil.ReadFileNoFollow(p, 4096)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var rec sessionRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return fmt.Errorf("session record %s: %w", p, err)
	}
	epoch := s.workEpoch(b.Spool)
	if cur, ok := rec.Target.target(); ok && cur == t && rec.WorkEpoch == epoch {
		return nil
	}
	// The epoch is read before the write: a change noted in between makes
	// this target look stale (none at receipt), never a stale one current.
	rec.Target, rec.WorkEpoch = toReceiptTarget(t), epoch
	enc, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := fsutil.WriteAtomic(p, enc, fsutil.FileMode); err != nil {
		return fmt.Errorf("session record %s: %w", p, err)
	}
	return nil
}

// observeStart is Observe for an intake-first hook: when the event is a
// startup SessionStart of a session without a record, in a mode other than
// shared-conversation, the observation cannot depend on who writes the
// record first (an original start, the binding's mode, whichever hook
// wins), so it returns the observation and the record's durable write as
// write, for the caller to run beside the event's own intake write. In
// every other case it is Observe, and write is nil.
func (s StateDir) observeStart(b *binding.Binding, session, hookEvent, source string) (obs Observation, write func() error, err error) {
	p, ok := s.sessionPath(b.Spool, session)
	if !ok || hookEvent != "SessionStart" || source != "startup" || b.CaptureMode == event.ModeSharedConversation {
		obs, err = s.Observe(b, session, hookEvent, source)
		return obs, nil, err
	}
	if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
		obs, err = s.Observe(b, session, hookEvent, source)
		return obs, nil, err
	}
	write = func() error {
		if err := fsutil.MkdirPrivate(filepath.Dir(p)); err != nil {
			return err
		}
		enc, _ := json.Marshal(sessionRecord{Mode: b.CaptureMode, OriginalStart: true})
		if err := fsutil.WriteNew(p, enc, fsutil.FileMode); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		return nil
	}
	return Observation{Mode: b.CaptureMode, checkout: s.checkoutAtReceipt(b.Spool)}, write, nil
}

// Sharing says whether the conversation bodies of one session of a checkout
// may leave the machine (the changelog's transcript copies, for one).
type Sharing struct {
	// Mode is the capture mode of the checkout's binding (metadata-only
	// without one).
	Mode string `json:"mode"`
	// Share is true only for an enabled binding in shared-conversation
	// mode, connected to the repository and Hub it was saved for, and a
	// session observed to start under that mode.
	Share bool `json:"share"`
	// Reason explains a Share of false.
	Reason string `json:"reason,omitempty"`
}

// ConversationSharing decides Sharing for session in the checkout at root,
// connected to hub and repository (empty: not checked). It reads the
// capture config and the session's record without writing anything: a
// session whose start was not observed under shared-conversation mode keeps
// its bodies local ("a session keeps the mode it started under for
// sharing"), as does a binding saved for another repository or Hub.
func (s StateDir) ConversationSharing(root, session, hub, repository string) (Sharing, error) {
	cfg, err := s.Bindings().Load()
	if err != nil {
		return Sharing{Mode: event.ModeMetadataOnly, Reason: "the capture config cannot be read"}, err
	}
	b := cfg.ForPath(root)
	if b == nil {
		return Sharing{Mode: event.ModeMetadataOnly, Reason: "the checkout has no enabled capture binding, so it is metadata-only"}, nil
	}
	sh := Sharing{Mode: b.CaptureMode}
	if b.CaptureMode != event.ModeSharedConversation {
		sh.Reason = "the checkout is in " + b.CaptureMode + " mode"
		return sh, nil
	}
	if b.Hub != "" && hub != "" && (b.Hub != hub || b.Repository != repository) {
		sh.Reason = "the capture binding was saved for " + binding.DescribeLineage(b.Lineage()) + ", not " + binding.DescribeLineage(binding.Lineage{Hub: hub, Repository: repository})
		return sh, nil
	}
	p, ok := s.sessionPath(b.Spool, session)
	if !ok {
		sh.Reason = "the tool call has no valid session id"
		return sh, nil
	}
	data, err := fsutil.ReadFileNoFollow(p, 4096)
	if errors.Is(err, fs.ErrNotExist) {
		sh.Reason = "the start of session " + session + " was not observed in shared-conversation mode"
		return sh, nil
	}
	if err != nil {
		sh.Reason = "the session record cannot be read"
		return sh, fmt.Errorf("session record %s: %w", p, err)
	}
	var rec sessionRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		sh.Reason = "the session record is corrupt"
		return sh, fmt.Errorf("session record %s: %w", p, err)
	}
	if rec.Mode != event.ModeSharedConversation {
		sh.Reason = "session " + session + " started in " + rec.Mode + " mode; sharing starts with the next session"
		return sh, nil
	}
	sh.Share = true
	return sh, nil
}
