package delivery

import (
	"context"
	"fmt"
	"sync"

	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/hub/api"
)

// envelopeAgent is the agent an envelope of r names: the record's agent,
// except on gaps, which capture itself writes for a session (a lost
// append, an undecodable payload) under a default agent, not the hook's.
// A name the Hub would refuse is left out rather than holding the
// envelope back.
func envelopeAgent(r event.Record) string {
	if r.Kind == event.KindGap || !api.ValidAgent(r.Agent) {
		return ""
	}
	return r.Agent
}

// agentSupport remembers, for one opened Hub, whether it accepts an
// envelope's agent: an older Hub refuses the unknown field (400
// unknown_field), so the agent is sent only to a Hub whose whoami lists
// api.FeatureAgent. The Hub is asked once, before the first envelope that
// names an agent.
type agentSupport struct {
	mu      sync.Mutex
	checked bool
	ok      bool
}

// strip clears e's agent unless the Hub accepts it, asking the Hub first
// if it was not asked yet. A failed whoami is returned (the envelope
// stays pending, as for a failed delivery).
func (a *agentSupport) strip(ctx context.Context, conn client.Conn, e *api.Envelope) error {
	if e.Agent == "" {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.checked {
		w, err := conn.Whoami(ctx)
		if err != nil {
			return fmt.Errorf("ask the hub whether it accepts an envelope's agent: %w", err)
		}
		a.checked, a.ok = true, w.HasFeature(api.FeatureAgent)
	}
	if !a.ok {
		e.Agent = ""
	}
	return nil
}
