//go:build !linux

package capsule

import "fmt"

// dirWatch has no inotify outside Linux: every run lists the whole tree
// after the command (the watch never vouches).
type dirWatch struct{}

func watchDirs(root string, dirs []string) (*dirWatch, error) {
	return nil, fmt.Errorf("%w: no inotify on this system", errWatchLost)
}

func (w *dirWatch) close() {}

func (w *dirWatch) dirty() (map[string]bool, error) {
	return nil, fmt.Errorf("%w: no inotify on this system", errWatchLost)
}

func (w *dirWatch) watched() int { return 0 }
