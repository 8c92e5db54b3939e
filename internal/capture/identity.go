package capture

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"

	"github.com/agentscm/agentscm/internal/agent"
	"github.com/agentscm/agentscm/internal/event"
)

// Provider identities. A tool call is identified by the host's tool_use_id
// per phase (pre: PreToolUse; post: PostToolUse or PostToolUseFailure, so a
// failure after a success is a conflict), a MessageDisplay fragment by its
// message_id and index, a subagent marker by its agent_id, and a startup
// SessionStart by the session id itself: the host starts each native
// session id once, so a second startup start of the same id is a retry.
// Prompts, resume/clear/compact/fork starts and SessionEnd carry no
// provider identity.

// ProviderOccurrence returns the observed identity of a mapped record, or
// false when the host gave none.
func ProviderOccurrence(rec *event.Record) (Occurrence, bool) {
	occ := Occurrence{Session: rec.SessionID}
	switch {
	case (rec.Kind == event.ToolStart || rec.Kind == event.ToolFinish) && rec.ToolUseID != "":
		occ.Phase, occ.Identity = "pre", "tool_use_id:"+rec.ToolUseID
		if rec.Kind == event.ToolFinish {
			occ.Phase = "post"
		}
	case rec.Kind == event.MessageDisplay && rec.MessageID != "" && rec.FragmentIndex != nil:
		occ.Phase, occ.Identity = rec.HookEvent, "message:"+rec.MessageID+":"+strconv.Itoa(*rec.FragmentIndex)
	case (rec.Kind == event.SubagentStart || rec.Kind == event.SubagentStop) && rec.AgentID != "":
		occ.Phase, occ.Identity = rec.HookEvent, "agent_id:"+rec.AgentID
	case rec.Kind == event.SessionStart && rec.Source == "startup":
		occ.Phase, occ.Identity = rec.HookEvent, "session_start:startup"
	default:
		return Occurrence{}, false
	}
	return occ, true
}

// Informational reports whether a record is an informational marker (Stop,
// PreCompact, subagent start/stop): it never raises coverage and never
// records an identity_uncertain gap.
func Informational(k event.Kind) bool {
	return k == event.TurnEnd || k == event.PreCompact || k == event.SubagentStart || k == event.SubagentStop
}

// PhaseFingerprint is the private SHA-256 (64 hex) of an occurrence's
// phase facts: hook event, kind, canonical tool name, typed input, typed
// result, error and outcome (and, for other identified events, their
// typed fields). Receipt time, cwd and transcript path never enter it. It
// stays local: Hub envelopes never carry it.
func PhaseFingerprint(p *agent.Payload, rec *event.Record) string {
	f := struct {
		V         string          `json:"v"`
		HookEvent string          `json:"hook_event"`
		Kind      event.Kind      `json:"kind"`
		ToolName  string          `json:"tool_name,omitempty"`
		Input     json.RawMessage `json:"input,omitempty"`
		Result    json.RawMessage `json:"result,omitempty"`
		Error     *string         `json:"error,omitempty"`
		Outcome   string          `json:"outcome,omitempty"`
		Source    string          `json:"source,omitempty"`
		AgentType string          `json:"agent_type,omitempty"`
		Final     *bool           `json:"final,omitempty"`
		Delta     *string         `json:"delta,omitempty"`
	}{V: "agentscm-phase-v1", HookEvent: rec.HookEvent, Kind: rec.Kind, ToolName: rec.ToolName,
		Outcome: rec.Outcome, Source: rec.Source, AgentType: rec.AgentType, Final: rec.Final}
	switch rec.Kind {
	case event.ToolStart, event.ToolFinish:
		f.Input = canonicalJSON(p.ToolInput)
		if rec.Kind == event.ToolFinish {
			f.Result = canonicalJSON(p.ToolResponse)
			f.Error = p.Error
		}
	case event.MessageDisplay:
		f.Delta = p.Delta
	}
	b, _ := json.Marshal(f)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// canonicalJSON re-encodes a JSON value with sorted object keys and exact
// numbers, so formatting never changes a fingerprint; an invalid value is
// kept as its trimmed bytes, quoted.
func canonicalJSON(raw json.RawMessage) json.RawMessage {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return json.RawMessage(strconv.Quote(string(raw)))
	}
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(strconv.Quote(string(raw)))
	}
	return b
}
