// Package event defines the typed event records that agent adapters produce
// and the spool retains.
package event

import (
	"encoding/json"
	"time"
)

// Kind names what happened in an agent session.
type Kind string

// Event kinds, one per supported agent lifecycle point.
const (
	SessionStart   Kind = "session_start"
	PromptSubmit   Kind = "prompt_submit"
	ToolStart      Kind = "tool_start"
	ToolFinish     Kind = "tool_finish"
	MessageDisplay Kind = "message_display"
	TurnEnd        Kind = "turn_end"
	PreCompact     Kind = "pre_compact"
	SubagentStart  Kind = "subagent_start"
	SubagentStop   Kind = "subagent_stop"
	SessionEnd     Kind = "session_end"
)

// Tool finish outcomes as the host reported them. Returned means the host's
// hook fired for a finished call; it is not evidence that the call worked.
const (
	OutcomeReturned = "returned"
	OutcomeFailed   = "failed"
	// OutcomeUnknown is a finish whose host did not say how the tool ended
	// (Codex gives no exit code in PostToolUse; see Record.Reason).
	OutcomeUnknown = "unknown"
)

// Capture modes of a checkout.
const (
	ModeMetadataOnly       = "metadata-only"
	ModeLocalConversation  = "local-conversation"
	ModeSharedConversation = "shared-conversation"
)

// Record is one captured event as retained in the private spool.
type Record struct {
	// Seq is the spool-local arrival order, assigned on append (1-based).
	Seq uint64 `json:"seq"`
	// Agent names the host adapter, e.g. "claude-code".
	Agent string `json:"agent"`
	// SessionID is the native session id the host reported.
	SessionID string `json:"session_id"`
	Kind      Kind   `json:"kind"`
	// HookEvent is the host's own event name, e.g. "PostToolUseFailure".
	HookEvent string `json:"hook_event"`
	ToolName  string `json:"tool_name,omitempty"`
	ToolUseID string `json:"tool_use_id,omitempty"`
	// Source is the SessionStart source (startup, resume, clear, compact, other).
	Source string `json:"source,omitempty"`
	// Reason is the SessionEnd reason (clear, logout, prompt_input_exit, other).
	Reason string `json:"reason,omitempty"`
	// Outcome is returned or failed on a tool finish.
	Outcome string `json:"outcome,omitempty"`
	AgentID string `json:"agent_id,omitempty"`
	// MessageID, FragmentIndex and Final are the host's correlation fields
	// of a MessageDisplay fragment, when it supplies them.
	MessageID     string `json:"message_id,omitempty"`
	FragmentIndex *int   `json:"fragment_index,omitempty"`
	Final         *bool  `json:"final,omitempty"`
	AgentType     string `json:"agent_type,omitempty"`
	// WorkID, Generation and CanonicalSession are the exact Hub target the
	// record was resolved to when it was captured; all empty for a deferred
	// fact captured while no exact authorized target existed.
	WorkID           string `json:"work_id,omitempty"`
	Generation       int64  `json:"generation,omitempty"`
	CanonicalSession string `json:"canonical_session,omitempty"`
	// Deferred marks a sanitized local fact kept while no exact target
	// could be resolved; it is never delivered. A deferred fact of a
	// session that already had an exact target copies that target (WorkID,
	// Generation, CanonicalSession; Association "copied"); one captured
	// before any exact target has none (Association "unassociated").
	Deferred bool `json:"deferred,omitempty"`
	// Association says how the record's target was chosen: "exact" (this
	// invocation resolved it), "copied" (a deferred fact copying the
	// session's last exact target) or "unassociated" (no target). Empty on
	// records written before shared sequences.
	Association string `json:"association,omitempty"`
	// DeferredSource is the checkout's source a deferred PreToolUse of a
	// tool with an execution rule observed when no target resolved (HEAD,
	// tree and a manifest digest; never content), when it could be read.
	DeferredSource *SourceBinding `json:"deferred_source,omitempty"`
	// DeferredReason says why a deferred fact stayed local: hub_unreachable,
	// or the Hub's refusal (e.g. no_current_work). Empty on records written
	// before it was recorded.
	DeferredReason string `json:"deferred_reason,omitempty"`
	// Sequenced is true on records written with shared sequences: the Hub
	// event sequence is SharedSeq, not Seq. Legacy records (false) keep the
	// spool-wide mapping.
	Sequenced bool `json:"sequenced,omitempty"`
	// SharedSeq is the record's reserved sequence in its target's shared
	// stream (per Work, generation and canonical session; per observed
	// session for an unassociated fact). Gap records name the sequence of
	// the event they concern, or 0. Reserved durably before the append, so
	// a crash leaves a hole and never a reuse.
	SharedSeq uint64 `json:"shared_seq,omitempty"`
	// Stream is the identity space of the record's shared sequence and
	// envelope identity: the spool's observation scope and the epoch of
	// its capture ledger ("obs_<32 hex>.<16 hex>"). Two spools (a re-enable,
	// a second worktree) or a lost ledger never share a stream, so their
	// sequences and identities never collide on the Hub. Empty on records
	// written before streams: those keep the legacy identity and the Hub's
	// legacy stream.
	Stream string `json:"stream,omitempty"`
	// ObservedAt is the hook process's receipt time, not a host timestamp.
	ObservedAt  time.Time `json:"observed_at"`
	CaptureMode string    `json:"capture_mode"`
	// Body holds conversation content, only in local-conversation mode.
	Body *Body `json:"body,omitempty"`
	// BodyRef is the opaque identity of the body as the spool retains it
	// (an artifact). Its Availability is "missing" when the content could not
	// be retained; a content_not_retained gap then names this record.
	BodyRef *ArtifactRef `json:"body_ref,omitempty"`
	// Gap describes a coverage hole; it is set exactly when Kind is KindGap.
	Gap *GapInfo `json:"gap,omitempty"`
	// Managed marks a managed recipe Pre/Post event, which compaction keeps
	// whole in the replay index.
	Managed bool `json:"managed,omitempty"`
	// Action is the action fact of an ActionStart or ActionFinish record.
	Action *Action `json:"action,omitempty"`
	// Usage is set exactly when Kind is KindUsage (see usage.go).
	Usage *Usage `json:"usage,omitempty"`
	// Setup is the setup the hook of this event exposed, if any.
	Setup *Setup `json:"setup,omitempty"`
}

// Body is the local-only conversation content of an event.
type Body struct {
	Prompt       string          `json:"prompt,omitempty"`
	ToolInput    json.RawMessage `json:"tool_input,omitempty"`
	ToolResponse json.RawMessage `json:"tool_response,omitempty"`
	Error        string          `json:"error,omitempty"`
	Message      string          `json:"message,omitempty"`
	// Redactions counts the secrets replaced in a shared-conversation body.
	Redactions int `json:"redactions,omitempty"`
}

// Empty reports whether the body holds no content.
func (b *Body) Empty() bool {
	return b.Prompt == "" && len(b.ToolInput) == 0 && len(b.ToolResponse) == 0 && b.Error == "" && b.Message == ""
}
