package capture

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/agentscm/agentscm/internal/agent/claude"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

// ConfigureOptions are the inputs of change-capture configure.
type ConfigureOptions struct {
	Root        string
	Spool       string
	CaptureMode string
	// Executable is the agentscm binary the installed hooks run.
	Executable string
	Now        time.Time
}

// ConfigureResult says what configure did.
type ConfigureResult struct {
	Root           string   `json:"root"`
	Spool          string   `json:"spool"`
	CaptureMode    string   `json:"capture_mode"`
	ClaudeSettings string   `json:"claude_settings"`
	HookEvents     []string `json:"hook_events"`
	SettingsChange bool     `json:"settings_changed"`
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

// Configure binds a checkout to a spool: it creates the spool, records the
// binding in the capture config and installs the marked Claude Code hooks.
func Configure(ctx context.Context, store Store, o ConfigureOptions) (*ConfigureResult, error) {
	root, err := CanonicalRoot(o.Root)
	if err != nil {
		return nil, err
	}
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
		return nil, fmt.Errorf("--capture-mode %q is not supported; use %s or %s", mode, event.ModeMetadataOnly, event.ModeLocalConversation)
	}
	if !filepath.IsAbs(o.Executable) {
		return nil, fmt.Errorf("cannot install hooks: agentscm executable path %q is not absolute", o.Executable)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var b Binding
	err = store.Update(func(c *Config) (bool, error) {
		if cur := c.Find(root); cur != nil {
			if cur.Spool != spoolDir {
				return false, fmt.Errorf("checkout %s is already bound to spool %s; a checkout cannot adopt another spool", root, cur.Spool)
			}
			cur.CaptureMode, cur.Enabled, cur.ConfiguredAt = mode, true, o.Now.UTC()
			b = *cur
		} else {
			for _, other := range c.Bindings {
				if other.Spool == spoolDir {
					return false, fmt.Errorf("spool %s is already bound to checkout %s", spoolDir, other.Root)
				}
			}
			b = Binding{Root: root, Spool: spoolDir, CaptureMode: mode, Enabled: true, ConfiguredAt: o.Now.UTC()}
			c.Bindings = append(c.Bindings, b)
		}
		// The spool exists before the binding that names it is saved.
		if _, err := spool.Init(spoolDir); err != nil {
			return false, err
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	events := claude.HookEvents[:]
	changed, err := claude.InstallHooks(b.SettingsPath(), claude.HookCommand(o.Executable), events)
	if err != nil {
		return nil, fmt.Errorf("install Claude Code hooks: %w", err)
	}
	return &ConfigureResult{
		Root: root, Spool: spoolDir, CaptureMode: mode, ClaudeSettings: b.SettingsPath(),
		HookEvents: append([]string(nil), events...), SettingsChange: changed,
	}, nil
}

// UnconfigureResult says what unconfigure did.
type UnconfigureResult struct {
	Root           string `json:"root"`
	Spool          string `json:"spool"`
	ClaudeSettings string `json:"claude_settings"`
	HooksRemoved   bool   `json:"hooks_removed"`
	SpoolRetained  bool   `json:"spool_retained"`
}

// Unconfigure removes the marked hooks of a checkout and disables its
// binding; the binding and its spool are kept.
func Unconfigure(ctx context.Context, store Store, root string) (*UnconfigureResult, error) {
	if root == "" {
		return nil, errors.New("--root is required")
	}
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("--root %q is not an absolute path", root)
	}
	canon := filepath.Clean(root)
	if real, err := filepath.EvalSymlinks(canon); err == nil {
		canon = real
	}
	var b Binding
	err := store.Update(func(c *Config) (bool, error) {
		cur := c.Find(canon)
		if cur == nil {
			cur = c.Find(filepath.Clean(root))
		}
		if cur == nil {
			return false, ErrNoBinding
		}
		b = *cur
		if !cur.Enabled {
			return false, nil
		}
		cur.Enabled = false
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	res := &UnconfigureResult{Root: b.Root, Spool: b.Spool, ClaudeSettings: b.SettingsPath(), SpoolRetained: true}
	if _, err := os.Stat(b.Root); err == nil {
		removed, err := claude.RemoveHooks(b.SettingsPath())
		if err != nil {
			return nil, fmt.Errorf("remove Claude Code hooks: %w", err)
		}
		res.HooksRemoved = removed
	}
	return res, nil
}
