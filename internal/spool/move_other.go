//go:build !linux

package spool

import (
	"context"
	"fmt"
	"runtime"
)

// Move is implemented on Linux only (it holds the spool's lock across a
// renameat2 between retained parent descriptors). Elsewhere it refuses
// before touching anything, saying so.
func Move(ctx context.Context, from, to string, want *Identity) (Identity, error) {
	return Identity{}, fmt.Errorf("%w: change-capture move-spool is not supported on this OS (%s); move spools on Linux, or export and re-enable", ErrMoveRefused, runtime.GOOS)
}
