package capture

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/agentscm/agentscm/internal/agent"
	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/spool"
	"github.com/agentscm/agentscm/internal/transcript"
)

// transcriptsDir holds, per spool, the private transcript cursor and setup
// state of each observed native session.
const transcriptsDir = "capture-transcripts"

// maxTranscriptState bounds a persisted transcript state file.
const maxTranscriptState = 64 << 10

// transcriptState is what the hook remembers of one session's transcript
// and setup between invocations.
type transcriptState struct {
	Cursor *transcript.Cursor `json:"cursor,omitempty"`
}

// transcriptEvents are the hook events after which the transcript is read:
// turn and session boundaries, plus SessionStart so a session whose start
// was observed is read from its beginning. Tool hooks do not read: they are
// on the agent's hot path between two model requests, and each message
// read costs a durable spool append.
var transcriptEvents = map[string]bool{
	"SessionStart": true, "Stop": true, "SubagentStop": true, "PreCompact": true, "SessionEnd": true,
}

func (s StateDir) transcriptStatePath(spoolDir, session string) (string, bool) {
	if !transcript.ValidSession(session) {
		return "", false
	}
	sum := sha256.Sum256([]byte(spoolDir))
	return filepath.Join(s.Dir, transcriptsDir, hex.EncodeToString(sum[:8]), session+".json"), true
}

func (s StateDir) loadTranscriptState(path string) (transcriptState, error) {
	var st transcriptState
	b, err := fsutil.ReadFileNoFollow(path, maxTranscriptState)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("transcript state %s: %w", path, err)
	}
	if st.Cursor != nil && st.Cursor.Version != transcript.CursorVersion {
		return st, fmt.Errorf("transcript state %s: cursor version %d not supported", path, st.Cursor.Version)
	}
	return st, nil
}

func (s StateDir) saveTranscriptState(path string, st transcriptState) error {
	if err := fsutil.MkdirPrivate(filepath.Dir(path)); err != nil {
		return err
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return fsutil.WriteAtomic(path, b, fsutil.FileMode)
}

// retainSetup writes the session's observed setup (raw is the hook
// payload; nothing when it observes none) as the small local setup
// artifact, content-addressed beside the session's transcript state at
// statePath; the hook's own event carries its identity and the observed
// values. Writing it twice is harmless (WriteNew, same content).
func retainSetup(statePath string, raw []byte) error {
	setup := agent.ObservedSetup(raw)
	if setup == nil {
		return nil
	}
	ap := filepath.Join(filepath.Dir(statePath), "setup-"+setup.Artifact[len("sha256:"):]+".json")
	if _, err := os.Lstat(ap); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	art, _ := json.Marshal(setup.ArtifactBody())
	if err := fsutil.MkdirPrivate(filepath.Dir(ap)); err != nil {
		return err
	}
	if err := fsutil.WriteNew(ap, art, fsutil.FileMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("retain the setup artifact: %w", err)
	}
	return nil
}

// intakeSetup is retainSetup for a hook whose event goes into the intake:
// the admission has no raw payload, so the hook writes the artifact itself.
func (s StateDir) intakeSetup(bd *binding.Binding, session string, raw []byte) error {
	path, ok := s.transcriptStatePath(bd.Spool, session)
	if !ok {
		return nil
	}
	return retainSetup(path, raw)
}

// TranscriptStep is the hook's transcript and setup step for one payload
// whose event resolved to the exact target t. It retains a setup artifact
// when the hook exposed setup metadata that differs from the last one, and
// when the binding has a Claude history root it reads the session's new
// transcript records and appends their usage (and, in a conversation mode,
// assistant text) to the same spool session, attributed to t. The cursor is
// saved only after the records are durably appended: a crash in between
// re-reads them, and their provider identities make the replay a
// duplicate. It returns how many records it appended.
func (s StateDir) TranscriptStep(ss *spool.Tx, bd *binding.Binding, raw []byte, p *agent.Payload, t Target, mode string, now time.Time) (int, error) {
	path, ok := s.transcriptStatePath(bd.Spool, p.SessionID)
	if !ok {
		return 0, nil
	}
	st, err := s.loadTranscriptState(path)
	if err != nil {
		return 0, err
	}
	changed := false
	n := 0
	base := func(r *event.Record) {
		r.WorkID, r.Generation, r.CanonicalSession, r.CaptureMode = t.WorkID, t.Generation, t.Session, mode
	}
	if err := retainSetup(path, raw); err != nil {
		return 0, err
	}
	var terr error
	if bd.ClaudeHistoryRoot != "" && transcriptEvents[p.HookEventName] {
		local := mode == event.ModeLocalConversation || mode == event.ModeSharedConversation
		o := transcript.Options{
			FromStart: p.HookEventName == "SessionStart" && p.Source == "startup",
			Flush:     p.HookEventName == "Stop" || p.HookEventName == "SessionEnd",
			Select:    transcript.Selection{AssistantText: local, Bodies: local},
			Now:       now,
		}
		tt := transcript.Target{WorkID: t.WorkID, Generation: t.Generation, Session: t.Session}
		recs, next, err := transcript.Read(bd.ClaudeHistoryRoot, p.SessionID, st.Cursor, tt, o)
		if err != nil && !errors.Is(err, transcript.ErrNotFound) {
			terr = fmt.Errorf("claude transcript: %w", err)
		}
		for i := range recs {
			r := &recs[i]
			base(r)
			if mode == event.ModeSharedConversation && r.Body != nil {
				agent.RedactBody(r.Body)
			}
			seq, err := ss.Append(r)
			if err == nil {
				if gap := redactedGap(r, seq); gap != nil { // redacted.go
					_, err = ss.Append(gap)
				}
			}
			if err != nil {
				// The cursor stays where it was: the next hook re-reads.
				if changed {
					err = errors.Join(err, s.saveTranscriptState(path, st))
				}
				return n, fmt.Errorf("retain transcript records: %w", err)
			}
			n++
		}
		if next != nil && (st.Cursor == nil || *next != *st.Cursor) {
			st.Cursor, changed = next, true
		}
	}
	if changed {
		if err := s.saveTranscriptState(path, st); err != nil {
			return n, errors.Join(terr, fmt.Errorf("save transcript cursor: %w", err))
		}
	}
	return n, terr
}
