// Package hookroute is the hook processes' one route table: every command
// line an installed hook entry runs (after its executable), verb x agent,
// mapped to the agent adapter whose payload it reads and the parts
// (capture, changelog) it runs. Every binary's main (agentscm,
// agentscm-hook, agentscm-hook-intake) looks its arguments up here, so a
// command string written into a user's settings file by any version keeps
// one meaning whichever binary it names. It links only the adapters.
package hookroute

import (
	"slices"
	"strings"

	"github.com/agentscm/agentscm/internal/agent/adapter"
)

// ChangelogFlag, after an agent's capture subcommand, makes one entry run
// both parts (hookfile.CombinedSubcommand for Claude Code).
const ChangelogFlag = "--changelog"

// Parts are what one hook process runs.
type Parts struct {
	// Capture is the change capture (every captured event).
	Capture bool
	// Changelog is the changelog increment (after a tool call) and its
	// turn marker (prompt, Stop, SessionEnd).
	Changelog bool
}

// Route is one hook command line.
type Route struct {
	// Args are the arguments after the executable, e.g.
	// ["change-capture", "hook-codex"].
	Args []string
	// Agent is the host whose payload the hook reads.
	Agent adapter.Adapter
	Parts Parts
	// Guidance: a SessionStart prints the recipe guidance on stdout as
	// the host's additional context (Claude Code's hookSpecificOutput,
	// which only Claude Code is known to read).
	Guidance bool
}

// Command is the route's command line after the executable.
func (r Route) Command() string { return strings.Join(r.Args, " ") }

// Table is every route: for each adapter its capture subcommand, its
// changelog subcommand, and its capture subcommand with ChangelogFlag
// (both parts in one process), in adapter.All order.
func Table() []Route {
	var out []Route
	for _, a := range adapter.All() {
		guide := adapter.IsDefault(a)
		capture := strings.Fields(a.CaptureSubcommand())
		out = append(out,
			Route{Args: capture, Agent: a, Parts: Parts{Capture: true}, Guidance: guide},
			Route{Args: append(slices.Clip(capture), ChangelogFlag), Agent: a, Parts: Parts{Capture: true, Changelog: true}, Guidance: guide},
			Route{Args: strings.Fields(a.ChangelogSubcommand()), Agent: a, Parts: Parts{Changelog: true}},
		)
	}
	return out
}

// Find returns the route of a hook's arguments (after the executable);
// false when they are not a hook command.
func Find(args []string) (Route, bool) {
	for _, r := range Table() {
		if slices.Equal(r.Args, args) {
			return r, true
		}
	}
	return Route{}, false
}
