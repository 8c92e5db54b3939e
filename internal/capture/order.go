package capture

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentscm/agentscm/internal/agent/gemini"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/spool"
)

// RecordedOrder returns the highest order k (a tool_use_id gemini.OrderID(k))
// the capture's durable record holds for the native session of the binding
// containing cwd: the ledger's occurrence claims of the session (written
// durably before any append) and the intake records waiting for admission.
// It is 0 when cwd is in no binding or nothing is recorded. The Gemini
// capture hook's order counters are rebuilt from it after a crash
// (gemini.Orderer Recover), so that they are kept without an fsync.
func (s StateDir) RecordedOrder(session, cwd string) (int, error) {
	cfg, err := s.Bindings().Load()
	if err != nil {
		return 0, err
	}
	bd := cfg.Lookup(filepath.Clean(cwd))
	if bd == nil {
		return 0, nil
	}
	k, err := claimedOrder(s.ledgerDir(bd.Spool), session)
	if err != nil {
		return 0, err
	}
	bodies, err := spool.PeekIntake(bd.Spool)
	if err != nil {
		return 0, err
	}
	for _, b := range bodies {
		ir, err := decodeIntake(spool.IntakeFile{Data: b})
		if err == nil && ir.Record.SessionID == session {
			k = max(k, orderOf(ir.Record.ToolUseID))
		}
	}
	return k, nil
}

// claimedOrder is the highest order k among the occurrence claims of
// session in the ledger directory dir (one directory per session).
func claimedOrder(dir, session string) (int, error) {
	ss := sha256.Sum256([]byte(session))
	cdir := filepath.Join(dir, claimsDir, hex.EncodeToString(ss[:8]))
	es, err := os.ReadDir(cdir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	k := 0
	for _, e := range es {
		if strings.HasPrefix(e.Name(), fsutil.TempPrefix) || strings.Contains(e.Name(), ".") {
			continue // a temporary file, an appended marker
		}
		b, err := fsutil.ReadFileNoFollow(filepath.Join(cdir, e.Name()), maxClaimBytes)
		if err != nil {
			continue
		}
		var c claimFile
		if json.Unmarshal(b, &c) != nil || c.Occurrence.Session != session {
			continue
		}
		k = max(k, orderOf(strings.TrimPrefix(c.Occurrence.Identity, "tool_use_id:")))
	}
	return k, nil
}

func orderOf(id string) int {
	k, _ := gemini.OrderOf(id)
	return k
}
