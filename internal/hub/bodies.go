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
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/hub/objects"
	"github.com/agentscm/agentscm/internal/hub/store"
)

// Shared conversation bodies on the Hub: each human's declaration of a body
// in a Work is its own row (declared with the event that carries it),
// uploaded after the event was accepted, readable by its author and Hub
// admins only, and swept when its retention ends.

// Retention sweep bounds (the seed's "Retention and deletion").
const (
	// SweepInterval is how often a serving Hub sweeps.
	SweepInterval = 10 * time.Minute
	// SweepBatch is how many due declarations (and, then, pending object
	// removals) one batch handles.
	SweepBatch = 100
	// SweepBudget bounds one pass; the rest waits for the next pass.
	SweepBudget = 30 * time.Second
	// RemovalRetry is the first wait after a failed object removal; each
	// further failure doubles it, to at most RemovalRetryMax.
	RemovalRetry    = time.Hour
	RemovalRetryMax = 24 * time.Hour
	// sweepLease is how long one Hub process holds the sweep: longer than
	// a pass, so a crashed runner's lease simply expires.
	sweepLease = 2 * time.Minute
	// removalClaim is how long a removal in progress is hidden from other
	// processes, so no object is removed twice at once.
	removalClaim = 5 * time.Minute
)

// sweepLeaseName is the lease row of the retention sweep.
const sweepLeaseName = "body_sweep"

func errBodyForbidden(digest string) error {
	// The same answer whether or not the digest exists.
	return api.Errorf(http.StatusForbidden, api.CodeForbidden, "no access to body %s in this work", digest)
}

func bodyGone(b store.Body) error {
	return &api.Error{Status: http.StatusGone, Code: api.CodeNotFound, Reason: api.ReasonBodyGone,
		Message: fmt.Sprintf("body %s was %s at %s", b.Digest, b.State, time.Unix(b.EndedAt, 0).UTC().Format(time.RFC3339))}
}

func bodyNotUploaded(digest string) error {
	return &api.Error{Status: http.StatusNotFound, Code: api.CodeNotFound, Reason: api.ReasonBodyNotUploaded,
		Message: fmt.Sprintf("body %s is declared but not uploaded (it is on its author's machine only)", digest)}
}

// readRank orders copies for a read: available, then not yet uploaded,
// then tombstones.
func readRank(state string) int {
	switch {
	case state == api.BodyAvailable:
		return 0
	case tombstoned(state):
		return 2
	}
	return 1
}

func tombstoned(state string) bool { return state == api.BodyExpired || state == api.BodyDeleted }

func (s *Service) retention() int64 { return int64(s.cfg.RetentionDays) * 86400 }

// declareBody records the declaration an accepted envelope carries and
// returns its state. A shared-approved body of a session that was not in
// shared-conversation mode is refused: it stays a local declaration and
// never uploads. Identical bodies from one author in one Work share the
// first declaration (and its expiry).
func (s *Service) declareBody(tx store.Tx, p Principal, w *store.Work, sc store.Scope, d *api.BodyDeclaration) (string, error) {
	b := store.Body{WorkID: w.ID, HumanID: p.HumanID, Digest: d.Digest, RepositoryID: w.RepositoryID, Bytes: d.Bytes,
		MediaType: d.MediaType, Retention: d.Retention, State: api.BodyLocal, Generation: sc.Generation, Session: sc.Session,
		Identity: sc.Identity, DeclaredAt: sc.ReceivedAt, ExpiresAt: sc.ReceivedAt + s.retention()}
	status := "declared_local"
	switch {
	case d.Retention != api.RetentionSharedApproved:
	case d.CaptureMode != "shared-conversation":
		b.Retention = api.RetentionLocalPrivate
		status = api.ReasonBodyNotShared
	case d.Availability == api.BodyRetained:
		b.State, status = api.BodyAwaitingUpload, "declared"
	}
	err := tx.InsertBody(b)
	if errors.Is(err, store.ErrExists) {
		return "shares_first_declaration", nil
	}
	return status, err
}

func entryOf(tx store.Tx, b store.Body) api.BodyEntry {
	return api.BodyEntry{Digest: b.Digest, Bytes: b.Bytes, MediaType: b.MediaType, Retention: b.Retention, State: b.State,
		Author: humanName(tx, b.HumanID), Generation: b.Generation, Session: b.Session, DeclaredAt: b.DeclaredAt,
		UploadedAt: b.UploadedAt, ExpiresAt: b.ExpiresAt, EndedAt: b.EndedAt}
}

// bodyReader is whose declarations p may see: its own human's, or (a Hub
// admin) everyone's ("").
func bodyReader(p Principal) string {
	if p.Admin {
		return ""
	}
	return p.HumanID
}

// ListBodies lists a Work's body declarations: the caller's own (a Hub
// admin sees all).
func (s *Service) ListBodies(ctx context.Context, p Principal, repository, workID string) (api.BodyList, error) {
	out := api.BodyList{WorkID: workID, Bodies: []api.BodyEntry{}, SharedConversationRetentionDays: s.cfg.RetentionDays}
	err := s.st.View(ctx, func(tx store.Tx) error {
		_, w, err := authorizedWork(tx, p, repository, workID, false)
		if err != nil {
			return err
		}
		if !p.Admin && p.HumanID == "" {
			return nil
		}
		rows, total, err := tx.ListBodies(w.ID, bodyReader(p), api.MaxListedBodies)
		if err != nil {
			return err
		}
		for _, b := range rows {
			out.Bodies = append(out.Bodies, entryOf(tx, b))
		}
		out.Omitted = total - len(rows)
		return nil
	})
	return out, internal(err)
}

// MissingBodies answers which of the caller's declared bodies the Hub lacks:
// of the digests asked about, those awaiting an upload, and up to
// api.MaxReuploadHints other declarations of the caller in the Work whose
// object was found missing.
func (s *Service) MissingBodies(ctx context.Context, p Principal, repository, workID string, req api.MissingBodiesRequest) (api.MissingBodiesResult, error) {
	out := api.MissingBodiesResult{Missing: []api.MissingBody{}}
	if err := req.Validate(); err != nil {
		return out, err
	}
	err := s.st.View(ctx, func(tx store.Tx) error {
		_, w, err := authorizedWork(tx, p, repository, workID, true)
		if err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, d := range req.Digests {
			b, err := tx.Body(w.ID, p.HumanID, d)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			if b.State == api.BodyAwaitingUpload && !seen[d] {
				seen[d] = true
				out.Missing = append(out.Missing, api.MissingBody{Digest: d, Bytes: b.Bytes})
			}
		}
		hints, err := tx.ReuploadBodies(w.ID, p.HumanID, api.MaxReuploadHints)
		if err != nil {
			return err
		}
		for _, b := range hints {
			if !seen[b.Digest] {
				seen[b.Digest] = true
				out.Missing = append(out.Missing, api.MissingBody{Digest: b.Digest, Bytes: b.Bytes})
			}
		}
		return nil
	})
	return out, internal(err)
}

// UploadBody stores the bytes of one of the caller's shared-approved
// declarations. The retention deadline is set at the first upload; a
// re-upload after the object was found missing keeps it.
func (s *Service) UploadBody(ctx context.Context, p Principal, repository, workID, digest string, size int64, r io.Reader) (api.BodyUploadResult, error) {
	out := api.BodyUploadResult{Digest: digest}
	if !api.IsDigest(digest) {
		return out, badf("digest must be 64 lowercase hex characters")
	}
	if size < 0 {
		return out, api.Errorf(http.StatusLengthRequired, api.CodeBadRequest, "a body upload needs a Content-Length")
	}
	if size > api.MaxBodyBytes {
		return out, api.Errorf(http.StatusRequestEntityTooLarge, api.CodeTooLarge, "a shared body is at most %d bytes, not %d", api.MaxBodyBytes, size)
	}
	var decl store.Body
	err := s.st.View(ctx, func(tx store.Tx) error {
		_, w, err := authorizedWork(tx, p, repository, workID, true)
		if err != nil {
			return err
		}
		decl, err = tx.Body(w.ID, p.HumanID, digest)
		if errors.Is(err, store.ErrNotFound) {
			return errBodyForbidden(digest)
		}
		return err
	})
	if err != nil {
		return out, internal(err)
	}
	switch {
	case tombstoned(decl.State):
		return out, bodyGone(decl)
	case decl.State == api.BodyLocal:
		return out, &api.Error{Status: http.StatusConflict, Code: api.CodeConflict, Reason: api.ReasonBodyNotShared,
			Message: fmt.Sprintf("body %s is declared %s and never leaves its author's machine", digest, decl.Retention)}
	case decl.State == api.BodyAvailable:
		if ok, err := s.obj.Has(ctx, digest); err == nil && ok {
			out.Status, out.ExpiresAt = api.BodyAlreadyAvailable, decl.ExpiresAt
			return out, nil
		}
		// Available, but the object is gone: store it again below.
	}
	if size != decl.Bytes {
		return out, badf("body %s was declared with %d bytes, not %d", digest, decl.Bytes, size)
	}
	b, err := fsutil.ReadBounded(r, api.MaxBodyBytes)
	if err != nil {
		return out, api.Errorf(http.StatusRequestEntityTooLarge, api.CodeTooLarge, "read body: %v", err)
	}
	sum := sha256.Sum256(b)
	if int64(len(b)) != decl.Bytes || hex.EncodeToString(sum[:]) != digest {
		return out, badf("the uploaded bytes do not match body %s as declared (%d bytes)", digest, decl.Bytes)
	}
	if err := s.obj.Put(ctx, digest, bytes.NewReader(b), api.MaxBodyBytes); err != nil {
		return out, internal(fmt.Errorf("store body object: %w", err))
	}
	now := s.now()
	err = s.st.Update(ctx, func(tx store.Tx) error {
		cur, err := tx.Body(decl.WorkID, decl.HumanID, digest)
		if err != nil {
			return err
		}
		switch {
		case tombstoned(cur.State):
			return bodyGone(cur) // deleted meanwhile: the sweep's removal takes the object
		case cur.State == api.BodyAvailable:
			out.Status, out.ExpiresAt = api.BodyStored, cur.ExpiresAt
			return nil
		}
		if cur.UploadedAt == 0 {
			cur.ExpiresAt = now + s.retention()
		}
		cur.State, cur.UploadedAt = api.BodyAvailable, now
		out.Status, out.ExpiresAt = api.BodyStored, cur.ExpiresAt
		return tx.UpdateBody(cur)
	})
	return out, internal(err)
}

// GetBody returns a body the caller may read: its own declaration's (a Hub
// admin: any author's). Anyone else gets 403, whether or not the digest
// exists; a tombstoned body answers 410; an available copy whose object is
// missing returns to awaiting upload (404 body_not_uploaded) so the
// checkout uploads it again.
func (s *Service) GetBody(ctx context.Context, p Principal, repository, workID, digest string) (api.BodyEntry, []byte, error) {
	var entry api.BodyEntry
	var decl store.Body
	if !api.IsDigest(digest) {
		return entry, nil, badf("digest must be 64 lowercase hex characters")
	}
	err := s.st.View(ctx, func(tx store.Tx) error {
		_, w, err := authorizedWork(tx, p, repository, workID, false)
		if err != nil {
			return err
		}
		rows, err := bodyRows(tx, p, w.ID, digest)
		if err != nil {
			return err
		}
		// Prefer an available copy, then one awaiting upload, then a
		// tombstone.
		decl = rows[0]
		for _, b := range rows[1:] {
			if readRank(b.State) < readRank(decl.State) {
				decl = b
			}
		}
		entry = entryOf(tx, decl)
		return nil
	})
	if err != nil {
		return entry, nil, internal(err)
	}
	switch {
	case tombstoned(decl.State):
		return entry, nil, bodyGone(decl)
	case decl.State != api.BodyAvailable:
		return entry, nil, bodyNotUploaded(digest)
	}
	b, err := s.obj.Get(ctx, digest, api.MaxBodyBytes)
	if errors.Is(err, objects.ErrNotFound) {
		if err := s.objectLost(ctx, decl.WorkID, digest); err != nil {
			return entry, nil, internal(err)
		}
		return entry, nil, bodyNotUploaded(digest)
	}
	if err != nil {
		return entry, nil, internal(fmt.Errorf("read body object: %w", err))
	}
	return entry, b, nil
}

// objectLost returns the Work's available copies of a digest whose object
// is missing to awaiting upload.
func (s *Service) objectLost(ctx context.Context, workID, digest string) error {
	return s.st.Update(ctx, func(tx store.Tx) error {
		rows, err := tx.BodiesOfDigest(workID, digest)
		if err != nil {
			return err
		}
		for _, b := range rows {
			if b.State == api.BodyAvailable {
				b.State = api.BodyAwaitingUpload
				if err := tx.UpdateBody(b); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// DeleteBody deletes a body now: the caller's own declaration, or (a Hub
// admin) every author's in the Work. It needs a read-write token. The
// tombstone is recorded first; the object is then removed unless another
// available copy needs it (a failed removal is retried by the sweep).
func (s *Service) DeleteBody(ctx context.Context, p Principal, repository, workID, digest string) (api.BodyDeleteResult, error) {
	out := api.BodyDeleteResult{Digest: digest}
	if !api.IsDigest(digest) {
		return out, badf("digest must be 64 lowercase hex characters")
	}
	now := s.now()
	remove := false
	err := s.st.Update(ctx, func(tx store.Tx) error {
		out.Deleted, remove = 0, false
		_, w, err := authorizedWork(tx, p, repository, workID, false)
		if err != nil {
			return err
		}
		rows, err := bodyRows(tx, p, w.ID, digest)
		if err != nil {
			return err
		}
		// Only after access is settled: a read-only token may read, not
		// delete.
		if !canWrite(p) {
			return errReadOnly
		}
		var gone store.Body
		for _, b := range rows {
			if tombstoned(b.State) {
				gone = b
				continue
			}
			if b.State == api.BodyAvailable {
				remove = true
			}
			b.State, b.EndedAt = api.BodyDeleted, now
			if err := tx.UpdateBody(b); err != nil {
				return err
			}
			out.Deleted++
		}
		if out.Deleted == 0 {
			return bodyGone(gone)
		}
		if remove {
			return queueRemoval(tx, digest, now)
		}
		return nil
	})
	if err != nil {
		return out, internal(err)
	}
	if remove {
		// The tombstone is committed; a failed removal is recorded with
		// its backoff and is the sweep's to retry.
		s.removeObject(ctx, digest)
	}
	return out, nil
}

// queueRemoval records that a digest's object may have to go (once no
// available copy needs it), keeping the backoff of a removal already
// pending.
func queueRemoval(tx store.Tx, digest string, now int64) error {
	r, err := tx.BodyRemoval(digest)
	if errors.Is(err, store.ErrNotFound) {
		r = store.BodyRemoval{Digest: digest}
	} else if err != nil {
		return err
	}
	r.NextAt = min(r.NextAt, now)
	if r.NextAt == 0 {
		r.NextAt = now
	}
	return tx.PutBodyRemoval(r)
}

// Removal outcomes.
const (
	removalDone    = "removed"
	removalKept    = "kept"    // another available copy (or an increment) needs the object
	removalRetry   = "retry"   // the removal failed; retried after the backoff
	removalSkipped = "skipped" // no longer pending or not yet due (another process)
)

// removeObject performs one pending removal: it claims it in a
// transaction (so no other Hub process removes the same object at once),
// keeps the object when another available copy needs it, else removes it;
// a failure is retried after 1 hour, doubling to at most a day.
func (s *Service) removeObject(ctx context.Context, digest string) (string, error) {
	now := s.now()
	var claimed store.BodyRemoval
	outcome := ""
	err := s.st.Update(ctx, func(tx store.Tx) error {
		outcome = ""
		r, err := tx.BodyRemoval(digest)
		if errors.Is(err, store.ErrNotFound) {
			outcome = removalSkipped
			return nil
		}
		if err != nil {
			return err
		}
		if r.NextAt > now {
			outcome = removalSkipped
			return nil
		}
		copies, err := tx.AvailableBodyCopies(digest)
		if err != nil {
			return err
		}
		refs, err := tx.IncrementDigestRefs(digest)
		if err != nil {
			return err
		}
		if copies > 0 || refs > 0 {
			outcome = removalKept
			return tx.DeleteBodyRemoval(digest)
		}
		claimed = r
		r.NextAt = now + int64(removalClaim/time.Second)
		return tx.PutBodyRemoval(r)
	})
	if err != nil || outcome != "" {
		return outcome, err
	}
	if derr := s.obj.Delete(ctx, digest); derr != nil {
		backoff := int64(RemovalRetry / time.Second)
		if claimed.Backoff > 0 {
			backoff = min(2*claimed.Backoff, int64(RemovalRetryMax/time.Second))
		}
		msg := derr.Error()
		if len(msg) > 300 {
			msg = msg[:300]
		}
		err := s.st.Update(ctx, func(tx store.Tx) error {
			return tx.PutBodyRemoval(store.BodyRemoval{Digest: digest, NextAt: now + backoff, Backoff: backoff,
				Attempts: claimed.Attempts + 1, LastError: msg})
		})
		return removalRetry, errors.Join(fmt.Errorf("remove body object %s: %w", digest, derr), err)
	}
	err = s.st.Update(ctx, func(tx store.Tx) error { return tx.DeleteBodyRemoval(digest) })
	return removalDone, err
}

// SweepResult reports one retention pass.
type SweepResult struct {
	// Skipped is true when another Hub process holds the sweep's lease.
	Skipped bool `json:"skipped,omitempty"`
	// Expired counts the declarations that reached the end of retention.
	Expired int `json:"expired"`
	// Removed, Kept and Failed count the object removals performed, kept
	// for another available copy, and failed (retried later).
	Removed int `json:"removed"`
	Kept    int `json:"kept"`
	Failed  int `json:"failed"`
	// More is true when the pass stopped at its time budget with work due.
	More bool `json:"more,omitempty"`
}

// Sweep runs one retention pass: it expires due declarations (a tombstone
// first) and performs due object removals, in batches of SweepBatch until
// none are due or SweepBudget is spent. Only the Hub process holding the
// sweep's lease sweeps; the others skip, and a crashed runner's lease
// expires after sweepLease.
func (s *Service) Sweep(ctx context.Context) (SweepResult, error) {
	var res SweepResult
	start := time.Now()
	lease := func() (bool, error) {
		now := s.now()
		var held bool
		err := s.st.Update(ctx, func(tx store.Tx) error {
			var err error
			held, err = tx.AcquireLease(sweepLeaseName, s.instance, now, now+int64(sweepLease/time.Second))
			return err
		})
		return held, err
	}
	held, err := lease()
	if err != nil || !held {
		res.Skipped = err == nil
		return res, internal(err)
	}
	defer s.st.Update(context.WithoutCancel(ctx), func(tx store.Tx) error { return tx.ReleaseLease(sweepLeaseName, s.instance) })
	var errs []error
	for {
		if time.Since(start) >= SweepBudget {
			res.More = true
			break
		}
		if held, err := lease(); err != nil || !held {
			return res, internal(err) // lost the lease: another process sweeps on
		}
		now := s.now()
		var due []store.Body
		err := s.st.Update(ctx, func(tx store.Tx) error {
			var err error
			if due, err = tx.DueBodies(now, SweepBatch); err != nil {
				return err
			}
			for _, b := range due {
				wasAvailable := b.State == api.BodyAvailable
				b.State, b.EndedAt = api.BodyExpired, now
				if err := tx.UpdateBody(b); err != nil {
					return err
				}
				if wasAvailable {
					if err := queueRemoval(tx, b.Digest, now); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			return res, internal(err)
		}
		res.Expired += len(due)
		var removals []store.BodyRemoval
		if err := s.st.View(ctx, func(tx store.Tx) error {
			var err error
			removals, err = tx.DueBodyRemovals(now, SweepBatch)
			return err
		}); err != nil {
			return res, internal(err)
		}
		for _, r := range removals {
			if time.Since(start) >= SweepBudget {
				break
			}
			outcome, err := s.removeObject(ctx, r.Digest)
			switch outcome {
			case removalDone:
				res.Removed++
			case removalKept:
				res.Kept++
			case removalRetry:
				res.Failed++
			}
			if err != nil {
				if ctx.Err() != nil {
					return res, ctx.Err()
				}
				errs = append(errs, err)
			}
		}
		if len(due) < SweepBatch && len(removals) < SweepBatch {
			break
		}
	}
	if len(errs) > 0 {
		// Failed removals wait for their retry; the pass itself succeeded.
		return res, fmt.Errorf("%d object removals failed and are retried later; first: %w", len(errs), errs[0])
	}
	return res, nil
}

// RunSweeper sweeps at once and then every interval (SweepInterval when
// zero) until ctx ends, logging each pass's errors to logf.
func (s *Service) RunSweeper(ctx context.Context, interval time.Duration, logf func(format string, a ...any)) {
	if interval <= 0 {
		interval = SweepInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		res, err := s.Sweep(ctx)
		if err != nil && ctx.Err() == nil && logf != nil {
			logf("retention sweep: %v", err)
		} else if logf != nil && (res.Expired > 0 || res.Removed > 0 || res.Failed > 0) {
			logf("retention sweep: %d expired, %d objects removed, %d kept for another copy, %d removals failed", res.Expired, res.Removed, res.Kept, res.Failed)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// bodyRows is the access check of one body digest in a Work: every author's
// declaration for a Hub admin (404 when there is none), else only the
// caller's own, and the same 403 whether or not the digest exists.
func bodyRows(tx store.Tx, p Principal, workID, digest string) ([]store.Body, error) {
	if p.Admin {
		rows, err := tx.BodiesOfDigest(workID, digest)
		if err != nil {
			return nil, err
		}
		if len(rows) == 0 {
			return nil, api.Errorf(http.StatusNotFound, api.CodeNotFound, "no body %s in work %s", digest, workID)
		}
		return rows, nil
	}
	if p.HumanID == "" {
		return nil, errBodyForbidden(digest)
	}
	b, err := tx.Body(workID, p.HumanID, digest)
	if errors.Is(err, store.ErrNotFound) {
		return nil, errBodyForbidden(digest)
	}
	if err != nil {
		return nil, err
	}
	return []store.Body{b}, nil
}
