package capsule

import (
	"errors"
	"strings"
)

// While the command runs, an inotify instance watches every directory of the
// before manifest, so that the after manifest re-lists only the directories
// where something happened (and their ancestors, for the directory entries
// themselves); the other subtrees are taken from the before manifest. The
// watch vouches only when nothing was lost: a queue overflow, a watch that
// could not be added or was removed, or a process of the group that survived
// cleanup (it may still hold a writable mapping) makes the run list the
// whole tree instead. Directories holding a file with more than one link are
// always re-listed (a write through a link outside the root is not reported
// to the root's directories). Not reported, and so a named gap of the
// watched after manifest: writes through a shared writable mapping by a
// process outside the command's process group that was open before the run,
// and writes through a hard link that a process created outside the root
// during the run. RunOptions.FullListing turns the watch off.

// watchResult carries watchDirs' answer from the goroutine that adds the watches.
type watchResult struct {
	w   *dirWatch
	err error
}

// errWatchLost reports events the watch cannot vouch for.
var errWatchLost = errors.New("inotify lost events")

func parentDir(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}

// relistSet returns the directories a watched after manifest lists: the
// dirty ones and all their ancestors.
func relistSet(dirty map[string]bool) map[string]bool {
	out := make(map[string]bool, len(dirty)*2)
	for d := range dirty {
		for {
			if out[d] {
				break
			}
			out[d] = true
			if d == "" {
				break
			}
			d = parentDir(d)
		}
	}
	out[""] = true
	return out
}
