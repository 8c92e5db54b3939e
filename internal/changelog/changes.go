package changelog

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/scan"
)

// baselineFile holds the capture roots' state when the changelog was
// enabled, so the first capture (which stores every path, to be replayable
// onto an empty directory) can still say what the first call changed.
const baselineFile = "baseline"

// RecordBaseline records the capture roots as they are now as the baseline
// the changelog's first capture is compared with. It does nothing once an
// increment is stored.
func (c *Changelog) RecordBaseline(ctx context.Context) error {
	lk, err := c.lock()
	if err != nil {
		return err
	}
	defer lk.Unlock()
	st, err := c.stateForCapture()
	if err != nil {
		return err
	}
	if st.LastPosition >= 0 {
		return nil
	}
	now := c.opts.Now()
	base := &captureState{LastPosition: -1}
	for _, r := range c.opts.Roots {
		p, err := c.scanRoot(ctx, r, nil, now)
		if err != nil {
			return fmt.Errorf("baseline of root %s: %w", r.Name, err)
		}
		base.Roots = append(base.Roots, p.state)
	}
	return fsutil.WriteAtomic(filepath.Join(c.dir, baselineFile), base.encode(), fsutil.FileMode)
}

// loadBaseline returns the recorded baseline, or nil when there is none (or
// it does not decode).
func (c *Changelog) loadBaseline() *captureState {
	b, err := fsutil.ReadFileNoFollow(filepath.Join(c.dir, baselineFile), 1<<30)
	if err != nil {
		return nil
	}
	s, err := decodeState(b)
	if err != nil {
		return nil
	}
	return s
}

// dropBaseline removes the baseline once the first capture used it.
func (c *Changelog) dropBaseline() {
	if err := os.Remove(filepath.Join(c.dir, baselineFile)); err == nil || !errors.Is(err, fs.ErrNotExist) {
		_ = fsutil.SyncDir(c.dir)
	}
}

// changeList accumulates one capture's Changes.
type changeList struct {
	ch incmeta.Changes
}

func addBounded(list *[]string, omitted *int, p string) {
	if len(*list) < incmeta.MaxChangePaths {
		*list = append(*list, p)
		return
	}
	*omitted++
}

func changePath(r Root, first bool, rel string, dir bool) string {
	p := rel
	if dir && rel != "" {
		p += "/"
	}
	if first {
		if p == "" {
			return "./"
		}
		return p
	}
	if p == "" {
		p = "/"
	}
	return r.Name + ":" + p
}

// root adds what changed under one root between old (nil: no comparison
// possible) and cur; gone says the root was removed.
func (l *changeList) root(r Root, first bool, old, cur []entry, removed bool) {
	ch := &l.ch
	if r.Name == TranscriptRootName {
		l.transcript(old, cur)
		return
	}
	if removed {
		addBounded(&ch.Deleted, &ch.DeletedOmitted, changePath(r, first, "", true))
		return
	}
	if old == nil {
		for i := range cur {
			e := &cur[i]
			if e.Excluded || e.Path == "" || (e.Type != scan.File && e.Type != scan.Symlink) {
				continue
			}
			addBounded(&ch.Created, &ch.CreatedOmitted, changePath(r, first, e.Path, false))
			if e.Type == scan.File {
				ch.Bytes += e.Size
			}
		}
		return
	}
	deletedDir := ""
	mergeEntries(old, cur, func(o, n *entry) {
		switch {
		case n == nil:
			if o.Excluded || o.Path == "" {
				return
			}
			if deletedDir != "" && strings.HasPrefix(o.Path, deletedDir+"/") {
				return // inside a deleted directory: the directory says it
			}
			isDir := o.Type == scan.Dir
			if isDir {
				deletedDir = o.Path
			}
			addBounded(&ch.Deleted, &ch.DeletedOmitted, changePath(r, first, o.Path, isDir))
		case n.Excluded || n.Path == "":
		case o == nil || o.Excluded:
			isDir := n.Type == scan.Dir
			addBounded(&ch.Created, &ch.CreatedOmitted, changePath(r, first, n.Path, isDir))
			if n.Type == scan.File {
				ch.Bytes += n.Size
			}
		case o.Type != n.Type:
			addBounded(&ch.Modified, &ch.ModifiedOmitted, changePath(r, first, n.Path, n.Type == scan.Dir))
			if n.Type == scan.File {
				ch.Bytes += n.Size
			}
		case n.Type == scan.File:
			if sameStat(o, n) {
				return
			}
			if o.Size == n.Size && o.Mode != n.Mode && o.MTime == n.MTime {
				addBounded(&ch.Modified, &ch.ModifiedOmitted, changePath(r, first, n.Path, false))
				return // a mode change: no content bytes
			}
			addBounded(&ch.Modified, &ch.ModifiedOmitted, changePath(r, first, n.Path, false))
			ch.Bytes += n.Size
		case n.Type == scan.Symlink:
			if o.Target != n.Target || o.Mode != n.Mode {
				addBounded(&ch.Modified, &ch.ModifiedOmitted, changePath(r, first, n.Path, false))
			}
		case n.Type == scan.Dir:
			if o.Mode != n.Mode {
				addBounded(&ch.Modified, &ch.ModifiedOmitted, changePath(r, first, n.Path, true))
			}
		}
	})
}

// transcript counts what the conversation grew by: a new transcript's
// size, an appended one's growth (a replaced or truncated one's new size).
func (l *changeList) transcript(old, cur []entry) {
	if old == nil {
		old = []entry{}
	}
	mergeEntries(old, cur, func(o, n *entry) {
		if n == nil || n.Excluded || n.Type != scan.File {
			return
		}
		switch {
		case o == nil || o.Type != scan.File:
			l.ch.TranscriptBytes += n.Size
		case sameStat(o, n):
		case n.Size >= o.Size:
			l.ch.TranscriptBytes += n.Size - o.Size
		default:
			l.ch.TranscriptBytes += n.Size
		}
	})
}

// count is the number of paths listed so far (named or omitted).
func (l *changeList) count() int {
	ch := &l.ch
	return len(ch.Created) + len(ch.Modified) + len(ch.Deleted) + ch.CreatedOmitted + ch.ModifiedOmitted + ch.DeletedOmitted
}

// result returns the accumulated Changes with empty lists (not null).
func (l *changeList) result() *incmeta.Changes {
	ch := l.ch
	for _, p := range []*[]string{&ch.Created, &ch.Modified, &ch.Deleted} {
		if *p == nil {
			*p = []string{}
		}
	}
	return &ch
}
