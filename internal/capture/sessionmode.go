package capture

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/fsutil"
)

// sessionModesDir holds, per checkout, the capture mode each native session
// started under: sharing follows the mode a session started with.
const sessionModesDir = "capture-sessions"

// sessionModePath returns the record of one native session of a checkout.
// Session ids were validated by the adapter (bounded, no spaces or control
// characters); a path separator is still refused here.
func (s Store) sessionModePath(root, session string) (string, bool) {
	if session == "" || strings.ContainsAny(session, `/\`) || session == "." || session == ".." {
		return "", false
	}
	sum := sha256.Sum256([]byte(root))
	return filepath.Join(s.Dir, sessionModesDir, hex.EncodeToString(sum[:8]), session), true
}

// EffectiveMode returns the capture mode to apply to an event of session:
// the binding's current mode, except that a session which started under
// another mode never starts sharing mid-session — its bodies stay local
// (local-conversation) until the next session. The first event of a
// session records the mode it started under.
func (s Store) EffectiveMode(b *Binding, session string) (string, error) {
	cur := b.CaptureMode
	p, ok := s.sessionModePath(b.Root, session)
	if !ok {
		return cur, nil
	}
	data, err := fsutil.ReadFileNoFollow(p, 64)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := fsutil.MkdirPrivate(filepath.Dir(p)); err != nil {
			return cur, err
		}
		if err := fsutil.WriteNew(p, []byte(cur), fsutil.FileMode); err != nil && !errors.Is(err, fs.ErrExist) {
			return cur, err
		}
		return cur, nil
	case err != nil:
		return cur, err
	}
	started := strings.TrimSpace(string(data))
	if cur == event.ModeSharedConversation && started != event.ModeSharedConversation {
		return event.ModeLocalConversation, nil
	}
	return cur, nil
}
