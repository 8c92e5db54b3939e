package gemini

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// ErrNoChat reports that the session's chat file, or the call in it, cannot
// be found.
var ErrNoChat = errors.New("no Gemini CLI chat to resume")

const maxChatBytes = 256 << 20

// Resumed is a Gemini conversation bound to a fresh session id.
type Resumed struct {
	SessionID      string `json:"session_id"`
	Transcript     string `json:"transcript"`
	FromSession    string `json:"from_session"`
	IncludesResult bool   `json:"includes_result"`
	Command        string `json:"command"`
}

func validSession(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// FindChat returns the chat file of session: the regular file
// geminiDir/tmp/<project>/chats/session-*-<first 8 of id>.jsonl whose header
// names the session.
func FindChat(geminiDir, session string) (string, error) {
	if !validSession(session) || len(session) < 8 {
		return "", fmt.Errorf("%w: invalid session id %q", ErrNoChat, session)
	}
	m, _ := filepath.Glob(filepath.Join(geminiDir, "tmp", "*", "chats", "session-*-"+session[:8]+".jsonl"))
	for _, p := range m {
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		b, err := fsutil.ReadFileNoFollow(p, maxChatBytes)
		if err != nil {
			continue
		}
		first, _, _ := bytes.Cut(b, []byte{'\n'})
		var h struct {
			SessionID string `json:"sessionId"`
		}
		if json.Unmarshal(first, &h) == nil && h.SessionID == session {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: no chat of session %s under %s", ErrNoChat, session, filepath.Join(geminiDir, "tmp"))
}

type chatLine struct {
	SessionID *string `json:"sessionId"`
	Type      string  `json:"type"`
	ToolCalls []struct {
		ID string `json:"id"`
	} `json:"toolCalls"`
	Content json.RawMessage `json:"content"`
}

// ResumeConversation binds the conversation of session, cut right after the
// result of its k-th tool call (toolUseID order-k; "" keeps it whole), to a
// fresh session id: a new chat file beside the original, header rewritten,
// every line up to the user message holding that call's functionResponse.
// The chat is append-only, so the live file holds the call whatever was
// rewound since. A resume of the same id appends a new header and the
// whole history again: every header is rewritten, each call id counts once
// (the order the hooks saw), and the copy stops at the first result of the
// k-th call, so a call made after a resume is found past the repeat.
func ResumeConversation(geminiDir, session, toolUseID string, now time.Time) (*Resumed, error) {
	k := 0
	if toolUseID != "" {
		var ok bool
		if k, ok = OrderOf(toolUseID); !ok {
			return nil, fmt.Errorf("%w: tool call %q has no order id", ErrNoChat, toolUseID)
		}
	}
	src, err := FindChat(geminiDir, session)
	if err != nil {
		return nil, err
	}
	b, err := fsutil.ReadFileNoFollow(src, maxChatBytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoChat, err)
	}
	id := newUUID()
	var out bytes.Buffer
	seen := map[string]bool{}
	var order []string
	target := ""
	found := false
	for _, line := range bytes.Split(b, []byte{'\n'}) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var l chatLine
		if err := json.Unmarshal(line, &l); err != nil {
			break // a torn last line ends the copy
		}
		for _, c := range l.ToolCalls {
			if c.ID != "" && !seen[c.ID] {
				seen[c.ID] = true
				order = append(order, c.ID)
				if len(order) == k {
					target = c.ID
				}
			}
		}
		if l.SessionID != nil {
			var m map[string]json.RawMessage
			if err := json.Unmarshal(line, &m); err != nil {
				return nil, err
			}
			m["sessionId"], _ = json.Marshal(id)
			line, _ = json.Marshal(m)
		}
		out.Write(line)
		out.WriteByte('\n')
		if target != "" && l.Type == "user" && bytes.Contains(l.Content, []byte(`"functionResponse"`)) && bytes.Contains(l.Content, []byte(`"`+target+`"`)) {
			found = true
			break
		}
	}
	if k > 0 && target == "" {
		return nil, fmt.Errorf("%w: the chat of session %s holds %d tool calls, not call %d", ErrNoChat, session, len(order), k)
	}
	name := "session-" + now.UTC().Format("2006-01-02T15-04") + "-" + id[:8] + ".jsonl"
	dst := filepath.Join(filepath.Dir(src), name)
	if err := fsutil.WriteNew(dst, out.Bytes(), fsutil.FileMode); err != nil {
		return nil, err
	}
	return &Resumed{SessionID: id, Transcript: dst, FromSession: session, IncludesResult: found || k == 0, Command: ResumeCommand(id)}, nil
}

func newUUID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return strings.ToLower(fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]))
}
