package sqlstore

// NextGroup waits for the first operation on ops, then takes the others
// already waiting, up to max in all, so that one transaction commits them
// together. ok is false when quit closed first.
func NextGroup[T any](ops <-chan T, quit <-chan struct{}, max int) (group []T, ok bool) {
	select {
	case first := <-ops:
		group = append(group, first)
	case <-quit:
		return nil, false
	}
	for len(group) < max {
		select {
		case op := <-ops:
			group = append(group, op)
		default:
			return group, true
		}
	}
	return group, true
}
