// Package delivery connects capture to a checkout's Hub: it resolves the
// exact current target of a native session and delivers retained spool
// envelopes through the checkout's client connection. Only a Hub
// acknowledgement (HTTP 200, or the in-process equivalent) counts as
// delivered.
package delivery

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/connections"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/spool"
	"github.com/agentscm/agentscm/internal/transcript"
)

// Connections gives capture the client connections of one config directory.
type Connections struct{ ConfigDir string }

// Lock takes the connections lock.
func (c Connections) Lock() (func() error, error) {
	l, err := connections.Lock(c.ConfigDir)
	if err != nil {
		return nil, err
	}
	return l.Unlock, nil
}

// Current returns the lineage of root's connection, or capture.ErrNoConnection.
func (c Connections) Current(root string) (binding.Lineage, error) {
	conn, err := connections.Lookup(c.ConfigDir, root)
	if errors.Is(err, connections.ErrNoConnection) {
		return binding.Lineage{}, binding.ErrNoConnection
	}
	if err != nil {
		return binding.Lineage{}, err
	}
	return binding.Lineage{Hub: conn.Hub, Repository: conn.Repository, WorktreeID: conn.WorktreeID}, nil
}

// Opener opens the Hub of a checkout from the connections file of one
// config directory.
type Opener struct{ ConfigDir string }

// Open returns the Hub of root, or capture.ErrNoConnection.
func (o Opener) Open(ctx context.Context, root string) (capture.Hub, error) {
	c, err := connections.Lookup(o.ConfigDir, root)
	if errors.Is(err, connections.ErrNoConnection) {
		return nil, binding.ErrNoConnection
	}
	if err != nil {
		return nil, err
	}
	conn, err := client.Open(ctx, c, client.Options{})
	if err != nil {
		return nil, err
	}
	return &hub{conn: conn, lineage: binding.Lineage{Hub: c.Hub, Repository: c.Repository, WorktreeID: c.WorktreeID},
		root: root, configDir: o.ConfigDir}, nil
}

// LookupConnection returns the lineage of root's client connection without
// opening the Hub (capture.ConnectionLooker).
func (o Opener) LookupConnection(root string) (binding.Lineage, error) {
	c, err := connections.Lookup(o.ConfigDir, root)
	if errors.Is(err, connections.ErrNoConnection) {
		return binding.Lineage{}, binding.ErrNoConnection
	}
	if err != nil {
		return binding.Lineage{}, err
	}
	return binding.Lineage{Hub: c.Hub, Repository: c.Repository, WorktreeID: c.WorktreeID}, nil
}

type hub struct {
	conn    client.Conn
	lineage binding.Lineage
	// root and configDir locate the checkout's capture binding, for the
	// body upload after acceptance (bodies.go).
	root, configDir string
	// agent says whether the Hub accepts an envelope's agent (agent.go).
	agent agentSupport
}

func (h *hub) Lineage() binding.Lineage { return h.lineage }

func (h *hub) Close() error { return h.conn.Close() }

func (h *hub) Resolve(ctx context.Context, worktreeID, nativeSession string) (capture.Target, error) {
	t, err := h.conn.Resolve(ctx, api.ResolveRequest{WorktreeID: worktreeID, NativeSessionID: nativeSession})
	if err != nil {
		return capture.Target{}, err
	}
	return capture.Target{WorkID: t.WorkID, Generation: t.Generation, Session: t.Session}, nil
}

// Deliver sends one envelope; nil means the Hub acknowledged it (accepted or
// an exact duplicate).
func (h *hub) Deliver(ctx context.Context, env *spool.Envelope) (string, error) {
	e, err := Envelope(env.Record)
	if err != nil {
		return "", err
	}
	if err := h.agent.strip(ctx, h.conn, e); err != nil { // agent.go
		return "", err
	}
	res, err := h.conn.Deliver(ctx, e)
	if err != nil {
		if ae, ok := api.AsError(err); ok && permanentRefusal(ae) {
			reason := ae.Reason
			if reason == "" {
				reason = ae.Code
			}
			return "", fmt.Errorf("%w", &capture.RefusedError{Reason: reason, Message: ae.Message})
		}
		return "", err
	}
	if err := h.uploadAfterAcceptance(ctx, env, e, res); err != nil {
		return "", err // the envelope stays pending; its replay is a duplicate
	}
	return res.Status, nil
}

// permanentRefusal reports whether the Hub's answer says the same envelope
// can never be accepted: a conflict (409: identity_reused,
// sequence_taken, a different action start or finish), a target refusal
// (422: stale_generation, work_not_accepting, unknown work or session), an
// invalid or too large envelope (400, 413). Authentication, authorization,
// unavailability and server errors are transient: the envelope is retried.
func permanentRefusal(e *api.Error) bool {
	switch e.Status {
	case http.StatusBadRequest, http.StatusConflict, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return true
	}
	return false
}

// Envelope builds the Hub envelope of a retained record. A record written
// with shared sequences carries its target stream's sequence (SharedSeq);
// a legacy record keeps the spool-wide one. Receipt time never enters
// identity (see Identity).
func Envelope(r event.Record) (*api.Envelope, error) {
	if r.Deferred || r.WorkID == "" {
		return nil, errors.New("a deferred record has no target and is never delivered")
	}
	if r.Seq > 1<<62 {
		return nil, fmt.Errorf("sequence %d out of range", r.Seq)
	}
	env := &api.Envelope{Identity: Identity(r), WorkID: r.WorkID, Generation: r.Generation,
		Session: r.CanonicalSession, NativeSessionID: r.SessionID, Agent: envelopeAgent(r)}
	env.Body = bodyDeclaration(r) // bodies.go: shared-conversation bodies only
	if r.Kind != event.KindUsage {
		// The sequence (and gap range) stream on the Hub; a legacy record
		// has none and stays in the legacy stream, byte for byte.
		env.Stream = r.Stream
	}
	switch r.Kind {
	case event.KindGap:
		if r.Gap == nil {
			return nil, errors.New("gap record without gap details")
		}
		g := &api.Gap{Kind: r.Gap.Kind, Reason: r.Gap.Reason, FromSeq: int64(r.Seq), ToSeq: int64(r.Seq)}
		if r.HookEvent == transcript.HookEvent {
			// A transcript gap concerns provider records, not a place in
			// the session's event sequence.
			g.FromSeq, g.ToSeq = 0, 0
		} else if r.Sequenced {
			// Shared sequences: a gap names the target-stream range it
			// covers (an outage), else the sequence of the event it
			// concerns, else none (a late start precedes every sequence).
			from, to := r.Gap.FromSeq, r.Gap.ToSeq
			if from == 0 {
				from, to = r.SharedSeq, r.SharedSeq
			}
			if from > 1<<62 || to > 1<<62 || to < from {
				return nil, fmt.Errorf("gap sequence range %d..%d is not valid", from, to)
			}
			g.FromSeq, g.ToSeq = int64(from), int64(to)
		}
		if g.Kind == event.GapContentNotRetained {
			// The Hub has no such kind: the record was kept, its content
			// was not, which interrupts capture of that content.
			g.Kind, g.Reason = event.GapCaptureInterrupted, "content_not_retained:"+r.Gap.Reason
		}
		env.Type, env.Gap = api.TypeGap, g
		return env, nil
	case event.KindUsage:
		u := r.Usage
		if u == nil {
			return nil, errors.New("usage record without usage details")
		}
		env.Type, env.Usage = api.TypeUsage, &api.Usage{Scope: u.Scope, MessageID: u.MessageID, Model: u.Model,
			InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
			CacheCreationInputTokens: u.CacheCreationInputTokens, CacheReadInputTokens: u.CacheReadInputTokens}
		return env, nil
	case event.ActionStart, event.ActionFinish:
		return actionEnvelope(env, r) // action.go
	}
	seq := r.Seq
	if r.Sequenced {
		if r.SharedSeq == 0 || r.SharedSeq > 1<<62 {
			return nil, fmt.Errorf("shared sequence %d out of range", r.SharedSeq)
		}
		seq = r.SharedSeq
	}
	ev := api.Event{
		Seq: int64(seq), Kind: string(r.Kind), HookEvent: r.HookEvent, ToolName: r.ToolName,
		ToolUseID: r.ToolUseID, Source: r.Source, Reason: r.Reason, Outcome: r.Outcome,
		AgentID: r.AgentID, AgentType: r.AgentType, ObservedAt: r.ObservedAt.Unix(),
	}
	if st := r.Setup; st != nil {
		ev.Setup = &api.Setup{Artifact: st.Artifact, Model: st.Model, PermissionMode: st.PermissionMode, Effort: st.Effort, Unobserved: st.Unobserved}
	}
	env.Type, env.Events = api.TypeEvents, []api.Event{ev}
	return env, nil
}

// Identity is the identity digest of a record (64 lowercase hex). It hashes
// the observed native session, kind and hook event plus the provider
// identity when the host gives one: the tool_use_id of a tool event, the
// message id and index of a MessageDisplay fragment and, on records written
// with shared sequences, the agent_id of a subagent marker and the single
// startup SessionStart of a native session. Otherwise it hashes the durable
// local occurrence number (the spool sequence). A late-start gap is one per
// session and an outage gap is named by its target and range, so a replay
// of either is a duplicate. Receipt time never enters identity.
//
// A record written with a stream (event.Record.Stream: the spool's
// observation scope and ledger epoch) hashes it too ("agentscm-event-v2"),
// so two spools observing one native session (a re-enable, a second
// worktree) never share an identity. A
// legacy record (no stream) keeps its v1 identity, so envelopes delivered
// before streams stay idempotent.
//
// A usage record written with a stream hashes its target (Work,
// generation, canonical session) instead of the stream: two spools that
// read one transcript into the same target (a re-enable) deliver one
// record, a duplicate; two spools that read it into different targets
// (the same native session resumed in a second worktree with its own
// Work) each deliver their own, where the stream-free v1 form made the
// second an identity_reused refusal.
func Identity(r event.Record) string {
	id := []string{"agentscm-event-v1", r.Agent, r.SessionID, string(r.Kind), r.HookEvent}
	usageTarget := r.Stream != "" && r.Kind == event.KindUsage
	switch {
	case usageTarget:
		id = []string{"agentscm-event-v2", "", r.Agent, r.SessionID, string(r.Kind), r.HookEvent, "target", r.WorkID, strconv.FormatInt(r.Generation, 10), r.CanonicalSession}
	case r.Stream != "":
		id = []string{"agentscm-event-v2", r.Stream, r.Agent, r.SessionID, string(r.Kind), r.HookEvent}
	}
	switch {
	case r.Kind == event.KindGap && r.Gap != nil && r.Gap.Kind == event.GapAdapterStartedLate:
		// One per session: a replay of it is a duplicate.
		id = append(id, "gap", r.Gap.Kind)
		if r.Sequenced {
			id = append(id, r.WorkID, strconv.FormatInt(r.Generation, 10), r.CanonicalSession)
		}
	case r.Sequenced && r.Kind == event.KindGap && r.Gap != nil && r.Gap.Kind == event.GapCaptureInterrupted && r.Gap.FromSeq != 0:
		id = append(id, "outage", r.WorkID, strconv.FormatInt(r.Generation, 10), r.CanonicalSession,
			strconv.FormatUint(r.Gap.FromSeq, 10), strconv.FormatUint(r.Gap.ToSeq, 10))
	case r.Kind == event.KindUsage && r.Usage != nil && r.Usage.Scope == event.UsageScopeRequest && r.Usage.MessageID != "":
		// One provider request, however many transcript records repeat it.
		id = append(id, "usage", r.Usage.MessageID)
	case r.Kind == event.KindUsage && r.Usage != nil && r.Usage.Scope == event.UsageScopeSessionCumulative:
		// Each distinct snapshot of the host's running total is its own
		// record; re-reading the same snapshot is a duplicate.
		id = append(id, "usage_cumulative", r.Usage.Model, countID(r.Usage.InputTokens), countID(r.Usage.OutputTokens),
			countID(r.Usage.CacheCreationInputTokens), countID(r.Usage.CacheReadInputTokens))
	case r.ToolUseID != "" && (r.Kind == event.ToolStart || r.Kind == event.ToolFinish || r.Kind == event.ActionStart || r.Kind == event.ActionFinish):
		id = append(id, "tool_use_id", r.ToolUseID)
	case r.Kind == event.MessageDisplay && r.MessageID != "" && r.FragmentIndex != nil:
		id = append(id, "message", r.MessageID, strconv.Itoa(*r.FragmentIndex))
	case r.Sequenced && r.AgentID != "" && (r.Kind == event.SubagentStart || r.Kind == event.SubagentStop):
		id = append(id, "agent_id", r.AgentID)
	case r.Sequenced && r.Kind == event.SessionStart && r.Source == "startup":
		id = append(id, "session_start", "startup")
	default:
		id = append(id, "occurrence", strconv.FormatUint(r.Seq, 10))
	}
	b, _ := json.Marshal(id)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func countID(v *int64) string {
	if v == nil {
		return "unknown"
	}
	return strconv.FormatInt(*v, 10)
}
