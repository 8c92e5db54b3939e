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
// sent): it asks whether the Hub lacks the envelope's own body and uploads
// it. Only that digest is ever uploaded here, because it comes from a
// record captured in shared-conversation mode: the Hub's answer may name
// other digests (copies whose object it lost), but a digest named by the
// Hub alone could be a local-private body of the same spool, so those are
// left to `change-capture conversation --upload`, which checks each
// against the spool's shared records. A transient failure is returned, so
// the envelope stays pending and the next hook asks again; a permanent
// refusal leaves the body declared local on the Hub.
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
	st := capture.StateDir{Dir: h.configDir}
	sh, err := st.ConversationSharing(h.root, env.Record.SessionID, h.lineage.Hub, h.lineage.Repository)
	if err != nil || !sh.Share {
		return nil
	}
	cfg, err := st.Bindings().Load()
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
	for _, m := range missing.Missing {
		if m.Digest != d.Digest {
			continue
		}
		body, err := spool.ReadBody(b.Spool, &event.ArtifactRef{Digest: "sha256:" + d.Digest, Bytes: d.Bytes, Availability: event.AvailabilityRetained})
		if err != nil {
			return nil // the artifact is gone: the body stays declared local
		}
		if _, err := bc.UploadBody(ctx, e.WorkID, d.Digest, body); err != nil && transientBodyError(err) {
			return fmt.Errorf("upload body %s: %w", d.Digest, err)
		}
	}
	return nil
}

// UploadResult reports UploadShared.
type UploadResult struct {
	WorkID string `json:"work_id"`
	// Shared counts the distinct shared-approved bodies of the Work this
	// spool retains; Missing how many of them the Hub lacked; Uploaded how
	// many were uploaded now; Failed how many failed.
	Shared   int `json:"shared"`
	Missing  int `json:"missing"`
	Uploaded int `json:"uploaded"`
	Failed   int `json:"failed"`
}

// UploadShared uploads every body of a Work that this spool retains from
// shared-conversation capture and the Hub lacks (for example a copy whose
// object the Hub found missing): recs are the spool's records. Only records
// captured in shared-conversation mode, in a checkout still in that mode,
// are considered; every digest the Hub names is checked against them.
func UploadShared(ctx context.Context, bc client.BodyConn, spoolDir, workID string, recs []event.Record) (UploadResult, error) {
	res := UploadResult{WorkID: workID}
	shared := map[string]int64{}
	var order []string
	for _, r := range recs {
		if r.WorkID != workID || r.Deferred {
			continue
		}
		d := bodyDeclaration(r)
		if d == nil || d.Retention != api.RetentionSharedApproved || d.Availability != api.BodyRetained {
			continue
		}
		if _, ok := shared[d.Digest]; !ok {
			shared[d.Digest] = d.Bytes
			order = append(order, d.Digest)
		}
	}
	res.Shared = len(order)
	var first error
	for i := 0; i < len(order); i += api.MaxMissingQuery {
		chunk := order[i:min(i+api.MaxMissingQuery, len(order))]
		missing, err := bc.MissingBodies(ctx, workID, chunk)
		if err != nil {
			return res, fmt.Errorf("ask the Hub which bodies it lacks: %w", err)
		}
		for _, m := range missing.Missing {
			n, ok := shared[m.Digest]
			if !ok || n != m.Bytes {
				continue // not a shared body of this spool
			}
			delete(shared, m.Digest) // once
			res.Missing++
			body, err := spool.ReadBody(spoolDir, &event.ArtifactRef{Digest: "sha256:" + m.Digest, Bytes: n, Availability: event.AvailabilityRetained})
			if err == nil {
				_, err = bc.UploadBody(ctx, workID, m.Digest, body)
			}
			if err != nil {
				res.Failed++
				if first == nil {
					first = fmt.Errorf("upload body %s: %w", m.Digest, err)
				}
				continue
			}
			res.Uploaded++
		}
	}
	return res, first
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
