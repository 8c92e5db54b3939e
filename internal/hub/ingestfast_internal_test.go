package hub

import (
	"slices"
	"testing"

	"github.com/agentscm/agentscm/internal/hub/api"
)

// TestAcceptingStates: the states a store.EventsCommitter is given as
// accepting are exactly those accepting() accepts, so the statement's
// condition and the service's refusal agree.
func TestAcceptingStates(t *testing.T) {
	for _, st := range []string{api.StateActive, api.StatePaused, api.StateBlocked, api.StateFinished, api.StateHandover, ""} {
		if got, want := slices.Contains(acceptingStates(), st), accepting(st); got != want {
			t.Errorf("state %q: in acceptingStates %v, accepting %v", st, got, want)
		}
	}
}
