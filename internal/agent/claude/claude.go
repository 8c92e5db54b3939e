// Package claude is the Claude Code adapter: its agent name, its
// capabilities, its blocking answer and the mapping of its hook events to
// typed event records (the neutral mapping of internal/agent). The hook
// entries it installs live in internal/agent/hookfile.
package claude

import (
	"time"

	"github.com/agentscm/agentscm/internal/agent"
	"github.com/agentscm/agentscm/internal/event"
)

// AgentName identifies this adapter in event records.
const AgentName = "claude-code"

// Map turns a payload into the event record to retain, in the given capture
// mode, stamped with receipt time now. It returns ok=false for events that
// are ignored (unrecognised events, subagent markers without an agent id).
func Map(p *agent.Payload, mode string, now time.Time) (*event.Record, bool, error) {
	return agent.MapHook(p, AgentName, mode, now)
}
