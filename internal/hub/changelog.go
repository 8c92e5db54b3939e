package hub

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/klauspost/compress/gzip"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/hub/objects"
	"github.com/agentscm/agentscm/internal/hub/store"
)

// grantOf returns a Work's changelog grant: its own, else the default.
func grantOf(tx store.Tx, workID string) (api.Grant, error) {
	g, err := tx.ChangelogGrant(workID)
	if errors.Is(err, store.ErrNotFound) {
		return api.DefaultGrant(), nil
	}
	return g, err
}

// uploadPlan is what storing one increment would do, decided in a
// transaction.
type uploadPlan struct {
	repo   store.Repository
	work   store.Work
	grant  api.Grant
	used   api.GrantUsage // after the upload when it is stored
	status string
	old    *store.Increment // the increment a replacement removes
}

func grantRefusal(workID, bound string, used, want, max int64) error {
	return &api.Error{Status: http.StatusUnprocessableEntity, Code: api.CodeGrantExceeded, Reason: bound,
		Message: fmt.Sprintf("work %s's changelog grant allows %d %s; %d are stored and this increment needs %d more", workID, max, bound, used, want),
		Detail:  &api.ErrorDetail{WorkID: workID, Bound: bound, Used: used, Max: max, Want: want}}
}

// planUpload resolves the worktree's current Work (it must accept capture at
// the worktree's generation) and decides whether the increment is new, a
// duplicate, a replacement of the Work's latest one, or refused: a position
// (or, for a merged upload, its first merged position) past the first
// missing one, a position taken by another body, one the sequence passed
// (merged into a later increment), a merge overlapping held positions, or a
// grant bound.
func planUpload(tx store.Tx, p Principal, repository, worktree string, up api.IncrementUpload) (uploadPlan, error) {
	var pl uploadPlan
	repo, w, err := resolveWork(tx, p, repository, worktree)
	if err != nil {
		return pl, err
	}
	pl.repo, pl.work = repo, w
	if pl.grant, err = grantOf(tx, w.ID); err != nil {
		return pl, err
	}
	used, err := tx.ChangelogUsage(w.ID)
	if err != nil {
		return pl, err
	}
	last, err := tx.ChangelogLast(w.ID, worktree)
	if err != nil {
		return pl, err
	}
	old, err := tx.ChangelogIncrement(w.ID, worktree, up.Position)
	switch {
	case err == nil && old.Digest == up.Digest:
		pl.status, pl.used = api.IncrementDuplicate, used
		return pl, nil
	case err == nil && up.Position != last:
		return pl, &api.Error{Status: http.StatusConflict, Code: api.CodeConflict, Reason: api.ReasonPositionTaken,
			Message: fmt.Sprintf("work %s already holds another increment of worktree %s at position %d, and later ones", w.ID, worktree, up.Position),
			Detail:  &api.ErrorDetail{WorkID: w.ID}}
	case err == nil:
		pl.status, pl.old = api.IncrementReplaced, &old
		used.Objects--
		used.Bytes -= old.Size
	case errors.Is(err, store.ErrNotFound):
		// A merged upload fills the sequence from first: the positions
		// before its own have no increment of their own.
		first := up.Position - up.Merged
		switch {
		case up.Position <= last:
			return pl, &api.Error{Status: http.StatusConflict, Code: api.CodeConflict, Reason: api.ReasonPositionMerged,
				Message: fmt.Sprintf("work %s holds increments of worktree %s up to position %d without one at %d: a later increment carries its writes", w.ID, worktree, last, up.Position),
				Detail:  &api.ErrorDetail{WorkID: w.ID}}
		case first > last+1:
			next := last + 1
			return pl, &api.Error{Status: http.StatusConflict, Code: api.CodeConflict, Reason: api.ReasonIncrementsMissing,
				Message: fmt.Sprintf("work %s holds increments of worktree %s up to position %d; upload position %d first", w.ID, worktree, last, next),
				Detail:  &api.ErrorDetail{WorkID: w.ID, NextPosition: &next}}
		case first < last+1:
			return pl, &api.Error{Status: http.StatusConflict, Code: api.CodeConflict, Reason: api.ReasonMergeOverlaps,
				Message: fmt.Sprintf("work %s holds increments of worktree %s up to position %d; an upload at %d cannot also carry positions %d..%d", w.ID, worktree, last, up.Position, first, last),
				Detail:  &api.ErrorDetail{WorkID: w.ID}}
		}
		pl.status = api.IncrementStored
	default:
		return pl, err
	}
	if used.Objects+1 > pl.grant.MaxObjects {
		return pl, grantRefusal(w.ID, api.BoundObjects, used.Objects, 1, pl.grant.MaxObjects)
	}
	if up.Size > pl.grant.MaxBytes-used.Bytes { // no overflow: used.Bytes is capped, never above 2^63-1
		return pl, grantRefusal(w.ID, api.BoundBytes, used.Bytes, up.Size, pl.grant.MaxBytes)
	}
	pl.used = api.GrantUsage{Objects: used.Objects + 1, Bytes: used.Bytes + up.Size}
	return pl, nil
}

func checkUpload(worktree string, up api.IncrementUpload) error {
	if !api.ValidName(worktree) {
		return badf("worktree id is not valid")
	}
	if up.Position < 0 || up.Position > api.MaxIncrementPosition {
		return badf("position must be 0 to %d", api.MaxIncrementPosition)
	}
	if !api.IsDigest(up.Digest) {
		return badf("digest must be the SHA-256 of the body as 64 lowercase hex characters")
	}
	if up.Merged < 0 || up.Merged > up.Position {
		return badf("merged must be 0 to the position (%d)", up.Position)
	}
	if up.Session != "" {
		if e := api.CheckSessionID("session", up.Session); e != nil {
			return e
		}
	}
	if up.Size <= 0 {
		return api.Errorf(http.StatusLengthRequired, api.CodeBadRequest, "an increment upload needs a Content-Length of at least one byte")
	}
	if up.Size > api.MaxIncrementBytes {
		return api.Errorf(http.StatusRequestEntityTooLarge, api.CodeTooLarge, "increment of %d bytes exceeds the %d-byte bound of one increment", up.Size, int64(api.MaxIncrementBytes))
	}
	return nil
}

// UploadIncrement stores one changelog increment under the worktree's
// current Work. It refuses before reading the body what the grant or the
// positions already decide, then verifies that the body hashes to
// up.Digest and that its metadata names up.Position and up.Session, stores
// the object and records it, re-checking the grant under the write lock.
func (s *Service) UploadIncrement(ctx context.Context, p Principal, repository, worktree string, up api.IncrementUpload, body io.Reader) (api.IncrementStoreResult, error) {
	if err := checkUpload(worktree, up); err != nil {
		return api.IncrementStoreResult{}, err
	}
	if s.obj == nil {
		return api.IncrementStoreResult{}, api.Errorf(http.StatusServiceUnavailable, api.CodeUnavailable, "this Hub has no object storage")
	}
	var pl uploadPlan
	err := s.st.View(ctx, func(tx store.Tx) error {
		var err error
		pl, err = planUpload(tx, p, repository, worktree, up)
		return err
	})
	if err != nil {
		return api.IncrementStoreResult{}, internal(err)
	}
	result := func(pl uploadPlan) api.IncrementStoreResult {
		return api.IncrementStoreResult{Status: pl.status, WorkID: pl.work.ID, Generation: pl.work.Generation, Position: up.Position,
			Digest: up.Digest, Size: up.Size, Grant: pl.grant, Used: pl.used}
	}
	if pl.status == api.IncrementDuplicate {
		return result(pl), nil
	}
	b, err := fsutil.ReadBounded(body, up.Size)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) || errors.Is(err, fsutil.ErrTooLarge) {
			return api.IncrementStoreResult{}, api.Errorf(http.StatusRequestEntityTooLarge, api.CodeTooLarge, "increment body is longer than its declared %d bytes", up.Size)
		}
		return api.IncrementStoreResult{}, badf("read increment body: %v", err)
	}
	if int64(len(b)) != up.Size {
		return api.IncrementStoreResult{}, badf("increment body has %d bytes, not the declared %d", len(b), up.Size)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != up.Digest {
		return api.IncrementStoreResult{}, api.Errorf(http.StatusBadRequest, api.CodeDigestMismatch, "increment body hashes to %s, not the digest %s given", got, up.Digest)
	}
	meta, err := incmeta.ReadFrom(bytes.NewReader(b))
	if err != nil {
		return api.IncrementStoreResult{}, api.Errorf(http.StatusUnprocessableEntity, api.CodeBadIncrement, "not a changelog increment: %v", err)
	}
	if meta.Position != up.Position || meta.SessionID != up.Session {
		return api.IncrementStoreResult{}, api.Errorf(http.StatusUnprocessableEntity, api.CodeBadIncrement,
			"the increment's metadata names position %d of session %q, not position %d of session %q", meta.Position, meta.SessionID, up.Position, up.Session)
	}
	if err := meta.CheckMerged(); err != nil || meta.Position-meta.MergedFrom() != up.Merged {
		return api.IncrementStoreResult{}, api.Errorf(http.StatusUnprocessableEntity, api.CodeBadIncrement,
			"the increment's metadata merges positions %d..%d, not the %d before position %d the upload says (%v)", meta.MergedFrom(), meta.Position-1, up.Merged, up.Position, err)
	}
	// The increment unpacks within the grant, as an apply requires: a
	// small body must not inflate past it (checked before it is stored).
	if n, err := unpackedSize(b, pl.grant.MaxBytes); err != nil {
		return api.IncrementStoreResult{}, api.Errorf(http.StatusUnprocessableEntity, api.CodeBadIncrement, "not a changelog increment: %v", err)
	} else if n > pl.grant.MaxBytes {
		return api.IncrementStoreResult{}, &api.Error{Status: http.StatusUnprocessableEntity, Code: api.CodeGrantExceeded, Reason: api.BoundUnpackedBytes,
			Message: fmt.Sprintf("work %s's changelog grant allows %d bytes; this increment unpacks to more than that", pl.work.ID, pl.grant.MaxBytes),
			Detail:  &api.ErrorDetail{WorkID: pl.work.ID, Bound: api.BoundUnpackedBytes, Max: pl.grant.MaxBytes, Want: n}}
	}
	if err := s.obj.Put(ctx, up.Digest, bytes.NewReader(b), up.Size); err != nil {
		return api.IncrementStoreResult{}, internal(fmt.Errorf("store increment object: %w", err))
	}
	tool := meta.Tool
	if len(tool) > api.MaxIDLen {
		tool = tool[:api.MaxIDLen]
	}
	var dropped string
	err = s.st.Update(ctx, func(tx store.Tx) error {
		var err error
		dropped = ""
		if pl, err = planUpload(tx, p, repository, worktree, up); err != nil || pl.status == api.IncrementDuplicate {
			return err
		}
		if err := tx.PutChangelogIncrement(store.Increment{WorkID: pl.work.ID, Position: up.Position, Digest: up.Digest, Size: up.Size,
			Session: up.Session, Generation: pl.work.Generation, WorktreeID: worktree, Kind: meta.Kind, Tool: tool, Failed: meta.Failed,
			StoredAt: s.now()}); err != nil {
			return err
		}
		if pl.old != nil && pl.old.Digest != up.Digest {
			if n, err := tx.IncrementDigestRefs(pl.old.Digest); err != nil {
				return err
			} else if n == 0 {
				dropped = pl.old.Digest
			}
		}
		return nil
	})
	if err != nil {
		return api.IncrementStoreResult{}, internal(err)
	}
	if dropped != "" {
		// Best effort: an object no increment names any more. A concurrent
		// upload of the same bytes stores it again (Put is idempotent).
		_ = s.obj.Delete(ctx, dropped)
	}
	return result(pl), nil
}

// SetGrant sets a Work's changelog grant. Lowering it below what is stored
// keeps the stored increments and refuses further ones.
func (s *Service) SetGrant(ctx context.Context, p Principal, repository, id string, req api.GrantRequest) (api.GrantView, error) {
	g := api.Grant(req)
	if err := g.Validate(); err != nil {
		return api.GrantView{}, err
	}
	var out api.GrantView
	err := s.st.Update(ctx, func(tx store.Tx) error {
		_, w, err := authorizedWork(tx, p, repository, id, true)
		if err != nil {
			return err
		}
		if err := tx.SetChangelogGrant(w.ID, g, s.now()); err != nil {
			return err
		}
		u, err := tx.ChangelogUsage(w.ID)
		out = api.GrantView{WorkID: w.ID, Grant: g, Used: u}
		return err
	})
	return out, internal(err)
}

func incrementInfo(i store.Increment) api.IncrementInfo {
	return api.IncrementInfo{Position: i.Position, Digest: i.Digest, Size: i.Size, Session: i.Session, Generation: i.Generation,
		WorktreeID: i.WorktreeID, Kind: i.Kind, Tool: i.Tool, Failed: i.Failed, StoredAt: i.StoredAt}
}

// ListIncrements lists a Work's stored increments, of one worktree's
// sequence when worktree is not empty, by worktree and position, with the
// Work's grant and usage.
func (s *Service) ListIncrements(ctx context.Context, p Principal, repository, id, worktree string) (api.IncrementList, error) {
	if worktree != "" && !api.ValidName(worktree) {
		return api.IncrementList{}, badf("worktree id is not valid")
	}
	var out api.IncrementList
	err := s.st.View(ctx, func(tx store.Tx) error {
		_, w, err := authorizedWork(tx, p, repository, id, false)
		if err != nil {
			return err
		}
		if out.Grant, err = grantOf(tx, w.ID); err != nil {
			return err
		}
		if out.Used, err = tx.ChangelogUsage(w.ID); err != nil {
			return err
		}
		incs, err := tx.ChangelogIncrements(w.ID)
		if err != nil {
			return err
		}
		out.WorkID = w.ID
		out.Increments = []api.IncrementInfo{}
		for _, i := range incs {
			if worktree == "" || i.WorktreeID == worktree {
				out.Increments = append(out.Increments, incrementInfo(i))
			}
		}
		return nil
	})
	return out, internal(err)
}

// GetIncrement returns the bytes of a Work's increment at position of a
// worktree's sequence, verified against its digest. An empty worktree
// names the Work's only sequence; with several it is a 409.
func (s *Service) GetIncrement(ctx context.Context, p Principal, repository, id, worktree string, position int) (api.IncrementInfo, []byte, error) {
	if position < 0 || position > api.MaxIncrementPosition {
		return api.IncrementInfo{}, nil, badf("position must be 0 to %d", api.MaxIncrementPosition)
	}
	if worktree != "" && !api.ValidName(worktree) {
		return api.IncrementInfo{}, nil, badf("worktree id is not valid")
	}
	if s.obj == nil {
		return api.IncrementInfo{}, nil, api.Errorf(http.StatusServiceUnavailable, api.CodeUnavailable, "this Hub has no object storage")
	}
	var inc store.Increment
	err := s.st.View(ctx, func(tx store.Tx) error {
		_, w, err := authorizedWork(tx, p, repository, id, false)
		if err != nil {
			return err
		}
		if worktree == "" {
			all, err := tx.ChangelogIncrements(w.ID)
			if err != nil {
				return err
			}
			seqs := map[string]bool{}
			var names []string
			for _, i := range all {
				if !seqs[i.WorktreeID] {
					seqs[i.WorktreeID] = true
					names = append(names, i.WorktreeID)
				}
			}
			if len(names) > 1 {
				return &api.Error{Status: http.StatusConflict, Code: api.CodeConflict, Reason: "several_sequences",
					Message: fmt.Sprintf("work %s holds the changelogs of %d worktrees (%s); name one with ?worktree=", w.ID, len(names), strings.Join(names, ", "))}
			}
			if len(names) == 1 {
				worktree = names[0]
			}
		}
		inc, err = tx.ChangelogIncrement(w.ID, worktree, position)
		if errors.Is(err, store.ErrNotFound) {
			return api.Errorf(http.StatusNotFound, api.CodeNotFound, "work %s has no increment at position %d", w.ID, position)
		}
		return err
	})
	if err != nil {
		return api.IncrementInfo{}, nil, internal(err)
	}
	b, err := s.obj.Get(ctx, inc.Digest, inc.Size)
	if err != nil {
		if errors.Is(err, objects.ErrNotFound) || errors.Is(err, objects.ErrDigest) {
			return api.IncrementInfo{}, nil, internal(fmt.Errorf("increment %d of work %s (object %s): %w", position, id, inc.Digest, err))
		}
		return api.IncrementInfo{}, nil, internal(err)
	}
	return incrementInfo(inc), b, nil
}

// unpackedSize is how many bytes the first gzip member of b decompresses to
// (what an apply reads), counting no further than max+1.
func unpackedSize(b []byte, max int64) (int64, error) {
	gz, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	defer gz.Close()
	gz.Multistream(false)
	return io.Copy(io.Discard, io.LimitReader(gz, max+1))
}
