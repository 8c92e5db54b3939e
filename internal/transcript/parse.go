// Package transcript reads Claude Code JSONL session transcripts: the
// bounded, cursor-driven reader the hook uses under a configured
// --claude-history-root, and the parser that an explicit import shares. It
// selects only structured provider usage and identity metadata (and, in a
// conversation capture mode, the visible prompt, assistant-text, tool-use and
// tool-result blocks, never thinking). It never makes a model request.
package transcript

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/agentscm/agentscm/internal/event"
)

// HookEvent is the HookEvent of every record the transcript reader produces,
// so a record read from a transcript is never mistaken for a live hook.
const HookEvent = "transcript"

// Gap reasons of the capture_interrupted gaps the reader records.
const (
	ReasonReplaced  = "transcript_replaced"
	ReasonTruncated = "transcript_truncated"
	ReasonMalformed = "transcript_malformed_record"
	ReasonOversized = "transcript_oversized_record"
	ReasonForeign   = "transcript_foreign_session"
	ReasonRebound   = "transcript_work_changed"
)

// Bounds on what one record may contribute.
const (
	maxIDLen        = 256
	maxModels       = 32
	maxBlocksPerRec = 256
)

// Selection says which records a parse produces besides usage.
type Selection struct {
	// Prompts selects visible user text.
	Prompts bool
	// AssistantText selects assistant text blocks.
	AssistantText bool
	// Tools selects tool_use and tool_result blocks.
	Tools bool
	// Bodies keeps the selected blocks' content (a conversation capture
	// mode); without it only the typed facts are produced.
	Bodies bool
}

// State is the parser's memory between lines, persisted in a Cursor so a
// message split over several records (Claude Code writes one content block
// per record, each repeating the message's usage) yields one usage record.
type State struct {
	// LastMessageID is the provider message id of the latest assistant
	// record.
	LastMessageID string `json:"last_message_id,omitempty"`
	// Blocks counts the content blocks seen so far of LastMessageID.
	Blocks int `json:"blocks,omitempty"`
	// Pending is LastMessageID's usage while the message may still be
	// incomplete (no stop_reason yet).
	Pending *PendingUsage `json:"pending,omitempty"`
}

// PendingUsage is a request-scoped usage record not yet emitted.
type PendingUsage struct {
	Usage event.Usage `json:"usage"`
	At    time.Time   `json:"at"`
}

// Parser turns complete transcript lines of one session into records.
type Parser struct {
	// Session is the observed native session id; a record naming another
	// session is foreign.
	Session string
	Select  Selection
	State   State
	// Now stamps records whose transcript line carries no valid timestamp.
	Now time.Time
	// Counts of refused lines, reported as gaps by the caller.
	Malformed, Foreign int
}

type rawUsage struct {
	InputTokens              *int64 `json:"input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
}

type rawMessage struct {
	ID         string          `json:"id"`
	Role       string          `json:"role"`
	Model      string          `json:"model"`
	StopReason *string         `json:"stop_reason"`
	Usage      *rawUsage       `json:"usage"`
	Content    json.RawMessage `json:"content"`
}

type rawModelUsage struct {
	InputTokens              *int64 `json:"inputTokens"`
	OutputTokens             *int64 `json:"outputTokens"`
	CacheReadInputTokens     *int64 `json:"cacheReadInputTokens"`
	CacheCreationInputTokens *int64 `json:"cacheCreationInputTokens"`
}

type rawRecord struct {
	Type       string                   `json:"type"`
	SessionID  *string                  `json:"sessionId"`
	Timestamp  string                   `json:"timestamp"`
	IsMeta     bool                     `json:"isMeta"`
	Message    *rawMessage              `json:"message"`
	ModelUsage map[string]rawModelUsage `json:"modelUsage"`
}

type rawBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

// Line parses one complete transcript line (without its newline) and
// appends the records it yields to out. A line that is not a JSON object
// counts as malformed and one naming another session as foreign; both yield
// nothing.
func (p *Parser) Line(line []byte, out []event.Record) []event.Record {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return out
	}
	h, ok := scanHead(line)
	if !ok {
		p.Malformed++
		return out
	}
	if h.hasSession && h.session != p.Session {
		p.Foreign++
		return out
	}
	switch h.typ {
	case "assistant", "cost-state":
	case "user":
		if !p.Select.Prompts && !p.Select.Tools {
			return p.Flush(out) // nothing of a user record is selected
		}
	case "system", "summary":
		return p.Flush(out)
	default:
		return out // attachments and bookkeeping: nothing to select
	}
	var r rawRecord
	if json.Unmarshal(line, &r) != nil {
		p.Malformed++
		return out
	}
	at := p.Now.UTC().Truncate(time.Second)
	if ts, err := time.Parse(time.RFC3339Nano, r.Timestamp); err == nil && ts.Unix() > 0 && ts.Unix() <= maxUnixTime {
		at = ts.UTC()
	}
	switch {
	case r.Type == "assistant" && r.Message != nil:
		return p.assistant(&r, at, out)
	case r.Type == "cost-state":
		out = p.Flush(out)
		return p.cumulative(&r, at, out)
	case r.Type == "user" && r.Message != nil:
		out = p.Flush(out)
		return p.user(&r, at, out)
	case r.Type == "user" || r.Type == "system" || r.Type == "summary":
		return p.Flush(out)
	}
	return out
}

// Flush emits the pending request-scoped usage record, if any: the turn or
// the input ended, so the message is complete.
func (p *Parser) Flush(out []event.Record) []event.Record {
	if p.State.Pending == nil {
		return out
	}
	pu := p.State.Pending
	p.State.Pending = nil
	u := pu.Usage
	return append(out, p.record(event.KindUsage, pu.At, func(rec *event.Record) { rec.Usage = &u }))
}

func (p *Parser) record(kind event.Kind, at time.Time, fill func(*event.Record)) event.Record {
	rec := event.Record{Agent: "claude-code", SessionID: p.Session, Kind: kind, HookEvent: HookEvent, ObservedAt: at}
	fill(&rec)
	return rec
}

func (p *Parser) assistant(r *rawRecord, at time.Time, out []event.Record) []event.Record {
	m := r.Message
	id := m.ID
	if !validID(id) {
		// An assistant record without a usable provider message id has no
		// identity to deliver usage under.
		out = p.Flush(out)
		p.State.LastMessageID, p.State.Blocks = "", 0
		return p.blocks(m.Content, "", 0, at, true, out)
	}
	if id != p.State.LastMessageID {
		out = p.Flush(out)
		p.State.LastMessageID, p.State.Blocks = id, 0
		if m.Model != "<synthetic>" {
			// Claude Code writes "<synthetic>" messages for local errors:
			// no provider request, no usage.
			p.State.Pending = &PendingUsage{Usage: usageOf(id, m), At: at}
		}
	} else if p.State.Pending != nil {
		p.State.Pending.Usage = usageOf(id, m)
	}
	if m.StopReason != nil {
		out = p.Flush(out)
	}
	first := p.State.Blocks
	out = p.blocks(m.Content, id, first, at, true, out)
	p.State.Blocks += countBlocks(m.Content)
	return out
}

func usageOf(id string, m *rawMessage) event.Usage {
	u := event.Usage{Scope: event.UsageScopeRequest, MessageID: id}
	if validText(m.Model) {
		u.Model = m.Model
	}
	if m.Usage != nil {
		u.InputTokens = nonNeg(m.Usage.InputTokens)
		u.OutputTokens = nonNeg(m.Usage.OutputTokens)
		u.CacheCreationInputTokens = nonNeg(m.Usage.CacheCreationInputTokens)
		u.CacheReadInputTokens = nonNeg(m.Usage.CacheReadInputTokens)
	}
	return u
}

// nonNeg keeps a reported count; a negative one is not a count and stays
// unknown.
// maxTokenCount and maxUnixTime are the Hub's admission bounds
// (api.MaxTokenCount and api.MaxUnixTime, pinned by a test). A token count
// above the bound is not a credible provider count and reads as unknown, and
// a timestamp past it as absent (the receipt time is used), so the Hub never
// refuses the record and leaves it pending for good.
const (
	maxTokenCount = 1 << 40
	maxUnixTime   = 253402300799
)

// nonNeg keeps a credible count: 0 to maxTokenCount, else unknown (nil).
func nonNeg(v *int64) *int64 {
	if v == nil || *v < 0 || *v > maxTokenCount {
		return nil
	}
	n := *v
	return &n
}

func (p *Parser) cumulative(r *rawRecord, at time.Time, out []event.Record) []event.Record {
	models := make([]string, 0, len(r.ModelUsage))
	for name := range r.ModelUsage {
		if validText(name) && name != "" {
			models = append(models, name)
		}
	}
	sort.Strings(models)
	if len(models) > maxModels {
		models = models[:maxModels]
	}
	for _, name := range models {
		mu := r.ModelUsage[name]
		u := event.Usage{Scope: event.UsageScopeSessionCumulative, Model: name,
			InputTokens: nonNeg(mu.InputTokens), OutputTokens: nonNeg(mu.OutputTokens),
			CacheCreationInputTokens: nonNeg(mu.CacheCreationInputTokens), CacheReadInputTokens: nonNeg(mu.CacheReadInputTokens)}
		out = append(out, p.record(event.KindUsage, at, func(rec *event.Record) { rec.Usage = &u }))
	}
	return out
}

func (p *Parser) user(r *rawRecord, at time.Time, out []event.Record) []event.Record {
	if r.IsMeta {
		return out // host-injected context, not something the user typed
	}
	var s string
	if json.Unmarshal(r.Message.Content, &s) == nil {
		if p.Select.Prompts && s != "" {
			out = append(out, p.record(event.PromptSubmit, at, func(rec *event.Record) {
				if p.Select.Bodies {
					rec.Body = &event.Body{Prompt: s}
				}
			}))
		}
		return out
	}
	return p.blocks(r.Message.Content, "", 0, at, false, out)
}

func countBlocks(content json.RawMessage) int {
	var bs []json.RawMessage
	if json.Unmarshal(content, &bs) != nil {
		return 0
	}
	return len(bs)
}

// blocks selects the visible blocks of a message's content. Thinking and
// redacted_thinking blocks are never selected.
func (p *Parser) blocks(content json.RawMessage, msgID string, first int, at time.Time, assistant bool, out []event.Record) []event.Record {
	var bs []rawBlock
	if len(content) == 0 || json.Unmarshal(content, &bs) != nil {
		return out
	}
	if len(bs) > maxBlocksPerRec {
		bs = bs[:maxBlocksPerRec]
	}
	for i, b := range bs {
		idx := first + i
		switch {
		case b.Type == "text" && assistant && p.Select.AssistantText:
			if msgID == "" {
				continue // no identity to correlate the fragment
			}
			out = append(out, p.record(event.MessageDisplay, at, func(rec *event.Record) {
				rec.MessageID, rec.FragmentIndex = msgID, &idx
				if p.Select.Bodies && b.Text != "" {
					rec.Body = &event.Body{Message: b.Text}
				}
			}))
		case b.Type == "text" && !assistant && p.Select.Prompts:
			out = append(out, p.record(event.PromptSubmit, at, func(rec *event.Record) {
				if p.Select.Bodies && b.Text != "" {
					rec.Body = &event.Body{Prompt: b.Text}
				}
			}))
		case b.Type == "tool_use" && assistant && p.Select.Tools:
			if !validID(b.Name) || (b.ID != "" && !validID(b.ID)) {
				continue
			}
			out = append(out, p.record(event.ToolStart, at, func(rec *event.Record) {
				rec.ToolName, rec.ToolUseID = b.Name, b.ID
				if p.Select.Bodies {
					rec.Body = &event.Body{ToolInput: compact(b.Input)}
				}
			}))
		case b.Type == "tool_result" && !assistant && p.Select.Tools:
			if b.ToolUseID != "" && !validID(b.ToolUseID) {
				continue
			}
			out = append(out, p.record(event.ToolFinish, at, func(rec *event.Record) {
				rec.ToolUseID, rec.Outcome = b.ToolUseID, event.OutcomeReturned
				if b.IsError {
					rec.Outcome = event.OutcomeFailed
				}
				if p.Select.Bodies {
					rec.Body = &event.Body{ToolResponse: compact(b.Content)}
				}
			}))
		}
	}
	return out
}

func compact(raw json.RawMessage) json.RawMessage {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return nil
	}
	return buf.Bytes()
}

// validID reports whether s is a usable provider identifier: 1 to 256 bytes
// of printable UTF-8 without spaces.
func validID(s string) bool {
	if s == "" || len(s) > maxIDLen || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

func validText(s string) bool {
	if len(s) > maxIDLen || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// gapRecord builds a capture_interrupted gap of the session.
func gapRecord(session, reason, detail string, at time.Time) event.Record {
	return event.Record{Agent: "claude-code", SessionID: session, Kind: event.KindGap, HookEvent: HookEvent,
		ObservedAt: at.UTC().Truncate(time.Second),
		Gap:        &event.GapInfo{Kind: event.GapCaptureInterrupted, Reason: reason, Detail: detail}}
}

// Gaps appends one gap per kind of refused line counted so far and resets
// the counts.
func (p *Parser) Gaps(out []event.Record) []event.Record {
	if p.Malformed > 0 {
		out = append(out, gapRecord(p.Session, ReasonMalformed, fmt.Sprintf("%d malformed transcript records skipped", p.Malformed), p.Now))
	}
	if p.Foreign > 0 {
		out = append(out, gapRecord(p.Session, ReasonForeign, fmt.Sprintf("%d transcript records of another session skipped", p.Foreign), p.Now))
	}
	p.Malformed, p.Foreign = 0, 0
	return out
}

// LocalOnly reports whether a retained record came from a transcript as
// conversation content (assistant text, prompts, tool blocks) rather than
// usage or a gap. Such records stay in the spool and are never delivered:
// they take no place in the Hub's event sequence, which only live hook
// events number.
func LocalOnly(r *event.Record) bool {
	return r.HookEvent == HookEvent && r.Kind != event.KindUsage && r.Kind != event.KindGap
}
