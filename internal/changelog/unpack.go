package changelog

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// LocalUnpackBound is the bound of what one of this changelog's increments
// may unpack to when it is applied: the space free to this user on the file
// system of the first capture root (FreeSpaceBound). The Work's grant is no
// bound here: the local changelog keeps the increments the grant refused
// too.
func (c *Changelog) LocalUnpackBound() UnpackBound { return FreeSpaceBound(c.opts.Roots) }

// GrantUnpackBound bounds each increment by a Work's changelog byte grant.
func GrantUnpackBound(maxBytes int64, work string) UnpackBound {
	if work == "" {
		work = "its Work"
	}
	return UnpackBound{Max: maxBytes, By: fmt.Sprintf("over the %d-byte changelog grant of %s", maxBytes, work)}
}

// FreeSpaceBound bounds each increment by the space free to this user on
// the file system of the first root (its nearest existing ancestor): an
// increment that could not be written there is refused before anything is.
// It is no bound (zero) when the space cannot be read.
func FreeSpaceBound(roots []Root) UnpackBound {
	if len(roots) == 0 {
		return UnpackBound{}
	}
	p := filepath.Clean(roots[0].Path)
	for {
		var st unix.Statfs_t
		err := unix.Statfs(p, &st)
		if err == nil {
			free := int64(st.Bavail) * int64(st.Bsize)
			if free <= 0 {
				free = 1
			}
			return UnpackBound{Max: free, By: fmt.Sprintf("more than the %d bytes free on the file system of %s", free, p)}
		}
		parent := filepath.Dir(p)
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, os.ErrNotExist) || parent == p {
			return UnpackBound{}
		}
		p = parent
	}
}

// ValidateSequence reads and validates the increments at paths (in order)
// as an apply into roots would, each within bound, and simulates their
// extraction onto empty roots: a hostile or unreadable increment, or a
// sequence that climbs through its own symlinks, is refused with
// ErrUnreadableArchive. It writes nothing, so a caller can refuse before it
// creates the directory or the connection an apply needs; the apply itself
// checks again against the disk.
func ValidateSequence(ctx context.Context, paths []string, roots []Root, bound UnpackBound) error {
	rp, err := readReplay(ctx, paths, roots, bound)
	if err != nil {
		return err
	}
	defer rp.close()
	rp.disk = &scanDisk{entries: map[string][]entry{}}
	return rp.simulate()
}
