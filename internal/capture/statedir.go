package capture

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"time"

	"github.com/agentscm/agentscm/internal/action"
	"github.com/agentscm/agentscm/internal/binding"
)

// StateDir is the agentscm config directory as capture uses it: the
// capture config (Bindings) and the private per-spool state capture keeps
// beside it (ledgers, session records, transcripts, action receipts,
// deliver locks and status). It implements binding.State.
type StateDir struct{ Dir string }

// Bindings is the capture config of the directory.
func (s StateDir) Bindings() binding.Registry { return binding.Registry{Dir: s.Dir} }

// PrepareSpool writes the hook's spool summary of spoolDir (opening its
// hook spool and taking and releasing its lock once) so that the first
// hooks can use the intake, which refuses while no summary of this boot
// says what the spool holds; best effort: without it the first hook takes
// the lock and writes it.
func (s StateDir) PrepareSpool(ctx context.Context, spoolDir string) {
	if hs, err := s.openHookSpool(spoolDir); err == nil {
		if ss, err := hs.Begin(ctx); err == nil {
			ss.Close()
		}
	}
}

// NoteDisabled records that capture into spoolDir was turned off at at:
// the sessions open then get a capture_disabled gap if they come back
// after a re-enable (disabled.go).
func (s StateDir) NoteDisabled(spoolDir string, at time.Time) error {
	return s.noteCaptureDisabled(spoolDir, at)
}

// SummaryPath is the hook's spool summary file of spoolDir.
func (s StateDir) SummaryPath(spoolDir string) string {
	return filepath.Join(s.ledgerDir(spoolDir), summaryName)
}

// SpoolStateDirs are the private capture state directories of a spool kept
// under the config directory by names derived from the spool path (and id):
// a move renames each of them to the new path's name.
func (s StateDir) SpoolStateDirs(spoolDir, spoolID string) []string {
	sum := sha256.Sum256([]byte(spoolDir))
	h := hex.EncodeToString(sum[:8])
	asum := sha256.Sum256([]byte(spoolDir + "\x00" + spoolID))
	return []string{
		s.ledgerDir(spoolDir),
		filepath.Join(s.Dir, sessionsDir, h),
		filepath.Join(s.Dir, sessionsDir, h+".warned"),
		filepath.Join(s.Dir, transcriptsDir, h),
		filepath.Join(s.Dir, action.ReceiptsDir, hex.EncodeToString(asum[:8])),
	}
}
