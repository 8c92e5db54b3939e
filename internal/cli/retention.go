package cli

import (
	"strconv"
	"time"

	"github.com/agentscm/agentscm/internal/localui"
)

// retentionUnknown and retentionWording are the seed's retention sentences,
// shared with the local page (one wording for every surface).
const retentionUnknown = localui.RetentionUnknown

func retentionWording(days int, hub string) string { return localui.RetentionWording(days, hub) }

// HubClockOffsetEnv is an end-to-end test hook, like the spool's
// failpoints: seconds added to the clock of `hub serve` (retention
// deadlines and the sweep), so a test can watch bodies expire. Never set it
// on a real Hub.
const HubClockOffsetEnv = "AGENTSCM_HUB_TEST_CLOCK_OFFSET"

// hubClock is the Hub's clock: env.Now, shifted by HubClockOffsetEnv.
func hubClock(env *Env) func() time.Time {
	v := env.Getenv(HubClockOffsetEnv)
	if v == "" {
		return env.Now
	}
	off, err := strconv.ParseInt(v, 10, 64)
	if err != nil || off < 0 || off > 100*365*86400 {
		return env.Now
	}
	return func() time.Time { return env.Now().Add(time.Duration(off) * time.Second) }
}
