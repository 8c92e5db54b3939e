// Package adapter is the small interface every agent adapter implements
// (Claude Code, Codex CLI, Gemini CLI), so capture, changelog and rewind treat the
// hosts alike: decode and validate a bounded hook payload into the one
// decoded form the hooks consume, map it to a typed event record, and name
// the hook file, events, marked subcommands and resume command of the host.
package adapter

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/agentscm/agentscm/internal/agent"
	"github.com/agentscm/agentscm/internal/agent/capability"
	"github.com/agentscm/agentscm/internal/agent/claude"
	"github.com/agentscm/agentscm/internal/agent/codex"
	"github.com/agentscm/agentscm/internal/agent/gemini"
	"github.com/agentscm/agentscm/internal/agent/hookfile"
	"github.com/agentscm/agentscm/internal/event"
)

// Adapter is one agent host's integration. Everything that differs between
// hosts is a method here, so no caller switches on an agent's name.
type Adapter interface {
	// Name is the agent name in event records (claude-code, codex).
	Name() string
	// Decode validates one bounded hook payload and normalises it.
	Decode(b []byte) (*agent.Payload, error)
	// Map turns a decoded payload into the record to retain (ok=false:
	// not captured).
	Map(p *agent.Payload, mode string, now time.Time) (*event.Record, bool, error)
	// ConfigDir is the checkout- or HOME-relative directory whose presence
	// says the host is used there (.claude, .codex, .gemini).
	ConfigDir() string
	// HookFile is the checkout-relative file the hooks are installed in.
	HookFile() string
	// CaptureEvents and ChangelogEvents are the host events each hook takes.
	CaptureEvents() []string
	ChangelogEvents() []string
	// CaptureSubcommand and ChangelogSubcommand mark the installed hooks.
	CaptureSubcommand() string
	ChangelogSubcommand() string
	// HookTimeout is the timeout value of an installed hook entry, in the
	// host's unit (seconds for Claude Code and Codex, milliseconds for
	// Gemini CLI).
	HookTimeout() int
	// InstallHooks installs the marked entries of part in the settings file
	// at path, running the agentscm executable exe (or the lean hook binary
	// beside it where the host's hook runs it), and keeps the entries of the
	// other part; it reports whether the file changed.
	InstallHooks(path, exe string, part Part) (bool, error)
	// RemoveHooks removes the marked entries of part from the settings file
	// at path, keeping the other part's; it reports whether the file changed.
	RemoveHooks(path string, part Part) (bool, error)
	// TrustNote says what the host needs before it runs the hooks installed
	// in the checkout at root ("" when nothing).
	TrustNote(root string) string
	// ChangelogTranscript reports whether the changelog captures the host's
	// conversation transcript as a root (Claude Code), so a rewind restores
	// it from the increments; the other hosts resume from their own session
	// files on this machine.
	ChangelogTranscript() bool
	// WithState returns the adapter a hook of kind hook ("capture",
	// "changelog") uses, its per-session state (if any) kept under the
	// agentscm config directory configDir.
	WithState(configDir, hook string) Adapter
	Capabilities() capability.Declaration
	// BlockPrompt is the host's blocking answer to its prompt-submission
	// hook (stdout, exit status 0): the prompt does not run and the host
	// shows reason.
	BlockPrompt(reason string) []byte
}

// Part is an agentscm part a marked hook entry runs.
type Part int

const (
	// PartCapture is the change capture (change-capture hook-*).
	PartCapture Part = iota
	// PartChangelog is the changelog (changelog hook-*).
	PartChangelog
)

// Claude is the Claude Code adapter.
type Claude struct{}

func (Claude) Name() string                            { return claude.AgentName }
func (Claude) Decode(b []byte) (*agent.Payload, error) { return agent.DecodePayload(b) }
func (Claude) Map(p *agent.Payload, mode string, now time.Time) (*event.Record, bool, error) {
	return claude.Map(p, mode, now)
}
func (Claude) HookFile() string                     { return ".claude/settings.local.json" }
func (Claude) CaptureEvents() []string              { return hookfile.HookEvents[:] }
func (Claude) ChangelogEvents() []string            { return hookfile.ChangelogEvents[:] }
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
// RecoverOrder, when set, lets the counters be updated without an fsync
// (gemini.Orderer Recover: the hook's durable record after a crash).
type Gemini struct {
	OrderDir     string
	RecoverOrder func(session, cwd string) (int, error)
}

func (Gemini) Name() string { return gemini.AgentName }
func (g Gemini) Decode(b []byte) (*agent.Payload, error) {
	return gemini.Orderer{Dir: g.OrderDir, Recover: g.RecoverOrder}.Decode(b)
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

// All is the table of supported adapters, Claude Code (the default) first.
func All() []Adapter { return []Adapter{Claude{}, Codex{}, Gemini{}} }

// Names returns the supported agent names, in the order of All.
func Names() []string {
	var out []string
	for _, a := range All() {
		out = append(out, a.Name())
	}
	return out
}

// IsDefault reports whether a is the default adapter (Claude Code), the
// one a binding saved without an agent name means.
func IsDefault(a Adapter) bool { return a.Name() == All()[0].Name() }

// For returns the adapter of an agent name ("" is Claude Code; "claude" is
// accepted for claude-code).
func For(name string) (Adapter, error) {
	if name == "" || name == "claude" {
		return All()[0], nil
	}
	for _, a := range All() {
		if a.Name() == name {
			return a, nil
		}
	}
	return nil, fmt.Errorf("unknown agent %q: use claude-code, codex or gemini", name)
}

// claudeParts returns the Claude Code parts to install so that part is on
// (on) or off and the other part of the settings file at path is kept.
func claudeParts(path string, part Part, on bool) (cur, want hookfile.Parts, err error) {
	cur, _, err = hookfile.InstalledParts(path)
	want = cur
	if part == PartCapture {
		want.Capture = on
	} else {
		want.Changelog = on
	}
	return cur, want, err
}

func (Claude) ConfigDir() string { return ".claude" }
func (Claude) HookTimeout() int  { return hookfile.HookTimeoutSeconds }

// InstallHooks writes one entry per event: where the other part is on too,
// the entry runs both (and an install with two entries there is upgraded).
func (Claude) InstallHooks(path, exe string, part Part) (bool, error) {
	_, want, err := claudeParts(path, part, true)
	if err != nil {
		return false, err
	}
	return hookfile.InstallParts(path, hookfile.HookExecutable(exe), want)
}

// RemoveHooks keeps the other part's share of the one entry per event.
func (Claude) RemoveHooks(path string, part Part) (bool, error) {
	cur, want, err := claudeParts(path, part, false)
	if err != nil || cur == want {
		return false, err
	}
	return hookfile.InstallParts(path, "", want)
}
func (Claude) TrustNote(string) string            { return "" }
func (Claude) ChangelogTranscript() bool          { return true }
func (c Claude) WithState(string, string) Adapter { return c }

// markedHooks installs the entries of part for a host whose file holds
// one marked entry per part and event: the capture runs the intake binary
// beside exe (else the lean hook binary, else exe), the changelog the lean
// hook binary beside exe (else exe), as Claude Code's changelog entries do.
// An entry written earlier with exe itself keeps working (the route table
// of every binary holds both subcommands) and is rewritten in place.
func markedHooks(a Adapter, path, exe string, part Part) (bool, error) {
	sub, events := a.CaptureSubcommand(), a.CaptureEvents()
	if part == PartCapture {
		exe = hookfile.IntakeExecutable(exe)
	} else {
		exe = hookfile.HookExecutable(exe)
		sub, events = a.ChangelogSubcommand(), a.ChangelogEvents()
	}
	return hookfile.InstallHooksWith(path, hookfile.CommandFor(exe, sub), events, a.HookTimeout())
}

func removeMarked(a Adapter, path string, part Part) (bool, error) {
	sub := a.CaptureSubcommand()
	if part == PartChangelog {
		sub = a.ChangelogSubcommand()
	}
	return hookfile.RemoveHooksFor(path, sub)
}

func (Codex) ConfigDir() string { return ".codex" }
func (Codex) HookTimeout() int  { return hookfile.HookTimeoutSeconds }
func (c Codex) InstallHooks(path, exe string, part Part) (bool, error) {
	return markedHooks(c, path, exe, part)
}
func (c Codex) RemoveHooks(path string, part Part) (bool, error) { return removeMarked(c, path, part) }
func (Codex) TrustNote(root string) string                       { return codex.TrustNote(root) }
func (Codex) ChangelogTranscript() bool                          { return false }
func (c Codex) WithState(string, string) Adapter                 { return c }

func (Gemini) ConfigDir() string { return ".gemini" }
func (Gemini) HookTimeout() int  { return gemini.HookTimeoutMillis }
func (g Gemini) InstallHooks(path, exe string, part Part) (bool, error) {
	return markedHooks(g, path, exe, part)
}
func (g Gemini) RemoveHooks(path string, part Part) (bool, error) { return removeMarked(g, path, part) }
func (Gemini) TrustNote(root string) string                       { return gemini.TrustNote(root) }
func (Gemini) ChangelogTranscript() bool                          { return false }

// WithState keeps the order counters of a hook of kind hook under
// configDir/agent-state/gemini-<hook>, unless OrderDir is set already.
func (g Gemini) WithState(configDir, hook string) Adapter {
	if g.OrderDir == "" {
		g.OrderDir = filepath.Join(configDir, "agent-state", "gemini-"+hook)
	}
	return g
}
