package capture

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/fsutil"
)

// sessionsDir holds, per spool, one small record per observed native
// session: the capture mode it started under (sharing follows it) and
// whether its original start was observed.
const sessionsDir = "capture-sessions"

// sessionRecord is what the adapter remembers of a native session.
type sessionRecord struct {
	Mode string `json:"mode"`
	// OriginalStart is true when a startup SessionStart was the session's
	// first observed event.
	OriginalStart bool `json:"original_start"`
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
}

// sessionPath returns the record of one native session of a spool. Session
// ids were validated by the adapter; a path separator is still refused.
func (s Store) sessionPath(spoolDir, session string) (string, bool) {
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
func (s Store) Observe(b *Binding, session, hookEvent, source string) (Observation, error) {
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
	return obs, nil
}
