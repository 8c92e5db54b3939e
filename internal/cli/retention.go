package cli

import (
	"fmt"
	"strconv"
	"time"
)

// retentionUnknown is the seed's wording when the Hub's retention is not
// known (an older Hub, an unreachable or slow Hub, no Hub check yet): it
// never names a number it was not given.
const retentionUnknown = "kept for as long as the Hub operator sets (30 days unless changed)"

// retentionWording says how long a Hub keeps shared conversation bodies:
// "kept N days on <hub>" when the Hub reported N, else retentionUnknown.
func retentionWording(days int, hub string) string {
	if days <= 0 {
		return retentionUnknown
	}
	return fmt.Sprintf("kept %d days on %s", days, hub)
}

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
