package changelog

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// turnFile marks a turn in progress in a changelog directory: the capture
// hook writes it when a prompt is submitted and removes it when the turn or
// the session ends.
const turnFile = "turn.json"

// ErrTurnRunning reports an operation refused while an agent turn runs (the
// seed's 409).
var ErrTurnRunning = errors.New("an agent turn is running")

// Turn is a running turn.
type Turn struct {
	SessionID string    `json:"session_id"`
	StartedAt time.Time `json:"started_at"`
}

// BeginTurn records that session's turn started.
func BeginTurn(dir, session string, now time.Time) error {
	b, _ := json.Marshal(Turn{SessionID: session, StartedAt: now.UTC()})
	return fsutil.WriteAtomic(filepath.Join(dir, turnFile), append(b, '\n'), fsutil.FileMode)
}

// EndTurn records that session's turn ended; a marker of another session is
// left alone.
func EndTurn(dir, session string) error {
	t, err := RunningTurn(dir)
	if err != nil || t == nil || (session != "" && t.SessionID != session) {
		return err
	}
	if err := os.Remove(filepath.Join(dir, turnFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return fsutil.SyncDir(dir)
}

// RunningTurn returns the running turn, or nil.
func RunningTurn(dir string) (*Turn, error) {
	b, err := fsutil.ReadFileNoFollow(filepath.Join(dir, turnFile), 4096)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read turn marker: %w", err)
	}
	var t Turn
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("turn marker %s: %w", filepath.Join(dir, turnFile), err)
	}
	return &t, nil
}

// RefuseDuringTurn fails with ErrTurnRunning while a turn runs in dir.
func RefuseDuringTurn(dir string) error {
	t, err := RunningTurn(dir)
	if err != nil {
		return err
	}
	if t != nil {
		return fmt.Errorf("%w (session %s, since %s); wait for the turn to end, or pass --force if that session is gone",
			ErrTurnRunning, t.SessionID, t.StartedAt.Format(time.RFC3339))
	}
	return nil
}
