//go:build e2e

package e2e

import (
	"context"
	"path/filepath"
	"time"

	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/changelog"
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
	if err := (capture.StateDir{Dir: filepath.Join(c.config, "agentscm")}).WaitDeliverers(ctx); err != nil {
		c.t.Fatalf("background deliverers: %v", err)
	}
	// The same deliverer uploads the changelog's increments (a checkout
	// with a changelog and no capture has a deliverer for them alone).
	dirs, _ := filepath.Glob(filepath.Join(c.config, "agentscm", "changelog", "*"))
	for _, d := range dirs {
		if err := changelog.WaitUploads(ctx, d); err != nil {
			c.t.Fatalf("the changelog's deliverer: %v", err)
		}
	}
}
