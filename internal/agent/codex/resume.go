package codex

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// ErrNoRollout reports that the session's rollout, or the call in it, cannot
// be found.
var ErrNoRollout = errors.New("no Codex rollout to resume")

// Resumed is a Codex conversation bound to a fresh session id.
type Resumed struct {
	SessionID   string `json:"session_id"`
	Transcript  string `json:"transcript"`
	FromSession string `json:"from_session"`
	// IncludesResult is true when the cut ends with the call's output.
	IncludesResult bool   `json:"includes_result"`
	Command        string `json:"command"`
}

// FindRollout returns the rollout file of session under codexHome/sessions
// (rollout-*-<session>.jsonl, a regular file; the newest when several).
func FindRollout(codexHome, session string) (string, error) {
	if !validSession(session) {
		return "", fmt.Errorf("%w: invalid session id %q", ErrNoRollout, session)
	}
	m, _ := filepath.Glob(filepath.Join(codexHome, "sessions", "*", "*", "*", "rollout-*-"+session+".jsonl"))
	best := ""
	for _, p := range m {
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() && p > best {
			best = p
		}
	}
	if best == "" {
		return "", fmt.Errorf("%w: no rollout of session %s under %s", ErrNoRollout, session, filepath.Join(codexHome, "sessions"))
	}
	return best, nil
}

func validSession(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'f' || r >= 'A' && r <= 'F' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

// ResumeConversation binds the conversation of session, cut right after the
// output of call callID, to a fresh session id: it writes a new rollout file
// beside the original with every line up to that output and the session id
// rewritten, and returns `codex exec resume <new id>`. Codex's rollout is
// append-only, so the live file holds the call whatever was rewound since.
func ResumeConversation(codexHome, session, callID string, now time.Time) (*Resumed, error) {
	src, err := FindRollout(codexHome, session)
	if err != nil {
		return nil, err
	}
	b, err := fsutil.ReadFileNoFollow(src, maxRolloutBytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoRollout, err)
	}
	id := newThreadID(now)
	var out bytes.Buffer
	sawCall, found := callID == "", false
	for _, line := range bytes.Split(b, []byte{'\n'}) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var l rolloutLine
		if err := json.Unmarshal(line, &l); err != nil {
			// A torn last line (Codex still writing) ends the copy.
			break
		}
		if callID != "" && l.Type == "response_item" && l.Payload.CallID == callID {
			sawCall = true
			found = strings.HasSuffix(l.Payload.Type, "_output")
		}
		out.Write(bytes.ReplaceAll(line, []byte(session), []byte(id)))
		out.WriteByte('\n')
		if found {
			break
		}
	}
	if !sawCall {
		return nil, fmt.Errorf("%w: call %s is not in %s", ErrNoRollout, callID, src)
	}
	name := "rollout-" + now.UTC().Format("2006-01-02T15-04-05") + "-" + id + ".jsonl"
	dst := filepath.Join(filepath.Dir(src), name)
	if err := fsutil.WriteNew(dst, out.Bytes(), fsutil.FileMode); err != nil {
		return nil, err
	}
	return &Resumed{SessionID: id, Transcript: dst, FromSession: session, IncludesResult: found || callID == "", Command: ResumeCommand(id)}, nil
}

// newThreadID returns a random UUID version 7 (the shape of Codex thread ids).
func newThreadID(now time.Time) string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(now.UnixMilli()))
	copy(b[0:6], ms[2:8])
	b[6] = b[6]&0x0f | 0x70
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
