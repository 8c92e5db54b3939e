package binding

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/spool"
)

// checkBoundSpool refuses, before anything is created or changed, a bound
// spool path that no longer holds the spool the binding recorded (replaced,
// restored or recreated at the same path: a different identity). Bindings
// saved before identities were recorded are not checked.
func checkBoundSpool(cur *Binding) error {
	if cur == nil || cur.SpoolIdentity == nil {
		return nil
	}
	id, sameRoot, err := spool.ProbeIdentity(cur.Spool)
	if err == nil && id == *cur.SpoolIdentity && sameRoot {
		return nil
	}
	why := ""
	switch {
	case err != nil:
		why = err.Error()
	case id != *cur.SpoolIdentity:
		why = "it holds " + id.String()
	default:
		why = "its root directory is not the one its commit binds (a copy or a restore)"
	}
	return fmt.Errorf("checkout %s is bound to the spool at %s (%s), but that path no longer holds it: %s; a replaced, restored or recreated spool is a different identity and is never adopted or recreated (if you moved the spool, run change-capture move-spool; to start fresh, unconfigure and forget the binding)",
		cur.Root, cur.Spool, *cur.SpoolIdentity, why)
}

// boundIdentity is the identity configure records for sp.
func boundIdentity(cur *Binding, sp *spool.Spool) (*spool.Identity, error) {
	id := sp.Identity()
	if cur != nil && cur.SpoolIdentity != nil && *cur.SpoolIdentity != id {
		return nil, fmt.Errorf("the spool at %s is %s, not the bound %s; it is never adopted", sp.Dir(), id, *cur.SpoolIdentity)
	}
	return &id, nil
}

// MoveSpoolOptions names a binding and its spool's new path.
type MoveSpoolOptions struct {
	Root string
	// To is the spool's new absolute path.
	To string
}

// MoveSpoolResult says what move-spool did.
type MoveSpoolResult struct {
	Root     string         `json:"root"`
	From     string         `json:"from"`
	To       string         `json:"to"`
	Identity spool.Identity `json:"identity"`
	// Renamed: agentscm renamed the spool directory itself; false when the
	// operator had already moved it.
	Renamed bool `json:"renamed"`
	// State lists the private per-spool capture state directories (ledger,
	// sessions, transcripts, action receipts) moved to the new path's names.
	State   []string `json:"state_moved"`
	Enabled bool     `json:"enabled"`
}

// MoveSpool applies the offline same-inode move of a disabled binding's
// spool, under the capture config lock. When the spool is still at the
// bound path, agentscm renames it itself (spool.Move: exclusive spool lock,
// renameat2 no-replace, same filesystem only); when the operator already
// moved it, the spool at the new path must be exactly the bound identity
// (recorded by configure; for older bindings, witnessed by the hook
// summary) and the same directory inode its commit binds. Then the private
// per-spool state under the config directory is renamed to the new path's
// names (never replacing anything), and the binding is saved with the new
// path (atomic replace, fsync) as the last step. Every step can be run
// again after a crash: what was already moved is recognised.
func MoveSpool(ctx context.Context, store State, o MoveSpoolOptions) (*MoveSpoolResult, error) {
	root, err := SavedRoot(o.Root)
	if err != nil {
		return nil, err
	}
	to := o.To
	if to == "" || !filepath.IsAbs(to) || filepath.Clean(to) != to {
		return nil, fmt.Errorf("--spool %q must be an absolute clean path", to)
	}
	if within(root, to) {
		return nil, fmt.Errorf("--spool %s is inside the checkout %s; choose a private directory outside it", to, root)
	}
	var res *MoveSpoolResult
	err = store.Bindings().Update(func(c *Config) (bool, error) {
		cur := c.Find(root)
		if cur == nil {
			return false, fmt.Errorf("%w %s", ErrNoBinding, root)
		}
		if cur.Enabled {
			return false, fmt.Errorf("the capture binding of %s is enabled; a spool moves only offline: run change-capture unconfigure --root %s first, then move-spool, then enable again", root, root)
		}
		from := cur.Spool
		if to == from {
			return false, fmt.Errorf("the spool of %s is already at %s", root, to)
		}
		for _, other := range c.Bindings {
			if other.Root != root && other.Spool == to {
				return false, fmt.Errorf("spool path %s is bound to checkout %s", to, other.Root)
			}
		}
		want, err := boundIdentityWitness(store, cur, to)
		if err != nil {
			return false, err
		}
		res = &MoveSpoolResult{Root: root, From: from, To: to, State: []string{}}
		_, fromErr := os.Lstat(from)
		_, toErr := os.Lstat(to)
		switch {
		case fromErr == nil && toErr == nil:
			return false, fmt.Errorf("both %s (the bound path) and %s exist; a move never adopts or replaces %s", from, to, to)
		case fromErr == nil:
			id, err := spool.Move(ctx, from, to, want)
			if err != nil {
				return false, err
			}
			res.Identity, res.Renamed = id, true
		case errors.Is(fromErr, fs.ErrNotExist) && toErr == nil:
			if want == nil {
				return false, fmt.Errorf("%w: the binding of %s records no spool identity and no hook summary names one, so %s cannot be shown to be the spool it was bound to; move the directory back to %s and run move-spool again so agentscm moves it itself", spool.ErrMoveRefused, root, to, from)
			}
			if err := spool.VerifyMoved(ctx, to, *want); err != nil {
				return false, err
			}
			res.Identity = *want
		default:
			return false, fmt.Errorf("%w: neither %s (the bound path) nor %s holds a spool", spool.ErrMoveRefused, from, to)
		}
		moved, err := moveSpoolState(store, from, to, res.Identity.SpoolID)
		res.State = moved
		if err != nil {
			return false, err
		}
		cur.Spool = to
		id := res.Identity
		cur.SpoolIdentity = &id
		res.Enabled = cur.Enabled
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// boundIdentityWitness is the identity the binding recorded or, for a
// binding saved before identities were recorded, the one the hook summary
// of the bound path names (or of the new path, when an interrupted move
// already moved the ledger); nil when none exists.
func boundIdentityWitness(s State, b *Binding, to string) (*spool.Identity, error) {
	if b.SpoolIdentity != nil {
		id := *b.SpoolIdentity
		return &id, nil
	}
	for _, dir := range []string{b.Spool, to} {
		if id, err := spool.SummaryIdentity(s.SummaryPath(dir)); err == nil {
			return &id, nil
		}
	}
	return nil, nil
}

// moveSpoolState renames each per-spool state directory of from to its
// name for to. It first checks all of them, so a conflict (both names
// exist) changes nothing; a directory already at its new name (an earlier
// interrupted move) is left there.
func moveSpoolState(s State, from, to, spoolID string) ([]string, error) {
	olds, news := s.SpoolStateDirs(from, spoolID), s.SpoolStateDirs(to, spoolID)
	var todo []int
	for i := range olds {
		_, oerr := os.Lstat(olds[i])
		_, nerr := os.Lstat(news[i])
		switch {
		case oerr == nil && nerr == nil:
			return nil, fmt.Errorf("%w: capture state exists under both %s and %s; nothing was moved", spool.ErrMoveRefused, olds[i], news[i])
		case oerr == nil:
			todo = append(todo, i)
		}
	}
	moved := []string{}
	for _, i := range todo {
		if err := fsutil.RenameNoReplace(unix.AT_FDCWD, olds[i], unix.AT_FDCWD, news[i]); err != nil {
			return moved, fmt.Errorf("move capture state %s to %s: %w (run move-spool again to finish)", olds[i], news[i], err)
		}
		if err := fsutil.SyncDir(filepath.Dir(news[i])); err != nil {
			return moved, fmt.Errorf("move capture state: %w (run move-spool again to finish)", err)
		}
		moved = append(moved, news[i])
	}
	return moved, nil
}
