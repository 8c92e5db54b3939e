package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"unicode/utf8"
)

// Envelope types.
const (
	TypeEvents       = "events"
	TypeActionStart  = "action_start"
	TypeActionFinish = "action_finish"
	TypeUsage        = "usage"
	TypeGap          = "gap"
)

// Bounds on client input. A request over a bound is refused, never cut.
const (
	MaxEnvelopeBytes  = 1 << 20
	MaxRequestBytes   = 64 << 10
	MaxEventsPerBatch = 1000
	MaxTextLen        = 1024
	MaxIDLen          = 256
	MaxStreamLen      = 128
	MaxAgentLen       = 64
)

// Envelope is one delivery unit from a client's spool: a typed payload bound
// to an exact target. Identity is the client's identity digest (64 lowercase
// hex); the Hub keeps the first body delivered under it. An exact replay is a
// duplicate and a different body under the same identity is a conflict.
type Envelope struct {
	Identity   string `json:"identity"`
	Type       string `json:"type"`
	WorkID     string `json:"work_id"`
	Generation int64  `json:"generation"`
	Session    string `json:"session"`
	// NativeSessionID is the observed native session, for the record.
	NativeSessionID string `json:"native_session_id,omitempty"`
	// Stream is the client's identity space of event sequences and gap
	// ranges: one per spool and capture ledger (the spool's observation
	// scope and a ledger epoch). Event sequences are unique per Work,
	// generation, canonical session and stream; a session fed by several
	// streams shows a stream_boundary gap where one stream's account ends
	// and the next begins. Empty is the legacy stream of clients before
	// streams.
	Stream string `json:"stream,omitempty"`
	// Agent names the host adapter whose hook observed the record
	// (claude-code, codex, gemini); empty from clients before the field.
	// A client sends it only to a Hub whose whoami lists FeatureAgent: an
	// older Hub refuses unknown fields. It never enters Digest, so a
	// replay with or without it is the same envelope.
	Agent string `json:"agent,omitempty"`

	Events       []Event       `json:"events,omitempty"`
	ActionStart  *ActionStart  `json:"action_start,omitempty"`
	ActionFinish *ActionFinish `json:"action_finish,omitempty"`
	Usage        *Usage        `json:"usage,omitempty"`
	Gap          *Gap          `json:"gap,omitempty"`
	// Body declares the conversation body the record carries (bodies.go):
	// set only for bodies retained in shared-conversation mode.
	Body *BodyDeclaration `json:"body,omitempty"`
}

// Event kinds the Hub accepts; an unknown kind is refused, so a newer client
// keeps such envelopes pending until the Hub is upgraded.
var eventKinds = map[string]bool{
	"session_start": true, "prompt_submit": true, "tool_start": true, "tool_finish": true,
	"message_display": true, "turn_end": true, "pre_compact": true, "subagent_start": true,
	"subagent_stop": true, "session_end": true,
}

// KindSessionEnd is the event kind that pauses the session's Work.
const KindSessionEnd = "session_end"

// Event is one typed event fact. ObservedAt may be a receipt time; it never
// takes part in identity or in the duplicate/conflict comparison.
type Event struct {
	Seq        int64  `json:"seq"`
	Kind       string `json:"kind"`
	HookEvent  string `json:"hook_event,omitempty"`
	ToolName   string `json:"tool_name,omitempty"`
	ToolUseID  string `json:"tool_use_id,omitempty"`
	Source     string `json:"source,omitempty"`
	Reason     string `json:"reason,omitempty"`
	Outcome    string `json:"outcome,omitempty"`
	AgentID    string `json:"agent_id,omitempty"`
	AgentType  string `json:"agent_type,omitempty"`
	ObservedAt int64  `json:"observed_at,omitempty"`
	// Setup is the setup the event's hook exposed, if any.
	Setup *Setup `json:"setup,omitempty"`
}

// SourceBinding is the exact source an action started on.
type SourceBinding struct {
	Head           string `json:"head,omitempty"`
	Tree           string `json:"tree,omitempty"`
	MergeBase      string `json:"merge_base,omitempty"`
	ManifestDigest string `json:"manifest_digest,omitempty"`
	Dirty          bool   `json:"dirty,omitempty"`
	Partial        bool   `json:"partial,omitempty"`
	// ManifestBytes, Retained, Transformed, Omissions and Stopped mirror
	// event.SourceBinding: the manifest's identity and the binding's
	// coverage, never a path or a byte of the checkout.
	ManifestBytes int64    `json:"manifest_bytes,omitempty"`
	Retained      bool     `json:"retained,omitempty"`
	Transformed   bool     `json:"transformed,omitempty"`
	Omissions     []string `json:"omissions,omitempty"`
	Stopped       string   `json:"stopped,omitempty"`
}

// MaxSourceOmissions bounds a source binding's omission kinds.
const MaxSourceOmissions = 16

// ActionStart is the durable start of an observed action.
type ActionStart struct {
	ActionID string `json:"action_id"`
	Tool     string `json:"tool"`
	Class    string `json:"class"`
	// Coverage is the rule's claimed coverage: complete, partial or unknown.
	Coverage         string         `json:"coverage,omitempty"`
	RecipeDigest     string         `json:"recipe_digest,omitempty"`
	SetupDigest      string         `json:"setup_digest,omitempty"`
	Source           *SourceBinding `json:"source,omitempty"`
	ObservationScope string         `json:"observation_scope,omitempty"`
	ObservationOrder int64          `json:"observation_order,omitempty"`
	StartedAt        int64          `json:"started_at,omitempty"`
}

// ActionFinish completes an action.
type ActionFinish struct {
	ActionID     string `json:"action_id"`
	Result       string `json:"result"`
	Verification string `json:"verification"`
	ExitCode     *int   `json:"exit_code,omitempty"`
	Drift        string `json:"drift,omitempty"`
	// SetupDigest is the setup current at completion. Stale is true exactly
	// when it differs from the start's SetupDigest: the finish was observed
	// under another setup than the one the action started with, so its
	// result says nothing about the started setup and source drift was not
	// checked (Drift is unknown).
	SetupDigest string `json:"setup_digest,omitempty"`
	Stale       bool   `json:"stale,omitempty"`
	FinishedAt  int64  `json:"finished_at,omitempty"`
}

// Usage scopes: a request-scoped record is one provider request and is
// summed into a Work's totals; a session-cumulative record is the host's own
// running total of a session, kept apart and never summed.
const (
	UsageScopeRequest           = "request"
	UsageScopeSessionCumulative = "session_cumulative"
)

// Usage is one provider usage record. A token count the provider did not
// report is absent (null), which means unknown, never zero.
type Usage struct {
	Scope                    string `json:"scope"`
	MessageID                string `json:"message_id,omitempty"`
	Model                    string `json:"model,omitempty"`
	InputTokens              *int64 `json:"input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
}

// Setup is the agent setup a native hook exposed: the opaque identity of the
// client's local setup artifact, any observed model, permission mode and
// effort, and the explicit list of setup components that were not observed.
// It is never a complete observed setup.
type Setup struct {
	Artifact       string   `json:"artifact"`
	Model          string   `json:"model,omitempty"`
	PermissionMode string   `json:"permission_mode,omitempty"`
	Effort         string   `json:"effort,omitempty"`
	Unobserved     []string `json:"unobserved"`
}

// MaxSetupComponents bounds a setup's list of unobserved components.
const MaxSetupComponents = 32

func (st *Setup) validate() *Error {
	if len(st.Artifact) != len("sha256:")+64 || st.Artifact[:7] != "sha256:" || !IsDigest(st.Artifact[7:]) {
		return bad("setup: artifact must be sha256:<64 lowercase hex>")
	}
	if st.Model == "" && st.PermissionMode == "" && st.Effort == "" {
		return bad("setup: nothing observed; no setup is recorded then")
	}
	if st.Unobserved == nil || len(st.Unobserved) > MaxSetupComponents {
		return bad("setup: unobserved must list at most %d components", MaxSetupComponents)
	}
	for _, v := range append([]string{st.Model, st.PermissionMode, st.Effort}, st.Unobserved...) {
		if len(v) > 128 || !validText(v) {
			return bad("setup: a field is too long or has control characters")
		}
	}
	for _, c := range st.Unobserved {
		if c == "" {
			return bad("setup: an unobserved component has no name")
		}
	}
	return nil
}

// Gap is an explicit hole in coverage.
type Gap struct {
	Kind    string `json:"kind"`
	Reason  string `json:"reason,omitempty"`
	FromSeq int64  `json:"from_seq,omitempty"`
	ToSeq   int64  `json:"to_seq,omitempty"`
}

var gapKinds = map[string]bool{
	"capture_interrupted": true, "identity_uncertain": true, "adapter_started_late": true,
	"redacted": true, "provider_history": true, "outage": true,
}

var (
	actionResults   = map[string]bool{"succeeded": true, "failed": true, "incomplete": true, "unknown": true}
	verifications   = map[string]bool{"passed": true, "failed": true, "incomplete": true, "unknown": true}
	actionClasses   = map[string]bool{"execution": true, "verification": true, "edit": true, "other": true}
	driftValues     = map[string]bool{"": true, "none_observed": true, "changed": true, "unknown": true}
	actionCoverages = map[string]bool{"complete": true, "partial": true, "unknown": true}
)

// IngestResult is the body of a 200 answer to an envelope delivery.
type IngestResult struct {
	// Status is "accepted" or "duplicate".
	Status   string `json:"status"`
	Identity string `json:"identity"`
	Digest   string `json:"digest"`
	// Paused is true when this envelope's SessionEnd paused the Work.
	Paused bool `json:"paused,omitempty"`
	// Body says what became of the envelope's body declaration: declared
	// (awaiting upload), declared_local, shares_first_declaration, or
	// body_not_shared (a shared-approved body of a session that was not in
	// shared-conversation mode, kept as a local declaration).
	Body string `json:"body,omitempty"`
}

// Ingest statuses.
const (
	StatusAccepted  = "accepted"
	StatusDuplicate = "duplicate"
)

// IsDigest reports whether s is 64 lowercase hex characters.
func IsDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ValidName reports whether s is a usable name or id: 1 to MaxIDLen bytes of
// printable UTF-8 with no control characters or slashes.
func ValidName(s string) bool {
	if s == "" || len(s) > MaxIDLen || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == '/' || r == '\\' {
			return false
		}
	}
	return true
}

// ValidAgent reports whether s is a usable agent name: 1 to MaxAgentLen
// bytes of lowercase ASCII letters, digits, '.', '_' and '-'. Any such
// name is kept, so a client with a new adapter is not refused.
func ValidAgent(s string) bool {
	if s == "" || len(s) > MaxAgentLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func validText(s string) bool {
	if len(s) > MaxTextLen || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 && r != '\t' {
			return false
		}
	}
	return true
}

func bad(format string, a ...any) *Error {
	return Errorf(http.StatusBadRequest, CodeBadRequest, format, a...)
}

// validateNames checks the optional names: native session, stream, agent.
func (e *Envelope) validateNames() error {
	if e.NativeSessionID != "" && !ValidName(e.NativeSessionID) {
		return bad("native_session_id is not valid")
	}
	if e.Stream != "" && (!ValidName(e.Stream) || len(e.Stream) > MaxStreamLen) {
		return bad("stream is not valid (at most %d printable bytes, no slashes)", MaxStreamLen)
	}
	if e.Agent != "" && !ValidAgent(e.Agent) {
		return bad("agent is not valid (1 to %d bytes of a-z, 0-9, '.', '_' or '-')", MaxAgentLen)
	}
	return nil
}

// Validate checks an envelope's shape: exactly the payload its type names,
// known kinds and bounded fields.
func (e *Envelope) Validate() error {
	if !IsDigest(e.Identity) {
		return bad("identity must be 64 lowercase hex characters")
	}
	if !ValidName(e.WorkID) || !ValidName(e.Session) {
		return bad("work_id and session are required")
	}
	if err := e.checkBounds(); err != nil {
		return err
	}
	if err := e.validateNames(); err != nil {
		return err
	}
	if e.Body != nil {
		if e.Type == TypeUsage || e.Type == TypeGap {
			return bad("a %s envelope declares no body", e.Type)
		}
		if err := e.Body.validate(); err != nil {
			return err
		}
	}
	n := 0
	if len(e.Events) > 0 {
		n++
	}
	for _, p := range []bool{e.ActionStart != nil, e.ActionFinish != nil, e.Usage != nil, e.Gap != nil} {
		if p {
			n++
		}
	}
	if n != 1 {
		return bad("an envelope carries exactly one payload")
	}
	switch e.Type {
	case TypeEvents:
		if len(e.Events) == 0 {
			return bad("events envelope without events")
		}
		if len(e.Events) > MaxEventsPerBatch {
			return bad("at most %d events per envelope", MaxEventsPerBatch)
		}
		seen := map[int64]bool{}
		for i, ev := range e.Events {
			if ev.Seq < 1 {
				return bad("event %d: seq must be at least 1", i)
			}
			if seen[ev.Seq] {
				return bad("event %d: seq %d repeated in the envelope", i, ev.Seq)
			}
			seen[ev.Seq] = true
			if !eventKinds[ev.Kind] {
				return bad("event %d: unknown kind %q", i, ev.Kind)
			}
			for _, s := range []string{ev.HookEvent, ev.ToolName, ev.ToolUseID, ev.Source, ev.Reason, ev.Outcome, ev.AgentID, ev.AgentType} {
				if !validText(s) {
					return bad("event %d: a field is too long or has control characters", i)
				}
			}
			if ev.ObservedAt < 0 {
				return bad("event %d: observed_at is negative", i)
			}
			if ev.Setup != nil {
				if err := ev.Setup.validate(); err != nil {
					return bad("event %d: %s", i, err.Message)
				}
			}
		}
	case TypeActionStart:
		a := e.ActionStart
		if a == nil {
			return bad("action_start envelope without action_start")
		}
		if !ValidName(a.ActionID) || !ValidName(a.Tool) {
			return bad("action_start needs action_id and tool")
		}
		if !actionClasses[a.Class] {
			return bad("action_start: unknown class %q", a.Class)
		}
		if a.Coverage != "" && !actionCoverages[a.Coverage] {
			return bad("action_start: unknown coverage %q", a.Coverage)
		}
		if a.ObservationOrder < 0 || a.StartedAt < 0 {
			return bad("action_start: observation_order and started_at cannot be negative")
		}
		for _, d := range []string{a.RecipeDigest, a.SetupDigest} {
			if d != "" && !IsDigest(d) {
				return bad("action_start: digests are 64 lowercase hex characters")
			}
		}
		if a.Source != nil {
			s := a.Source
			for _, v := range []string{s.Head, s.Tree, s.MergeBase, s.ManifestDigest} {
				if !validText(v) || len(v) > 128 {
					return bad("action_start: source binding field is not valid")
				}
			}
			if s.ManifestBytes < 0 || len(s.Omissions) > MaxSourceOmissions || !ValidName(s.Stopped) && s.Stopped != "" {
				return bad("action_start: source binding coverage is not valid")
			}
			for _, o := range s.Omissions {
				if !ValidName(o) || len(o) > 64 {
					return bad("action_start: source binding omission is not valid")
				}
			}
		}
		if !validText(a.ObservationScope) || len(a.ObservationScope) > 128 {
			return bad("action_start: observation_scope is not valid")
		}
	case TypeActionFinish:
		f := e.ActionFinish
		if f == nil {
			return bad("action_finish envelope without action_finish")
		}
		if !ValidName(f.ActionID) {
			return bad("action_finish needs action_id")
		}
		if !actionResults[f.Result] {
			return bad("action_finish: unknown result %q", f.Result)
		}
		if !verifications[f.Verification] {
			return bad("action_finish: unknown verification %q", f.Verification)
		}
		if !driftValues[f.Drift] {
			return bad("action_finish: unknown drift %q", f.Drift)
		}
		if f.SetupDigest != "" && !IsDigest(f.SetupDigest) {
			return bad("action_finish: setup_digest is 64 lowercase hex characters")
		}
		if f.Stale && f.Drift != "" && f.Drift != "unknown" {
			return bad("action_finish: a stale finish did not check source drift; drift must be unknown")
		}
		if f.FinishedAt < 0 {
			return bad("action_finish: finished_at cannot be negative")
		}
	case TypeUsage:
		u := e.Usage
		if u == nil {
			return bad("usage envelope without usage")
		}
		for _, n := range []*int64{u.InputTokens, u.OutputTokens, u.CacheCreationInputTokens, u.CacheReadInputTokens} {
			if n != nil && *n < 0 {
				return bad("usage: token counts cannot be negative")
			}
		}
		if !validText(u.MessageID) || !validText(u.Model) || len(u.MessageID) > MaxIDLen || len(u.Model) > MaxIDLen {
			return bad("usage: a field is too long or has control characters")
		}
		switch u.Scope {
		case UsageScopeRequest:
			if u.MessageID == "" {
				return bad("usage: a request-scoped record needs the provider message_id")
			}
		case UsageScopeSessionCumulative:
			if u.MessageID != "" {
				return bad("usage: a session-cumulative record names no message_id")
			}
		default:
			return bad("usage: unknown scope %q", u.Scope)
		}
	case TypeGap:
		g := e.Gap
		if g == nil {
			return bad("gap envelope without gap")
		}
		if !gapKinds[g.Kind] {
			return bad("gap: unknown kind %q", g.Kind)
		}
		if !validText(g.Reason) || g.FromSeq < 0 || g.ToSeq < 0 || (g.ToSeq != 0 && g.ToSeq < g.FromSeq) {
			return bad("gap: reason or sequence range is not valid")
		}
	default:
		return bad("unknown envelope type %q", e.Type)
	}
	return nil
}

// Digest is the SHA-256 of the envelope's canonical JSON with every event's
// observed_at and the agent cleared: the body compared against a retained
// envelope of the same identity. The caller must have validated the
// envelope.
func (e *Envelope) Digest() string {
	c := *e
	c.Agent = ""
	if len(e.Events) > 0 {
		c.Events = make([]Event, len(e.Events))
		copy(c.Events, e.Events)
		for i := range c.Events {
			c.Events[i].ObservedAt = 0
		}
	}
	b, err := json.Marshal(&c)
	if err != nil {
		// The struct holds only strings, numbers and bools: Marshal cannot fail.
		panic(fmt.Sprintf("marshal envelope: %v", err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// DecodeStrict decodes exactly one JSON value from r into v, refusing
// unknown fields, trailing data and bodies over limit bytes, with the right
// *Error for each.
func DecodeStrict(r io.Reader, limit int64, v any) error {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return Errorf(http.StatusRequestEntityTooLarge, CodeTooLarge, "request body exceeds %d bytes", limit)
		}
		return Errorf(http.StatusBadRequest, CodeBadRequest, "read request body: %v", err)
	}
	if int64(len(b)) > limit {
		return Errorf(http.StatusRequestEntityTooLarge, CodeTooLarge, "request body exceeds %d bytes", limit)
	}
	return DecodeBytesStrict(b, v)
}

// DecodeBytesStrict is DecodeStrict on bytes already read.
func DecodeBytesStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if msg := err.Error(); len(msg) > 14 && msg[:14] == "json: unknown " {
			return Errorf(http.StatusBadRequest, CodeUnknownField, "%s", msg)
		}
		return Errorf(http.StatusBadRequest, CodeBadJSON, "bad JSON: %v", err)
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); err != io.EOF {
		return Errorf(http.StatusBadRequest, CodeBadJSON, "bad JSON: trailing data after the value")
	}
	return nil
}
