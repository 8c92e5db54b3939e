package hookrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/agentscm/agentscm/internal/agent/adapter"
	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/delivery"
	"github.com/agentscm/agentscm/internal/hookcore"
)

// AgentCapture is ClaudeCapture for the hook payload of another agent
// adapter (Codex CLI): the same capture, fail-open rules and one-line
// warnings.
func AgentCapture(ctx context.Context, a adapter.Adapter, stdin io.Reader, stderr io.Writer, getenv func(string) string, now time.Time) int {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "agentscm: warning: %s capture hook failed: internal error: %v\n", a.Name(), r)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	dir, err := binding.ConfigDir(getenv)
	var res *capture.HookResult
	if err == nil {
		a = a.WithState(dir, "capture")
		store := capture.StateDir{Dir: dir}
		res, err = capture.HandleAgentHook(ctx, store, delivery.Opener{ConfigDir: store.Dir}, a, stdin, now)
	}
	also := ""
	if res != nil && res.Warning != "" {
		also = "; " + hookcore.OneLine(res.Warning)
	}
	switch {
	case errors.Is(err, capture.ErrOccurrenceConflict):
		fmt.Fprintf(stderr, "agentscm: warning: %s%s\n", hookcore.OneLine(err.Error()), also)
	case err != nil:
		fmt.Fprintf(stderr, "agentscm: warning: %s capture hook failed: %s%s\n", a.Name(), hookcore.OneLine(err.Error()), also)
	case res.DeliveryErr != nil:
		fmt.Fprintf(stderr, "agentscm: warning: event retained locally, delivery pending: %s%s\n", hookcore.OneLine(res.DeliveryErr.Error()), also)
	case also != "":
		fmt.Fprintf(stderr, "agentscm: warning: %s\n", also[2:])
	}
	return 0
}
