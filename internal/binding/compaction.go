package binding

import (
	"errors"
	"fmt"
	"time"
)

// CompactionPolicy is an operator's recorded choice, saved in the binding,
// to let the hook compact acknowledged history automatically. The seed
// forbids automatic deletion; this is the explicit choice that permits
// exactly what `change-capture compact` does and nothing more: acknowledged
// ordinary envelopes become digests and completed acknowledged action pairs
// receipts, while pending envelopes, incomplete starts, artifacts and the
// replay index are never removed. Each automatic compaction is recorded in
// the spool's compaction index (its history lists the trigger).
type CompactionPolicy struct {
	// ThresholdPercent: the hook compacts when the spool's usage of its
	// record or byte limit reaches this percentage (1 to 95).
	ThresholdPercent int `json:"threshold_percent"`
	// ChosenBy is the command that recorded the choice (enable, configure).
	ChosenBy string    `json:"chosen_by"`
	ChosenAt time.Time `json:"chosen_at"`
}

// DefaultCompactThreshold is the threshold one-step enable records.
const DefaultCompactThreshold = 50

// Validate refuses a threshold outside 1 to 95 percent.
func (p *CompactionPolicy) Validate() error {
	if p.ThresholdPercent < 1 || p.ThresholdPercent > 95 {
		return fmt.Errorf("compaction threshold %d%% must be between 1 and 95", p.ThresholdPercent)
	}
	return nil
}

// String describes the policy for status output.
func (p *CompactionPolicy) String() string {
	if p == nil {
		return "off (compact by hand: agentscm change-capture compact --spool SPOOL)"
	}
	return fmt.Sprintf("automatic: compact acknowledged history when usage reaches %d%% of a limit (chosen by %s at %s)",
		p.ThresholdPercent, p.ChosenBy, p.ChosenAt.Format(time.RFC3339))
}

// PolicyChange is a configure/enable request about the compaction policy.
type PolicyChange struct {
	// Set records a policy with this threshold (percent); 0 leaves the
	// current choice.
	Set int
	// Clear turns automatic compaction off.
	Clear bool
}

// Apply returns the policy after the change.
func (c PolicyChange) Apply(cur *CompactionPolicy, by string, now time.Time) (*CompactionPolicy, error) {
	switch {
	case c.Set != 0 && c.Clear:
		return nil, errors.New("--auto-compact and --no-auto-compact exclude each other")
	case c.Clear:
		return nil, nil
	case c.Set != 0:
		p := &CompactionPolicy{ThresholdPercent: c.Set, ChosenBy: by, ChosenAt: now.UTC()}
		if cur != nil && cur.ThresholdPercent == c.Set {
			return cur, nil
		}
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("--auto-compact: %w", err)
		}
		return p, nil
	}
	return cur, nil
}
