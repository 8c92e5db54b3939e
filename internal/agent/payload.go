// Package agent is the agent-neutral contract the adapters share: the
// decoded hook payload (Payload) with its bounded decode, the hook-event
// mapping the hosts that speak Claude Code's hook format share, and the
// setup a payload exposes. The adapters (internal/agent/claude, codex,
// gemini) import this package and never each other.
package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/redact"
)

// MaxPayloadBytes bounds one hook payload read from stdin.
const MaxPayloadBytes = 16 << 20

// Bounds on identifiers taken from a payload.
const (
	maxIDLen       = 256
	maxToolNameLen = 256
)

// ErrInvalidPayload reports a hook payload that is not a valid hook input
// (the message names Claude Code, whose hook format the hosts share).
var ErrInvalidPayload = errors.New("invalid Claude Code hook payload")

// Payload is the part of a hook input that agentscm reads: Claude Code's
// hook fields, which Codex CLI shares and Gemini CLI's adapter normalises to.
type Payload struct {
	SessionID      string          `json:"session_id"`
	TranscriptPath string          `json:"transcript_path"`
	Cwd            string          `json:"cwd"`
	HookEventName  string          `json:"hook_event_name"`
	Source         string          `json:"source"`
	Reason         string          `json:"reason"`
	Prompt         *string         `json:"prompt"`
	ToolName       string          `json:"tool_name"`
	ToolUseID      string          `json:"tool_use_id"`
	ToolInput      json.RawMessage `json:"tool_input"`
	ToolResponse   json.RawMessage `json:"tool_response"`
	Error          *string         `json:"error"`
	AgentID        string          `json:"agent_id"`
	AgentType      string          `json:"agent_type"`
	MessageID      string          `json:"message_id"`
	Index          *int            `json:"index"`
	Final          *bool           `json:"final"`
	Delta          *string         `json:"delta"`
	// Setup metadata some hooks expose (see setup.go).
	Model          json.RawMessage `json:"model"`
	PermissionMode json.RawMessage `json:"permission_mode"`
	Effort         json.RawMessage `json:"effort"`
	// LastAssistantMessage is the turn's final assistant text some hosts
	// send with Stop (Codex CLI); Claude Code's mapping does not read it.
	LastAssistantMessage *string `json:"last_assistant_message"`
	// Adapter-derived facts (never decoded from the payload): the host an
	// adapter normalised the payload from, and, for a tool finish whose
	// host gives no exit code, where the adapter looked for one.
	Host           string `json:"-"`
	ExitCodeSource string `json:"-"`
}

// DecodePayload parses one hook payload. It checks the fields every event
// needs (session id, event name, absolute cwd) and bounds identifiers.
func DecodePayload(b []byte) (*Payload, error) {
	if len(b) > MaxPayloadBytes {
		return nil, fmt.Errorf("%w: %d bytes exceeds the %d-byte bound", ErrInvalidPayload, len(b), MaxPayloadBytes)
	}
	var p Payload
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidPayload, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the JSON object", ErrInvalidPayload)
	}
	if err := checkID("hook_event_name", p.HookEventName, maxIDLen, true); err != nil {
		return nil, err
	}
	if err := checkID("session_id", p.SessionID, maxIDLen, true); err != nil {
		return nil, err
	}
	if p.Cwd == "" || !filepath.IsAbs(p.Cwd) || len(p.Cwd) > 4096 || !utf8.ValidString(p.Cwd) {
		return nil, fmt.Errorf("%w: cwd must be an absolute path", ErrInvalidPayload)
	}
	return &p, nil
}

// checkID validates an identifier: printable, no spaces, bounded.
func checkID(name, v string, limit int, required bool) error {
	if v == "" {
		if required {
			return fmt.Errorf("%w: %s is missing", ErrInvalidPayload, name)
		}
		return nil
	}
	if len(v) > limit {
		return fmt.Errorf("%w: %s is longer than %d bytes", ErrInvalidPayload, name, limit)
	}
	if !utf8.ValidString(v) {
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalidPayload, name)
	}
	for _, r := range v {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return fmt.Errorf("%w: %s has a space or control character", ErrInvalidPayload, name)
		}
	}
	return nil
}

var sessionStartSources = map[string]bool{"startup": true, "resume": true, "clear": true, "compact": true}

var sessionEndReasons = map[string]bool{"clear": true, "logout": true, "prompt_input_exit": true}

// MapHook turns a payload in Claude Code's hook format into the event
// record of agent name to retain, in the given capture mode, stamped with
// receipt time now. It returns ok=false for events that are ignored
// (unrecognised events, subagent markers without an agent id).
func MapHook(p *Payload, name, mode string, now time.Time) (rec *event.Record, ok bool, err error) {
	rec = &event.Record{
		Agent:       name,
		SessionID:   p.SessionID,
		HookEvent:   p.HookEventName,
		ObservedAt:  now.UTC().Truncate(time.Second),
		CaptureMode: mode,
	}
	// Both conversation modes select the visible bodies; shared-conversation
	// scrubs them before anything is written.
	local := mode == event.ModeLocalConversation || mode == event.ModeSharedConversation
	var body event.Body
	switch p.HookEventName {
	case "SessionStart":
		rec.Kind = event.SessionStart
		rec.Source = allowlisted(p.Source, sessionStartSources)
	case "UserPromptSubmit":
		rec.Kind = event.PromptSubmit
		if local && p.Prompt != nil {
			body.Prompt = *p.Prompt
		}
	case "PreToolUse", "PostToolUse", "PostToolUseFailure":
		rec.Kind = event.ToolStart
		if p.HookEventName != "PreToolUse" {
			rec.Kind = event.ToolFinish
			rec.Outcome = event.OutcomeReturned
			if p.HookEventName == "PostToolUseFailure" {
				rec.Outcome = event.OutcomeFailed
			}
		}
		if err := checkID("tool_name", p.ToolName, maxToolNameLen, true); err != nil {
			return nil, false, err
		}
		if err := checkID("tool_use_id", p.ToolUseID, maxIDLen, false); err != nil {
			return nil, false, err
		}
		rec.ToolName, rec.ToolUseID = p.ToolName, p.ToolUseID
		if local {
			body.ToolInput = compactJSON(p.ToolInput)
			if p.HookEventName == "PostToolUse" {
				body.ToolResponse = compactJSON(p.ToolResponse)
			}
			if p.Error != nil {
				body.Error = *p.Error
			}
		}
	case "MessageDisplay":
		rec.Kind = event.MessageDisplay
		if err := checkID("message_id", p.MessageID, maxIDLen, false); err != nil {
			return nil, false, err
		}
		rec.MessageID, rec.FragmentIndex, rec.Final = p.MessageID, p.Index, p.Final
		if rec.FragmentIndex != nil && *rec.FragmentIndex < 0 {
			return nil, false, fmt.Errorf("%w: negative message index", ErrInvalidPayload)
		}
		if local && p.Delta != nil {
			body.Message = *p.Delta
		}
	case "Stop":
		rec.Kind = event.TurnEnd
	case "PreCompact":
		rec.Kind = event.PreCompact
	case "SubagentStart", "SubagentStop":
		rec.Kind = event.SubagentStart
		if p.HookEventName == "SubagentStop" {
			rec.Kind = event.SubagentStop
		}
		if p.AgentID == "" || checkID("agent_id", p.AgentID, maxIDLen, true) != nil {
			return nil, false, nil // a subagent marker without a valid agent id is ignored
		}
		rec.AgentID = p.AgentID
		if checkID("agent_type", p.AgentType, maxIDLen, false) == nil {
			rec.AgentType = p.AgentType
		}
	case "SessionEnd":
		rec.Kind = event.SessionEnd
		rec.Reason = allowlisted(p.Reason, sessionEndReasons)
	default:
		return nil, false, nil
	}
	// The setup the hook exposed travels with its event: no record of its
	// own, so no place of its own in the session's sequence.
	rec.Setup = setupFrom(p.Model, p.PermissionMode, p.Effort)
	if local && !body.Empty() {
		if mode == event.ModeSharedConversation {
			redactBody(&body)
		}
		rec.Body = &body
	}
	return rec, true, nil
}

// redactBody replaces well-known credential shapes in every field of a
// shared-conversation body and counts the replacements: redact.Body.
func redactBody(b *event.Body) { redact.Body(b) }

func allowlisted(v string, allow map[string]bool) string {
	if allow[v] {
		return v
	}
	return "other"
}

func compactJSON(raw json.RawMessage) json.RawMessage {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil
	}
	return buf.Bytes()
}

// CheckID validates an identifier taken from a hook payload: printable, no
// spaces, at most limit bytes.
func CheckID(name, v string, limit int, required bool) error {
	return checkID(name, v, limit, required)
}
