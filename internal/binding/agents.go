package binding

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentscm/agentscm/internal/agent/adapter"
	"github.com/agentscm/agentscm/internal/agent/hookfile"
)

// AgentHooks is one agent whose capture hooks a binding installs, and the
// file, relative to the checkout root, that agent reads them from.
type AgentHooks struct {
	// Agent is the adapter name (claude-code, codex, gemini).
	Agent string `json:"agent"`
	// Settings is the hook file relative to the root (slash-separated).
	Settings string `json:"settings"`
}

// Path is the absolute hook file of h in the checkout at root.
func (h AgentHooks) Path(root string) string {
	return filepath.Join(root, filepath.FromSlash(h.Settings))
}

// ErrAgentNotBound reports an agent a binding does not install hooks for.
var ErrAgentNotBound = errors.New("the capture binding does not install this agent's hooks")

// Hooks lists the agents whose capture hooks the binding installs, each
// with its hook file, the binding's first agent first: the agents field of
// a version 8 binding, else the one agent a version 5 to 7 binding names
// (agent, empty for Claude Code, and claude_settings, empty for its
// default file).
func (b *Binding) Hooks() []AgentHooks {
	if len(b.Agents) > 0 {
		return append([]AgentHooks(nil), b.Agents...)
	}
	name := b.Agent
	if a, err := adapter.For(b.Agent); err == nil {
		name = a.Name()
	}
	rel := b.ClaudeSettings
	if rel == "" {
		rel = DefaultClaudeSettings
	}
	return []AgentHooks{{Agent: name, Settings: rel}}
}

// HookOf returns the binding's entry of the agent name ("" or "claude" is
// Claude Code) and whether the binding installs that agent's hooks.
func (b *Binding) HookOf(name string) (AgentHooks, bool) {
	a, err := adapter.For(name)
	if err != nil {
		return AgentHooks{}, false
	}
	for _, h := range b.Hooks() {
		if h.Agent == a.Name() {
			return h, true
		}
	}
	return AgentHooks{}, false
}

// setHooks records hs (at least one) as the binding's agents: one agent in
// the version 5 to 7 fields (agent, claude_settings), so a binding of one
// agent is saved exactly as before; several in agents (version 8).
func (b *Binding) setHooks(hs []AgentHooks) {
	if len(hs) == 1 {
		b.Agents = nil
		b.Agent, b.ClaudeSettings = hs[0].Agent, hs[0].Settings
		if a, err := adapter.For(hs[0].Agent); err == nil && adapter.IsDefault(a) {
			b.Agent = ""
		}
		if b.ClaudeSettings == DefaultClaudeSettings {
			b.ClaudeSettings = ""
		}
		return
	}
	b.Agents = append([]AgentHooks(nil), hs...)
	b.Agent, b.ClaudeSettings = "", ""
}

// withAgent returns hs with h added, or replacing the entry of the same
// agent in place (its hook file may change).
func withAgent(hs []AgentHooks, h AgentHooks) []AgentHooks {
	out := append([]AgentHooks(nil), hs...)
	for i := range out {
		if out[i].Agent == h.Agent {
			out[i] = h
			return out
		}
	}
	return append(out, h)
}

// checkAgents validates the agents field of a version 8 binding: at least
// two known agents, each once, each with its own valid hook file, and the
// version 5 to 7 fields empty.
func checkAgents(b *Binding) error {
	if len(b.Agents) < 2 {
		return errors.New("agents lists fewer than two agents (one agent is saved in agent and claude_settings)")
	}
	if b.Agent != "" || b.ClaudeSettings != "" {
		return errors.New("agents and agent or claude_settings are both set")
	}
	agents, files := map[string]bool{}, map[string]bool{}
	for _, h := range b.Agents {
		a, err := adapter.For(h.Agent)
		if err != nil || a.Name() != h.Agent {
			return fmt.Errorf("agents: unknown agent %q", h.Agent)
		}
		if err := checkSettingsRel(h.Settings); err != nil {
			return fmt.Errorf("agents: %s: %w", h.Agent, err)
		}
		if agents[h.Agent] || files[h.Settings] {
			return fmt.Errorf("agents: %s or its hook file %s is listed twice", h.Agent, h.Settings)
		}
		agents[h.Agent], files[h.Settings] = true, true
	}
	return nil
}

// checkHookFileFree refuses h when another agent of hs installs its hooks in
// the same file.
func checkHookFileFree(hs []AgentHooks, h AgentHooks) error {
	for _, o := range hs {
		if o.Agent != h.Agent && o.Settings == h.Settings {
			return fmt.Errorf("the %s hooks of this checkout are already in %s; give %s another hook file", o.Agent, h.Settings, h.Agent)
		}
	}
	return nil
}

// AgentHookState is one agent of a binding and whether its hook file holds
// its marked capture hooks now.
type AgentHookState struct {
	Agent string `json:"agent"`
	// Settings is the absolute hook file.
	Settings string `json:"settings"`
	// Events are the host events the capture hooks take; Installed those
	// of them with a marked capture hook in Settings now.
	Events    []string `json:"hook_events"`
	Installed []string `json:"installed_events"`
	// Error says why the hook file could not be read.
	Error string `json:"error,omitempty"`
}

// HookStates reads, for every agent of the binding, which capture hooks
// its hook file holds.
func (b *Binding) HookStates() []AgentHookState {
	var out []AgentHookState
	for _, h := range b.Hooks() {
		s := AgentHookState{Agent: h.Agent, Settings: h.Path(b.Root), Events: []string{}, Installed: []string{}}
		a, err := adapter.For(h.Agent)
		if err != nil {
			s.Error = err.Error()
			out = append(out, s)
			continue
		}
		s.Events = append(s.Events, a.CaptureEvents()...)
		have, err := hookfile.MarkedEventsFor(s.Settings, a.CaptureSubcommand())
		if err != nil {
			s.Error = err.Error()
		}
		for _, ev := range s.Events {
			for _, x := range have {
				if x == ev {
					s.Installed = append(s.Installed, ev)
					break
				}
			}
		}
		out = append(out, s)
	}
	return out
}

// RemoveAgentResult says what removing one agent from a binding did.
type RemoveAgentResult struct {
	Root     string `json:"root"`
	Agent    string `json:"agent"`
	Settings string `json:"settings"`
	// HooksRemoved is true when the agent's hook file changed.
	HooksRemoved bool `json:"hooks_removed"`
	// Remaining are the agents whose hooks the binding still installs;
	// none when it was the binding's last agent, and capture is then off
	// (Unconfigure: Capture holds what it did).
	Remaining []string           `json:"remaining_agents"`
	Capture   *UnconfigureResult `json:"capture,omitempty"`
}

// RemoveAgent removes the capture hooks of one agent of the enabled binding
// of root and drops the agent from the binding, keeping every other agent's
// hooks; the binding's last agent is removed by Unconfigure (capture off,
// spool kept). An agent the binding does not install is refused with
// ErrAgentNotBound.
func RemoveAgent(ctx context.Context, store State, root, agent string) (*RemoveAgentResult, error) {
	a, err := adapter.For(agent)
	if err != nil {
		return nil, err
	}
	canon, err := SavedRoot(root)
	if err != nil {
		return nil, err
	}
	var gone AgentHooks
	var b Binding
	last := false
	err = store.Bindings().Update(func(c *Config) (bool, error) {
		cur := c.Find(canon)
		if cur == nil || !cur.Enabled {
			return false, ErrNoBinding
		}
		hs := cur.Hooks()
		var rest []AgentHooks
		found := false
		for _, h := range hs {
			if h.Agent == a.Name() {
				gone, found = h, true
				continue
			}
			rest = append(rest, h)
		}
		if !found {
			return false, fmt.Errorf("%w: %s installs the hooks of %s, not %s", ErrAgentNotBound, canon, agentNames(hs), a.Name())
		}
		if len(rest) == 0 {
			last = true
			return false, nil
		}
		cur.setHooks(rest)
		b = *cur
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	if last {
		un, err := Unconfigure(ctx, store, canon)
		if err != nil {
			return nil, err
		}
		return &RemoveAgentResult{Root: un.Root, Agent: a.Name(), Settings: gone.Path(un.Root), HooksRemoved: un.HooksRemoved, Remaining: []string{}, Capture: un}, nil
	}
	res := &RemoveAgentResult{Root: b.Root, Agent: a.Name(), Settings: gone.Path(b.Root), Remaining: []string{}}
	for _, h := range b.Hooks() {
		res.Remaining = append(res.Remaining, h.Agent)
	}
	if fi, err := os.Stat(b.Root); err == nil && fi.IsDir() {
		if res.HooksRemoved, err = a.RemoveHooks(res.Settings, adapter.PartCapture); err != nil {
			return nil, fmt.Errorf("remove %s hooks: %w", a.Name(), err)
		}
	}
	return res, nil
}

// agentNames is the agents of hs, comma-separated.
func agentNames(hs []AgentHooks) string {
	s := ""
	for i, h := range hs {
		if i > 0 {
			s += ", "
		}
		s += h.Agent
	}
	return s
}

// installAllHooks installs the capture hooks of every agent of b where that
// agent reads them; it reports, per agent, whether its file changed and
// whether it was created.
func installAllHooks(b *Binding, exe string) ([]InstalledHooks, error) {
	var out []InstalledHooks
	for _, h := range b.Hooks() {
		a, err := adapter.For(h.Agent)
		if err != nil {
			return out, err
		}
		p := h.Path(b.Root)
		_, statErr := os.Lstat(p)
		changed, err := a.InstallHooks(p, exe, adapter.PartCapture)
		if err != nil {
			return out, fmt.Errorf("install %s hooks: %w", a.Name(), err)
		}
		out = append(out, InstalledHooks{Agent: a.Name(), Settings: p, Events: append([]string(nil), a.CaptureEvents()...),
			Changed: changed, Created: os.IsNotExist(statErr)})
	}
	return out, nil
}

// InstalledHooks is what configure did to one agent's hook file.
type InstalledHooks struct {
	Agent string `json:"agent"`
	// Settings is the absolute hook file.
	Settings string   `json:"settings"`
	Events   []string `json:"hook_events"`
	Changed  bool     `json:"settings_changed"`
	Created  bool     `json:"settings_created"`
}
