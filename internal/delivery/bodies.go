package delivery

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/spool"
)

// Shared conversation bodies leave the machine here, and only here: after
// the Hub accepted (HTTP 200) the envelope that declares them, for a
// checkout still in shared-conversation mode whose session started shared,
// and only the bodies the Hub says it lacks. A body kept in any other mode
// is never declared and never read by this file.

// bodyDeclaration is the envelope's declaration of the record's body: only
// a body retained in shared-conversation mode is declared (shared-approved,
// or work-local above 1 MiB); every other body stays local-private and the
// envelope says nothing of it.
func bodyDeclaration(r event.Record) *api.BodyDeclaration {
	ref := r.BodyRef
	if ref == nil || r.CaptureMode != event.ModeSharedConversation || !strings.HasPrefix(ref.Digest, "sha256:") {
		return nil
	}
	avail := api.BodyRetained
	if ref.Availability != event.AvailabilityRetained {
		avail = api.BodyMissing
	}
	return &api.BodyDeclaration{Digest: strings.TrimPrefix(ref.Digest, "sha256:"), Bytes: ref.Bytes, MediaType: api.BodyMediaType,
		Retention: event.RetentionClass(r.CaptureMode, ref.Bytes), Availability: avail, CaptureMode: r.CaptureMode}
}

// uploadAfterAcceptance runs after the Hub acknowledged env (e is what was
// sent): it asks which bodies the Hub lacks (this envelope's, and any of
// this author's in the Work whose object the Hub found missing) and uploads
// those this spool holds. A transient failure for the envelope's own body
// is returned, so the envelope stays pending and the next hook asks again;
// a permanent refusal leaves the body declared local on the Hub.
func (h *hub) uploadAfterAcceptance(ctx context.Context, env *spool.Envelope, e *api.Envelope, res api.IngestResult) error {
	d := e.Body
	if d == nil || d.Retention != api.RetentionSharedApproved || d.Availability != api.BodyRetained || res.Body == api.ReasonBodyNotShared {
		return nil
	}
	bc, ok := h.conn.(client.BodyConn)
	if !ok || h.configDir == "" {
		return nil
	}
	// The mode now, not at capture: switching away stops uploads at the
	// next delivery; a session that did not start shared never uploads.
	st := capture.Store{Dir: h.configDir}
	sh, err := st.ConversationSharing(h.root, env.Record.SessionID, h.lineage.Hub, h.lineage.Repository)
	if err != nil || !sh.Share {
		return nil
	}
	cfg, err := st.Load()
	if err != nil {
		return nil
	}
	b := cfg.ForPath(h.root)
	if b == nil {
		return nil
	}
	missing, err := bc.MissingBodies(ctx, e.WorkID, []string{d.Digest})
	if err != nil {
		if transientBodyError(err) {
			return fmt.Errorf("ask the Hub which bodies it lacks: %w", err)
		}
		return nil
	}
	var first error
	for _, m := range missing.Missing {
		if m.Bytes <= 0 || m.Bytes > api.MaxBodyBytes || !api.IsDigest(m.Digest) {
			continue
		}
		body, err := spool.ReadBody(b.Spool, &event.ArtifactRef{Digest: "sha256:" + m.Digest, Bytes: m.Bytes, Availability: event.AvailabilityRetained})
		if err != nil {
			continue // not in this spool (another checkout of the author's), or gone
		}
		if _, err := bc.UploadBody(ctx, e.WorkID, m.Digest, body); err != nil && m.Digest == d.Digest && transientBodyError(err) && first == nil {
			first = fmt.Errorf("upload body %s: %w", m.Digest, err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	return first
}

// transientBodyError says whether a body request may succeed later: a
// transport failure, the Hub unavailable or failing, authentication or
// authorization (a token being fixed), a timeout or rate limit. A 400, 404,
// 409, 410 or 413 is final for that body.
func transientBodyError(err error) bool {
	var ae *api.Error
	if !errors.As(err, &ae) {
		return true
	}
	switch ae.Status {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusGone, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return false
	}
	return true
}
