package spool

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// Identity is what binds a checkout to exactly one spool: the random spool
// id and the root directory identity (device, inode) its format commit
// binds. A same-inode move keeps it; a copy, restore or re-initialisation
// at any path is another identity.
type Identity struct {
	SpoolID string `json:"spool_id"`
	Root    FileID `json:"root"`
}

func (i Identity) String() string {
	return fmt.Sprintf("spool id %s, root dev %d inode %d", i.SpoolID, i.Root.Dev, i.Root.Ino)
}

// ErrMoveRefused: a spool move was refused before anything changed.
var ErrMoveRefused = errors.New("spool move refused")

// ProbeIdentity reads the commit at dir (read-only, without the lock) and
// returns the identity it declares and whether the directory at dir is the
// root the commit binds (false for a copy or a restore).
func ProbeIdentity(dir string) (Identity, bool, error) {
	if err := checkAbs(dir); err != nil {
		return Identity{}, false, err
	}
	c, _, err := readCommit(dir)
	if err != nil {
		return Identity{}, false, err
	}
	id := Identity{SpoolID: c.SpoolID, Root: c.Root}
	fi, err := os.Lstat(dir)
	if err != nil {
		return id, false, err
	}
	return id, fileID(fi) == c.Root, nil
}

// SummaryIdentity returns the spool identity a hook summary file names. The
// summary is derived state, not evidence; a move uses it only as a witness
// of which spool a binding that recorded no identity was using.
func SummaryIdentity(path string) (Identity, error) {
	b, err := fsutil.ReadFileNoFollow(path, maxSummaryBytes)
	if err != nil {
		return Identity{}, err
	}
	f, err := decodeFrame(b)
	if err != nil || f.typ != typeSummary || f.key != typeSummary {
		return Identity{}, fmt.Errorf("%w: summary", errMalformed)
	}
	var sr summaryRecord
	if err := strictJSON(f.body, &sr); err != nil || sr.SpoolID == "" {
		return Identity{}, fmt.Errorf("%w: summary: %v", errMalformed, err)
	}
	return Identity{SpoolID: sr.SpoolID, Root: sr.Root}, nil
}

// VerifyMoved checks that the spool at dir is exactly want, moved without
// copying: a valid commit whose id and root are want's, the root directory
// and both permanent lock files the ones the commit binds, and private
// authority; the identities are revalidated under the spool lock, which is
// taken and released without recovery (nothing is written).
func VerifyMoved(ctx context.Context, dir string, want Identity) error {
	s, err := openCommitted(dir, false)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrMoveRefused, err)
	}
	got := Identity{SpoolID: s.commit.SpoolID, Root: s.commit.Root}
	if got != want {
		return fmt.Errorf("%w: %s holds another spool (%s), not the bound one (%s): a replaced, restored or recreated spool is a different identity", ErrMoveRefused, dir, got, want)
	}
	if err := s.checkRetainedFiles(); err != nil {
		return fmt.Errorf("%w: %v", ErrMoveRefused, err)
	}
	lf, err := s.lockWith(ctx, s.lockWait)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrMoveRefused, err)
	}
	defer lf.Close()
	if err := s.revalidate(lf); err != nil {
		return fmt.Errorf("%w: %v (a copied or restored spool has new inodes and is a different identity)", ErrMoveRefused, err)
	}
	return nil
}

// Identity returns the spool's identity (random id and committed root).
func (s *Spool) Identity() Identity {
	return Identity{SpoolID: s.commit.SpoolID, Root: s.commit.Root}
}
