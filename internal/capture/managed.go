package capture

// Managed recipes, the hook's side and the spool writes of the runner
// (internal/recipe runs the child).
//
// A binding with registered recipes records the absolute agentscm
// executable (Binding.Runner). The exact visible Bash command of recipe ID
// is RunnerCommand(Runner, ID); the SessionStart hook gives Claude Code that
// command as additional context. When a PreToolUse or completion hook sees
// a Bash call whose command is exactly that string, it keeps the ordinary
// lifecycle event but records no generic Bash action: the PreToolUse
// durably writes a managed occurrence marker (the observed session, the
// provider tool_use_id, the recipe and the Pre event's spool sequence),
// which is the only thing that lets `change-capture run-recipe` launch the
// child, and the completion writes the Post marker. Prefixes, suffixes and
// any other shell command do not match.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/agentscm/agentscm/internal/action"
	"github.com/agentscm/agentscm/internal/agent"
	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/source"
	"github.com/agentscm/agentscm/internal/spool"
)

// RunRecipeSubcommand is the command line of the managed runner after the
// executable, up to the recipe id.
const RunRecipeSubcommand = "change-capture run-recipe --id"

// Action outcomes of the managed command's hooks (HookResult.Action).
const (
	// ActionManagedPre: the exact runner command's PreToolUse wrote its
	// managed occurrence marker; no generic action start.
	ActionManagedPre = "managed_pre"
	// ActionManagedPreDuplicate: an exact retry of that PreToolUse.
	ActionManagedPreDuplicate = "managed_pre_duplicate"
	// ActionManagedPost: the completion hook of the exact runner command;
	// the generic action finish is suppressed.
	ActionManagedPost = "managed_post"
	// ActionManagedDeferred: no exact target; no marker, so the runner
	// cannot launch for this occurrence.
	ActionManagedDeferred = "managed_deferred"
)

// Guidance bounds: the SessionStart additional context is at most
// MaxGuidanceBytes; a runner path longer than maxRunnerPath gives none.
const (
	MaxGuidanceBytes = 16 << 10
	maxRunnerPath    = 4096
	managedDir       = "managed"
	maxMarkerBytes   = 16 << 10
	markerVersion    = 1
	// maxManagedFiles bounds the managed directory a runner lists (markers,
	// retained outputs and run receipts, a handful per managed call): past
	// it the runner refuses instead of missing an occurrence.
	maxManagedFiles = 8 * action.MaxReceipts
)

// RunnerCommand is the exact visible Bash command of the managed runner for
// recipe id: the shell-quoted absolute executable, the subcommand and the
// shell-quoted id.
func RunnerCommand(runner, id string) string {
	return shellWord(runner) + " " + RunRecipeSubcommand + " " + shellWord(id)
}

// shellWord quotes s for a POSIX shell unless it is made of safe characters.
func shellWord(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+:@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// commandDigest identifies an exact command string without retaining it.
func commandDigest(cmd string) string {
	sum := sha256.Sum256([]byte("agentscm-command-v1\x00" + cmd))
	return hex.EncodeToString(sum[:])
}

// bashCommandDigest is the digest of a Bash call's exact string command,
// or "" (another tool, no command, a command that is not a string).
func bashCommandDigest(p *agent.Payload) string {
	if p == nil || p.ToolName != "Bash" || len(p.ToolInput) == 0 {
		return ""
	}
	var in struct {
		Command *string `json:"command"`
	}
	if json.Unmarshal(p.ToolInput, &in) != nil || in.Command == nil {
		return ""
	}
	return commandDigest(*in.Command)
}

// managedRecipe returns the registered recipe whose exact runner command
// has digest d: only a Bash call, only a binding with a runner.
func managedRecipe(bd *binding.Binding, tool, d string) (binding.Recipe, bool) {
	if bd == nil || tool != "Bash" || d == "" || bd.Runner == "" {
		return binding.Recipe{}, false
	}
	for _, r := range bd.Recipes {
		if commandDigest(RunnerCommand(bd.Runner, r.ID)) == d {
			return r, true
		}
	}
	return binding.Recipe{}, false
}

// RecipeGuidance is the SessionStart guidance of a binding with registered
// recipes: each recipe's exact absolute runner command, at most
// MaxGuidanceBytes. It is empty when no recipe is registered.
func RecipeGuidance(bd *binding.Binding) (string, error) {
	if bd == nil || len(bd.Recipes) == 0 || bd.Runner == "" {
		return "", nil
	}
	if !filepath.IsAbs(bd.Runner) || len(bd.Runner) > maxRunnerPath {
		return "", fmt.Errorf("the recorded recipe runner %q is not an absolute path of at most %d bytes; no recipe guidance", bd.Runner, maxRunnerPath)
	}
	var b strings.Builder
	b.WriteString("AgentSCM managed recipes are registered for this repository (" + bd.Root + ").\n")
	b.WriteString("To run one as a verification, use the Bash tool with exactly this command from the repository root, alone: no prefix, suffix, pipe, redirection or other command.\n")
	ids := make([]binding.Recipe, len(bd.Recipes))
	copy(ids, bd.Recipes)
	sort.Slice(ids, func(i, j int) bool { return ids[i].ID < ids[j].ID })
	for _, r := range ids {
		fmt.Fprintf(&b, "- recipe %s (timeout %d s): %s\n", r.ID, r.TimeoutSeconds, RunnerCommand(bd.Runner, r.ID))
	}
	b.WriteString("Give the Bash call a timeout longer than the recipe's. The runner executes the registered argv and exits with its status; its passed or failed result is caller_asserted.\n")
	if b.Len() > MaxGuidanceBytes {
		return "", fmt.Errorf("the recipe guidance of %d bytes exceeds the %d-byte bound; no recipe guidance", b.Len(), MaxGuidanceBytes)
	}
	return b.String(), nil
}

// SessionStartOutput is what the SessionStart hook prints on stdout for a
// payload: Claude Code's hookSpecificOutput with the recipe guidance as
// additional context, only for a SessionStart whose cwd an enabled binding
// with registered recipes covers. It is empty (nothing printed) otherwise.
func SessionStartOutput(store StateDir, payload []byte) ([]byte, error) {
	if len(payload) == 0 || len(payload) > agent.MaxPayloadBytes || !strings.Contains(string(payload), "SessionStart") {
		return nil, nil
	}
	p, err := agent.DecodePayload(payload)
	if err != nil || p.HookEventName != "SessionStart" {
		return nil, nil
	}
	cfg, err := store.Bindings().Load()
	if err != nil {
		return nil, err
	}
	cwd := filepath.Clean(p.Cwd)
	bd := cfg.Lookup(cwd)
	text, err := RecipeGuidance(bd)
	if err != nil || text == "" {
		return nil, err
	}
	out := map[string]any{"hookSpecificOutput": map[string]string{"hookEventName": "SessionStart", "additionalContext": text}}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// ManagedPre is the durable managed occurrence marker a PreToolUse of the
// exact runner command writes: what the runner binds its verification
// action to.
type ManagedPre struct {
	Version      int    `json:"version"`
	SpoolID      string `json:"spool_id"`
	ActionID     string `json:"action_id"`
	Agent        string `json:"agent"`
	Session      string `json:"session"`
	ToolUseID    string `json:"tool_use_id"`
	RecipeID     string `json:"recipe_id"`
	RecipeDigest string `json:"recipe_digest"`
	InputDigest  string `json:"input_digest"`
	// WorkID, Generation and CanonicalSession are the exact target the Pre
	// event was captured under.
	WorkID           string `json:"work_id"`
	Generation       int64  `json:"generation"`
	CanonicalSession string `json:"canonical_session"`
	// PreSeq is the spool sequence of the durable PreToolUse event: the
	// verification action's observation order.
	PreSeq      uint64    `json:"pre_seq"`
	CaptureMode string    `json:"capture_mode"`
	ObservedAt  time.Time `json:"observed_at"`
}

// ErrManagedConflict reports a managed occurrence retried with other facts.
var ErrManagedConflict = errors.New("managed occurrence conflict")

func (a actionReceipts) managedDir() string { return filepath.Join(a.dir, managedDir) }

// recordManaged handles a lifecycle record of the exact runner command.
func recordManaged(e actionEnv, rs actionReceipts, r binding.Recipe) (string, error) {
	rec := e.rec
	if rec.ToolUseID == "" {
		return action.NoToolUseID, nil
	}
	if err := rs.ensure(); err != nil {
		return "", err
	}
	md := rs.managedDir()
	if err := fsutil.MkdirPrivate(md); err != nil {
		return "", err
	}
	id := action.ID(rec.Agent, rec.SessionID, rec.ToolUseID)
	if rec.Kind == event.ToolFinish {
		// The Post marker: the original occurrence completed (ordinary
		// lifecycle facts are retained; no generic finish while the
		// occurrence is the runner's).
		pf := e.payloadFacts()
		post := managedPost{Version: markerVersion, HookEvent: rec.HookEvent, Outcome: rec.Outcome, ExitCode: pf.ExitCode,
			ExitCodeField: pf.ExitCodeField, ObservedAt: rec.ObservedAt.UTC()}
		b, _ := json.Marshal(post)
		if err := fsutil.WriteNew(filepath.Join(md, id+".post"), b, fsutil.FileMode); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", err
		}
		if _, err := os.Lstat(filepath.Join(md, id+".cleared")); err == nil {
			// Reconciliation proved that no run started and cleared the
			// reservation before this Post: the occurrence converges on
			// one original-bound generic terminal receipt.
			mk, err := readMarker(filepath.Join(md, id+".pre"), rs.spoolID)
			if err != nil {
				return "", err
			}
			start, finish := genericTerminal(e.bd, e.sp.ObservationScope(), mk, post, e.now)
			if err := appendOnce(e.ss, rs, start, finish); err != nil {
				return "", err
			}
		}
		return ActionManagedPost, nil
	}
	if rec.Deferred || rec.WorkID == "" {
		return ActionManagedDeferred, nil
	}
	m := ManagedPre{Version: markerVersion, SpoolID: rs.spoolID, ActionID: id, Agent: rec.Agent, Session: rec.SessionID,
		ToolUseID: rec.ToolUseID, RecipeID: r.ID, RecipeDigest: r.Digest, InputDigest: e.payloadFacts().InputDigest,
		WorkID: rec.WorkID, Generation: rec.Generation, CanonicalSession: rec.CanonicalSession,
		PreSeq: rec.Seq, CaptureMode: rec.CaptureMode, ObservedAt: rec.ObservedAt.UTC()}
	path := filepath.Join(md, id+".pre")
	prev, err := readMarker(path, rs.spoolID)
	switch {
	case err == nil:
		if prev.Session != m.Session || prev.ToolUseID != m.ToolUseID || prev.RecipeDigest != m.RecipeDigest || prev.InputDigest != m.InputDigest {
			return action.Conflict, fmt.Errorf("%w: managed occurrence %s (tool_use_id %s) was observed with other facts; the retained marker stands", ErrManagedConflict, id, rec.ToolUseID)
		}
		return ActionManagedPreDuplicate, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	if err := fsutil.WriteNew(path, b, fsutil.FileMode); err != nil {
		return "", fmt.Errorf("managed occurrence marker: %w", err)
	}
	return ActionManagedPre, nil
}

func readMarker(path, spoolID string) (*ManagedPre, error) {
	b, err := fsutil.ReadFileNoFollow(path, maxMarkerBytes)
	if err != nil {
		return nil, err
	}
	var m ManagedPre
	if err := json.Unmarshal(b, &m); err != nil || m.Version != markerVersion || m.SpoolID != spoolID || m.ActionID == "" {
		return nil, fmt.Errorf("managed occurrence marker %s is malformed or belongs to another spool", path)
	}
	return &m, nil
}

// ManagedSpool is the runner's access to a binding's spool: markers,
// receipts and the durable appends of its verification action.
type ManagedSpool struct {
	store StateDir
	bd    *binding.Binding
	sp    *spool.Spool
	rs    actionReceipts
}

// OpenManaged opens the spool of bd for the managed runner.
func (s StateDir) OpenManaged(bd *binding.Binding) (*ManagedSpool, error) {
	sp, err := s.openHookSpool(bd.Spool)
	if err != nil {
		return nil, err
	}
	rs := openActionReceipts(s.Dir, sp)
	if err := rs.ensure(); err != nil {
		return nil, err
	}
	if err := fsutil.MkdirPrivate(rs.managedDir()); err != nil {
		return nil, err
	}
	if err := fsutil.CheckPrivateDir(rs.managedDir()); err != nil {
		return nil, err
	}
	return &ManagedSpool{store: s, bd: bd, sp: sp, rs: rs}, nil
}

// Dir is the private directory of the managed markers and retained
// outputs.
func (m *ManagedSpool) Dir() string { return m.rs.managedDir() }

// ObservationScope is the spool's observation scope.
func (m *ManagedSpool) ObservationScope() string { return m.sp.ObservationScope() }

// withSession runs fn in a spool Session bound to the ledger's stream.
func (m *ManagedSpool) withSession(ctx context.Context, fn func(ss *spool.Tx, led *Ledger) error) error {
	ss, err := m.sp.Begin(ctx)
	if err != nil {
		return err
	}
	defer ss.Close()
	led, err := m.store.OpenLedger(m.bd.Spool)
	if err != nil {
		return err
	}
	defer led.Close()
	stream, err := led.BindStream(m.sp.ObservationScope())
	if err != nil {
		return err
	}
	ss.SetStream(stream)
	return fn(ss, led)
}

// Admit admits the events waiting in the spool's intake (a PreToolUse that
// found the lock busy writes its event there), so that the marker of this
// very invocation exists before the runner looks for it.
func (m *ManagedSpool) Admit(ctx context.Context, hub Hub) error {
	return m.withSession(ctx, func(ss *spool.Tx, led *Ledger) error {
		adm := &admission{deadline: time.Now().Add(2 * admitBudget), left: maxAdmitPerHook}
		_, err := admitIntake(ctx, m.store, led, ss, m.sp, m.bd, hub, adm, &HookResult{})
		return err
	})
}

// Markers returns the managed occurrence markers of the observed session
// and recipe id that no run has started, none cleared and no completion
// followed. Markers of other sessions or recipes are ignored.
func (m *ManagedSpool) Markers(session, recipeID string) ([]ManagedPre, error) {
	d, err := os.Open(m.Dir())
	if err != nil {
		return nil, err
	}
	defer d.Close()
	var names []string
	for {
		batch, err := d.Readdirnames(1024)
		names = append(names, batch...)
		if len(names) > maxManagedFiles {
			return nil, fmt.Errorf("the managed directory %s holds more than %d files; no occurrence can be chosen", m.Dir(), maxManagedFiles)
		}
		if err != nil || len(batch) == 0 {
			break
		}
	}
	var out []ManagedPre
	for _, n := range names {
		id, ok := strings.CutSuffix(n, ".pre")
		if !ok {
			continue
		}
		mk, err := readMarker(filepath.Join(m.Dir(), n), m.rs.spoolID)
		if err != nil {
			return nil, err
		}
		if mk.Session != session || mk.RecipeID != recipeID || mk.ActionID != id {
			continue
		}
		if st, err := m.StartState(id); err != nil {
			return nil, err
		} else if st != StartNone {
			continue
		}
		if m.exists(id+".cleared") || m.exists(id+".post") {
			continue
		}
		out = append(out, *mk)
	}
	return out, nil
}

func (m *ManagedSpool) exists(name string) bool {
	_, err := os.Lstat(filepath.Join(m.Dir(), name))
	return err == nil
}

// Marker reads the marker of an action id.
func (m *ManagedSpool) Marker(actionID string) (*ManagedPre, error) {
	return readMarker(filepath.Join(m.Dir(), actionID+".pre"), m.rs.spoolID)
}

// Start states of a managed action.
const (
	StartNone    = "none"
	StartPending = "pending" // the receipt was written; the append may or may not be durable
	StartDurable = "durable"
)

// StartState says whether the verification start of actionID was written.
func (m *ManagedSpool) StartState(actionID string) (string, error) {
	_, pending, err := m.rs.read(actionID + ".s")
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return StartNone, nil
	case err != nil:
		return "", err
	case pending:
		return StartPending, nil
	}
	return StartDurable, nil
}

// FinishState says whether the verification finish of actionID was
// written (StartNone/StartPending/StartDurable for the finish receipt).
func (m *ManagedSpool) FinishState(actionID string) (string, error) {
	_, pending, err := m.rs.read(actionID + ".f")
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return StartNone, nil
	case err != nil:
		return "", err
	case pending:
		return StartPending, nil
	}
	return StartDurable, nil
}

// StartRecord returns the retained verification start of actionID.
func (m *ManagedSpool) StartRecord(actionID string) (*event.Record, error) {
	r, _, err := m.rs.read(actionID + ".s")
	if err != nil {
		return nil, err
	}
	rec := r.Record
	return &rec, nil
}

// Source binds the checkout's current source (noTree for a drift check).
func (m *ManagedSpool) Source(ctx context.Context, noTree bool) (*event.SourceBinding, error) {
	return captureSource(ctx, m.bd.Root, sourceOptions{treeCache: filepath.Join(m.rs.dir, "trees"), noTree: noTree, baseRef: m.bd.BaseRef})
}

// Drift compares the current source with a start's binding.
func (m *ManagedSpool) Drift(ctx context.Context, start *event.SourceBinding) string {
	now, _ := m.Source(ctx, true)
	return source.Drift(start, now)
}

// PutBlobs retains blobs as local-private artifacts of the spool, under its
// lock and limits (spool.Spool.PutBlobs).
func (m *ManagedSpool) PutBlobs(ctx context.Context, blobs []spool.Blob) ([]event.ArtifactRef, error) {
	return m.sp.PutBlobs(ctx, blobs)
}

// AppendStart durably retains the verification start: its private receipt
// first, then the spool append (fsynced), then the receipt's commit. A
// retained start is never written again.
func (m *ManagedSpool) AppendStart(ctx context.Context, rec *event.Record) error {
	return m.appendReceipt(ctx, rec, ".s")
}

// AppendFinish durably retains the verification finish the same way.
func (m *ManagedSpool) AppendFinish(ctx context.Context, rec *event.Record) error {
	return m.appendReceipt(ctx, rec, ".f")
}

func (m *ManagedSpool) appendReceipt(ctx context.Context, rec *event.Record, suffix string) error {
	if rec.Action == nil || rec.Action.ID == "" {
		return errors.New("managed action record without its action fact")
	}
	name := rec.Action.ID + suffix
	canon, _ := json.Marshal(map[string]string{"managed": rec.Action.ID, "kind": string(rec.Kind)})
	r := &action.Receipt{Version: action.ReceiptVersion, SpoolID: m.rs.spoolID, Canon: canon, Record: *rec}
	prev, pending, err := m.rs.read(name)
	switch {
	case err == nil && !pending:
		return fmt.Errorf("the %s of managed action %s is already retained", rec.Kind, rec.Action.ID)
	case err == nil:
		r = prev // a cut append: append the retained bytes again
	case !errors.Is(err, fs.ErrNotExist):
		return err
	default:
		if err := m.rs.writePending(name, r); err != nil {
			return err
		}
	}
	return m.withSession(ctx, func(ss *spool.Tx, _ *Ledger) error {
		return appendReceipt(ss, m.rs, name, r)
	})
}

// Clear records that a proven no-start reservation of actionID was
// cleared by reconciliation: the marker can never launch the runner again.
func (m *ManagedSpool) Clear(actionID string) error {
	b, _ := json.Marshal(map[string]any{"version": markerVersion, "cleared": true})
	if err := fsutil.WriteNew(filepath.Join(m.Dir(), actionID+".cleared"), b, fsutil.FileMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// managedPost is the Post marker: the typed completion facts of the
// managed occurrence.
type managedPost struct {
	Version       int       `json:"version"`
	HookEvent     string    `json:"hook_event"`
	Outcome       string    `json:"outcome"`
	ExitCode      *int      `json:"exit_code,omitempty"`
	ExitCodeField string    `json:"exit_code_field"`
	ObservedAt    time.Time `json:"observed_at"`
}

// genericTerminal builds the generic action start and finish of a managed
// occurrence whose run was proven never to start: bound to the original
// PreToolUse (target, order, time) and the binding's Bash rule (execution,
// unknown/unverified without one); the verification is unknown and the
// source was not captured, so drift is unknown.
func genericTerminal(bd *binding.Binding, scope string, mk *ManagedPre, post managedPost, now time.Time) (start, finish *event.Record) {
	rule, ok := ruleFor(bd, "Bash")
	if !ok {
		rule = action.Rule{Tool: "Bash", Kind: "execution", Coverage: "unknown", ResultSource: "unverified"}
	}
	act := event.Action{ID: mk.ActionID, Class: rule.Kind, Coverage: rule.Coverage, ResultSource: rule.ResultSource,
		SetupDigest: bd.SetupDigest, ObservationScope: scope, ObservationOrder: int64(mk.PreSeq), StartedAt: mk.ObservedAt.Truncate(time.Second)}
	start = &event.Record{Agent: mk.Agent, SessionID: mk.Session, Kind: event.ActionStart, HookEvent: "PreToolUse", ToolName: "Bash",
		ToolUseID: mk.ToolUseID, WorkID: mk.WorkID, Generation: mk.Generation, CanonicalSession: mk.CanonicalSession,
		ObservedAt: mk.ObservedAt, CaptureMode: mk.CaptureMode, Action: &act}
	fin := act
	fin.Result, fin.Verification = action.Result(rule, post.HookEvent, post.ExitCode)
	fin.ExitCode = post.ExitCode
	fin.CompletionSetupDigest, fin.Drift = bd.SetupDigest, "unknown"
	fin.FinishedAt = post.ObservedAt.Truncate(time.Second)
	if fin.FinishedAt.IsZero() {
		fin.FinishedAt = now.UTC().Truncate(time.Second)
	}
	finish = &event.Record{Agent: mk.Agent, SessionID: mk.Session, Kind: event.ActionFinish, HookEvent: post.HookEvent, ToolName: "Bash",
		ToolUseID: mk.ToolUseID, Outcome: post.Outcome, WorkID: mk.WorkID, Generation: mk.Generation, CanonicalSession: mk.CanonicalSession,
		ObservedAt: post.ObservedAt, CaptureMode: mk.CaptureMode, Action: &fin}
	return start, finish
}

// appendOnce appends each record under its receipt (.s, .f) unless that
// receipt is already retained: whichever of the Post and the clearing
// comes second finds the first one's receipts and appends nothing new.
func appendOnce(ss *spool.Tx, rs actionReceipts, recs ...*event.Record) error {
	for _, rec := range recs {
		name := rec.Action.ID + ".s"
		if rec.Kind == event.ActionFinish {
			name = rec.Action.ID + ".f"
		}
		prev, pending, err := rs.read(name)
		switch {
		case err == nil && !pending:
			continue
		case err == nil:
			if err := appendReceipt(ss, rs, name, prev); err != nil {
				return err
			}
			continue
		case !errors.Is(err, fs.ErrNotExist):
			return err
		}
		canon, _ := json.Marshal(map[string]string{"generic_terminal": rec.Action.ID, "kind": string(rec.Kind)})
		r := &action.Receipt{Version: action.ReceiptVersion, SpoolID: rs.spoolID, Canon: canon, Record: *rec}
		if err := rs.writePending(name, r); err != nil {
			return err
		}
		if err := appendReceipt(ss, rs, name, r); err != nil {
			return err
		}
	}
	return nil
}

// ClearAfterPost records, for a cleared reservation whose Post already
// arrived, the one original-bound generic terminal receipt; it reports
// whether the Post had arrived.
func (m *ManagedSpool) ClearAfterPost(ctx context.Context, actionID string) (bool, error) {
	b, err := fsutil.ReadFileNoFollow(filepath.Join(m.Dir(), actionID+".post"), maxMarkerBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var post managedPost
	if err := json.Unmarshal(b, &post); err != nil || post.Version != markerVersion {
		return false, fmt.Errorf("managed completion marker of %s is malformed", actionID)
	}
	mk, err := m.Marker(actionID)
	if err != nil {
		return false, err
	}
	start, finish := genericTerminal(m.bd, m.sp.ObservationScope(), mk, post, time.Now())
	return true, m.withSession(ctx, func(ss *spool.Tx, _ *Ledger) error {
		return appendOnce(ss, m.rs, start, finish)
	})
}
