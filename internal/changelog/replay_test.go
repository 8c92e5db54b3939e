package changelog

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Replay takes two paths: archives whose small files are held from the
// validation, and archives read a second time (one file over sameCheckMax).
// Both restore the captured tree, leaving matching files untouched.
func TestReplayHeldAndStreamed(t *testing.T) {
	for _, big := range []bool{false, true} {
		base := t.TempDir()
		root := filepath.Join(base, "root")
		writeFile(t, filepath.Join(root, "a/small"), "small")
		writeFile(t, filepath.Join(root, "a/other"), "other")
		if big {
			writeFile(t, filepath.Join(root, "big"), strings.Repeat("b", sameCheckMax+10))
		}
		c, err := Open(filepath.Join(base, "cl"), Options{Roots: []Root{{Name: "r", Path: root}}})
		if err != nil {
			t.Fatal(err)
		}
		mustCapture(t, c, 0)
		want := snapshot(t, root, true, nil)
		rp, err := prepareReplay(context.Background(), []string{c.incrementPath(0)}, []Root{{Name: "r", Path: root}}, UnpackBound{})
		if err != nil {
			t.Fatal(err)
		}
		if rp.archives[0].a.held == big {
			t.Fatalf("big=%v: archive held=%v", big, rp.archives[0].a.held)
		}
		rp.close()
		// Change one file, remove one, and keep one as it was.
		writeFile(t, filepath.Join(root, "a/small"), "SMALL")
		os.Remove(filepath.Join(root, "a/other"))
		writeFile(t, filepath.Join(root, "a/new"), "new")
		if big {
			writeFile(t, filepath.Join(root, "big"), "short now")
		}
		// The changes were never captured: the check refuses, --force goes on.
		if _, err := c.Apply(context.Background(), ApplyRequest{To: 0}); !errors.Is(err, ErrChangedSinceCapture) {
			t.Fatalf("big=%v: rewind over uncaptured changes: %v", big, err)
		}
		if _, err := c.Apply(context.Background(), ApplyRequest{To: 0, Force: true}); err != nil {
			t.Fatal(err)
		}
		if d := diffTrees(want, snapshot(t, root, true, nil)); d != "" {
			t.Fatalf("big=%v: rewind differs:\n%s", big, d)
		}
	}
}
