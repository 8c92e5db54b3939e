package capture

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/agentscm/agentscm/internal/agent/claude"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/spool"
)

// Actions from execution rules. For a tool with a configured rule,
// PreToolUse durably appends an action_start record (after the lifecycle
// event, before the hook returns, so before the tool runs) and
// PostToolUse/PostToolUseFailure appends the action_finish against that
// retained start. Private retained receipts, one per start and finish,
// decide duplicates and conflicts: an exact retry is a duplicate (nothing
// appended, source not captured again), a changed tool input or typed result
// under the same tool-use identity is a conflict (nothing appended). The
// first retained start fixes the action's rule, setup, source, observation
// order and Hub target; its finish and every later retry use them.

// Action outcomes reported in HookResult.Action.
const (
	ActionStarted         = "started"
	ActionStartDuplicate  = "start_duplicate"
	ActionFinished        = "finished"
	ActionFinishDuplicate = "finish_duplicate"
	ActionConflict        = "conflict"
	// ActionNoToolUseID: the host gave no tool_use_id, so there is no action
	// identity and no action (only the lifecycle event is kept).
	ActionNoToolUseID = "no_tool_use_id"
	// ActionDeferred: no exact target; only the sanitized lifecycle fact is
	// kept and no action envelope is made.
	ActionDeferred = "deferred"
	// ActionNoStart: a completion without a retained start (the start was
	// deferred, had no rule or was refused); nothing is recorded for it.
	ActionNoStart = "no_retained_start"
	// ActionReceiptLimit: the receipt bound was reached; a
	// capture_interrupted gap records the unrecorded start.
	ActionReceiptLimit = "receipt_limit"
)

// ErrActionConflict reports a changed tool input or typed result under an
// action identity whose receipt is retained.
var ErrActionConflict = errors.New("action conflict")

// Receipt store bounds: starts per spool (each start and finish is one
// small private file) and the size of one receipt.
const (
	MaxActionReceipts = 16384
	maxReceiptBytes   = 64 << 10
	actionsDir        = "capture-actions"
	receiptVersion    = 1
)

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

// actionReceipt is one retained private receipt: the canonical fact it was
// made from and the exact record appended for it.
type actionReceipt struct {
	Version int             `json:"version"`
	SpoolID string          `json:"spool_id"`
	Canon   json.RawMessage `json:"canon"`
	Record  event.Record    `json:"record"`
}

// ActionID derives an action's identity from the observed native session and
// the provider tool_use_id only.
func ActionID(agent, nativeSession, toolUseID string) string {
	b, _ := json.Marshal([]string{"agentscm-action-v1", agent, nativeSession, toolUseID})
	sum := sha256.Sum256(b)
	return "act_" + hex.EncodeToString(sum[:16])
}

// ruleFor returns the binding's rule for tool, if any.
func ruleFor(bd *Binding, tool string) (ActionRule, bool) {
	for _, r := range bd.ActionRules {
		if r.Tool == tool {
			return r, true
		}
	}
	return ActionRule{}, false
}

// actionReceipts is the private receipt directory of one spool:
// <config>/capture-actions/<hash of spool path and id>/.
type actionReceipts struct {
	dir     string
	spoolID string
	limit   int
}

func openActionReceipts(configDir string, sp *spool.Spool) actionReceipts {
	sum := sha256.Sum256([]byte(sp.Dir() + "\x00" + sp.ID()))
	return actionReceipts{dir: filepath.Join(configDir, actionsDir, hex.EncodeToString(sum[:8])), spoolID: sp.ID(), limit: MaxActionReceipts}
}

func (a actionReceipts) ensure() error {
	if err := fsutil.MkdirPrivate(a.dir); err != nil {
		return err
	}
	return fsutil.CheckPrivateDir(a.dir)
}

// read returns the receipt name (id + ".s" or ".f"), whether it is still
// pending (appended possibly not yet), or fs.ErrNotExist.
func (a actionReceipts) read(name string) (*actionReceipt, bool, error) {
	for _, pending := range []bool{false, true} {
		p := filepath.Join(a.dir, name)
		if pending {
			p += ".pending"
		}
		b, err := fsutil.ReadFileNoFollow(p, maxReceiptBytes)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, false, fmt.Errorf("action receipt %s: %w", p, err)
		}
		var r actionReceipt
		if err := json.Unmarshal(b, &r); err != nil || r.Version != receiptVersion || r.SpoolID != a.spoolID {
			return nil, false, fmt.Errorf("action receipt %s is malformed or belongs to another spool", p)
		}
		return &r, pending, nil
	}
	return nil, false, fs.ErrNotExist
}

// writePending durably creates name.pending (no replace).
func (a actionReceipts) writePending(name string, r *actionReceipt) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if len(b) > maxReceiptBytes {
		return fmt.Errorf("action receipt of %d bytes exceeds the %d-byte bound", len(b), maxReceiptBytes)
	}
	return fsutil.WriteNew(filepath.Join(a.dir, name+".pending"), b, fsutil.FileMode)
}

// commit marks a pending receipt as appended. The rename is not synced: if
// a crash loses it, the receipt is pending again and a retry appends the
// identical record once more, which the Hub answers as a duplicate.
func (a actionReceipts) commit(name string) error {
	if err := os.Rename(filepath.Join(a.dir, name+".pending"), filepath.Join(a.dir, name)); err != nil {
		return fmt.Errorf("commit action receipt: %w", err)
	}
	return nil
}

// checkRoom refuses a new start once the directory holds
// MaxActionReceipts start receipts (names ending in ".s" or ".s.pending").
// It lists names only; hooks of one spool are serialised by the spool lock.
func (a actionReceipts) checkRoom() error {
	d, err := os.Open(a.dir)
	if err != nil {
		return err
	}
	defer d.Close()
	n := 0
	for {
		names, err := d.Readdirnames(1024)
		for _, name := range names {
			if strings.HasSuffix(name, ".s") || strings.HasSuffix(name, ".s.pending") {
				n++
			}
		}
		if n >= a.limit {
			return errReceiptLimit
		}
		if err == io.EOF || len(names) == 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

var errReceiptLimit = errors.New("action receipt limit reached")

// canonicalInputDigest hashes the tool input's canonical JSON (object keys
// sorted, numbers kept exactly); an absent input hashes as null.
func canonicalInputDigest(raw json.RawMessage) string {
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

var integerLiteral = regexp.MustCompile(`^-?(0|[1-9][0-9]{0,9})$`)

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
		if !integerLiteral.MatchString(lit) {
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

// ActionResult maps a completion onto an execution rule's result: a failure
// hook is failed; process_exit_code maps an explicit integer exit code (0
// succeeded, otherwise failed) and anything else to unknown; unverified is
// unknown on a returned call. Verification is always unknown.
func ActionResult(rule ActionRule, hookEvent string, exitCode *int) (result, verification string) {
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

// actionEnv is what recordAction needs of one hook invocation.
type actionEnv struct {
	ss        *spool.Session
	sp        *spool.Spool
	configDir string
	bd        *Binding
	p         *claude.Payload
	rec       *event.Record
	now       time.Time
	// source captures the checkout's source; CaptureSource unless a test
	// replaces it.
	source func(ctx context.Context, root string) (*event.SourceBinding, error)
	// receiptLimit replaces MaxActionReceipts when set (tests).
	receiptLimit int
	// facts, when set, are the payload facts an intake record carried
	// (its payload is not kept); otherwise they come from p.
	facts *payloadFacts
}

// payloadFacts are the facts of a hook payload the action path derives from
// its tool input and response: the canonical input digest and the explicit
// exit code. An intake record keeps them instead of the bodies.
type payloadFacts struct {
	InputDigest   string `json:"input_digest"`
	ExitCode      *int   `json:"exit_code,omitempty"`
	ExitCodeField string `json:"exit_code_field"`
	// CommandDigest is the digest of a Bash call's exact command string
	// (managed.go), never the command itself; empty for other tools.
	CommandDigest string `json:"command_digest,omitempty"`
}

func factsOf(p *claude.Payload) payloadFacts {
	code, field := ExplicitExitCode(p.ToolResponse)
	return payloadFacts{InputDigest: canonicalInputDigest(p.ToolInput), ExitCode: code, ExitCodeField: field, CommandDigest: bashCommandDigest(p)}
}

func (e actionEnv) payloadFacts() payloadFacts {
	if e.facts != nil {
		return *e.facts
	}
	return factsOf(e.p)
}

// recordAction appends the action start or finish of a tool lifecycle
// record that was just retained, and reports what it did. It is called by
// HandleClaudeHook after the event append, in the same spool Session.
func recordAction(ctx context.Context, e actionEnv) (string, error) {
	rec := e.rec
	if rec.Kind != event.ToolStart && rec.Kind != event.ToolFinish {
		return "", nil
	}
	rs := openActionReceipts(e.configDir, e.sp)
	if e.source == nil {
		e.source = func(ctx context.Context, root string) (*event.SourceBinding, error) {
			// Only a start needs HEAD's tree; a finish's drift check
			// compares HEAD.
			o := sourceOptions{treeCache: filepath.Join(rs.dir, "trees"), noTree: rec.Kind == event.ToolFinish, baseRef: e.bd.BaseRef}
			if rec.Kind == event.ToolStart {
				o.store = e.ss // the start retains a dirty checkout's bytes
			}
			return captureSource(ctx, root, o)
		}
	}
	if e.receiptLimit > 0 {
		rs.limit = e.receiptLimit
	}
	// The exact visible command of a registered recipe's runner: the hook
	// keeps the lifecycle event, records the managed occurrence for the
	// runner and suppresses the generic Bash action (managed.go).
	if r, ok := managedRecipe(e.bd, rec.ToolName, e.payloadFacts().CommandDigest); ok {
		return recordManaged(e, rs, r)
	}
	if rec.Kind == event.ToolStart {
		rule, ok := ruleFor(e.bd, rec.ToolName)
		if !ok {
			return "", nil
		}
		if rec.ToolUseID == "" {
			return ActionNoToolUseID, nil
		}
		if rec.Deferred || rec.WorkID == "" {
			return ActionDeferred, nil
		}
		return startAction(ctx, e, rs, rule)
	}
	if rec.ToolUseID == "" {
		if _, ok := ruleFor(e.bd, rec.ToolName); ok {
			return ActionNoToolUseID, nil
		}
		return "", nil
	}
	return finishAction(ctx, e, rs)
}

func (e actionEnv) startCanon() startCanon {
	return startCanon{Agent: e.rec.Agent, Session: e.rec.SessionID, ToolUseID: e.rec.ToolUseID, Tool: e.rec.ToolName,
		InputDigest: e.payloadFacts().InputDigest}
}

func startAction(ctx context.Context, e actionEnv, rs actionReceipts, rule ActionRule) (string, error) {
	rec := e.rec
	id := ActionID(rec.Agent, rec.SessionID, rec.ToolUseID)
	canon, _ := json.Marshal(e.startCanon())
	if err := rs.ensure(); err != nil {
		return "", err
	}
	prev, pending, err := rs.read(id + ".s")
	switch {
	case err == nil:
		if !bytes.Equal(prev.Canon, canon) {
			return ActionConflict, fmt.Errorf("%w: action %s (tool_use_id %s) was started with another tool or input; the retained start stands", ErrActionConflict, id, rec.ToolUseID)
		}
		if !pending {
			return ActionStartDuplicate, nil
		}
		// A crash came between the receipt and its append: append the
		// retained record again (identical bytes; the Hub sees a duplicate
		// if the first append had happened).
		return ActionStarted, appendReceipt(e.ss, rs, id+".s", prev)
	case !errors.Is(err, fs.ErrNotExist):
		return "", err
	}
	// The observation order is the spool sequence of the PreToolUse event
	// just appended: durable, spool-local, unique and in observation order.
	order := int64(rec.Seq)
	if rec.Seq == 0 || rec.Seq > 1<<62 {
		return "", fmt.Errorf("action %s: the PreToolUse event has no spool sequence to order it", id)
	}
	if err := rs.checkRoom(); errors.Is(err, errReceiptLimit) {
		gap := &event.Record{Agent: rec.Agent, SessionID: rec.SessionID, Kind: event.KindGap, HookEvent: rec.HookEvent,
			ObservedAt: rec.ObservedAt, CaptureMode: rec.CaptureMode,
			WorkID: rec.WorkID, Generation: rec.Generation, CanonicalSession: rec.CanonicalSession,
			Gap: &event.GapInfo{Kind: event.GapCaptureInterrupted, Reason: "action_receipt_limit", RefusedKind: event.ActionStart,
				Detail: fmt.Sprintf("the spool's %d retained action receipts are its bound; this action start was not recorded", rs.limit)}}
		if _, gerr := e.ss.Append(gap); gerr != nil {
			return ActionReceiptLimit, fmt.Errorf("action receipt limit reached, and recording its gap failed: %w", gerr)
		}
		return ActionReceiptLimit, nil
	} else if err != nil {
		return "", err
	}
	src, err := e.source(ctx, e.bd.Root)
	if err != nil {
		src = nil // the binding stays unknown; finish drift is then unknown
	}
	start := event.Record{
		Agent: rec.Agent, SessionID: rec.SessionID, Kind: event.ActionStart, HookEvent: rec.HookEvent,
		ToolName: rec.ToolName, ToolUseID: rec.ToolUseID,
		WorkID: rec.WorkID, Generation: rec.Generation, CanonicalSession: rec.CanonicalSession,
		ObservedAt: rec.ObservedAt, CaptureMode: rec.CaptureMode,
		Action: &event.Action{ID: id, Class: rule.Kind, Coverage: rule.Coverage, ResultSource: rule.ResultSource,
			SetupDigest: e.bd.SetupDigest, Source: src, ObservationScope: e.sp.ObservationScope(), ObservationOrder: order,
			StartedAt: e.now.UTC().Truncate(time.Second)},
	}
	r := &actionReceipt{Version: receiptVersion, SpoolID: rs.spoolID, Canon: canon, Record: start}
	if err := rs.writePending(id+".s", r); err != nil {
		return "", err
	}
	if err := appendReceipt(e.ss, rs, id+".s", r); err != nil {
		return "", err
	}
	// A checkout whose source cannot be bound (not a Git repository, git
	// missing or too slow) starts without a source binding, visibly so in
	// the record; it is not a hook failure.
	return ActionStarted, nil
}

// appendReceipt appends the receipt's record and commits the receipt.
func appendReceipt(ss *spool.Session, rs actionReceipts, name string, r *actionReceipt) error {
	rec := r.Record
	if _, err := ss.Append(&rec); err != nil {
		return fmt.Errorf("append %s: %w", rec.Kind, err)
	}
	return rs.commit(name)
}

func finishAction(ctx context.Context, e actionEnv, rs actionReceipts) (string, error) {
	rec := e.rec
	id := ActionID(rec.Agent, rec.SessionID, rec.ToolUseID)
	start, startPending, err := rs.read(id + ".s")
	if errors.Is(err, fs.ErrNotExist) {
		if _, ok := ruleFor(e.bd, rec.ToolName); ok {
			return ActionNoStart, nil
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
		if err := appendReceipt(e.ss, rs, id+".s", start); err != nil {
			return "", fmt.Errorf("action %s: the retained start could not be appended, so no finish is recorded: %w", id, err)
		}
	}
	pf := e.payloadFacts()
	code, field := pf.ExitCode, pf.ExitCodeField
	fc := finishCanon{startCanon: e.startCanon(), HookEvent: rec.HookEvent, Outcome: rec.Outcome, ExitCode: code, ExitCodeField: field}
	canon, _ := json.Marshal(fc)
	if !bytes.Equal(start.Canon, mustMarshal(fc.startCanon)) {
		return ActionConflict, fmt.Errorf("%w: action %s (tool_use_id %s) finished with another tool or input than it started with; no finish recorded", ErrActionConflict, id, rec.ToolUseID)
	}
	prev, pending, err := rs.read(id + ".f")
	switch {
	case err == nil:
		if !bytes.Equal(prev.Canon, canon) {
			return ActionConflict, fmt.Errorf("%w: action %s (tool_use_id %s) already finished with another typed result; the retained finish stands", ErrActionConflict, id, rec.ToolUseID)
		}
		if !pending {
			return ActionFinishDuplicate, nil
		}
		return ActionFinished, appendReceipt(e.ss, rs, id+".f", prev)
	case !errors.Is(err, fs.ErrNotExist):
		return "", err
	}
	if rec.Deferred || rec.WorkID == "" {
		// No exact target now: keep the sanitized lifecycle fact only; a
		// retry with a target records the finish.
		return ActionDeferred, nil
	}
	sa := start.Record.Action
	if sa == nil {
		return "", fmt.Errorf("action receipt %s.s has no action fact", id)
	}
	rule := ActionRule{Tool: start.Record.ToolName, Kind: sa.Class, Coverage: sa.Coverage, ResultSource: sa.ResultSource}
	result, verification := ActionResult(rule, rec.HookEvent, code)
	fin := *sa
	fin.Result, fin.Verification, fin.ExitCode = result, verification, code
	fin.CompletionSetupDigest = e.bd.SetupDigest
	fin.FinishedAt = e.now.UTC().Truncate(time.Second)
	if fin.CompletionSetupDigest != sa.SetupDigest {
		// The setup changed since the start: the finish is stale and source
		// drift is not checked.
		fin.Stale, fin.Drift = true, "unknown"
	} else {
		now, _ := e.source(ctx, e.bd.Root) // an unbound source gives drift unknown
		fin.Drift = sourceDrift(sa.Source, now)
	}
	// The finish goes to the start's target (the first durable claim),
	// whatever the current resolution says.
	sr := start.Record
	finish := event.Record{
		Agent: rec.Agent, SessionID: rec.SessionID, Kind: event.ActionFinish, HookEvent: rec.HookEvent,
		ToolName: sr.ToolName, ToolUseID: rec.ToolUseID, Outcome: rec.Outcome,
		WorkID: sr.WorkID, Generation: sr.Generation, CanonicalSession: sr.CanonicalSession,
		ObservedAt: rec.ObservedAt, CaptureMode: rec.CaptureMode, Action: &fin,
	}
	r := &actionReceipt{Version: receiptVersion, SpoolID: rs.spoolID, Canon: canon, Record: finish}
	if err := rs.writePending(id+".f", r); err != nil {
		return "", err
	}
	if err := appendReceipt(e.ss, rs, id+".f", r); err != nil {
		return "", err
	}
	return ActionFinished, nil
}

func mustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
