package capture

import (
	"context"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/source"
)

// The source binding lives in internal/source; these names keep the
// capture package's call sites unchanged.

// sourceOptions tunes a capture on the hook path (source.Options).
type sourceOptions struct {
	treeCache string
	noTree    bool
}

// CaptureSource binds the source of the checkout at root (source.CaptureSource).
func CaptureSource(ctx context.Context, root string) (*event.SourceBinding, error) {
	return source.CaptureSource(ctx, root)
}

func captureSource(ctx context.Context, root string, o sourceOptions) (*event.SourceBinding, error) {
	return source.Capture(ctx, root, source.Options{TreeCache: o.treeCache, NoTree: o.noTree})
}

func sourceDrift(start, now *event.SourceBinding) string { return source.Drift(start, now) }
