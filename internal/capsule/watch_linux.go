package capsule

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

const watchMask = unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_CLOSE_WRITE | unix.IN_CREATE | unix.IN_DELETE |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW

// dirWatch is the inotify instance of one run.
type dirWatch struct {
	fd    int
	paths map[int32]string // watch descriptor -> directory ("" for the root)
}

// watchDirs watches root and each directory in dirs (root-relative).
func watchDirs(root string, dirs []string) (*dirWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	w := &dirWatch{fd: fd, paths: make(map[int32]string, len(dirs)+1)}
	add := func(rel string) error {
		p := root
		if rel != "" {
			p = root + "/" + rel
		}
		wd, err := unix.InotifyAddWatch(fd, p, watchMask)
		if err != nil {
			return fmt.Errorf("inotify watch %q: %w", rel, err)
		}
		if prev, dup := w.paths[int32(wd)]; dup && prev != rel {
			return fmt.Errorf("inotify: %q and %q are the same directory", prev, rel)
		}
		w.paths[int32(wd)] = rel
		return nil
	}
	if err := add(""); err != nil {
		w.close()
		return nil, err
	}
	for _, d := range dirs {
		if err := add(d); err != nil {
			w.close()
			return nil, err
		}
	}
	return w, nil
}

func (w *dirWatch) close() {
	if w != nil {
		unix.Close(w.fd)
	}
}

// dirty drains the queue and returns the directories to re-list: every
// watched directory with an event, and the parent of a directory whose own
// entry changed (attributes, deletion, move).
func (w *dirWatch) dirty() (map[string]bool, error) {
	out := map[string]bool{}
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(w.fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("inotify read: %w", err)
		}
		if n <= 0 {
			return out, nil
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				return nil, fmt.Errorf("%w: queue overflow", errWatchLost)
			}
			if ev.Mask&unix.IN_IGNORED != 0 {
				// The watch went away (directory deleted or unmounted): its
				// parent saw the deletion; a re-listing of the parent covers it.
				if p, ok := w.paths[ev.Wd]; ok && p != "" {
					out[parentDir(p)] = true
				}
				continue
			}
			p, ok := w.paths[ev.Wd]
			if !ok {
				return nil, fmt.Errorf("%w: event for an unknown watch", errWatchLost)
			}
			out[p] = true
			if ev.Len == 0 && p != "" {
				out[parentDir(p)] = true // the directory's own entry changed
			}
		}
	}
}

// watched is the number of directories the watch covers.
func (w *dirWatch) watched() int { return len(w.paths) }
