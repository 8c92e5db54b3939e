package hub

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/hub/store"
)

// plainEvents reports whether env is an events envelope that only adds
// events: no setup to record and no session_end to pause the Work. Those
// are most envelopes, and a store that implements store.EventsIngester
// accepts them in one round trip.
func plainEvents(env *api.Envelope) bool {
	if env.Type != api.TypeEvents || len(env.Events) == 0 || env.Body != nil {
		// A body declaration takes the general path (declareBody).
		return false
	}
	for _, ev := range env.Events {
		if ev.Setup != nil || ev.Kind == api.KindSessionEnd {
			return false
		}
	}
	return true
}

// ingestEventsFast is Ingest's transaction for a plain events envelope on a
// store.EventsIngester: the same checks, in the same order, with the same
// refusals as the general path, on what one statement wrote and read. A
// refusal discards the transaction and so the statement's writes.
func ingestEventsFast(tx store.EventsIngester, repo store.Repository, row store.Envelope, env *api.Envelope, res *api.IngestResult, taken func() error) error {
	sc := store.Scope{WorkID: env.WorkID, Generation: env.Generation, Session: env.Session, Stream: env.Stream, Identity: env.Identity, ReceivedAt: row.ReceivedAt}
	got, err := tx.IngestEvents(row, sc, env.Events)
	if err != nil {
		return err
	}
	if got.EnvelopeTaken {
		return taken()
	}
	w := got.Work
	if errors.Is(got.WorkErr, store.ErrNotFound) || (got.WorkErr == nil && w.RepositoryID != repo.ID) {
		return api.Refusef(api.ReasonUnknownWork, "no work %q in repository %q", env.WorkID, repo.Name)
	}
	if got.WorkErr != nil {
		return got.WorkErr
	}
	if !accepting(w.State) {
		return api.Refusef(api.ReasonWorkNotAccepting, "work %s is %s and accepts no capture", w.ID, w.State)
	}
	if env.Generation != w.Generation {
		return api.Refusef(api.ReasonStaleGeneration, "work %s is at generation %d, not %d", w.ID, w.Generation, env.Generation)
	}
	if !got.SessionFound {
		return api.Refusef(api.ReasonUnknownSession, "work %s has no session %q at generation %d", w.ID, env.Session, env.Generation)
	}
	if got.Inserted != int64(len(env.Events)) {
		return conflict("sequence_taken", "session %q of work %s already has an event at one of these sequence numbers", env.Session, w.ID)
	}
	res.Status = api.StatusAccepted
	return nil
}

// acceptingStates lists the Work states that accept capture: those for
// which accepting is true.
func acceptingStates() []string {
	return []string{api.StateActive, api.StatePaused, api.StateBlocked}
}

// ingestCommitted accepts a plain events envelope on a store.EventsCommitter
// as one transaction in one round trip, when the principal's token names
// the repository (authorize needs no read). ok is false when this path does
// not apply and Ingest's transaction runs instead. The store writes only
// what passes the checks below, so the outcome is the general path's: a
// taken identity is a duplicate or identity_reused whatever the Work says,
// then the refusals in the same order.
func (s *Service) ingestCommitted(ctx context.Context, p Principal, repository string, env *api.Envelope, digest string) (res api.IngestResult, ok bool, err error) {
	c, isCommitter := s.st.(store.EventsCommitter)
	if !isCommitter || !plainEvents(env) || repository != p.RepositoryName || p.RepositoryID == "" {
		return res, false, nil
	}
	// With the token's repository bound, authorize reads nothing.
	repo, err := authorize(nil, p, repository, true)
	if err != nil {
		return res, true, err
	}
	res = api.IngestResult{Identity: env.Identity, Digest: digest}
	row := store.Envelope{RepositoryID: repo.ID, Identity: env.Identity, Digest: digest, Type: env.Type,
		WorkID: env.WorkID, Generation: env.Generation, Session: env.Session, ReceivedAt: s.now()}
	sc := store.Scope{WorkID: env.WorkID, Generation: env.Generation, Session: env.Session, Stream: env.Stream, Identity: env.Identity, ReceivedAt: row.ReceivedAt}
	got, err := c.CommitEvents(ctx, row, sc, env.Events, acceptingStates())
	if err != nil {
		return res, true, internal(err)
	}
	if got.Accepted {
		res.Status = api.StatusAccepted
		return res, true, nil
	}
	// Nothing was written: choose the refusal. A taken sequence number
	// means every check passed and the identity was free.
	if got.SequenceTaken {
		return api.IngestResult{}, true, conflict("sequence_taken", "session %q of work %s already has an event at one of these sequence numbers", env.Session, env.WorkID)
	}
	if got.Taken {
		if got.TakenDigest != digest {
			return api.IngestResult{}, true, &api.Error{Status: http.StatusConflict, Code: api.CodeConflict, Reason: "identity_reused",
				Message: fmt.Sprintf("a different %s envelope was already accepted under identity %s", got.TakenType, env.Identity)}
		}
		res.Status = api.StatusDuplicate
		return res, true, nil
	}
	w := got.Work
	switch {
	case errors.Is(got.WorkErr, store.ErrNotFound) || (got.WorkErr == nil && w.RepositoryID != repo.ID):
		err = api.Refusef(api.ReasonUnknownWork, "no work %q in repository %q", env.WorkID, repo.Name)
	case got.WorkErr != nil:
		err = internal(got.WorkErr)
	case !accepting(w.State):
		err = api.Refusef(api.ReasonWorkNotAccepting, "work %s is %s and accepts no capture", w.ID, w.State)
	case env.Generation != w.Generation:
		err = api.Refusef(api.ReasonStaleGeneration, "work %s is at generation %d, not %d", w.ID, w.Generation, env.Generation)
	case !got.SessionFound:
		err = api.Refusef(api.ReasonUnknownSession, "work %s has no session %q at generation %d", w.ID, env.Session, env.Generation)
	default:
		err = fmt.Errorf("hub: the store accepted nothing of envelope %s and named no reason", env.Identity)
	}
	return api.IngestResult{}, true, err
}
