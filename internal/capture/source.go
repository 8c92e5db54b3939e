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
	// stage, when set (and store is not), writes those bytes without the
	// lock into the spool's staging directory (the intake path); the
	// admitting lock holder retains them (admitStagedSource).
	stage *spool.Staging
}

// CaptureSource binds the source of the checkout at root (source.CaptureSource).
func CaptureSource(ctx context.Context, root string) (*event.SourceBinding, error) {
	return source.CaptureSource(ctx, root)
}

func captureSource(ctx context.Context, root string, o sourceOptions) (*event.SourceBinding, error) {
	so := source.Options{TreeCache: o.treeCache, NoTree: o.noTree, BaseRef: o.baseRef}
	if o.store != nil {
		so.Store = o.store
	} else if o.stage != nil {
		so.Store = o.stage
	}
	sb, err := source.Capture(ctx, root, so)
	if o.store == nil && o.stage != nil {
		sb = source.Staged(sb) // retained once admitted (admitStagedSource)
	}
	return sb, err
}

func sourceDrift(start, now *event.SourceBinding) string { return source.Drift(start, now) }

// admitStagedSource retains, under the held lock, the working bytes an
// intake hook staged for the binding it took at receipt, and returns the
// binding to record (source.Admit: a limit's refusal or a lost blob is
// named in it, never claimed retained).
func admitStagedSource(ss *spool.Session, sb *event.SourceBinding) *event.SourceBinding {
	return source.Admit(ss, sb)
}
