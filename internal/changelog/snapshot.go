package changelog

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
)

// KindSnapshot marks a whole-workspace snapshot: a full archive of the
// capture roots in the increment format, independent of any changelog.
const KindSnapshot = "snapshot"

// SaveSnapshot writes a full archive of roots to w and returns its metadata.
// git is the git binary used to leave ignored paths out ("" for "git");
// the paths in exclude (absolute) are left out too, as are .git and
// .agentdiff, as a capture leaves them out.
func SaveSnapshot(ctx context.Context, roots []Root, w io.Writer, git string, exclude ...string) (*incmeta.Meta, error) {
	mroots, err := metaRoots(roots)
	if err != nil {
		return nil, err
	}
	if git == "" {
		git = "git"
	}
	c := &Changelog{opts: Options{Roots: roots, Git: git, Exclude: exclude}}
	start := time.Now()
	meta := &incmeta.Meta{Version: 1, Position: 0, Kind: KindSnapshot, Full: true, CreatedAt: start.UTC(), RemovedRoots: []string{}}
	var plans []*rootPlan
	for i, r := range roots {
		p, err := c.scanRoot(ctx, r, nil, start)
		if err != nil {
			return nil, fmt.Errorf("snapshot root %s: %w", r.Name, err)
		}
		mroots[i].Exists = p.state.Exists
		p.prefix = mroots[i].Prefix
		plans = append(plans, p)
	}
	meta.Roots = mroots
	if err := writeIncrement(ctx, w, meta, plans, start); err != nil {
		return nil, err
	}
	return meta, nil
}

// LoadSnapshot validates the snapshot at path and restores it into roots
// (matched by name), deleting what the snapshot does not hold (except what
// its dumpdirs list as present): meant for a fresh directory, with no check
// and no undo point. Onto a workspace, use Changelog.ApplySnapshot, which
// checks, protects excluded paths and stores an undo point. after, when
// set, runs once extracted.
func LoadSnapshot(ctx context.Context, path string, roots []Root, after func(ctx context.Context, roots []Root) error) error {
	if err := Replay(ctx, []string{path}, roots); err != nil {
		return err
	}
	if after != nil {
		return after(ctx, roots)
	}
	return nil
}
