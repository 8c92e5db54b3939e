package binding

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentscm/agentscm/internal/agent/adapter"
	"github.com/agentscm/agentscm/internal/agent/claude"
	"github.com/agentscm/agentscm/internal/agent/hookfile"
)

// strayHookFiles are the hook files of a checkout that may hold marked
// capture hooks: every agent's own, and Claude Code's shared settings file
// (a binding may name it with --claude-settings).
func strayHookFiles(root string, b *Binding) []string {
	var files []string
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			files = append(files, p)
		}
	}
	if b != nil {
		for _, h := range b.Hooks() {
			add(h.Path(b.Root))
		}
	}
	for _, name := range adapter.Names() {
		if ad, err := adapter.For(name); err == nil {
			add(filepath.Join(root, filepath.FromSlash(ad.HookFile())))
		}
	}
	add(filepath.Join(root, ".claude", "settings.json"))
	return files
}

// StrayHooks lists the hook files of the checkout at root that hold marked
// capture hooks while no enabled binding records them (b is the checkout's
// binding, nil when none): a configure that did not finish, a copied
// checkout, a binding lost or turned off while the checkout was away. Such
// hooks run on every agent event and capture nothing. A missing checkout has
// none.
func StrayHooks(root string, b *Binding) []string {
	if b != nil && b.Enabled {
		return nil
	}
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		return nil
	}
	var out []string
	for _, f := range strayHookFiles(root, b) {
		if hasCaptureHooks(f) {
			out = append(out, f)
		}
	}
	return out
}

// hasCaptureHooks reports whether the hook file at path holds a marked
// capture hook of any agent (the combined capture and changelog entry
// included).
func hasCaptureHooks(path string) bool {
	for _, name := range adapter.Names() {
		ad, err := adapter.For(name)
		if err != nil {
			continue
		}
		if ev, err := hookfile.MarkedEventsFor(path, ad.CaptureSubcommand()); err == nil && len(ev) > 0 {
			return true
		}
	}
	return false
}

// removeStrayHooks removes the marked capture hooks of every agent from
// files, keeping the changelog's part of a combined entry, and reports
// whether any file changed.
func removeStrayHooks(files []string) (bool, error) {
	removed := false
	for _, f := range files {
		cur, _, err := hookfile.InstalledParts(f)
		if err != nil {
			return removed, fmt.Errorf("remove capture hooks from %s: %w", f, err)
		}
		if cur.Capture {
			changed, err := hookfile.InstallParts(f, "", hookfile.Parts{Changelog: cur.Changelog})
			if err != nil {
				return removed, fmt.Errorf("remove capture hooks from %s: %w", f, err)
			}
			removed = removed || changed
		}
		for _, name := range adapter.Names() {
			ad, err := adapter.For(name)
			if err != nil || ad.Name() == claude.AgentName {
				continue
			}
			changed, err := hookfile.RemoveHooksFor(f, ad.CaptureSubcommand())
			if err != nil {
				return removed, fmt.Errorf("remove capture hooks from %s: %w", f, err)
			}
			removed = removed || changed
		}
	}
	return removed, nil
}

// StrayHooksAdvice says what stray capture hooks mean and the two commands
// that end the half-configured state.
func StrayHooksAdvice(root string, files []string) string {
	return fmt.Sprintf("capture hooks are installed in %s, but no enabled capture binding records them (a configure that did not finish, or a copied checkout), so they capture nothing: run agentscm change-capture enable --root %s to finish setting up, or agentscm change-capture unconfigure --root %s to remove them",
		strings.Join(files, ", "), root, root)
}
