//go:build e2e

package e2e

import (
	"context"
	"path/filepath"
	"time"

	"github.com/agentscm/agentscm/internal/hookrun"
)

// waitDelivered waits until no background deliverer of the checkout's
// config directory runs. The installed agentscm-hook hands delivery to a
// detached deliverer per spool (off the hook's critical path), so right
// after a Claude session the Hub may not have every envelope yet; once
// the deliverers are done it has everything they could deliver (what they
// could not stays pending, as before, for the next hook). It also keeps a
// deliverer from outliving the test's temporary directory.
func (c *checkout) waitDelivered() {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := hookrun.WaitBackground(ctx, filepath.Join(c.config, "agentscm")); err != nil {
		c.t.Fatal(err)
	}
}
