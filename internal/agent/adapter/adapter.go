// Package adapter is the small interface every agent adapter implements
// (Claude Code, Codex CLI, Gemini CLI), so capture, changelog and rewind treat the
// hosts alike: decode and validate a bounded hook payload into the one
// decoded form the hooks consume, map it to a typed event record, and name
// the hook file, events, marked subcommands and resume command of the host.
package adapter

import (
	"fmt"
	"time"

	"github.com/agentscm/agentscm/internal/agent"
	"github.com/agentscm/agentscm/internal/agent/capability"
	"github.com/agentscm/agentscm/internal/agent/claude"
	"github.com/agentscm/agentscm/internal/agent/codex"
	"github.com/agentscm/agentscm/internal/agent/gemini"
	"github.com/agentscm/agentscm/internal/agent/hookfile"
	"github.com/agentscm/agentscm/internal/event"
)

// Adapter is one agent host's integration.
type Adapter interface {
	// Name is the agent name in event records (claude-code, codex).
	Name() string
	// Decode validates one bounded hook payload and normalises it.
	Decode(b []byte) (*agent.Payload, error)
	// Map turns a decoded payload into the record to retain (ok=false:
	// not captured).
	Map(p *agent.Payload, mode string, now time.Time) (*event.Record, bool, error)
	// HookFile is the checkout-relative file the hooks are installed in.
	HookFile() string
	// CaptureEvents and ChangelogEvents are the host events each hook takes.
	CaptureEvents() []string
	ChangelogEvents() []string
	// CaptureSubcommand and ChangelogSubcommand mark the installed hooks.
	CaptureSubcommand() string
	ChangelogSubcommand() string
	Capabilities() capability.Declaration
	// BlockPrompt is the host's blocking answer to its prompt-submission
	// hook (stdout, exit status 0): the prompt does not run and the host
	// shows reason.
	BlockPrompt(reason string) []byte
}

// Claude is the Claude Code adapter.
type Claude struct{}

func (Claude) Name() string                            { return claude.AgentName }
func (Claude) Decode(b []byte) (*agent.Payload, error) { return agent.DecodePayload(b) }
func (Claude) Map(p *agent.Payload, mode string, now time.Time) (*event.Record, bool, error) {
	return claude.Map(p, mode, now)
}
func (Claude) HookFile() string                     { return ".claude/settings.local.json" }
func (Claude) CaptureEvents() []string              { return hookfile.HookEvents[:] }
func (Claude) ChangelogEvents() []string            { return nil } // changelog.HookEvents
func (Claude) CaptureSubcommand() string            { return hookfile.HookSubcommand }
func (Claude) ChangelogSubcommand() string          { return hookfile.ChangelogSubcommand }
func (Claude) Capabilities() capability.Declaration { return claude.Capabilities() }
func (Claude) BlockPrompt(reason string) []byte     { return claude.BlockPrompt(reason) }

// Codex is the Codex CLI adapter.
type Codex struct{}

func (Codex) Name() string                            { return codex.AgentName }
func (Codex) Decode(b []byte) (*agent.Payload, error) { return codex.Decode(b) }
func (Codex) Map(p *agent.Payload, mode string, now time.Time) (*event.Record, bool, error) {
	return codex.Map(p, mode, now)
}
func (Codex) HookFile() string                     { return codex.HookFile }
func (Codex) CaptureEvents() []string              { return codex.HookEvents }
func (Codex) ChangelogEvents() []string            { return codex.ChangelogEvents }
func (Codex) CaptureSubcommand() string            { return codex.HookSubcommand }
func (Codex) ChangelogSubcommand() string          { return codex.ChangelogSubcommand }
func (Codex) Capabilities() capability.Declaration { return codex.Capabilities() }
func (Codex) BlockPrompt(reason string) []byte     { return codex.BlockPrompt(reason) }

// Gemini is the Gemini CLI adapter. OrderDir holds the per-session
// counters that pair tool starts and finishes by order (Gemini CLI carries
// no tool-call id); each hook gives its own (hookrun, the changelog hook).
type Gemini struct{ OrderDir string }

func (Gemini) Name() string { return gemini.AgentName }
func (g Gemini) Decode(b []byte) (*agent.Payload, error) {
	return gemini.Orderer{Dir: g.OrderDir}.Decode(b)
}
func (Gemini) Map(p *agent.Payload, mode string, now time.Time) (*event.Record, bool, error) {
	return gemini.Map(p, mode, now)
}
func (Gemini) HookFile() string                     { return gemini.HookFile }
func (Gemini) CaptureEvents() []string              { return gemini.HookEvents }
func (Gemini) ChangelogEvents() []string            { return gemini.ChangelogEvents }
func (Gemini) CaptureSubcommand() string            { return gemini.HookSubcommand }
func (Gemini) ChangelogSubcommand() string          { return gemini.ChangelogSubcommand }
func (Gemini) Capabilities() capability.Declaration { return gemini.Capabilities() }
func (Gemini) BlockPrompt(reason string) []byte     { return gemini.BlockPrompt(reason) }

// HookTimeout is the timeout value of an installed hook entry of agent a,
// in its host's unit.
func HookTimeout(a Adapter) int {
	if a.Name() == gemini.AgentName {
		return gemini.HookTimeoutMillis
	}
	return hookfile.HookTimeoutSeconds
}

// Names lists the supported agents.
var names = []string{claude.AgentName, codex.AgentName, gemini.AgentName}

// Names returns the supported agent names.
func Names() []string { return append([]string(nil), names...) }

// For returns the adapter of an agent name ("" is Claude Code; "claude" is
// accepted for claude-code).
func For(name string) (Adapter, error) {
	switch name {
	case "", claude.AgentName, "claude":
		return Claude{}, nil
	case codex.AgentName:
		return Codex{}, nil
	case gemini.AgentName:
		return Gemini{}, nil
	}
	return nil, fmt.Errorf("unknown agent %q: use claude-code, codex or gemini", name)
}
