package cli

import "fmt"

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
