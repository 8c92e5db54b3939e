package spool

import (
	"context"

	"github.com/agentscm/agentscm/internal/event"
)

// SetNoSync disables fsync for tests that populate large spools quickly.
func (s *Spool) SetNoSync(v bool) { s.noSync = v }

// AppendBatch appends recs under one lock acquisition (same admission code
// as Append), so tests can fill a default-sized spool quickly.
func (s *Spool) AppendBatch(recs []*event.Record) (int, error) {
	g, err := s.acquire(context.Background())
	if err != nil {
		return 0, err
	}
	defer g.release()
	for i, r := range recs {
		if _, err := s.appendLocked(g.st, r); err != nil {
			return i, err
		}
	}
	return len(recs), nil
}
