// Package codex is the Codex CLI adapter: it decodes and validates Codex
// hook payloads (.codex/hooks.json, the same shape as Claude Code's
// settings hooks), normalises them into the decoded form the capture hook
// consumes, maps them to typed event records, reads the exit code of a
// shell call from the session's rollout file (the hook payload carries
// none), and cuts a rollout into a fresh session for `codex exec resume`.
package codex

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentscm/agentscm/internal/agent"
	"github.com/agentscm/agentscm/internal/agent/capability"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/fsutil"
)

// AgentName identifies Codex in event records and declarations.
const AgentName = "codex"

// Version is the Codex CLI release whose hook payloads this adapter was
// qualified against (test/e2e/codex_test.go).
const Version = "0.169.0"

// Marked subcommands of the hooks agentscm installs for Codex.
const (
	HookSubcommand      = "change-capture hook-codex"
	ChangelogSubcommand = "changelog hook-codex"
)

// HookFile is where the hooks are installed, relative to the checkout.
const HookFile = ".codex/hooks.json"

// HookEvents are the Codex hook events the capture hook takes.
var HookEvents = []string{"SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop", "SessionEnd"}

// ChangelogEvents are the Codex hook events the changelog hook takes
// (PreToolUse and UserPromptSubmit capture work done outside the agent;
// Codex has no PostToolUseFailure: a failing command fires PostToolUse, a patch
// that fails to apply fires PreToolUse only and changes nothing).
var ChangelogEvents = []string{"PreToolUse", "PostToolUse", "UserPromptSubmit", "Stop", "SessionEnd"}

// Exit-code sources of a tool finish (Payload.ExitCodeSource).
const (
	ExitFromRollout   = "rollout"
	ExitNoRollout     = "no_rollout"         // transcript_path null (--ephemeral) or invalid
	ExitNotInRollout  = "not_in_rollout"     // the rollout has no completion of this call yet
	ExitRolloutUnread = "rollout_unreadable" // the rollout could not be read (bounded, no-follow)
)

// maxRolloutBytes bounds a rollout file read for an exit code or a resume.
const maxRolloutBytes = 256 << 20

// Decode parses one Codex hook payload into the decoded form the capture
// and changelog hooks consume. For a PostToolUse it looks up the call's
// exit code in the rollout file the payload names and, when found, gives
// it as tool_response {"exit_code": N, "output": <the host's text>}, so
// the action path reads it as an explicit exit code; ExitCodeSource says
// where it came from or why it is unknown.
func Decode(b []byte) (*agent.Payload, error) {
	p, err := agent.DecodePayload(b)
	if err != nil {
		return nil, fmt.Errorf("codex: %w", err)
	}
	p.Host = AgentName
	if p.HookEventName == "PostToolUse" {
		code, src := RolloutExitCode(p.TranscriptPath, p.SessionID, p.ToolUseID)
		p.ExitCodeSource = src
		if code != nil {
			resp := map[string]json.RawMessage{"exit_code": json.RawMessage(strconv.Itoa(*code))}
			if len(bytes.TrimSpace(p.ToolResponse)) > 0 {
				resp["output"] = p.ToolResponse
			}
			p.ToolResponse, _ = json.Marshal(resp)
		}
	}
	return p, nil
}

var sessionEndReasons = map[string]bool{"other": true, "clear": true, "logout": true, "exit": true}

// Map turns a decoded Codex payload into the event record to retain. It is
// Claude Code's mapping (the hook events share names and fields) with the
// agent set to codex and Codex's own facts: a PostToolUse is returned when
// the rollout holds exit code 0 (or a completed patch), failed on another
// exit code or a failed status, and of unknown outcome, with the reason,
// when the rollout does not say; Stop carries last_assistant_message in a
// conversation mode.
func Map(p *agent.Payload, mode string, now time.Time) (*event.Record, bool, error) {
	rec, ok, err := agent.MapHook(p, AgentName, mode, now)
	if err != nil || !ok {
		return rec, ok, err
	}
	rec.Agent = AgentName
	switch p.HookEventName {
	case "PostToolUse":
		if code, _ := exitCodeOf(p.ToolResponse); code != nil {
			if *code != 0 {
				rec.Outcome = event.OutcomeFailed
			}
		} else {
			rec.Outcome = event.OutcomeUnknown
			rec.Reason = "exit_code_" + p.ExitCodeSource
		}
	case "SessionEnd":
		rec.Reason = "other"
		if sessionEndReasons[p.Reason] {
			rec.Reason = p.Reason
		}
	case "Stop":
		local := mode == event.ModeLocalConversation || mode == event.ModeSharedConversation
		if local && p.LastAssistantMessage != nil && *p.LastAssistantMessage != "" {
			body := event.Body{Message: *p.LastAssistantMessage}
			if rec.Body != nil {
				body = *rec.Body
				body.Message = *p.LastAssistantMessage
			}
			if mode == event.ModeSharedConversation {
				agent.RedactBody(&body)
			}
			rec.Body = &body
		}
	}
	return rec, true, nil
}

func exitCodeOf(resp json.RawMessage) (*int, bool) {
	var v struct {
		ExitCode *int `json:"exit_code"`
	}
	if json.Unmarshal(resp, &v) != nil {
		return nil, false
	}
	return v.ExitCode, v.ExitCode != nil
}

// ValidRolloutPath reports whether path names a Codex rollout file of
// session: absolute, clean, basename rollout-<time>-<session>.jsonl under a
// sessions directory.
func ValidRolloutPath(path, session string) bool {
	if path == "" || !filepath.IsAbs(path) || filepath.Clean(path) != path || len(path) > 4096 {
		return false
	}
	base := filepath.Base(path)
	if !strings.HasPrefix(base, "rollout-") || !strings.HasSuffix(base, "-"+session+".jsonl") {
		return false
	}
	return strings.Contains(filepath.ToSlash(path), "/sessions/")
}

// RolloutExitCode finds the exit code of call callID in the rollout file:
// the item_completed event of the call (exit_code of a CommandExecution;
// status of a FileChange: completed is 0, failed is 1) or, failing that,
// "Process exited with code N" in the call's function_call_output. It
// returns nil and the reason when the rollout does not say.
func RolloutExitCode(path, session, callID string) (*int, string) {
	if callID == "" || !ValidRolloutPath(path, session) {
		return nil, ExitNoRollout
	}
	// The call's completion was just written: the tail holds it, so a
	// long session's rollout is not read whole on every PostToolUse.
	b, whole, err := readTail(path, rolloutTailBytes)
	if err != nil {
		return nil, ExitRolloutUnread
	}
	if code, src := exitCodeIn(b, callID); code != nil || whole {
		return code, src
	}
	if b, err = fsutil.ReadFileNoFollow(path, maxRolloutBytes); err != nil {
		return nil, ExitRolloutUnread
	}
	return exitCodeIn(b, callID)
}

// rolloutTailBytes is how much of a rollout's end is read first.
const rolloutTailBytes = 4 << 20

// readTail reads at most max bytes from the end of the regular file at path
// (no-follow), starting at a line boundary; whole is true when that is the
// entire file.
func readTail(path string, max int64) (b []byte, whole bool, err error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, false, err
	}
	if !fi.Mode().IsRegular() {
		return nil, false, fmt.Errorf("%s is not a regular file", path)
	}
	off := fi.Size() - max
	if off <= 0 {
		b, err = fsutil.ReadBounded(f, max)
		return b, true, err
	}
	b = make([]byte, max)
	n, err := f.ReadAt(b, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, false, err
	}
	b = b[:n]
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[i+1:] // drop the partial first line
	}
	return b, false, nil
}

// exitCodeIn finds the exit code of callID in rollout lines b.
func exitCodeIn(b []byte, callID string) (*int, string) {
	var fromOutput *int
	for _, line := range bytes.Split(b, []byte{'\n'}) {
		if !bytes.Contains(line, []byte(callID)) {
			continue
		}
		var l rolloutLine
		if json.Unmarshal(line, &l) != nil {
			continue
		}
		switch {
		case l.Type == "event_msg" && l.Payload.Type == "item_completed" && l.Payload.Item.ID == callID:
			it := l.Payload.Item
			if it.ExitCode != nil {
				return it.ExitCode, ExitFromRollout
			}
			if it.Type == "FileChange" && (it.Status == "completed" || it.Status == "failed") {
				c := 0
				if it.Status == "failed" {
					c = 1
				}
				return &c, ExitFromRollout
			}
		case l.Type == "response_item" && l.Payload.CallID == callID && strings.HasSuffix(l.Payload.Type, "_output"):
			var out string
			if json.Unmarshal(l.Payload.Output, &out) == nil {
				if m := exitedRE().FindStringSubmatch(out); m != nil {
					if c, err := strconv.Atoi(m[1]); err == nil {
						fromOutput = &c
					}
				}
			}
		}
	}
	if fromOutput != nil {
		return fromOutput, ExitFromRollout
	}
	return nil, ExitNotInRollout
}

var exitedRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?m)^(?:Process exited with code|Exit code:) (-?\d{1,9})$`)
})

type rolloutLine struct {
	Type    string `json:"type"`
	Payload struct {
		Type   string          `json:"type"`
		CallID string          `json:"call_id"`
		Output json.RawMessage `json:"output"`
		Item   struct {
			Type     string `json:"type"`
			ID       string `json:"id"`
			Status   string `json:"status"`
			ExitCode *int   `json:"exit_code"`
		} `json:"item"`
	} `json:"payload"`
}

// ResumeCommand is the command that continues session id headlessly.
func ResumeCommand(id string) string { return "codex exec resume " + id }

// Capabilities is the Codex adapter's capability declaration, as the live
// payloads of Codex CLI 0.169.0 carry them (docs/agents.md).
func Capabilities() capability.Declaration {
	return capability.Declaration{
		Agent:           AgentName,
		CompleteCapture: false,
		Summary:         "hooks in .codex/hooks.json: session boundaries, prompts, every shell and apply_patch call start and finish, turn ends; exit codes only from the rollout file; complete capture is not claimed (a patch that fails to apply fires no finish)",
		Fields: []capability.Field{
			{Name: "session_boundaries", Available: true, Note: "SessionStart (startup, resume) and SessionEnd (reason)"},
			{Name: "user_prompts", Available: true, Note: "UserPromptSubmit; bodies only in a conversation mode"},
			{Name: "tool_starts", Available: true, Note: "PreToolUse for Bash (exec_command) and apply_patch, with tool_use_id"},
			{Name: "tool_completions", Available: true, Note: "PostToolUse; a patch that fails to apply fires none (its start stays unfinished)"},
			{Name: "exit_codes", Available: false, Note: "not in PostToolUse; read from the rollout file (transcript_path) when it holds the call's completion, else the outcome is unknown with the reason"},
			{Name: "assistant_messages", Available: true, Note: "last_assistant_message of Stop, in a conversation mode; intermediate messages are not exposed"},
			{Name: "turn_markers", Available: true, Note: "Stop (never raises coverage)"},
			{Name: "setup", Available: true, Note: "model and permission_mode of each payload; other setup components unobserved"},
			{Name: "resume", Available: true, Note: "rewind --resume-conversation cuts the rollout after call N into a fresh session: codex exec resume <id>"},
			{Name: "provider_usage", Available: false, Note: "token counts are in the rollout, not read"},
			{Name: "subagents", Available: false, Note: "no subagent hooks"},
			{Name: "retrospective_history", Available: false, Note: "no import of earlier rollouts"},
		},
	}
}

// TrustNote says what Codex needs before it runs the hooks of a checkout's
// .codex/hooks.json (measured with 0.169.0: an untrusted hook is skipped
// without any message).
func TrustNote(root string) string {
	return fmt.Sprintf("Codex runs the hooks in %s only in a trusted project ([projects.%q] trust_level = \"trusted\" in $CODEX_HOME/config.toml; a -c override is ignored) and once the hooks are reviewed in Codex (/hooks), or with --dangerously-bypass-hook-trust; an untrusted hook is skipped silently", filepath.Join(root, HookFile), root)
}
