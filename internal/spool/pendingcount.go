package spool

// PendingCount returns how many pending envelopes the held acquisition
// knows of (its pending list, from a trusted summary or a rebuild), and
// false when it keeps no such list (a full scan without one): a hint for
// the hook's backpressure that costs no second read of the summary.
func (ss *Tx) PendingCount() (int, bool) {
	if ss.held() != nil || ss.g.st == nil || !ss.g.st.pendKnown {
		return 0, false
	}
	return len(ss.g.st.pend), true
}
