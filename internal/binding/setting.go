package binding

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentscm/agentscm/internal/action"
	"github.com/agentscm/agentscm/internal/agent/adapter"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/source"
	"github.com/agentscm/agentscm/internal/spool"
)

// Capture states as every surface shows them.
const (
	StateNotSetUp     = "Not set up"
	StateOff          = "Off"
	StateMetadataOnly = "Metadata only"
	StateLocalOnly    = "Local only"
	StateShared       = "Shared with Hub"
)

// Setting is capture_setting: the one reading of a checkout's capture choice
// that every surface uses.
type Setting struct {
	Root       string `json:"root"`
	Configured bool   `json:"configured"`
	Enabled    bool   `json:"enabled"`
	Mode       string `json:"capture_mode,omitempty"`
	State      string `json:"state"`
	// LineageMismatch is true when the checkout is now connected to another
	// repository or Hub than the binding was saved for.
	LineageMismatch bool   `json:"lineage_mismatch"`
	Hub             string `json:"hub,omitempty"`
	Repository      string `json:"repository,omitempty"`
	// ConnectedHub and ConnectedRepository describe the current connection.
	ConnectedHub        string `json:"connected_hub,omitempty"`
	ConnectedRepository string `json:"connected_repository,omitempty"`
	Spool               string `json:"spool,omitempty"`
	WorktreeID          string `json:"worktree_id,omitempty"`
	ClaudeSettings      string `json:"claude_settings,omitempty"`
	// Agent is the first agent whose hooks the binding installs
	// (claude-code, codex, gemini); Agents lists every agent with the state
	// of its hooks.
	Agent  string           `json:"agent,omitempty"`
	Agents []AgentHookState `json:"agents,omitempty"`
	// Refused lists the envelopes of the spool the Hub permanently
	// refused (retained locally, each marked on the Hub by a hub_refused
	// gap where it had a place in a stream).
	Refused *RefusalReport `json:"refused,omitempty"`
	// Compaction is the binding's automatic compaction policy (nil: off).
	Compaction *CompactionPolicy `json:"compaction_policy,omitempty"`
	// StrayHooks lists the checkout's hook files that hold marked capture
	// hooks while no enabled binding records them (StrayHooks): the
	// checkout is half configured, and StrayAdvice says how to finish or
	// undo it.
	StrayHooks  []string `json:"stray_hooks,omitempty"`
	StrayAdvice string   `json:"stray_hooks_advice,omitempty"`
}

func stateOf(b *Binding) string {
	switch {
	case b == nil:
		return StateNotSetUp
	case !b.Enabled:
		return StateOff
	case b.CaptureMode == event.ModeSharedConversation:
		return StateShared
	case b.CaptureMode == event.ModeLocalConversation:
		return StateLocalOnly
	}
	return StateMetadataOnly
}

// CaptureSetting reads the setting of a checkout (saved path accepted for a
// deleted checkout).
func CaptureSetting(store State, conns Connections, root string) (*Setting, error) {
	canon, err := SavedRoot(root)
	if err != nil {
		return nil, err
	}
	cfg, err := store.Bindings().Load()
	if err != nil {
		return nil, err
	}
	b := cfg.Find(canon)
	s := &Setting{Root: canon, State: stateOf(b)}
	lin, cerr := conns.Current(canon)
	if cerr == nil {
		s.ConnectedHub, s.ConnectedRepository = lin.Hub, lin.Repository
	} else if !errors.Is(cerr, ErrNoConnection) {
		return nil, cerr
	}
	if s.StrayHooks = StrayHooks(canon, b); len(s.StrayHooks) > 0 {
		s.StrayAdvice = StrayHooksAdvice(canon, s.StrayHooks)
	}
	if b == nil {
		return s, nil
	}
	s.Configured, s.Enabled, s.Mode = true, b.Enabled, b.CaptureMode
	s.Hub, s.Repository, s.Spool, s.WorktreeID = b.Hub, b.Repository, b.Spool, b.WorktreeID
	s.ClaudeSettings = b.SettingsPath()
	s.Agent = b.Hooks()[0].Agent
	s.Agents = b.HookStates()
	s.Compaction = b.Compaction
	s.LineageMismatch = cerr == nil && b.Hub != "" && !SameRepo(lin, b.Lineage())
	if rep, err := store.Refusals(b.Spool); err == nil && rep.Total > 0 {
		s.Refused = &rep
	}
	return s, nil
}

// Settings reads the setting of every bound checkout.
func Settings(store State, conns Connections) ([]Setting, error) {
	cfg, err := store.Bindings().Load()
	if err != nil {
		return nil, err
	}
	out := make([]Setting, 0, len(cfg.Bindings))
	for _, b := range cfg.Bindings {
		s, err := CaptureSetting(store, conns, b.Root)
		if err != nil {
			return nil, err
		}
		out = append(out, *s)
	}
	return out, nil
}

// EnableOptions are the inputs of enable_capture.
type EnableOptions struct {
	Root string
	// Mode is the requested capture mode; empty keeps an enabled binding's
	// mode and means metadata-only otherwise.
	Mode string
	// Expect, when set, is the repository and Hub the caller displayed to
	// the person who confirmed: the connection must still be that one.
	Expect     *Lineage
	ConfigDir  string
	Executable string
	Now        time.Time
	// Limits raise (or, as far as the spool's contents allow, lower) the
	// limits of the binding's spool; zero fields keep the current value
	// (the defaults for a new spool).
	Limits spool.Limits
	// Agent is the agent whose hooks a new binding installs (adapter.For;
	// empty is Claude Code). An existing binding keeps its agents; an agent
	// it does not have is added, its hooks installed where it reads them
	// beside the others'.
	Agent string
	// Compaction sets or clears the automatic compaction policy. A new
	// binding records the default policy (DefaultCompactThreshold) unless
	// this clears it; re-enabling keeps the saved choice unless this
	// changes it.
	Compaction PolicyChange
}

// EnableResult says what enable_capture did.
type EnableResult struct {
	Action string `json:"action"` // created, re-enabled or mode-changed
	*ConfigureResult
	ExcludeAdded []string `json:"exclude_added,omitempty"`
}

// EnableCapture is the one-step setup (enable_capture). Under the
// connections lock then the capture config lock it decides from the saved
// binding: with none it builds one through the configure code path with the
// defaults; with a disabled one it re-enables with everything saved; with an
// enabled one it only changes the mode.
func EnableCapture(ctx context.Context, store State, conns Connections, o EnableOptions) (*EnableResult, error) {
	root, err := CanonicalRoot(o.Root)
	if err != nil {
		return nil, err
	}
	if o.Mode != "" && !ValidMode(o.Mode) {
		return nil, fmt.Errorf("--mode %q is not supported; use metadata-only, local-conversation or shared-conversation", o.Mode)
	}
	unlock, err := conns.Lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	lin, err := conns.Current(root)
	if err != nil {
		return nil, err
	}
	if o.Expect != nil && !SameRepo(lin, *o.Expect) {
		return nil, fmt.Errorf("this checkout is now connected to %s on %s; refresh and confirm again", lin.Repository, lin.Hub)
	}
	did := ""
	if _, err := adapter.For(o.Agent); err != nil {
		return nil, err
	}
	co := ConfigureOptions{Root: root, CaptureMode: o.Mode, Executable: o.Executable, Now: o.Now,
		Compaction: o.Compaction, compactionBy: "enable", Agent: o.Agent}
	decide := func(cur *Binding, co *ConfigureOptions) error {
		switch {
		case cur == nil:
			did = "created"
			co.Spool = filepath.Join(o.ConfigDir, "capture-spools", randomHex(16))
			co.WorktreeID = lin.WorktreeID
			co.SetupDigest = randomHex(32)
			co.BaseRef = defaultBaseRef(ctx, root)
			co.ActionRules = []string{action.DefaultRule.String()}
			if co.CaptureMode == "" {
				co.CaptureMode = event.ModeMetadataOnly
			}
			co.Limits = o.Limits
			if o.Compaction == (PolicyChange{}) {
				// One-step setup records the operator's choice of
				// automatic compaction of acknowledged history.
				co.Compaction = PolicyChange{Set: DefaultCompactThreshold}
			}
		default:
			if cur.Hub != "" && !SameRepo(lin, cur.Lineage()) {
				return fmt.Errorf("the capture binding of this checkout was saved for %s, but it is now connected to %s; %s",
					DescribeLineage(cur.Lineage()), DescribeLineage(lin), startFreshAdvice(cur))
			}
			// The binding keeps its agents; an agent asked for that it does
			// not have is added beside them (configureLocked).
			did = "re-enabled"
			if cur.Enabled {
				did = "mode-changed"
			}
			if co.CaptureMode == "" {
				co.CaptureMode = cur.CaptureMode
			}
			co.Spool, co.WorktreeID, co.BaseRef, co.SetupDigest = cur.Spool, cur.WorktreeID, cur.BaseRef, cur.SetupDigest
			co.ClaudeHistoryRoot = cur.ClaudeHistoryRoot
			co.Limits = o.Limits // zero fields keep the spool's current limits
			co.ActionRules = nil
			for _, r := range cur.ActionRules {
				co.ActionRules = append(co.ActionRules, r.String())
			}
			co.RecipeFiles, co.Recipes = nil, cur.Recipes
		}
		return nil
	}
	res, err := configureLocked(ctx, store, root, lin, co, decide)
	if err != nil {
		return nil, err
	}
	out := &EnableResult{Action: did, ConfigureResult: res}
	if w := warnBaseRefOnce(ctx, store, root, res); w != "" {
		out.Warnings = append(out.Warnings, w)
	}
	// A hook file this call created (a new binding's, or an added
	// agent's) goes into the repository's local exclude.
	for _, in := range res.Agents {
		if !in.Created {
			continue
		}
		added, err := addExclude(ctx, root, settingsRel(in.Settings, root))
		if err != nil {
			out.Warnings = append(out.Warnings, "could not add the hook file "+in.Settings+" to the repository's local exclude: "+err.Error())
		}
		out.ExcludeAdded = append(out.ExcludeAdded, added...)
	}
	return out, nil
}

func settingsRel(abs, root string) string {
	rel, err := filepath.Rel(root, abs)
	if err != nil {
		return DefaultClaudeSettings
	}
	return filepath.ToSlash(rel)
}

// defaultBaseRef is the checkout's default branch from origin/HEAD as
// origin/<name> when that resolves to a commit, else origin/main.
func defaultBaseRef(ctx context.Context, root string) string {
	out, err := gitOut(ctx, root, "rev-parse", "--abbrev-ref", "origin/HEAD")
	ref := strings.TrimSpace(out)
	if err == nil && strings.HasPrefix(ref, "origin/") && ref != "origin/HEAD" {
		if _, err := gitOut(ctx, root, "rev-parse", "--verify", "--quiet", ref+"^{commit}"); err == nil {
			return ref
		}
	}
	return "origin/main"
}

// baseRefWarnedName is the file, in the capture layer's private state of
// a spool (beside its summary), naming the base ref enable last warned
// does not resolve. It is kept out of capture.json, whose strict readers
// would refuse a new field.
const baseRefWarnedName = "base-ref-warned"

// warnBaseRefOnce returns enable's warning that the binding's base ref
// does not resolve, with advice that works in this repository, or "": it
// warns once per spool and ref (the spool is the checkout's for life),
// remembering that it did in baseRefWarnedName; once the ref resolves the
// note is removed, so a ref that stops resolving later is named again. A
// note that cannot be written costs one more warning next time.
func warnBaseRefOnce(ctx context.Context, store State, root string, res *ConfigureResult) string {
	if res.BaseRef == "" {
		return ""
	}
	note := filepath.Join(filepath.Dir(store.SummaryPath(res.Spool)), baseRefWarnedName)
	_, err := source.ResolveBaseRef(ctx, root, res.BaseRef)
	var unresolved *source.UnresolvedBaseRefError
	switch {
	case err == nil:
		_ = os.Remove(note)
		return ""
	case !errors.As(err, &unresolved):
		return err.Error() // not a ref name: say so every time
	}
	if b, err := fsutil.ReadFileNoFollow(note, 4096); err == nil && strings.TrimSpace(string(b)) == res.BaseRef {
		return ""
	}
	_ = os.MkdirAll(filepath.Dir(note), fsutil.DirMode)
	_ = fsutil.WriteAtomic(note, []byte(res.BaseRef+"\n"), fsutil.FileMode)
	return fmt.Sprintf("base ref %q does not resolve yet, so source bindings name merge_base as omitted (partial); %s (this warning is not repeated)",
		res.BaseRef, baseRefAdvice(ctx, root, res.BaseRef))
}

// baseRefAdvice says how ref (a remote-tracking ref such as origin/main,
// the seed's default) comes to resolve in the repository at root.
func baseRefAdvice(ctx context.Context, root, ref string) string {
	remote, branch, ok := strings.Cut(ref, "/")
	if !ok || remote == "" || branch == "" {
		return fmt.Sprintf("create or fetch %s", ref)
	}
	if _, err := gitOut(ctx, root, "remote", "get-url", "--", remote); err != nil {
		return fmt.Sprintf("this repository has no remote %q: it resolves once it has one with a branch %s (git remote add %s URL && git fetch %s)",
			remote, branch, remote, remote)
	}
	return fmt.Sprintf("it resolves once the branch is fetched (git fetch %s %s)", remote, branch)
}

func gitOut(ctx context.Context, root string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", root}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_OPTIONAL_LOCKS=0", "GIT_TERMINAL_PROMPT=0")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}

// SetModeResult says what set_capture_mode did.
type SetModeResult struct {
	Root     string `json:"root"`
	Previous string `json:"previous_mode"`
	Mode     string `json:"capture_mode"`
	Changed  bool   `json:"changed"`
}

// SetCaptureMode is set_capture_mode: it changes only the stored mode of an
// enabled binding. Lowering needs only the capture config lock (no
// connection, no spool, no upload); raising needs a current connection
// whose repository and Hub match the binding (and Expect, when given).
func SetCaptureMode(ctx context.Context, store State, conns Connections, root, mode string, expect *Lineage) (*SetModeResult, error) {
	if !ValidMode(mode) {
		return nil, fmt.Errorf("--mode %q is not supported; use metadata-only, local-conversation or shared-conversation", mode)
	}
	canon, err := SavedRoot(root)
	if err != nil {
		return nil, err
	}
	// Read once without locks to know whether this raises the mode.
	cfg, err := store.Bindings().Load()
	if err != nil {
		return nil, err
	}
	b := cfg.Find(canon)
	if b == nil || !b.Enabled {
		return nil, fmt.Errorf("no enabled capture binding for this checkout (run change-capture configure first)")
	}
	raising := modeRank(mode) > modeRank(b.CaptureMode)
	if raising {
		unlock, err := conns.Lock()
		if err != nil {
			return nil, err
		}
		defer unlock()
		lin, err := conns.Current(canon)
		if err != nil {
			return nil, err
		}
		if expect != nil && !SameRepo(lin, *expect) {
			return nil, fmt.Errorf("this checkout is now connected to %s on %s; refresh and confirm again", lin.Repository, lin.Hub)
		}
		if b.Hub != "" && !SameRepo(lin, b.Lineage()) {
			return nil, fmt.Errorf("the capture binding of this checkout was saved for %s, but it is now connected to %s; raising the mode needs the same repository and Hub",
				DescribeLineage(b.Lineage()), DescribeLineage(lin))
		}
	}
	res := &SetModeResult{Root: canon, Mode: mode}
	err = store.Bindings().Update(func(c *Config) (bool, error) {
		cur := c.Find(canon)
		if cur == nil || !cur.Enabled {
			return false, fmt.Errorf("no enabled capture binding for this checkout (run change-capture configure first)")
		}
		res.Previous = cur.CaptureMode
		if modeRank(mode) > modeRank(cur.CaptureMode) && !raising {
			return false, errors.New("the binding changed concurrently; run set-mode again")
		}
		if cur.CaptureMode == mode {
			return false, nil
		}
		cur.CaptureMode = mode
		res.Changed = true
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// LowerForConnectionChange lowers a shared-conversation binding of root to
// metadata-only because its client connection was removed or replaced, so
// reconnecting never resumes sharing without a new confirmation. It reports
// whether the mode changed.
func LowerForConnectionChange(store State, root string) (bool, error) {
	changed := false
	err := store.Bindings().Update(func(c *Config) (bool, error) {
		if b := c.Find(root); b != nil && b.CaptureMode == event.ModeSharedConversation {
			b.CaptureMode = event.ModeMetadataOnly
			changed = true
		}
		return changed, nil
	})
	return changed, err
}

// ForgetResult says what forget did.
type ForgetResult struct {
	Root           string   `json:"root"`
	Spool          string   `json:"spool"`
	SpoolRetained  bool     `json:"spool_retained"`
	ExcludeRemoved []string `json:"exclude_removed,omitempty"`
	// SettingsRemoved names the hook settings file (relative to the root)
	// forget removed: setup created it and it was left empty; with several
	// agents, the first such file, and HookFilesRemoved lists them all.
	SettingsRemoved  string   `json:"settings_removed,omitempty"`
	HookFilesRemoved []string `json:"hook_files_removed,omitempty"`
	Warnings         []string `json:"warnings,omitempty"`
}

// Forget removes a disabled binding from the capture config. The spool is
// never deleted: its path is reported so the operator can export or delete
// it. Exclude lines one-step setup added for the checkout's settings file
// are removed unless another binding of the repository uses the same
// relative settings path.
func Forget(ctx context.Context, store State, root string) (*ForgetResult, error) {
	canon, err := SavedRoot(root)
	if err != nil {
		return nil, err
	}
	var gone Binding
	var others []Binding
	err = store.Bindings().Update(func(c *Config) (bool, error) {
		b := c.Find(canon)
		if b == nil {
			b = c.Find(filepath.Clean(root))
		}
		if b == nil {
			return false, ErrNoBinding
		}
		if b.Enabled {
			return false, fmt.Errorf("capture is still on for %s; run change-capture unconfigure --root %s first", b.Root, b.Root)
		}
		gone = *b
		c.Remove(b.Root)
		others = append(others, c.Bindings...)
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	res := &ForgetResult{Root: gone.Root, Spool: gone.Spool, SpoolRetained: true}
	if fi, err := os.Stat(gone.Root); err == nil && fi.IsDir() {
		for _, h := range gone.Hooks() {
			rel := settingsRel(h.Path(gone.Root), gone.Root)
			removed, err := removeExclude(ctx, gone.Root, rel, others)
			if err != nil {
				res.Warnings = append(res.Warnings, "could not update the repository's local exclude: "+err.Error())
			}
			res.ExcludeRemoved = append(res.ExcludeRemoved, removed...)
			if removedFile, err := removeCreatedEmptySettings(h.Path(gone.Root), rel, removed); err != nil {
				res.Warnings = append(res.Warnings, "could not remove the emptied settings file: "+err.Error())
			} else if removedFile {
				if res.SettingsRemoved == "" {
					res.SettingsRemoved = rel
				}
				res.HookFilesRemoved = append(res.HookFilesRemoved, rel)
			}
		}
	}
	return res, nil
}
