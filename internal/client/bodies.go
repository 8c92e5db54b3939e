package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/hub"
	"github.com/agentscm/agentscm/internal/hub/api"
)

// BodyConn is the shared-conversation part of a connection: both the
// embedded and the HTTP connection implement it.
type BodyConn interface {
	// MissingBodies asks which of the caller's declared bodies in a Work
	// the Hub still lacks.
	MissingBodies(ctx context.Context, workID string, digests []string) (api.MissingBodiesResult, error)
	// UploadBody uploads one declared body (b hashes to digest).
	UploadBody(ctx context.Context, workID, digest string, b []byte) (api.BodyUploadResult, error)
	ListBodies(ctx context.Context, workID string) (api.BodyList, error)
	// GetBody downloads a body and verifies it against its digest.
	GetBody(ctx context.Context, workID, digest string) ([]byte, error)
	DeleteBody(ctx context.Context, workID, digest string) (api.BodyDeleteResult, error)
}

var (
	_ BodyConn = (*Local)(nil)
	_ BodyConn = (*HTTP)(nil)
)

// ErrBodyDigest reports a downloaded body whose bytes do not hash to its
// digest.
var ErrBodyDigest = errors.New("downloaded body does not match its digest")

func verifyBody(b []byte, digest string) error {
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != digest {
		return fmt.Errorf("%w %s", ErrBodyDigest, digest)
	}
	return nil
}

func (l *Local) MissingBodies(ctx context.Context, workID string, digests []string) (api.MissingBodiesResult, error) {
	return l.svc.MissingBodies(ctx, l.p, l.repo, workID, api.MissingBodiesRequest{Digests: digests})
}

func (l *Local) UploadBody(ctx context.Context, workID, digest string, b []byte) (api.BodyUploadResult, error) {
	return l.svc.UploadBody(ctx, l.p, l.repo, workID, digest, int64(len(b)), bytes.NewReader(b))
}

func (l *Local) ListBodies(ctx context.Context, workID string) (api.BodyList, error) {
	return l.svc.ListBodies(ctx, l.p, l.repo, workID)
}

func (l *Local) GetBody(ctx context.Context, workID, digest string) ([]byte, error) {
	_, b, err := l.svc.GetBody(ctx, l.p, l.repo, workID, digest)
	if err != nil {
		return nil, err
	}
	return b, verifyBody(b, digest)
}

func (l *Local) DeleteBody(ctx context.Context, workID, digest string) (api.BodyDeleteResult, error) {
	return l.svc.DeleteBody(ctx, l.p, l.repo, workID, digest)
}

func (h *HTTP) MissingBodies(ctx context.Context, workID string, digests []string) (api.MissingBodiesResult, error) {
	var out api.MissingBodiesResult
	if digests == nil {
		digests = []string{}
	}
	return out, h.do(ctx, "POST", h.repoPath("works", workID, "bodies"), api.MissingBodiesRequest{Digests: digests}, &out)
}

func (h *HTTP) UploadBody(ctx context.Context, workID, digest string, b []byte) (api.BodyUploadResult, error) {
	var out api.BodyUploadResult
	raw, _, err := h.send(ctx, "PUT", h.repoPath("works", workID, "bodies", digest), b, api.BodyContentType, maxResponseBytes)
	if err != nil {
		return out, err
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return out, fmt.Errorf("hub %s: bad answer to a body upload: %w", h.base, err)
	}
	return out, nil
}

func (h *HTTP) ListBodies(ctx context.Context, workID string) (api.BodyList, error) {
	var out api.BodyList
	return out, h.do(ctx, "GET", h.repoPath("works", workID, "bodies"), nil, &out)
}

func (h *HTTP) GetBody(ctx context.Context, workID, digest string) ([]byte, error) {
	b, _, err := h.send(ctx, "GET", h.repoPath("works", workID, "bodies", digest), nil, "", api.MaxBodyBytes)
	if err != nil {
		if errors.Is(err, fsutil.ErrTooLarge) {
			return nil, fmt.Errorf("body %s: the answer is over the %d-byte cap", digest, api.MaxBodyBytes)
		}
		return nil, err
	}
	return b, verifyBody(b, digest)
}

func (h *HTTP) DeleteBody(ctx context.Context, workID, digest string) (api.BodyDeleteResult, error) {
	var out api.BodyDeleteResult
	return out, h.do(ctx, "DELETE", h.repoPath("works", workID, "bodies", digest), nil, &out)
}

// Sweep runs one retention pass of the embedded Hub (it has no server
// process to run the sweep every ten minutes).
func (l *Local) Sweep(ctx context.Context) (hub.SweepResult, error) { return l.svc.Sweep(ctx) }
