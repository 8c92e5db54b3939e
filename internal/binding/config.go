// Package binding holds capture bindings: which checkout is captured into
// which spool, in which mode, with which consent, lineage, recipes and
// compaction policy, recorded in a versioned capture config file
// (capture.json v5-v8) under the user's config directory; and the
// operations that change them (configure, enable, set-mode, move-spool,
// forget, the git local exclude).
package binding

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentscm/agentscm/internal/action"
	"github.com/agentscm/agentscm/internal/binding/checkout"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/spool"
)

// Capture config versions. Version 8 is written only while some binding
// installs the hooks of several agents (agents); version 7 only while some
// binding records a compaction policy; version 6 only while some binding is in
// shared-conversation mode or records a non-default Claude settings path;
// otherwise the file stays at version 5 so older binaries keep reading it.
// Any other version is refused, never half-read.
const (
	ConfigVersion5 = 5
	ConfigVersion6 = 6
	ConfigVersion7 = 7
	ConfigVersion8 = 8
)

// File names under the agentscm config directory.
const (
	configFile = "capture.json"
	lockFile   = "capture.lock"
	// maxConfigBytes bounds the capture config read from disk.
	maxConfigBytes = 4 << 20
)

// ErrUnknownVersion reports a capture config written by another format
// version.
var ErrUnknownVersion = errors.New("capture config version not supported by this agentscm")

// ErrNoBinding reports a checkout without a capture binding.
var ErrNoBinding = errors.New("no capture binding for this checkout")

// ConfigDir returns the agentscm config directory: $XDG_CONFIG_HOME/agentscm,
// else $HOME/.config/agentscm.
func ConfigDir(getenv func(string) string) (string, error) {
	if x := getenv("XDG_CONFIG_HOME"); x != "" {
		if !filepath.IsAbs(x) {
			return "", fmt.Errorf("XDG_CONFIG_HOME %q is not an absolute path", x)
		}
		return filepath.Join(x, "agentscm"), nil
	}
	home := getenv("HOME")
	if home == "" || !filepath.IsAbs(home) {
		return "", errors.New("cannot find the config directory: neither XDG_CONFIG_HOME nor an absolute HOME is set")
	}
	return filepath.Join(home, ".config", "agentscm"), nil
}

// Config is the capture config file.
type Config struct {
	Version  int       `json:"version"`
	Bindings []Binding `json:"bindings"`
}

// Binding binds one checkout root to a spool and a capture mode, and keeps
// the lineage (Hub, repository, worktree) the spool was created for.
type Binding struct {
	// Root is the canonical absolute checkout root.
	Root string `json:"root"`
	// Spool is the absolute private spool directory.
	Spool       string `json:"spool"`
	CaptureMode string `json:"capture_mode"`
	// Enabled is false after unconfigure; the binding keeps its spool.
	Enabled bool `json:"enabled"`
	// ClaudeSettings is the settings file holding the hooks, relative to
	// Root; empty means the default .claude/settings.local.json.
	ClaudeSettings string    `json:"claude_settings,omitempty"`
	ConfiguredAt   time.Time `json:"configured_at"`
	// Agent is the agent whose hooks the binding installed in its settings
	// file (internal/agent/adapter); empty is Claude Code. Optional, so a
	// version 7 config without it keeps its old meaning.
	Agent string `json:"agent,omitempty"`
	// Agents lists the agents whose hooks the binding installs, each with
	// its hook file, when there are several (version 8); Agent and
	// ClaudeSettings are then empty. Read it through Hooks, which gives the
	// one agent of a binding without it.
	Agents []AgentHooks `json:"agents,omitempty"`

	// Hub and Repository are the lineage the binding was saved for; a
	// disabled binding keeps them.
	Hub        string `json:"hub,omitempty"`
	Repository string `json:"repository,omitempty"`
	// WorktreeID names the checkout's worktree namespace on the Hub.
	WorktreeID string `json:"worktree_id,omitempty"`
	BaseRef    string `json:"base_ref,omitempty"`
	// SetupDigest is the caller's assertion identifying the agent setup.
	SetupDigest       string        `json:"setup_digest,omitempty"`
	ClaudeHistoryRoot string        `json:"claude_history_root,omitempty"`
	ActionRules       []action.Rule `json:"action_rules,omitempty"`
	Recipes           []Recipe      `json:"recipes,omitempty"`
	// Runner is the absolute agentscm executable of the managed recipe
	// runner, recorded by configure only while recipes are registered: the
	// exact visible Bash command of recipe ID is RunnerCommand(Runner, ID).
	// Absent (no recipes, or a binding saved before it) means no managed
	// command, no SessionStart guidance and no suppression.
	Runner string       `json:"runner,omitempty"`
	Limits spool.Limits `json:"limits"`
	// Compaction is the operator's recorded choice to let the hook compact
	// acknowledged history automatically; nil means off (compaction stays
	// a manual `change-capture compact`).
	Compaction *CompactionPolicy `json:"compaction,omitempty"`
	// SpoolIdentity is the spool's random id and committed root identity,
	// recorded by configure and move-spool (movespool.go); absent in
	// bindings saved before it (then nothing is checked). A spool at the
	// bound path with another identity (replaced, restored, recreated) is
	// refused.
	SpoolIdentity *spool.Identity `json:"spool_identity,omitempty"`
}

// DefaultClaudeSettings is where hooks are installed, relative to the root.
const DefaultClaudeSettings = ".claude/settings.local.json"

// SettingsPath returns the absolute hook file of the binding's first agent
// (Hooks lists every agent's).
func (b *Binding) SettingsPath() string {
	return b.Hooks()[0].Path(b.Root)
}

// ValidMode reports whether m is a capture mode this binary supports.
func ValidMode(m string) bool { return modeRank(m) > 0 }

// modeRank orders modes by what they keep and share: metadata-only <
// local-conversation < shared-conversation. Unknown modes rank 0.
func modeRank(m string) int {
	switch m {
	case event.ModeMetadataOnly:
		return 1
	case event.ModeLocalConversation:
		return 2
	case event.ModeSharedConversation:
		return 3
	}
	return 0
}

// needsV8 reports whether c can only be written as version 8.
func (c *Config) needsV8() bool {
	for _, b := range c.Bindings {
		if len(b.Agents) > 0 {
			return true
		}
	}
	return false
}

// needsV7 reports whether c can only be written as version 7 (or later).
func (c *Config) needsV7() bool {
	for _, b := range c.Bindings {
		if b.Compaction != nil {
			return true
		}
	}
	return false
}

// needsV6 reports whether c can only be written as version 6 (or later).
func (c *Config) needsV6() bool {
	for _, b := range c.Bindings {
		if b.CaptureMode == event.ModeSharedConversation || b.ClaudeSettings != "" {
			return true
		}
	}
	return false
}

// Load reads the capture config; a missing file is an empty config.
func (s Registry) Load() (*Config, error) {
	b, err := fsutil.ReadFileNoFollow(filepath.Join(s.Dir, configFile), maxConfigBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return &Config{Version: ConfigVersion5}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read capture config: %w", err)
	}
	return decodeConfig(b)
}

func decodeConfig(b []byte) (*Config, error) {
	var probe struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, fmt.Errorf("capture config is not valid JSON: %w", err)
	}
	if probe.Version == nil {
		return nil, errors.New("capture config has no version")
	}
	if *probe.Version < ConfigVersion5 || *probe.Version > ConfigVersion8 {
		return nil, fmt.Errorf("%w: file is version %d, this binary reads versions %d to %d", ErrUnknownVersion, *probe.Version, ConfigVersion5, ConfigVersion8)
	}
	var c Config
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("capture config: %w", err)
	}
	for i, bd := range c.Bindings {
		if !filepath.IsAbs(bd.Root) || !filepath.IsAbs(bd.Spool) || !ValidMode(bd.CaptureMode) {
			return nil, fmt.Errorf("capture config: binding %d is invalid (root %q, spool %q, mode %q)", i, bd.Root, bd.Spool, bd.CaptureMode)
		}
		if bd.Compaction != nil {
			if err := bd.Compaction.Validate(); err != nil {
				return nil, fmt.Errorf("capture config: binding %d: %w", i, err)
			}
		}
		if bd.ClaudeSettings != "" {
			if err := checkSettingsRel(bd.ClaudeSettings); err != nil {
				return nil, fmt.Errorf("capture config: binding %d: %w", i, err)
			}
		}
		if len(bd.Agents) > 0 {
			if err := checkAgents(&bd); err != nil {
				return nil, fmt.Errorf("capture config: binding %d: %w", i, err)
			}
		}
	}
	if c.Version == ConfigVersion5 && c.needsV6() {
		return nil, errors.New("capture config: version 5 cannot hold a shared-conversation binding or a claude_settings path")
	}
	if c.Version < ConfigVersion7 && c.needsV7() {
		return nil, fmt.Errorf("capture config: version %d cannot hold a compaction policy", c.Version)
	}
	if c.Version < ConfigVersion8 && c.needsV8() {
		return nil, fmt.Errorf("capture config: version %d cannot hold a binding of several agents (agents)", c.Version)
	}
	return &c, nil
}

// save writes the config atomically with mode 0600.
func (s Registry) save(c *Config) error {
	c.Version = ConfigVersion5
	if c.needsV6() {
		c.Version = ConfigVersion6
	}
	if c.needsV7() {
		c.Version = ConfigVersion7
	}
	if c.needsV8() {
		c.Version = ConfigVersion8
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("encode capture config: %w", err)
	}
	if err := fsutil.WriteAtomic(filepath.Join(s.Dir, configFile), append(b, '\n'), fsutil.FileMode); err != nil {
		return fmt.Errorf("write capture config: %w", err)
	}
	return nil
}

// Update runs fn on the current config under the capture config lock and
// saves the result atomically when fn reports a change.
func (s Registry) Update(fn func(c *Config) (changed bool, err error)) error {
	if err := fsutil.MkdirPrivate(s.Dir); err != nil {
		return fmt.Errorf("create config directory: %w", err)
	}
	lock, err := fsutil.LockFile(filepath.Join(s.Dir, lockFile))
	if err != nil {
		return err
	}
	defer lock.Unlock()
	c, err := s.Load()
	if err != nil {
		return err
	}
	changed, err := fn(c)
	if err != nil || !changed {
		return err
	}
	return s.save(c)
}

// Remove deletes the binding of root; it reports whether one was removed.
func (c *Config) Remove(root string) bool {
	for i := range c.Bindings {
		if c.Bindings[i].Root == root {
			c.Bindings = append(c.Bindings[:i], c.Bindings[i+1:]...)
			return true
		}
	}
	return false
}

// Find returns the binding whose root is exactly root, or nil.
func (c *Config) Find(root string) *Binding {
	for i := range c.Bindings {
		if c.Bindings[i].Root == root {
			return &c.Bindings[i]
		}
	}
	return nil
}

// ForPath returns the enabled binding whose root contains path (the deepest
// root wins), or nil.
func (c *Config) ForPath(path string) *Binding {
	var best *Binding
	for i := range c.Bindings {
		b := &c.Bindings[i]
		if !b.Enabled || !within(b.Root, path) {
			continue
		}
		if best == nil || len(b.Root) > len(best.Root) {
			best = b
		}
	}
	return best
}

// Lookup returns the enabled binding of the checkout a hook's cwd (clean,
// absolute) belongs to: LookupFrom of its own checkout.Lookup.
func (c *Config) Lookup(cwd string) *Binding { return c.LookupFrom(checkout.Of(cwd)) }

// LookupFrom returns the enabled binding of the checkout l looks up: ForPath
// of its cwd, else of the cwd with its symbolic links resolved (the lookup
// the changelog asks its question of too); nil when none.
func (c *Config) LookupFrom(l *checkout.Lookup) *Binding {
	b, _ := checkout.Find(l, func(path string) (*Binding, bool) {
		b := c.ForPath(path)
		return b, b != nil
	})
	return b
}

// within reports whether path is root or beneath it (both clean, absolute).
func within(root, path string) bool {
	if root == path {
		return true
	}
	if root == "/" {
		return strings.HasPrefix(path, "/")
	}
	return strings.HasPrefix(path, root+"/")
}
