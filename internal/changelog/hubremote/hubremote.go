// Package hubremote connects a checkout's changelog to its Hub: increments
// are uploaded under the worktree's current Work (changelog.Remote over a
// client.Conn, embedded or HTTP).
package hubremote

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/connections"
	"github.com/agentscm/agentscm/internal/hub/api"
)

// Remote uploads a checkout's increments to its connected Hub, under
// the worktree's current Work.
type Remote struct {
	conn     client.Conn
	worktree string
}

// Upload maps the Hub's answers to the changelog's: a target refusal (no
// current Work, a finished or handed-over Work, a stale generation) leaves
// nowhere to upload; a grant refusal is a *changelog.LimitError; missing
// earlier positions a *changelog.MissingError; a position the Hub merged into
// a later one changelog.ErrMergedOnRemote.
func (h *Remote) Upload(ctx context.Context, inc changelog.RemoteIncrement) (changelog.RemoteResult, error) {
	res, err := h.conn.UploadIncrement(ctx, h.worktree, api.IncrementUpload{Position: inc.Position, Session: inc.Session, Digest: inc.Digest, Merged: inc.Merged}, inc.Body)
	if err == nil {
		return changelog.RemoteResult{WorkID: res.WorkID, Status: res.Status,
			Grant: changelog.Grant{MaxObjects: res.Grant.MaxObjects, MaxBytes: res.Grant.MaxBytes},
			Used:  changelog.Usage{Objects: res.Used.Objects, Bytes: res.Used.Bytes}}, nil
	}
	if _, refused := api.IsRefusal(err); refused {
		return changelog.RemoteResult{}, fmt.Errorf("%w: %v", changelog.ErrNoDestination, err)
	}
	if e, ok := api.AsError(err); ok && e.Detail != nil {
		switch {
		case e.Code == api.CodeGrantExceeded:
			return changelog.RemoteResult{}, fmt.Errorf("work %s: %w", e.Detail.WorkID,
				&changelog.LimitError{Bound: e.Detail.Bound, Used: e.Detail.Used, Max: e.Detail.Max, Want: e.Detail.Want})
		case e.Reason == api.ReasonIncrementsMissing && e.Detail.NextPosition != nil:
			return changelog.RemoteResult{}, &changelog.MissingError{Next: *e.Detail.NextPosition}
		case e.Reason == api.ReasonPositionMerged:
			return changelog.RemoteResult{}, fmt.Errorf("%w: %v", changelog.ErrMergedOnRemote, err)
		}
	}
	return changelog.RemoteResult{}, err
}

// Holding lists what the Hub holds of the worktree's sequence under its
// current Work (no current Work is changelog.ErrNoDestination): its
// sequence ends after the highest position stored for the worktree, the
// positions in a gap having been merged into the next stored one.
func (h *Remote) Holding(ctx context.Context) (changelog.Holding, error) {
	cur, err := h.conn.CurrentWork(ctx, h.worktree)
	if e, ok := api.AsError(err); ok && e.Code == api.CodeNotFound {
		return changelog.Holding{}, fmt.Errorf("%w: %v", changelog.ErrNoDestination, err)
	}
	if err != nil {
		return changelog.Holding{}, err
	}
	list, err := h.conn.ListIncrements(ctx, cur.Work.ID)
	if err != nil {
		return changelog.Holding{}, err
	}
	out := changelog.Holding{WorkID: list.WorkID,
		Grant: changelog.Grant{MaxObjects: list.Grant.MaxObjects, MaxBytes: list.Grant.MaxBytes},
		Used:  changelog.Usage{Objects: list.Used.Objects, Bytes: list.Used.Bytes}}
	for _, in := range list.Increments {
		if in.WorktreeID == h.worktree && in.Position >= out.Next {
			out.Next = in.Position + 1
		}
	}
	return out, nil
}

// New returns the remote of a worktree over conn.
func New(conn client.Conn, worktreeID string) *Remote {
	return &Remote{conn: conn, worktree: worktreeID}
}

// ForCheckout is the hook's changelog.HookOptions.Remote: the checkout's
// client connection under configDir, if any.
func ForCheckout(configDir string) func(ctx context.Context, root string) (changelog.Remote, func(), error) {
	return func(ctx context.Context, root string) (changelog.Remote, func(), error) {
		c, err := connections.Lookup(configDir, root)
		if errors.Is(err, connections.ErrNoConnection) {
			return nil, nil, nil
		}
		if err != nil {
			return nil, nil, err
		}
		conn, err := client.Open(ctx, c, client.Options{})
		if err != nil {
			return nil, nil, err
		}
		return New(conn, c.WorktreeID), func() { conn.Close() }, nil
	}
}
