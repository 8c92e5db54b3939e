package spool

// SetNoSync disables fsync for tests that populate large spools quickly.
func (s *Spool) SetNoSync(v bool) { s.noSync = v }
