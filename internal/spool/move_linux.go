//go:build linux

package spool

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Move renames the spool at from to to: the offline same-inode move. It
// opens the committed spool at from, takes its lock exclusively and
// revalidates the committed identities (no recovery, nothing written), and
// refuses a spool that is not want (when set). It renames with
// renameat2(RENAME_NOREPLACE) relative to the two retained parent
// descriptors, so an existing to is never replaced, and a move to another
// filesystem (which would need a copy, a new identity) is refused; then it
// syncs both parents and verifies the spool at to with VerifyMoved.
func Move(ctx context.Context, from, to string, want *Identity) (Identity, error) {
	if err := checkAbs(from); err != nil {
		return Identity{}, fmt.Errorf("%w: %v", ErrMoveRefused, err)
	}
	if err := checkAbs(to); err != nil {
		return Identity{}, fmt.Errorf("%w: %v", ErrMoveRefused, err)
	}
	if to == from || strings.HasPrefix(to, from+"/") {
		return Identity{}, fmt.Errorf("%w: %s is %s itself or beneath it", ErrMoveRefused, to, from)
	}
	s, err := openCommitted(from, false)
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %v", ErrMoveRefused, err)
	}
	id := Identity{SpoolID: s.commit.SpoolID, Root: s.commit.Root}
	if want != nil && id != *want {
		return Identity{}, fmt.Errorf("%w: %s holds another spool (%s), not the bound one (%s)", ErrMoveRefused, from, id, *want)
	}
	if err := s.checkRetainedFiles(); err != nil {
		return Identity{}, fmt.Errorf("%w: %v", ErrMoveRefused, err)
	}
	lf, err := s.lockWith(ctx, s.lockWait)
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %v", ErrMoveRefused, err)
	}
	defer lf.Close()
	if err := s.revalidate(lf); err != nil {
		return Identity{}, fmt.Errorf("%w: %v", ErrMoveRefused, err)
	}
	fp, err := unix.Open(filepath.Dir(from), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Identity{}, fmt.Errorf("%w: open %s: %v", ErrMoveRefused, filepath.Dir(from), err)
	}
	defer unix.Close(fp)
	tp, err := unix.Open(filepath.Dir(to), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Identity{}, fmt.Errorf("%w: the new parent directory %s: %v (create it first)", ErrMoveRefused, filepath.Dir(to), err)
	}
	defer unix.Close(tp)
	if got, ok := statAt(fp, filepath.Base(from)); !ok || got != id.Root {
		return Identity{}, fmt.Errorf("%w: %s no longer names the spool root (dev %d, inode %d)", ErrMoveRefused, from, id.Root.Dev, id.Root.Ino)
	}
	err = unix.Renameat2(fp, filepath.Base(from), tp, filepath.Base(to), unix.RENAME_NOREPLACE)
	switch {
	case err == nil:
	case errors.Is(err, unix.EEXIST):
		return Identity{}, fmt.Errorf("%w: %s already exists; a move never replaces or adopts it", ErrMoveRefused, to)
	case errors.Is(err, unix.EXDEV):
		return Identity{}, fmt.Errorf("%w: %s is on another filesystem than %s; a same-inode move stays on one filesystem (a copy is a different identity: use change-capture export for one)", ErrMoveRefused, to, from)
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EOPNOTSUPP):
		return Identity{}, fmt.Errorf("%w: the filesystem has no atomic no-replace rename (renameat2 RENAME_NOREPLACE: %v)", ErrMoveRefused, err)
	default:
		return Identity{}, fmt.Errorf("%w: rename %s to %s: %v", ErrMoveRefused, from, to, err)
	}
	s.fail("move.renamed")
	if err := unix.Fsync(tp); err != nil {
		return id, fmt.Errorf("the spool was renamed to %s but syncing %s failed (the move may not survive a machine crash; run the move again to finish): %w", to, filepath.Dir(to), err)
	}
	if err := unix.Fsync(fp); err != nil {
		return id, fmt.Errorf("the spool was renamed to %s but syncing %s failed (run the move again to finish): %w", to, filepath.Dir(from), err)
	}
	lf.Close()
	if err := VerifyMoved(ctx, to, id); err != nil {
		return id, err
	}
	return id, nil
}
