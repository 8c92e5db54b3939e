package changelog

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// TranscriptRootName names the capture root that holds the checkout's Claude
// Code transcript directory (see ClaudeProjectDir), which changelog enable
// adds by default: a rewind then restores the conversation as it was at the
// call.
const TranscriptRootName = "claude-transcript"

// maxTranscriptBytes bounds a transcript read for resuming.
const maxTranscriptBytes = 512 << 20

// ErrNoTranscript reports that the session's transcript, or the tool call
// inside it, cannot be found.
var ErrNoTranscript = errors.New("no transcript to resume")

// ClaudeProjectDir returns the directory where Claude Code keeps the
// transcripts of sessions started in root: ~/.claude/projects/<root with
// every character other than an ASCII letter or digit replaced by '-'>, as
// Claude Code 2.1 names it. A name longer than 200 characters is cut there
// and suffixed by a hash of Claude's own; the one existing directory with
// that prefix is returned then.
func ClaudeProjectDir(home, root string) string {
	slug := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, root)
	base := filepath.Join(home, ".claude", "projects")
	if len(slug) <= 200 {
		return filepath.Join(base, slug)
	}
	if m, _ := filepath.Glob(filepath.Join(base, slug[:200]+"-*")); len(m) == 1 {
		return m[0]
	}
	return filepath.Join(base, slug[:200])
}

// Resumed is a conversation bound to a fresh session id.
type Resumed struct {
	SessionID  string `json:"session_id"`
	Transcript string `json:"transcript"`
	// FromSession is the session whose transcript was continued.
	FromSession string `json:"from_session"`
	// IncludesResult is true when the transcript ends with the tool call's
	// result, false when the host had not written it yet.
	IncludesResult bool   `json:"includes_result"`
	Command        string `json:"command"`
}

// ResumeConversation binds the conversation of session, cut right after the
// result of tool call toolUseID, to a fresh session id: it writes
// <dir>/<new id>.jsonl with every line up to that result and the session id
// rewritten, and returns the command that continues it. The transcript is
// read no-follow from the regular file whose basename is exactly
// <session>.jsonl in dir.
func ResumeConversation(dir, session, toolUseID string) (*Resumed, error) {
	return ResumeConversationFrom(dir, session, toolUseID, nil)
}

// ReadTranscript reads the transcript of session from the transcript
// directory dir (bounded, no-follow, regular file <session>.jsonl).
func ReadTranscript(dir, session string) ([]byte, error) {
	if err := checkSession(session); err != nil {
		return nil, err
	}
	if err := checkDir(dir); err != nil {
		return nil, err
	}
	b, err := fsutil.ReadFileNoFollow(filepath.Join(dir, session+".jsonl"), maxTranscriptBytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoTranscript, err)
	}
	return b, nil
}

// ResumeConversationFrom is ResumeConversation preferring an earlier copy of
// the transcript (pre, read before a rewind restored the transcript
// directory; nil when there was none): the hook captures a call before the
// host appends its result, so the transcript restored at call k ends with
// the call and the copy read before the rewind is the one that holds its
// result. The copy that holds the call's result wins, then the one that
// holds the call; the new transcript is written into dir either way.
func ResumeConversationFrom(dir, session, toolUseID string, pre []byte) (*Resumed, error) {
	if err := checkSession(session); err != nil {
		return nil, err
	}
	disk, derr := ReadTranscript(dir, session)
	if derr != nil && pre == nil {
		return nil, derr
	}
	if err := checkDir(dir); err != nil {
		return nil, err
	}
	var cands [][]byte
	if pre != nil {
		cands = append(cands, pre)
	}
	if derr == nil {
		cands = append(cands, disk)
	}
	var best *cut
	for _, b := range cands {
		c, err := cutTranscript(b, toolUseID)
		if err != nil {
			if errors.Is(err, ErrNoTranscript) {
				continue // a copy without the call; another may hold it
			}
			return nil, fmt.Errorf("transcript %s: %w", filepath.Join(dir, session+".jsonl"), err)
		}
		if best == nil || (c.found && !best.found) {
			best = c
		}
		if best.found {
			break
		}
	}
	if best == nil {
		return nil, fmt.Errorf("%w: tool call %s is not in the transcript of session %s", ErrNoTranscript, toolUseID, session)
	}
	dst := filepath.Join(dir, best.id+".jsonl")
	if err := fsutil.WriteNew(dst, best.out, fsutil.FileMode); err != nil {
		return nil, err
	}
	return &Resumed{SessionID: best.id, Transcript: dst, FromSession: session, IncludesResult: best.found || toolUseID == "", Command: "claude --resume " + best.id}, nil
}

func checkSession(session string) error {
	if session == "" || strings.ContainsAny(session, "/\\\x00") || session == "." || session == ".." {
		return fmt.Errorf("%w: invalid session id %q", ErrNoTranscript, session)
	}
	return nil
}

func checkDir(dir string) error {
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("%w: no transcript directory %s", ErrNoTranscript, dir)
	}
	return nil
}

// cut is a transcript cut right after a tool call's result, under a fresh
// session id.
type cut struct {
	id    string
	out   []byte
	found bool // the call's result is in out
}

// cutTranscript copies the transcript b up to the result of toolUseID (all
// of it when toolUseID is empty) with its session id replaced by a fresh
// one; ErrNoTranscript when the call is not in b.
func cutTranscript(b []byte, toolUseID string) (*cut, error) {
	id := newSessionID()
	var out bytes.Buffer
	found, sawUse := false, toolUseID == ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() && !found {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var entry map[string]json.RawMessage
		if err := json.Unmarshal(line, &entry); err != nil {
			if torn(b, line) {
				// The host was writing this line when the copy was read.
				break
			}
			return nil, fmt.Errorf("malformed line: %w", err)
		}
		if _, ok := entry["sessionId"]; ok {
			entry["sessionId"], _ = json.Marshal(id)
		}
		if toolUseID != "" {
			uses, results := toolIDs(entry["message"])
			sawUse = sawUse || uses[toolUseID]
			found = results[toolUseID]
		}
		enc, err := json.Marshal(entry)
		if err != nil {
			return nil, err
		}
		out.Write(enc)
		out.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !sawUse {
		return nil, fmt.Errorf("%w: tool call %s is not in it", ErrNoTranscript, toolUseID)
	}
	return &cut{id: id, out: out.Bytes(), found: found}, nil
}

// torn says whether line is b's last line and has no newline yet: a copy
// read while the host appended to the transcript.
func torn(b, line []byte) bool {
	return len(b) > 0 && b[len(b)-1] != '\n' && bytes.HasSuffix(b, line)
}

// toolIDs lists the tool_use ids and tool_result ids of a transcript
// message.
func toolIDs(raw json.RawMessage) (uses, results map[string]bool) {
	uses, results = map[string]bool{}, map[string]bool{}
	var m struct {
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(raw, &m) != nil {
		return
	}
	var blocks []struct {
		Type      string `json:"type"`
		ID        string `json:"id"`
		ToolUseID string `json:"tool_use_id"`
	}
	if json.Unmarshal(m.Content, &blocks) != nil {
		return
	}
	for _, b := range blocks {
		switch b.Type {
		case "tool_use":
			uses[b.ID] = true
		case "tool_result":
			results[b.ToolUseID] = true
		}
	}
	return
}

// newSessionID returns a random RFC 4122 version-4 UUID, the shape of a
// Claude Code session id.
func newSessionID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
