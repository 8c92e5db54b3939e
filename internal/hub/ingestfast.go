package hub

import (
	"errors"

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
