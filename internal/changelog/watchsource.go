package changelog

import (
	"context"
	"errors"
	"path/filepath"

	"github.com/agentscm/agentscm/internal/watch"
)

// WatchDir is the watch server's private directory inside a changelog
// directory: its Unix socket, lock and cookies.
const WatchDir = "watch"

// maxSocketPath bounds the socket's path (sun_path holds 104-108 bytes).
const maxSocketPath = 100

// WatchSource is a ChangeSource backed by the watch server (internal/watch)
// of the changelog directory dir, reached over dir/watch/sock and started
// on demand with command (the roots are appended), detached. When no
// server answers within the client's bounded wait the capture lists every
// directory.
func WatchSource(dir string, command []string) ChangeSource {
	return &watchSource{c: &watch.Client{Dir: filepath.Join(dir, WatchDir), Command: command}}
}

type watchSource struct{ c *watch.Client }

func (w *watchSource) Since(ctx context.Context, roots []string, since string) (string, []*Hint, error) {
	if len(filepath.Join(w.c.Dir, watch.SocketName)) > maxSocketPath {
		return "", nil, errors.New("watch: the changelog directory's path is too long for a Unix socket")
	}
	tok, ch, err := w.c.Since(ctx, roots, since)
	if err != nil {
		return "", nil, err
	}
	out := make([]*Hint, len(ch))
	for i, c := range ch {
		if c != nil {
			out[i] = &Hint{Dirs: c.Dirs, Trees: c.Trees}
		}
	}
	return tok, out, nil
}
