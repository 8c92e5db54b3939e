package capture

import (
	"context"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/source"
	"github.com/agentscm/agentscm/internal/spool"
)

// The source binding lives in internal/source; these names keep the
// capture package's call sites short.

// sourceOptions tunes a capture on the hook path (source.Options).
type sourceOptions struct {
	treeCache string
	noTree    bool
	// baseRef is the binding's base ref (the merge-base).
	baseRef string
	// store, when set, retains a dirty or transformed checkout's working
	// bytes and manifest in the spool (under the held lock); nil: digest
	// only, and the binding names bytes_not_retained.
	store *spool.Session
}

// CaptureSource binds the source of the checkout at root (source.CaptureSource).
func CaptureSource(ctx context.Context, root string) (*event.SourceBinding, error) {
	return source.CaptureSource(ctx, root)
}

func captureSource(ctx context.Context, root string, o sourceOptions) (*event.SourceBinding, error) {
	so := source.Options{TreeCache: o.treeCache, NoTree: o.noTree, BaseRef: o.baseRef}
	if o.store != nil {
		so.Store = o.store
	}
	return source.Capture(ctx, root, so)
}

func sourceDrift(start, now *event.SourceBinding) string { return source.Drift(start, now) }
