package api

// ChangeRecord is a Work's change-record projection: what the Hub holds
// about the Work, read without side effects. Shared bodies are never part of
// it.
type ChangeRecord struct {
	Work          Work            `json:"work"`
	Sessions      []SessionRecord `json:"sessions"`
	Events        []EventRecord   `json:"events"`
	EventsOmitted int64           `json:"events_omitted"`
	Actions       []ActionRecord  `json:"actions"`
	Gaps          []GapRecord     `json:"gaps"`
	Usage         UsageTotals     `json:"usage"`
	// Setups lists the setups the sessions' hooks exposed, by receipt
	// time; each names what was not observed.
	Setups   []SetupRecord `json:"setups"`
	Coverage Coverage      `json:"coverage"`
}

// SetupRecord is an observed setup as retained.
type SetupRecord struct {
	Session    string `json:"session"`
	Generation int64  `json:"generation"`
	Setup
	ReceivedAt int64 `json:"received_at"`
}

// SessionRecord is one canonical session of a Work at one generation.
type SessionRecord struct {
	Session          string   `json:"session"`
	Generation       int64    `json:"generation"`
	WorktreeID       string   `json:"worktree_id"`
	NativeSessionIDs []string `json:"native_session_ids"`
	// Agent is the host adapter that fed the session (claude-code, codex,
	// gemini): the first agent its envelopes named; "" (unknown) when
	// only clients before the field delivered to it.
	Agent    string `json:"agent"`
	Events   int64  `json:"events"`
	FirstSeq int64  `json:"first_seq"`
	LastSeq  int64  `json:"last_seq"`
	// MissingSeqs counts sequence numbers between 1 and LastSeq that the Hub
	// never received, summed over the session's streams.
	MissingSeqs int64 `json:"missing_seqs"`
	// Streams lists the client streams that fed the session, in the order
	// they first reached the Hub. Each has its own sequence from 1; with
	// more than one, FirstSeq and LastSeq are the latest stream's and a
	// stream_boundary gap marks each place one stream's account ends and
	// the next begins.
	Streams []StreamRecord `json:"streams,omitempty"`
}

// StreamRecord is one client stream's account of a session: a spool and
// capture ledger (its observation scope and epoch), or "" for the legacy
// stream of clients before streams.
type StreamRecord struct {
	Stream      string `json:"stream"`
	Events      int64  `json:"events"`
	FirstSeq    int64  `json:"first_seq"`
	LastSeq     int64  `json:"last_seq"`
	MissingSeqs int64  `json:"missing_seqs"`
	// FirstReceivedAt is when the stream's first event reached the Hub.
	FirstReceivedAt int64 `json:"first_received_at"`
}

// Hub-derived gap reasons.
const (
	// GapReasonStreamBoundary: another client stream (a re-enabled or
	// second spool) continued the session; what happened between the two
	// accounts was not observed.
	GapReasonStreamBoundary = "stream_boundary"
)

// EventRecord is an event as the Hub retained it.
type EventRecord struct {
	Session    string `json:"session"`
	Generation int64  `json:"generation"`
	// Stream is the client stream the event's seq belongs to.
	Stream string `json:"stream,omitempty"`
	// Agent is the agent of the event's session (SessionRecord.Agent).
	Agent string `json:"agent,omitempty"`
	Event
	ReceivedAt int64 `json:"received_at"`
}

// ActionRecord pairs an action start with its finish, when one arrived.
type ActionRecord struct {
	Session    string `json:"session"`
	Generation int64  `json:"generation"`
	ActionID   string `json:"action_id"`
	// Agent is the agent of the action's session (SessionRecord.Agent).
	Agent  string        `json:"agent,omitempty"`
	Start  *ActionStart  `json:"start,omitempty"`
	Finish *ActionFinish `json:"finish,omitempty"`
	// Status is complete, incomplete (no finish yet) or finish_without_start.
	Status string `json:"status"`
}

// GapRecord is an explicit gap as retained.
type GapRecord struct {
	Session    string `json:"session"`
	Generation int64  `json:"generation"`
	// Stream is the client stream a gap's sequence range refers to.
	Stream string `json:"stream,omitempty"`
	// Derived is true for a gap the Hub computed from what it holds (a
	// stream_boundary), not one a client delivered. PreviousStream and
	// PreviousLastSeq then name where the earlier account ended.
	Derived         bool   `json:"derived,omitempty"`
	PreviousStream  string `json:"previous_stream,omitempty"`
	PreviousLastSeq int64  `json:"previous_last_seq,omitempty"`
	Gap
	ReceivedAt int64 `json:"received_at"`
}

// UsageTotals sums a Work's request-scoped usage records. A count some
// records left unknown is summed over the others and the records that left
// it unknown are counted in Unknown (field name to count), so a partial sum
// never reads as complete. Session-cumulative records are never added: they
// are listed apart in SessionCumulative.
type UsageTotals struct {
	Records                  int64            `json:"records"`
	InputTokens              int64            `json:"input_tokens"`
	OutputTokens             int64            `json:"output_tokens"`
	CacheCreationInputTokens int64            `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64            `json:"cache_read_input_tokens"`
	Unknown                  map[string]int64 `json:"unknown,omitempty"`
	// Saturated names the fields whose sum would leave the 64-bit range:
	// they read 9223372036854775807 (2^63-1) and are not exact. Admission
	// bounds (MaxTokenCount) make this unreachable for data the Hub accepted.
	Saturated []string `json:"saturated,omitempty"`
	// SessionCumulative holds the latest session-cumulative record of each
	// session and model, excluded from the sums above.
	SessionCumulative []CumulativeUsage `json:"session_cumulative,omitempty"`
}

// CumulativeUsage is a session's own running usage total as the host
// reported it.
type CumulativeUsage struct {
	Session    string `json:"session"`
	Generation int64  `json:"generation"`
	Usage
	ReceivedAt int64 `json:"received_at"`
}

// Coverage states what the record can claim: complete only when every
// session's sequence is contiguous from 1, no gap was reported and every
// action that started finished.
type Coverage struct {
	// State is none (nothing captured), complete or partial.
	State   string   `json:"state"`
	Reasons []string `json:"reasons,omitempty"`
}
