package hub

import (
	"sync"

	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/hub/store"
)

// maxAgentKnown bounds agentKnown's remembered sessions; a full set is
// emptied (it only saves a general-path ingest per session).
const maxAgentKnown = 1 << 16

// agentKnown remembers the sessions whose agent the store already names.
// A session's agent, once set, never changes, so a remembered session's
// envelopes take the one-round-trip events path (which writes no session
// row); the first envelope naming an agent for any other session takes
// the general path, which claims it (claimAgent).
type agentKnown struct {
	mu   sync.Mutex
	seen map[agentKey]bool
}

type agentKey struct {
	work, session string
	generation    int64
}

func keyOf(env *api.Envelope) agentKey {
	return agentKey{work: env.WorkID, session: env.Session, generation: env.Generation}
}

func (a *agentKnown) has(k agentKey) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.seen[k]
}

func (a *agentKnown) add(k agentKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seen == nil || len(a.seen) >= maxAgentKnown {
		a.seen = map[agentKey]bool{}
	}
	a.seen[k] = true
}

// fastPathAgent reports whether env's agent needs no write: it names none,
// or its session's agent is already stored.
func (s *Service) fastPathAgent(env *api.Envelope) bool {
	return env.Agent == "" || s.agents.has(keyOf(env))
}

// claimAgent gives sess the envelope's agent when it names none yet (the
// first agent named wins: a canonical session is bound to one native
// session, which belongs to one agent) and reports whether the session's
// agent is stored after this transaction.
func claimAgent(tx store.Tx, sess store.Session, env *api.Envelope) (bool, error) {
	if env.Agent == "" || sess.Agent != "" {
		return sess.Agent != "", nil
	}
	if err := tx.ClaimSessionAgent(sess.WorkID, sess.Generation, sess.Canonical, env.Agent); err != nil {
		return false, err
	}
	return true, nil
}
