// Package action records actions from execution rules: for a tool with a
// configured Rule, PreToolUse durably appends an action_start record (after
// the lifecycle event, before the hook returns, so before the tool runs) and
// PostToolUse/PostToolUseFailure appends the action_finish against that
// retained start. Private retained receipts (Receipts), one per start and
// finish, decide duplicates and conflicts: an exact retry is a duplicate
// (nothing appended, source not captured again), a changed tool input or
// typed result under the same tool-use identity is a conflict (nothing
// appended). The first retained start fixes the action's rule, setup,
// source, observation order and Hub target; its finish and every later retry
// use them.
//
// The capture hook (internal/capture) calls Record after it appended the
// tool's lifecycle event, in the same spool Session; managed recipe runs are
// handled there before it.
package action

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/agentscm/agentscm/internal/agent"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/source"
	"github.com/agentscm/agentscm/internal/spool"
)

// Outcomes Record reports.
const (
	Started         = "started"
	StartDuplicate  = "start_duplicate"
	Finished        = "finished"
	FinishDuplicate = "finish_duplicate"
	Conflict        = "conflict"
	// NoToolUseID: the host gave no tool_use_id, so there is no action
	// identity and no action (only the lifecycle event is kept).
	NoToolUseID = "no_tool_use_id"
	// Deferred: no exact target; only the sanitized lifecycle fact is
	// kept and no action envelope is made.
	Deferred = "deferred"
	// NoStart: a completion without a retained start (the start was
	// deferred, had no rule, was refused or lost) and without an exact
	// target: nothing is recorded for it (a retry with a target records
	// it as FinishWithoutStart).
	NoStart = "no_retained_start"
	// FinishWithoutStart: a completion without a retained start under an
	// exact target: its finish is recorded alone (the Hub lists the action
	// as finish_without_start), so the missing start is visible.
	FinishWithoutStart = "finish_without_start"
	// ReceiptLimit: the receipt bound was reached; a capture_interrupted
	// gap records the unrecorded start.
	ReceiptLimit = "receipt_limit"
)

// ErrConflict reports a changed tool input or typed result under an action
// identity whose receipt is retained.
var ErrConflict = errors.New("action conflict")

// startCanon is the canonical start receipt an incoming PreToolUse is
// compared with: everything that identifies the native call, nothing
// volatile (receipt time, target, setup, rules, source).
type startCanon struct {
	Agent       string `json:"agent"`
	Session     string `json:"session"`
	ToolUseID   string `json:"tool_use_id"`
	Tool        string `json:"tool"`
	InputDigest string `json:"input_digest"`
}

// finishCanon is the canonical finish receipt: the call plus its typed
// result as the host reported it (not the derived result, which depends on
// the rule).
type finishCanon struct {
	startCanon
	HookEvent string `json:"hook_event"`
	Outcome   string `json:"outcome"`
	// ExitCode is the explicit integer the host reported; ExitCodeField is
	// absent, integer or malformed.
	ExitCode      *int   `json:"exit_code,omitempty"`
	ExitCodeField string `json:"exit_code_field"`
}

// ID derives an action's identity from the observed native session and the
// provider tool_use_id only.
func ID(agent, nativeSession, toolUseID string) string {
	b, _ := json.Marshal([]string{"agentscm-action-v1", agent, nativeSession, toolUseID})
	sum := sha256.Sum256(b)
	return "act_" + hex.EncodeToString(sum[:16])
}

// CanonicalInputDigest hashes the tool input's canonical JSON (object keys
// sorted, numbers kept exactly); an absent input hashes as null.
func CanonicalInputDigest(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	canon := []byte("null")
	if len(raw) > 0 {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err == nil {
			if b, err := json.Marshal(v); err == nil {
				canon = b
			}
		} else {
			canon = append([]byte("invalid:"), raw...)
		}
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:])
}

var integerLiteral = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^-?(0|[1-9][0-9]{0,9})$`) })

// ExplicitExitCode reads an explicit integer exit_code or exitCode from a
// tool_response object. field is absent (neither key), integer, or
// malformed (a string, float, null, out of range, or two keys that
// disagree); only integer returns a code.
func ExplicitExitCode(resp json.RawMessage) (code *int, field string) {
	var obj map[string]json.RawMessage
	if len(bytes.TrimSpace(resp)) == 0 || json.Unmarshal(resp, &obj) != nil {
		return nil, "absent"
	}
	var got *int
	seen := false
	for _, k := range []string{"exit_code", "exitCode"} {
		v, ok := obj[k]
		if !ok {
			continue
		}
		seen = true
		lit := string(bytes.TrimSpace(v))
		if !integerLiteral().MatchString(lit) {
			return nil, "malformed"
		}
		n, err := strconv.ParseInt(lit, 10, 32)
		if err != nil {
			return nil, "malformed"
		}
		c := int(n)
		if got != nil && *got != c {
			return nil, "malformed"
		}
		got = &c
	}
	if !seen {
		return nil, "absent"
	}
	return got, "integer"
}

// Result maps a completion onto an execution rule's result: a failure hook
// is failed; process_exit_code maps an explicit integer exit code (0
// succeeded, otherwise failed) and anything else to unknown; unverified is
// unknown on a returned call. Verification is always unknown.
func Result(rule Rule, hookEvent string, exitCode *int) (result, verification string) {
	switch {
	case hookEvent == "PostToolUseFailure":
		result = "failed"
	case rule.ResultSource == "process_exit_code" && exitCode != nil && *exitCode == 0:
		result = "succeeded"
	case rule.ResultSource == "process_exit_code" && exitCode != nil:
		result = "failed"
	default:
		result = "unknown"
	}
	return result, rule.Verification()
}

// Facts are the facts of a hook payload the action path derives from its
// tool input and response: the canonical input digest and the explicit
// exit code. An intake record keeps them instead of the bodies.
type Facts struct {
	InputDigest   string `json:"input_digest"`
	ExitCode      *int   `json:"exit_code,omitempty"`
	ExitCodeField string `json:"exit_code_field"`
	// CommandDigest is the digest of a Bash call's exact command string
	// (the capture package's managed recipes), never the command itself;
	// empty for other tools. FactsOf leaves it to the caller.
	CommandDigest string `json:"command_digest,omitempty"`
}

// FactsOf derives the input digest and exit code facts of p.
func FactsOf(p *agent.Payload) Facts {
	code, field := ExplicitExitCode(p.ToolResponse)
	return Facts{InputDigest: CanonicalInputDigest(p.ToolInput), ExitCode: code, ExitCodeField: field}
}

// Env is what Record needs of one hook invocation.
type Env struct {
	// Session is the held spool Session the lifecycle event was appended
	// in; Spool its spool.
	Session *spool.Tx
	Spool   *spool.Spool
	// Receipts is the spool's receipt directory (OpenReceipts).
	Receipts Receipts
	// Rules, Root, BaseRef and SetupDigest are the capture binding's.
	Rules       []Rule
	Root        string
	BaseRef     string
	SetupDigest string
	// Record is the lifecycle record just retained (its Seq set).
	Record *event.Record
	// Facts are the payload's facts (FactsOf, or an intake record's).
	Facts Facts
	Now   time.Time
	// Source captures the checkout's source; nil: source.Capture with the
	// receipt directory's tree cache (a start also retains a dirty
	// checkout's bytes in Session).
	Source func(ctx context.Context, root string) (*event.SourceBinding, error)
}

// Record appends the action start or finish of a tool lifecycle record that
// was just retained, and reports what it did (one of the outcomes above, or
// "" when no rule applies).
func Record(ctx context.Context, e Env) (string, error) {
	rec := e.Record
	if rec.Kind != event.ToolStart && rec.Kind != event.ToolFinish {
		return "", nil
	}
	if e.Source == nil {
		e.Source = func(ctx context.Context, root string) (*event.SourceBinding, error) {
			// Only a start needs HEAD's tree; a finish's drift check
			// compares HEAD.
			o := source.Options{TreeCache: filepath.Join(e.Receipts.Dir(), "trees"), NoTree: rec.Kind == event.ToolFinish, BaseRef: e.BaseRef}
			if rec.Kind == event.ToolStart && e.Session != nil {
				o.Store = e.Session // the start retains a dirty checkout's bytes
			}
			return source.Capture(ctx, root, o)
		}
	}
	if rec.Kind == event.ToolStart {
		rule, ok := RuleFor(e.Rules, rec.ToolName)
		if !ok {
			return "", nil
		}
		if rec.ToolUseID == "" {
			return NoToolUseID, nil
		}
		if rec.Deferred || rec.WorkID == "" {
			return Deferred, nil
		}
		return start(ctx, e, rule)
	}
	if rec.ToolUseID == "" {
		if _, ok := RuleFor(e.Rules, rec.ToolName); ok {
			return NoToolUseID, nil
		}
		return "", nil
	}
	return finish(ctx, e)
}

func (e Env) startCanon() startCanon {
	return startCanon{Agent: e.Record.Agent, Session: e.Record.SessionID, ToolUseID: e.Record.ToolUseID, Tool: e.Record.ToolName,
		InputDigest: e.Facts.InputDigest}
}

func start(ctx context.Context, e Env, rule Rule) (string, error) {
	rec, rs := e.Record, e.Receipts
	id := ID(rec.Agent, rec.SessionID, rec.ToolUseID)
	canon, _ := json.Marshal(e.startCanon())
	if err := rs.Ensure(); err != nil {
		return "", err
	}
	prev, pending, err := rs.Read(id + ".s")
	switch {
	case err == nil:
		if !bytes.Equal(prev.Canon, canon) {
			return Conflict, fmt.Errorf("%w: action %s (tool_use_id %s) was started with another tool or input; the retained start stands", ErrConflict, id, rec.ToolUseID)
		}
		if !pending {
			return StartDuplicate, nil
		}
		// A crash came between the receipt and its append: append the
		// retained record again (identical bytes; the Hub sees a duplicate
		// if the first append had happened).
		return Started, AppendReceipt(e.Session, rs, id+".s", prev)
	case !errors.Is(err, fs.ErrNotExist):
		return "", err
	}
	// The observation order is the spool sequence of the PreToolUse event
	// just appended: durable, spool-local, unique and in observation order.
	order := int64(rec.Seq)
	if rec.Seq == 0 || rec.Seq > 1<<62 {
		return "", fmt.Errorf("action %s: the PreToolUse event has no spool sequence to order it", id)
	}
	if err := rs.CheckRoom(); errors.Is(err, ErrReceiptLimit) {
		gap := &event.Record{Agent: rec.Agent, SessionID: rec.SessionID, Kind: event.KindGap, HookEvent: rec.HookEvent,
			ObservedAt: rec.ObservedAt, CaptureMode: rec.CaptureMode,
			WorkID: rec.WorkID, Generation: rec.Generation, CanonicalSession: rec.CanonicalSession,
			Gap: &event.GapInfo{Kind: event.GapCaptureInterrupted, Reason: "action_receipt_limit", RefusedKind: event.ActionStart,
				Detail: fmt.Sprintf("the spool's %d retained action receipts are its bound; this action start was not recorded", rs.Limit())}}
		if _, gerr := e.Session.Append(gap); gerr != nil {
			return ReceiptLimit, fmt.Errorf("action receipt limit reached, and recording its gap failed: %w", gerr)
		}
		return ReceiptLimit, nil
	} else if err != nil {
		return "", err
	}
	src, err := e.Source(ctx, e.Root)
	if err != nil {
		src = nil // the binding stays unknown; finish drift is then unknown
	}
	st := event.Record{
		Agent: rec.Agent, SessionID: rec.SessionID, Kind: event.ActionStart, HookEvent: rec.HookEvent,
		ToolName: rec.ToolName, ToolUseID: rec.ToolUseID,
		WorkID: rec.WorkID, Generation: rec.Generation, CanonicalSession: rec.CanonicalSession,
		ObservedAt: rec.ObservedAt, CaptureMode: rec.CaptureMode,
		Action: &event.Action{ID: id, Class: rule.Kind, Coverage: rule.Coverage, ResultSource: rule.ResultSource,
			SetupDigest: e.SetupDigest, Source: src, ObservationScope: e.Spool.ObservationScope(), ObservationOrder: order,
			StartedAt: e.Now.UTC().Truncate(time.Second)},
	}
	r := &Receipt{Version: ReceiptVersion, SpoolID: rs.SpoolID(), Canon: canon, Record: st}
	if err := rs.WritePending(id+".s", r); err != nil {
		return "", err
	}
	if err := AppendReceipt(e.Session, rs, id+".s", r); err != nil {
		return "", err
	}
	// A checkout whose source cannot be bound (not a Git repository, git
	// missing or too slow) starts without a source binding, visibly so in
	// the record; it is not a hook failure.
	return Started, nil
}

func finish(ctx context.Context, e Env) (string, error) {
	rec, rs := e.Record, e.Receipts
	id := ID(rec.Agent, rec.SessionID, rec.ToolUseID)
	st, startPending, err := rs.Read(id + ".s")
	if errors.Is(err, fs.ErrNotExist) {
		if rule, ok := RuleFor(e.Rules, rec.ToolName); ok {
			return finishWithoutStart(e, rule, id)
		}
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if startPending && !rec.Deferred && rec.WorkID != "" {
		// The start's append failed or was cut by a crash (a quota pause
		// records its own gap): append the retained start first, so a
		// finish never goes out without it.
		if err := AppendReceipt(e.Session, rs, id+".s", st); err != nil {
			return "", fmt.Errorf("action %s: the retained start could not be appended, so no finish is recorded: %w", id, err)
		}
	}
	code, field := e.Facts.ExitCode, e.Facts.ExitCodeField
	fc := finishCanon{startCanon: e.startCanon(), HookEvent: rec.HookEvent, Outcome: rec.Outcome, ExitCode: code, ExitCodeField: field}
	canon, _ := json.Marshal(fc)
	sc, _ := json.Marshal(fc.startCanon)
	if !bytes.Equal(st.Canon, sc) {
		return Conflict, fmt.Errorf("%w: action %s (tool_use_id %s) finished with another tool or input than it started with; no finish recorded", ErrConflict, id, rec.ToolUseID)
	}
	prev, pending, err := rs.Read(id + ".f")
	switch {
	case err == nil:
		if !bytes.Equal(prev.Canon, canon) {
			return Conflict, fmt.Errorf("%w: action %s (tool_use_id %s) already finished with another typed result; the retained finish stands", ErrConflict, id, rec.ToolUseID)
		}
		if !pending {
			return FinishDuplicate, nil
		}
		return Finished, AppendReceipt(e.Session, rs, id+".f", prev)
	case !errors.Is(err, fs.ErrNotExist):
		return "", err
	}
	if rec.Deferred || rec.WorkID == "" {
		// No exact target now: keep the sanitized lifecycle fact only; a
		// retry with a target records the finish.
		return Deferred, nil
	}
	sa := st.Record.Action
	if sa == nil {
		return "", fmt.Errorf("action receipt %s.s has no action fact", id)
	}
	rule := Rule{Tool: st.Record.ToolName, Kind: sa.Class, Coverage: sa.Coverage, ResultSource: sa.ResultSource}
	result, verification := Result(rule, rec.HookEvent, code)
	fin := *sa
	fin.Result, fin.Verification, fin.ExitCode = result, verification, code
	fin.CompletionSetupDigest = e.SetupDigest
	fin.FinishedAt = e.Now.UTC().Truncate(time.Second)
	if fin.CompletionSetupDigest != sa.SetupDigest {
		// The setup changed since the start: the finish is stale and source
		// drift is not checked.
		fin.Stale, fin.Drift = true, "unknown"
	} else {
		now, _ := e.Source(ctx, e.Root) // an unbound source gives drift unknown
		fin.Drift = source.Drift(sa.Source, now)
	}
	// The finish goes to the start's target (the first durable claim),
	// whatever the current resolution says.
	sr := st.Record
	fr := event.Record{
		Agent: rec.Agent, SessionID: rec.SessionID, Kind: event.ActionFinish, HookEvent: rec.HookEvent,
		ToolName: sr.ToolName, ToolUseID: rec.ToolUseID, Outcome: rec.Outcome,
		WorkID: sr.WorkID, Generation: sr.Generation, CanonicalSession: sr.CanonicalSession,
		ObservedAt: rec.ObservedAt, CaptureMode: rec.CaptureMode, Action: &fin,
	}
	r := &Receipt{Version: ReceiptVersion, SpoolID: rs.SpoolID(), Canon: canon, Record: fr}
	if err := rs.WritePending(id+".f", r); err != nil {
		return "", err
	}
	if err := AppendReceipt(e.Session, rs, id+".f", r); err != nil {
		return "", err
	}
	return Finished, nil
}

// finishWithoutStart records the finish of an action whose start was never
// retained (a PreToolUse that was lost, deferred, refused or captured
// before the rule existed): the finish alone, under the completion's own
// exact target, with the rule's class and result and unknown drift (no
// source was bound at start). The Hub lists it as finish_without_start, so
// the missing start is named instead of the whole action vanishing. Its
// receipt makes a retry a duplicate and a changed result a conflict.
func finishWithoutStart(e Env, rule Rule, id string) (string, error) {
	rec, rs := e.Record, e.Receipts
	if rec.Deferred || rec.WorkID == "" {
		return NoStart, nil
	}
	code, field := e.Facts.ExitCode, e.Facts.ExitCodeField
	canon, _ := json.Marshal(finishCanon{startCanon: e.startCanon(), HookEvent: rec.HookEvent, Outcome: rec.Outcome, ExitCode: code, ExitCodeField: field})
	if err := rs.Ensure(); err != nil {
		return "", err
	}
	prev, pending, err := rs.Read(id + ".f")
	switch {
	case err == nil:
		if !bytes.Equal(prev.Canon, canon) {
			return Conflict, fmt.Errorf("%w: action %s (tool_use_id %s) already finished with another typed result; the retained finish stands", ErrConflict, id, rec.ToolUseID)
		}
		if !pending {
			return FinishDuplicate, nil
		}
		return FinishWithoutStart, AppendReceipt(e.Session, rs, id+".f", prev)
	case !errors.Is(err, fs.ErrNotExist):
		return "", err
	}
	result, verification := Result(rule, rec.HookEvent, code)
	fin := event.Action{ID: id, Class: rule.Kind, Coverage: rule.Coverage, ResultSource: rule.ResultSource,
		Result: result, Verification: verification, ExitCode: code, Drift: "unknown",
		SetupDigest: e.SetupDigest, CompletionSetupDigest: e.SetupDigest, ObservationScope: e.Spool.ObservationScope(),
		FinishedAt: e.Now.UTC().Truncate(time.Second)}
	fr := event.Record{
		Agent: rec.Agent, SessionID: rec.SessionID, Kind: event.ActionFinish, HookEvent: rec.HookEvent,
		ToolName: rec.ToolName, ToolUseID: rec.ToolUseID, Outcome: rec.Outcome,
		WorkID: rec.WorkID, Generation: rec.Generation, CanonicalSession: rec.CanonicalSession,
		ObservedAt: rec.ObservedAt, CaptureMode: rec.CaptureMode, Action: &fin,
	}
	r := &Receipt{Version: ReceiptVersion, SpoolID: rs.SpoolID(), Canon: canon, Record: fr}
	if err := rs.WritePending(id+".f", r); err != nil {
		return "", err
	}
	if err := AppendReceipt(e.Session, rs, id+".f", r); err != nil {
		return "", err
	}
	return FinishWithoutStart, nil
}
