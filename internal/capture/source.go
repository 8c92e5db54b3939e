package capture

import (
	"context"
	"crypto/sha256"

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
	store *spool.Tx
	// stage, when set (and store is not), keeps those bytes without the
	// lock for the intake record (intakeStore: in the record, or staged in
	// the spool); the admitting lock holder retains them
	// (admitStagedSource).
	stage *intakeStore
}

// inlineBlobBytes bounds the new bytes one intake record keeps itself
// (base64 in its JSON, well within spool.MaxIntakeBytes); past it, new
// blobs are staged as files of their own.
const inlineBlobBytes = 64 << 10

// intakeStore keeps the bytes a capture at receipt binds, without the
// spool lock: bytes the spool already holds (retained or staged) cost
// nothing; new ones, up to inlineBlobBytes in all, go into the intake
// record itself (durable with it, no file or fsync of their own); larger
// ones, and those past the budget, are staged (spool.Staging, whose
// directory sync overlaps the intake write).
type intakeStore struct {
	sp     *spool.Spool
	stage  *spool.Staging
	limit  int64 // the per-artifact limit; larger blobs go to the staging store, which refuses them
	budget int
	inline []intakeBlob
	seen   map[[32]byte]bool
}

// newIntakeStore is an intake store of sp; a clean checkout never calls
// it, so it reads nothing until the first blob.
func newIntakeStore(sp *spool.Spool) *intakeStore {
	return &intakeStore{sp: sp, stage: sp.DeferredStaging(), limit: -1, budget: inlineBlobBytes, seen: map[[32]byte]bool{}}
}

// PutBlobs keeps blobs (source.BlobStore); the identities are not used.
func (s *intakeStore) PutBlobs(blobs []spool.Blob) ([]event.ArtifactRef, error) {
	if s.limit < 0 {
		limit, err := s.sp.ArtifactLimit()
		if err != nil {
			limit = 0 // everything goes to the staging store, which says why
		}
		s.limit = limit
	}
	var rest []spool.Blob
	for _, b := range blobs {
		sum := sha256.Sum256(b.Data)
		if s.seen[sum] {
			continue
		}
		s.seen[sum] = true
		if int64(len(b.Data)) > s.limit || len(b.Data) > s.budget {
			rest = append(rest, b)
			continue
		}
		if s.sp.HasBlob(b.Data) {
			continue
		}
		s.inline = append(s.inline, intakeBlob{MediaType: b.MediaType, Data: b.Data})
		s.budget -= len(b.Data)
	}
	if len(rest) == 0 {
		return nil, nil
	}
	return s.stage.PutBlobs(rest)
}

// spill stages the inline blobs instead (a record too large with them).
func (s *intakeStore) spill() error {
	if len(s.inline) == 0 {
		return nil
	}
	blobs := make([]spool.Blob, len(s.inline))
	for i, b := range s.inline {
		blobs[i] = spool.Blob{MediaType: b.MediaType, Data: b.Data}
	}
	s.inline = nil
	_, err := s.stage.PutBlobs(blobs)
	return err
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

// admitStagedSource retains, under the held lock, the working bytes an
// intake hook staged for the binding it took at receipt, and returns the
// binding to record (source.Admit: a limit's refusal or a lost blob is
// named in it, never claimed retained).
func admitStagedSource(ss *spool.Tx, sb *event.SourceBinding, inline []intakeBlob) *event.SourceBinding {
	blobs := make([]spool.Blob, len(inline))
	for i, b := range inline {
		blobs[i] = spool.Blob{MediaType: b.MediaType, Data: b.Data}
	}
	return source.Admit(ss, sb, blobs)
}
