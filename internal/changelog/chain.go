package changelog

import (
	"context"
	"fmt"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
)

// CheckChain checks that increments with the metadata metas (in order) form
// a sequence a replay can apply from position 0: each one starts where the
// previous one ended, either at the next position or, for an increment the
// Hub stored merged, at its first merged position.
func CheckChain(metas []*incmeta.Meta) error {
	next := 0
	for _, m := range metas {
		if err := m.CheckMerged(); err != nil {
			return fmt.Errorf("%w: increment %d: %v", ErrUnreadableArchive, m.Position, err)
		}
		if from := m.MergedFrom(); from != next {
			if from > next {
				return fmt.Errorf("%w: positions %d..%d are missing before increment %d (it carries %d..%d)", ErrNoIncrement, next, from-1, m.Position, from, m.Position)
			}
			return fmt.Errorf("%w: increment %d carries positions from %d, which earlier increments hold", ErrUnreadableArchive, m.Position, from)
		}
		next = m.Position + 1
	}
	return nil
}

// ApplyChain is ApplyFiles for a sequence whose positions may have holes
// (positions merged into a later increment on the Hub): paths hold the
// increments at positions, in order, the last at req.To, and each one's
// metadata must continue the previous one (CheckChain).
func (c *Changelog) ApplyChain(ctx context.Context, paths []string, positions []int, req ApplyRequest) (*ApplyResult, error) {
	if len(paths) == 0 || len(paths) != len(positions) || positions[len(positions)-1] != req.To {
		return nil, fmt.Errorf("%w: %d increments given for positions up to %d", ErrNoIncrement, len(paths), req.To)
	}
	var metas []*incmeta.Meta
	for i, p := range paths {
		m, err := ReadMeta(p)
		if err != nil {
			return nil, fmt.Errorf("increment %d: %w", positions[i], err)
		}
		if m.Position != positions[i] {
			return nil, fmt.Errorf("%w: the increment listed at position %d names position %d", ErrUnreadableArchive, positions[i], m.Position)
		}
		metas = append(metas, m)
	}
	if err := CheckChain(metas); err != nil {
		return nil, err
	}
	lk, err := c.lock()
	if err != nil {
		return nil, err
	}
	defer lk.Unlock()
	st, err := c.stateForCapture()
	if err != nil {
		return nil, err
	}
	to := req.To
	return c.applyLocked(ctx, paths, append([]int(nil), positions...), req, st, "agentscm changelog apply", &to)
}
