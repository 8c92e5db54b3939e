package binding

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentscm/agentscm/internal/action"
	"github.com/agentscm/agentscm/internal/agent/adapter"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/source"
	"github.com/agentscm/agentscm/internal/spool"
)

// ErrNoConnection reports a checkout without a current client connection.
var ErrNoConnection = errors.New("no client connection for this checkout")

// Lineage is the Hub, repository and worktree namespace a binding belongs to.
type Lineage struct {
	Hub        string `json:"hub"`
	Repository string `json:"repository"`
	WorktreeID string `json:"worktree_id,omitempty"`
}

// Connections gives capture read access to the client connections without
// importing the Hub: the CLI supplies the implementation.
type Connections interface {
	// Lock takes the connections lock; it is always taken before the
	// capture config lock.
	Lock() (unlock func() error, err error)
	// Current returns the checkout's current connection or ErrNoConnection.
	Current(root string) (Lineage, error)
}

// ConfigureOptions are the inputs of change-capture configure.
type ConfigureOptions struct {
	Root              string
	Spool             string
	WorktreeID        string
	BaseRef           string
	SetupDigest       string
	ClaudeHistoryRoot string
	CaptureMode       string
	ActionRules       []string
	RecipeFiles       []string
	// Recipes are already registered recipes kept alongside RecipeFiles.
	Recipes []Recipe
	// ClaudeSettings is the settings file relative to Root; empty is the
	// default .claude/settings.local.json.
	ClaudeSettings string
	// Agent is the agent whose hooks are installed (adapter.For); empty is
	// Claude Code for a new binding and, for a bound checkout, keeps the
	// agents it has. An agent the binding does not have yet is added beside
	// the others (each agent's hooks in its own file). For another agent an
	// empty ClaudeSettings is that agent's hook file (Codex:
	// .codex/hooks.json).
	Agent string
	// Limits are the spool limits; zero fields take the defaults (a new
	// spool) or keep the current value (an existing spool, whose limits
	// may be raised, or lowered as far as its contents allow).
	Limits spool.Limits
	// Compaction sets or clears the binding's automatic compaction policy;
	// the zero value keeps the current choice (off for a new binding).
	Compaction PolicyChange
	// compactionBy names the command recording a policy (configure when
	// empty).
	compactionBy string
	// Executable is the agentscm binary; the installed hooks run it, or the
	// lean agentscm-hook next to it (hookfile.HookExecutable).
	Executable string
	Now        time.Time
}

// ConfigureResult says what configure did.
type ConfigureResult struct {
	Root        string        `json:"root"`
	Spool       string        `json:"spool"`
	CaptureMode string        `json:"capture_mode"`
	Hub         string        `json:"hub"`
	Repository  string        `json:"repository"`
	WorktreeID  string        `json:"worktree_id"`
	BaseRef     string        `json:"base_ref,omitempty"`
	SetupDigest string        `json:"setup_digest,omitempty"`
	ActionRules []action.Rule `json:"action_rules"`
	Recipes     []string      `json:"recipes"`
	Limits      spool.Limits  `json:"limits"`
	// LimitsChanged is true when this call changed the limits of an
	// existing spool (PreviousLimits were its limits before).
	LimitsChanged  bool              `json:"limits_changed,omitempty"`
	PreviousLimits *spool.Limits     `json:"previous_limits,omitempty"`
	Compaction     *CompactionPolicy `json:"compaction_policy"`
	ClaudeSettings string            `json:"claude_settings"`
	Agent          string            `json:"agent"`
	HookEvents     []string          `json:"hook_events"`
	SettingsChange bool              `json:"settings_changed"`
	// Agents are every agent whose hooks the binding installs, the one
	// Agent names (this call's) among them, with what this call did to
	// each agent's hook file.
	Agents []InstalledHooks `json:"agents"`
	// Created is true when this call made a new binding.
	Created bool `json:"created"`
	// SettingsCreated is true when this call created the settings file.
	SettingsCreated bool     `json:"settings_created"`
	Warnings        []string `json:"warnings,omitempty"`
}

// CanonicalRoot validates a checkout root given on the command line: it must
// be absolute and an existing directory. Symlinks in it are resolved.
func CanonicalRoot(root string) (string, error) {
	if root == "" {
		return "", errors.New("--root is required")
	}
	if !filepath.IsAbs(root) {
		return "", fmt.Errorf("--root %q is not an absolute path", root)
	}
	fi, err := os.Stat(root)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("--root %s does not exist", root)
	}
	if err != nil {
		return "", fmt.Errorf("--root %s: %w", root, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("--root %s is not a directory", root)
	}
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", fmt.Errorf("resolve --root %s: %w", root, err)
	}
	return filepath.Clean(real), nil
}

// SavedRoot canonicalises a root that may no longer exist: symlinks in the
// longest existing prefix are resolved and the missing rest is kept as given.
func SavedRoot(root string) (string, error) {
	if root == "" {
		return "", errors.New("--root is required")
	}
	if !filepath.IsAbs(root) {
		return "", fmt.Errorf("--root %q is not an absolute path", root)
	}
	p := filepath.Clean(root)
	var rest []string
	for {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(append([]string{real}, rest...)...), nil
		}
		parent := filepath.Dir(p)
		if parent == p {
			return filepath.Clean(root), nil
		}
		rest = append([]string{filepath.Base(p)}, rest...)
		p = parent
	}
}

// validWorktreeID reports 1 to 128 letters, digits, '_', '.' or '-',
// starting with a letter or digit.
func validWorktreeID(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i, c := range s {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '.' && c != '-') {
			return false
		}
	}
	return true
}

// prepared is a validated configure request.
type prepared struct {
	b       Binding
	rules   []action.Rule
	recipes []Recipe
}

func prepare(o ConfigureOptions, root string, lin Lineage) (*prepared, error) {
	if o.Spool == "" {
		return nil, errors.New("--spool is required")
	}
	if !filepath.IsAbs(o.Spool) {
		return nil, fmt.Errorf("--spool %q is not an absolute path", o.Spool)
	}
	spoolDir := filepath.Clean(o.Spool)
	if within(root, spoolDir) {
		return nil, fmt.Errorf("--spool %s is inside the checkout %s; choose a private directory outside it", spoolDir, root)
	}
	mode := o.CaptureMode
	if mode == "" {
		mode = event.ModeMetadataOnly
	}
	if !ValidMode(mode) {
		return nil, fmt.Errorf("--capture-mode %q is not supported; use metadata-only, local-conversation or shared-conversation", mode)
	}
	wt := o.WorktreeID
	if wt == "" {
		wt = lin.WorktreeID
	}
	if !validWorktreeID(wt) {
		return nil, fmt.Errorf("--worktree-id %q must be 1 to 128 letters, digits, '_', '.' or '-'", wt)
	}
	if o.SetupDigest != "" && !api.IsDigest(o.SetupDigest) {
		return nil, fmt.Errorf("--setup-digest must be 64 lowercase hex characters (a SHA-256)")
	}
	if o.BaseRef != "" {
		if err := action.CheckToken("--base-ref", o.BaseRef, 256); err != nil {
			return nil, err
		}
	}
	if o.ClaudeHistoryRoot != "" {
		if err := checkHistoryRoot(o.ClaudeHistoryRoot); err != nil {
			return nil, err
		}
	}
	ad, err := adapter.For(o.Agent)
	if err != nil {
		return nil, err
	}
	if o.ClaudeSettings == "" {
		o.ClaudeSettings = ad.HookFile()
	}
	if o.ClaudeSettings != "" {
		if err := checkSettingsRel(o.ClaudeSettings); err != nil {
			return nil, err
		}
		if o.ClaudeSettings == DefaultClaudeSettings {
			o.ClaudeSettings = ""
		}
	}
	rules, err := action.ParseRules(o.ActionRules)
	if err != nil {
		return nil, err
	}
	recipes := append([]Recipe(nil), o.Recipes...)
	for _, f := range o.RecipeFiles {
		r, err := LoadRecipe(f)
		if err != nil {
			return nil, err
		}
		recipes = append(recipes, r)
	}
	if recipes, err = CheckRecipes(recipes); err != nil {
		return nil, err
	}
	lim := o.Limits.WithDefaults()
	if err := lim.Validate(len(rules) > 0 || len(recipes) > 0); err != nil {
		return nil, err
	}
	if !filepath.IsAbs(o.Executable) {
		return nil, fmt.Errorf("cannot install hooks: agentscm executable path %q is not absolute", o.Executable)
	}
	runner := ""
	if len(recipes) > 0 {
		runner = filepath.Clean(o.Executable)
	}
	return &prepared{
		b: Binding{
			Root: root, Spool: spoolDir, CaptureMode: mode, Enabled: true, ClaudeSettings: o.ClaudeSettings,
			Agent:        agentField(ad),
			ConfiguredAt: o.Now.UTC(), Hub: lin.Hub, Repository: lin.Repository, WorktreeID: wt,
			BaseRef: o.BaseRef, SetupDigest: o.SetupDigest, ClaudeHistoryRoot: o.ClaudeHistoryRoot,
			ActionRules: rules, Recipes: recipes, Runner: runner, Limits: lim,
		},
		rules: rules, recipes: recipes,
	}, nil
}

func checkHistoryRoot(dir string) error {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return fmt.Errorf("--claude-history-root %q must be a clean absolute path", dir)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("--claude-history-root: %w", err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 || !fi.IsDir() {
		return fmt.Errorf("--claude-history-root %s must be a directory, not a symbolic link", dir)
	}
	return nil
}

// Configure binds a checkout with a current client connection to a spool:
// it validates every input, creates (or reopens) the spool, records the
// binding under the connections lock then the capture config lock, and
// installs the marked Claude Code hooks. Nothing changes when it refuses.
func Configure(ctx context.Context, store State, conns Connections, o ConfigureOptions) (*ConfigureResult, error) {
	root, err := CanonicalRoot(o.Root)
	if err != nil {
		return nil, err
	}
	// Refuse bad input before looking at the connection; the worktree id
	// placeholder stands for the connection's until then.
	if _, err := prepare(o, root, Lineage{WorktreeID: "checkout_pending"}); err != nil {
		return nil, err
	}
	if o.BaseRef != "" {
		// Source bindings carry the merge-base with the base ref: a ref
		// that does not resolve is refused, naming it.
		if _, err := source.ResolveBaseRef(ctx, root, o.BaseRef); err != nil {
			return nil, fmt.Errorf("--base-ref: %w; fetch it or name a ref that exists", err)
		}
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
	return configureLocked(ctx, store, root, lin, o, nil)
}

// configureLocked is the one configure code path; callers hold the
// connections lock. decide, when set, is called under the capture config
// lock with the current binding (nil when none) to adjust the options.
func configureLocked(ctx context.Context, store State, root string, lin Lineage, o ConfigureOptions, decide func(cur *Binding, o *ConfigureOptions) error) (*ConfigureResult, error) {
	var p *prepared
	var req AgentHooks
	created := false
	limitsChanged, prevLimits := false, (*spool.Limits)(nil)
	err := store.Bindings().Update(func(c *Config) (bool, error) {
		cur := c.Find(root)
		if decide != nil {
			if err := decide(cur, &o); err != nil {
				return false, err
			}
		}
		var err error
		if p, err = prepare(o, root, lin); err != nil {
			return false, err
		}
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if cur != nil {
			if cur.Spool != p.b.Spool {
				return false, fmt.Errorf("checkout %s is already bound to spool %s; a checkout cannot adopt another spool (to move that spool offline, see change-capture move-spool)", root, cur.Spool)
			}
			if err := checkBoundSpool(cur); err != nil { // movespool.go
				return false, err
			}
			if cur.Hub != "" && (cur.Hub != lin.Hub || cur.Repository != lin.Repository) {
				return false, fmt.Errorf("the binding of %s was saved for %s on %s, but the checkout is now connected to %s on %s; %s",
					root, cur.Repository, cur.Hub, lin.Repository, lin.Hub, startFreshAdvice(cur))
			}
			if cur.WorktreeID != "" && cur.WorktreeID != p.b.WorktreeID {
				return false, fmt.Errorf("the spool of %s is bound to worktree %s, not %s", root, cur.WorktreeID, p.b.WorktreeID)
			}
		}
		for _, other := range c.Bindings {
			if other.Root != root && other.Spool == p.b.Spool {
				return false, fmt.Errorf("spool %s is already bound to checkout %s", p.b.Spool, other.Root)
			}
		}
		// The spool exists, bound for life to its lineage, before the
		// binding that names it is saved.
		sp, err := spool.InitWith(ctx, p.b.Spool, spool.Config{
			Limits:       p.b.Limits,
			MetadataOnly: len(p.rules) == 0 && len(p.recipes) == 0,
			Lineage:      &spool.Lineage{Hub: lin.Hub, Repository: lin.Repository, WorktreeID: p.b.WorktreeID},
		})
		if err != nil {
			return false, err
		}
		if p.b.SpoolIdentity, err = boundIdentity(cur, sp); err != nil { // movespool.go
			return false, err
		}
		// The spool enforces its own limits: an explicit request for other
		// ones changes them under the spool lock (refused, changing
		// nothing, below what the spool holds), and the binding records
		// what the spool enforces.
		ch, err := sp.SetLimits(ctx, o.Limits)
		if err != nil {
			return false, fmt.Errorf("spool %s: %w", p.b.Spool, err)
		}
		p.b.Limits = ch.New
		if ch.Changed {
			limitsChanged, prevLimits = true, &ch.Old
		}
		var curPolicy *CompactionPolicy
		if cur != nil {
			curPolicy = cur.Compaction
		}
		by := o.compactionBy
		if by == "" {
			by = "configure"
		}
		if p.b.Compaction, err = o.Compaction.Apply(curPolicy, by, o.Now); err != nil {
			return false, err
		}
		if req, err = mergeAgents(&p.b, cur, o); err != nil {
			return false, err
		}
		if cur != nil {
			*cur = p.b
		} else {
			c.Bindings = append(c.Bindings, p.b)
			created = true
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	b := p.b
	// The hook's spool summary, so the first hooks can use the intake
	// (which refuses while no summary of this boot says what the spool
	// holds); best effort: without it the first hook takes the lock and
	// writes it.
	store.PrepareSpool(ctx, b.Spool)
	// Every agent's hooks where that agent reads them: a re-run puts back
	// hooks removed meanwhile, and an added agent keeps the others'.
	installed, err := installAllHooks(&b, o.Executable)
	if err != nil {
		return nil, err
	}
	ad, err := adapter.For(req.Agent)
	if err != nil {
		return nil, err
	}
	res := &ConfigureResult{
		Root: root, Spool: b.Spool, CaptureMode: b.CaptureMode, Hub: b.Hub, Repository: b.Repository,
		WorktreeID: b.WorktreeID, BaseRef: b.BaseRef, SetupDigest: b.SetupDigest, ActionRules: b.ActionRules,
		Recipes: []string{}, Limits: b.Limits, LimitsChanged: limitsChanged, PreviousLimits: prevLimits,
		Compaction: b.Compaction, ClaudeSettings: req.Path(root), Agent: ad.Name(),
		HookEvents: append([]string(nil), ad.CaptureEvents()...), Created: created, Agents: installed,
	}
	for _, in := range installed {
		res.SettingsChange = res.SettingsChange || in.Changed
		if in.Agent == ad.Name() {
			res.SettingsCreated = in.Created
		}
	}
	if res.ActionRules == nil {
		res.ActionRules = []action.Rule{}
	}
	for _, h := range b.Hooks() {
		if a, err := adapter.For(h.Agent); err == nil {
			if note := a.TrustNote(root); note != "" {
				res.Warnings = append(res.Warnings, note)
			}
		}
	}
	for _, r := range b.Recipes {
		res.Recipes = append(res.Recipes, r.ID+"@"+r.Digest[:12])
	}
	return res, nil
}

// UnconfigureResult says what unconfigure did.
type UnconfigureResult struct {
	Root           string `json:"root"`
	Spool          string `json:"spool"`
	ClaudeSettings string `json:"claude_settings"`
	HooksRemoved   bool   `json:"hooks_removed"`
	// HookFiles are the hook files of every agent of the binding, the
	// first agent's (ClaudeSettings) first.
	HookFiles []string `json:"hook_files,omitempty"`
	// StrayHooks, when set, are the files whose capture hooks were removed
	// although no enabled binding recorded them (a half-configured
	// checkout, StrayHooks): nothing else changed.
	StrayHooks     []string `json:"stray_hooks,omitempty"`
	CheckoutExists bool     `json:"checkout_exists"`
	SpoolRetained  bool     `json:"spool_retained"`
	// Warning says what unconfigure could not do besides (noting the
	// capture_disabled window, disabled.go).
	Warning string `json:"warning,omitempty"`
}

// Unconfigure removes the marked capture hooks of a checkout (of every agent
// of its binding, from the file each reads) and disables the binding, which
// keeps its spool and lineage. It works on a deleted checkout given its saved
// absolute path and then touches nothing in the missing tree.
func Unconfigure(ctx context.Context, store State, root string) (*UnconfigureResult, error) {
	canon, err := SavedRoot(root)
	if err != nil {
		return nil, err
	}
	var b Binding
	err = store.Bindings().Update(func(c *Config) (bool, error) {
		cur := c.Find(canon)
		if cur == nil {
			cur = c.Find(filepath.Clean(root))
		}
		if cur == nil || !cur.Enabled {
			return false, ErrNoBinding
		}
		cur.Enabled = false
		b = *cur
		return true, nil
	})
	if errors.Is(err, ErrNoBinding) {
		return unconfigureStray(store, canon, err)
	}
	if err != nil {
		return nil, err
	}
	res := &UnconfigureResult{Root: b.Root, Spool: b.Spool, ClaudeSettings: b.SettingsPath(), SpoolRetained: true}
	for _, h := range b.Hooks() {
		res.HookFiles = append(res.HookFiles, h.Path(b.Root))
	}
	// The sessions open now get a capture_disabled gap if they come back
	// after a re-enable (disabled.go).
	if err := store.NoteDisabled(b.Spool, time.Now()); err != nil {
		res.Warning = "capture is off, but when it was turned off could not be noted, so a re-enable will not name the window in the record: " + err.Error()
	}
	if fi, err := os.Stat(b.Root); err == nil && fi.IsDir() {
		res.CheckoutExists = true
		for _, h := range b.Hooks() {
			ad, err := adapter.For(h.Agent)
			if err != nil {
				return nil, err
			}
			// The changelog keeps its part of Claude Code's one entry per
			// event.
			removed, err := ad.RemoveHooks(h.Path(b.Root), adapter.PartCapture)
			if err != nil {
				return nil, fmt.Errorf("remove %s hooks: %w", ad.Name(), err)
			}
			res.HooksRemoved = res.HooksRemoved || removed
		}
	}
	return res, nil
}

// unconfigureStray removes the capture hooks of a half-configured checkout
// (StrayHooks: hooks installed, no enabled binding); with none it returns
// noBinding.
func unconfigureStray(store State, root string, noBinding error) (*UnconfigureResult, error) {
	cfg, err := store.Bindings().Load()
	if err != nil {
		return nil, err
	}
	b := cfg.Find(root)
	files := StrayHooks(root, b)
	if len(files) == 0 {
		return nil, noBinding
	}
	removed, err := removeStrayHooks(files)
	if err != nil {
		return nil, err
	}
	res := &UnconfigureResult{Root: root, ClaudeSettings: files[0], HooksRemoved: removed, CheckoutExists: true, StrayHooks: files}
	if b != nil {
		res.Spool, res.SpoolRetained = b.Spool, true
	}
	return res, nil
}

// startFreshAdvice says how to drop a binding saved for another Hub or
// repository: forget refuses an enabled binding, so unconfigure comes first.
func startFreshAdvice(b *Binding) string {
	if b.Enabled {
		return fmt.Sprintf("to start fresh, run change-capture unconfigure --root %s, then change-capture forget --root %s (the spool is kept)", b.Root, b.Root)
	}
	return fmt.Sprintf("to start fresh, run change-capture forget --root %s (the spool is kept)", b.Root)
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return hex.EncodeToString(b)
}

// Lineage returns the binding's saved lineage.
func (b *Binding) Lineage() Lineage {
	return Lineage{Hub: b.Hub, Repository: b.Repository, WorktreeID: b.WorktreeID}
}

// SameRepo reports whether a connection is the repository and Hub a binding
// was saved for.
func SameRepo(a, b Lineage) bool {
	return a.Hub == b.Hub && a.Repository == b.Repository
}

// DescribeLineage formats "<repository> on <hub>".
func DescribeLineage(l Lineage) string {
	return strings.TrimSpace(l.Repository + " on " + l.Hub)
}

// agentField is the binding's Agent value: empty for Claude Code, so a
// Claude binding is saved exactly as before.
func agentField(a adapter.Adapter) string {
	if adapter.IsDefault(a) {
		return ""
	}
	return a.Name()
}

// mergeAgents sets the agents of the prepared binding p: a new binding has
// the agent asked for; a bound checkout keeps its agents, plus the agent
// asked for (o.Agent or o.ClaudeSettings given) when it is not among them,
// or with the hook file given. It returns the entry of the agent this call
// is about (the one asked for, else the binding's first).
func mergeAgents(p *Binding, cur *Binding, o ConfigureOptions) (AgentHooks, error) {
	req := p.Hooks()[0]
	if cur == nil {
		return req, nil
	}
	hs := cur.Hooks()
	asked := o.Agent != "" || o.ClaudeSettings != ""
	have, bound := cur.HookOf(req.Agent)
	switch {
	case !asked:
		req = hs[0]
	case bound && o.ClaudeSettings == "":
		req = have
	default:
		if err := checkHookFileFree(hs, req); err != nil {
			return req, err
		}
		hs = withAgent(hs, req)
	}
	p.setHooks(hs)
	return req, nil
}
