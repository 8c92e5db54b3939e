package changelog

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/scan"
)

// CaptureRequest identifies the tool call a capture belongs to.
type CaptureRequest struct {
	// Position is the call's zero-based ordinal; it must exceed every
	// stored position. A negative Position takes the next one, decided
	// under the changelog lock.
	Position  int
	SessionID string
	ToolUseID string
	Tool      string
	// Failed marks a tool call that failed (PostToolUseFailure): it still
	// takes its own position.
	Failed bool
	// ConcurrentSessions names the other sessions whose turn ran when the
	// position was taken (parallel sessions): their writes may be in it.
	ConcurrentSessions []string
	// Kind is the increment's kind: "" or KindCall for a tool call,
	// KindOutside for CaptureOutside.
	Kind string
	// Outside describes a KindOutside capture.
	Outside *incmeta.Outside

	// CaptureID identifies a hook's request of this capture (see
	// CaptureOps); it is stored in the increment's metadata.
	CaptureID string
	// recognise: the watcher may already hold an increment of CaptureID
	// (the hook gave up waiting for its answer); one stored since start
	// is returned instead of a second capture.
	recognise bool
	start     time.Time
	// abandoned, checked once the lock is held, ends a capture the
	// requester no longer waits for (errAbandoned) before anything is
	// stored.
	abandoned func() error

	// holes are the recorded positions whose increments were not stored
	// (see holes.go), loaded by Capture.
	holes []incmeta.Held
	// reverted is the call a KindRevert increment undid.
	reverted *int
}

// errNothingOutside ends an outside capture that found no change outside
// the conversation roots: nothing is stored.
var errNothingOutside = errors.New("no change outside the conversation roots")

// ErrPosition reports a capture at a position not past the last stored one.
var ErrPosition = errors.New("position is not past the last stored increment")

// racyWindow: a file modified this close to the capture's start may change
// again within the same timestamp tick; its content hash is kept and
// re-verified by the next capture.
const racyWindow = 50 * time.Millisecond

// NextPosition returns the position after the last stored increment.
func (c *Changelog) NextPosition() (int, error) {
	lk, err := c.lock()
	if err != nil {
		return 0, err
	}
	defer lk.Unlock()
	st, err := c.stateForCapture()
	if err != nil {
		return 0, err
	}
	return st.LastPosition + 1, nil
}

// Capture stores the writes and deletions under the capture roots since the
// last stored increment as increment req.Position. The incremental state
// advances only once the increment is durably stored in the changelog
// directory; on any failure, including a refused reservation, the writes
// are left to the next increment. Uploads to the Hub follow (Upload).
func (c *Changelog) Capture(ctx context.Context, req CaptureRequest) (*Increment, error) {
	lk, err := c.lock()
	if err != nil {
		return nil, err
	}
	defer lk.Unlock()
	if req.Kind == "" {
		req.Kind = KindCall
	}
	if req.abandoned != nil {
		if err := req.abandoned(); err != nil {
			return nil, err
		}
	}
	if req.recognise {
		if inc := c.recognise(req); inc != nil {
			return inc, nil
		}
	}
	req.holes = c.loadHoles()
	inc, ok, err := c.captureFast(ctx, req)
	if !ok {
		inc, _, err = c.captureLocked(ctx, req, req.Kind, nil, nil)
	}
	switch {
	case errors.Is(err, errNothingOutside):
		return nil, nil
	case err != nil && !errors.Is(err, ErrPosition):
		// The call keeps its position: the next increment carries its
		// writes and says so.
		pos := req.Position
		if pos < 0 {
			if pos, err2 := c.nextFreePosition(req.holes); err2 == nil {
				req.Position = pos
			}
		}
		if req.Position >= 0 {
			h := incmeta.Held{Position: req.Position, Kind: req.Kind, Tool: req.Tool, Error: err.Error()}
			if herr := c.addHole(h); herr != nil {
				return nil, fmt.Errorf("%w (and position %d could not be kept for it: %v)", err, req.Position, herr)
			}
			return nil, &HoleError{Position: req.Position, Err: err}
		}
		return nil, err
	case err == nil && len(inc.Meta.Holds) > 0:
		c.clearHoles()
	}
	return inc, err
}

// HoleError reports a capture whose increment could not be stored: its
// position stays taken and the next stored increment carries its writes.
type HoleError struct {
	Position int
	Err      error
}

func (e *HoleError) Error() string {
	return fmt.Sprintf("increment %d not stored (the next increment carries its writes and keeps position %d for it): %v", e.Position, e.Position, e.Err)
}

func (e *HoleError) Unwrap() error { return e.Err }

// CaptureOutside stores the changes made under the capture roots since the
// last stored increment, when any lies outside the conversation roots, as
// an increment of kind KindOutside: work done between tool calls (by the
// user or any other process) that the next call's increment must not
// claim. It returns nil, storing nothing, when only conversation roots
// (the host's transcript) changed. The hooks call it before a tool call
// starts (PreToolUse) and before a turn (UserPromptSubmit).
func (c *Changelog) CaptureOutside(ctx context.Context, req CaptureRequest) (*Increment, error) {
	req.Kind, req.Failed, req.ToolUseID, req.Tool = KindOutside, false, "", ""
	return c.Capture(ctx, req)
}

// stateForCapture loads the state, falling back to a full capture after the
// last stored position when the state is corrupt or behind the stored
// increments (see behind).
func (c *Changelog) stateForCapture() (*captureState, error) {
	st, err := c.loadState()
	if errors.Is(err, errBadState) {
		pos, perr := c.positions()
		if perr != nil {
			return nil, perr
		}
		st = &captureState{LastPosition: -1, reset: err.Error()}
		if len(pos) > 0 {
			st.LastPosition = pos[len(pos)-1]
		}
	} else if err != nil {
		return nil, err
	}
	last, ok, err := c.behind(st)
	if err != nil {
		return nil, err
	}
	if ok {
		st = &captureState{LastPosition: last, reset: fmt.Sprintf("it records position %d but increments up to %d are stored (a crash before the state was written)", st.LastPosition, last)}
	}
	return st, nil
}

// captureLocked stores one increment against the state st (nil loads it)
// and returns the state it advanced to.
func (c *Changelog) captureLocked(ctx context.Context, req CaptureRequest, kind string, appliedTo *int, st *captureState) (_ *Increment, next *captureState, _ error) {
	if st == nil {
		var err error
		if st, err = c.stateForCapture(); err != nil {
			return nil, nil, err
		}
	}
	if req.Position >= 0 && (req.Position <= st.LastPosition || req.Position > 999999) {
		return nil, nil, fmt.Errorf("%w: position %d, last stored %d", ErrPosition, req.Position, st.LastPosition)
	}
	sc, err := c.scanLocked(ctx, st)
	if err != nil {
		return nil, nil, err
	}
	inc, next, err := c.storeLocked(ctx, sc, req, kind, appliedTo)
	if inc != nil && st.reset != "" {
		inc.Warning = fmt.Sprintf("the capture state did not check out (%s): this increment stores every path", st.reset)
	}
	return inc, next, err
}

// walked is the walk of every root against a state: what the next increment
// stores. A rewind inspects it (what changed since the newest captured
// position, what is excluded) before storing it as its undo point.
type walked struct {
	st     *captureState
	start  time.Time
	mroots []incmeta.Root
	plans  []*rootPlan
	// removed names the roots that existed in st and are gone now.
	removed []string
	full    bool
	token   string // the watcher's token taken before the listing
}

// scanLocked walks every root against st.
func (c *Changelog) scanLocked(ctx context.Context, st *captureState) (*walked, error) {
	mroots, err := metaRoots(c.opts.Roots)
	if err != nil {
		return nil, err
	}
	sc := &walked{st: st, start: c.opts.Now(), mroots: mroots, full: true, removed: []string{}}
	for i, r := range c.opts.Roots {
		old := st.root(r.Name)
		if old != nil && old.Path != r.Path {
			old = nil // the root moved: capture it in full
		}
		p, err := c.scanRoot(ctx, r, old, sc.start)
		if err != nil {
			return nil, fmt.Errorf("capture root %s: %w", r.Name, err)
		}
		sc.mroots[i].Exists = p.state.Exists
		if old != nil && old.Exists && !p.state.Exists {
			sc.removed = append(sc.removed, r.Name)
		}
		if p.state.Exists && !p.full {
			sc.full = false
		}
		p.prefix = sc.mroots[i].Prefix
		sc.plans = append(sc.plans, p)
	}
	return sc, nil
}

// storeLocked stores the scan sc as increment req.Position and advances the
// state from sc.st.
func (c *Changelog) storeLocked(ctx context.Context, sc *walked, req CaptureRequest, kind string, appliedTo *int) (_ *Increment, next *captureState, _ error) {
	st := sc.st
	holds := pendingHoles(req.holes, st.LastPosition)
	if req.Position < 0 {
		req.Position = max(st.LastPosition, lastHole(holds)) + 1
	}
	if kind == KindOutside && slices.ContainsFunc(holds, func(h incmeta.Held) bool { return h.Kind != KindOutside }) {
		// A call's writes are still uncaptured (its store failed): they
		// cannot be told from outside work, so the next call's increment
		// carries both and says it holds that call.
		return nil, nil, errNothingOutside
	}
	if req.Position <= st.LastPosition || req.Position > 999999 {
		return nil, nil, fmt.Errorf("%w: position %d, last stored %d", ErrPosition, req.Position, st.LastPosition)
	}
	start := sc.start
	meta := &incmeta.Meta{
		Version: 1, Position: req.Position, SessionID: req.SessionID, ToolUseID: req.ToolUseID, Tool: req.Tool, Failed: req.Failed,
		Kind: kind, CreatedAt: start.UTC(), RemovedRoots: sc.removed, AppliedTo: appliedTo, Outside: req.Outside,
		Reverted: req.reverted, CaptureID: req.CaptureID,
	}
	for _, h := range holds {
		if h.Position < req.Position {
			meta.Holds = append(meta.Holds, h)
		}
	}
	meta.ConcurrentSessions = req.ConcurrentSessions
	next = &captureState{LastPosition: req.Position, token: sc.token}
	plans := sc.plans
	var changes changeList
	var baseline *captureState
	if st.LastPosition < 0 {
		baseline = c.loadBaseline()
	}
	outside, seen := false, 0 // a change outside the conversation roots; changes counted so far
	mroots := sc.mroots
	if c.opts.ConversationRefs {
		// No copy of the conversation roots: a reference to the session's
		// transcript instead, and no state for them (a later copy is
		// whole).
		var kept []*rootPlan
		mroots = nil
		for i, p := range plans {
			if !p.conv {
				kept = append(kept, p)
				mroots = append(mroots, sc.mroots[i])
				continue
			}
			ref, err := transcriptRef(p.root, refSession(req), c.dir)
			if err != nil {
				return nil, nil, err
			}
			if ref != nil {
				meta.TranscriptRefs = append(meta.TranscriptRefs, *ref)
			}
		}
		meta.RemovedRoots = slices.DeleteFunc(slices.Clone(meta.RemovedRoots), func(name string) bool {
			return slices.ContainsFunc(plans, func(p *rootPlan) bool { return p.conv && p.root.Name == name })
		})
		plans = kept
	}
	for i, p := range plans {
		r := p.root
		old := st.root(r.Name)
		if old != nil && old.Path != r.Path {
			old = nil // the root moved: it was captured in full
		}
		switch {
		case old != nil && old.Exists && !p.state.Exists:
			changes.root(r, i == 0, nil, nil, true)
		case !p.state.Exists:
		case old != nil && old.Exists && p.sparseOld != nil:
			changes.root(r, i == 0, p.sparseOld, p.state.Entries, false)
		case old != nil && old.Exists:
			changes.root(r, i == 0, old.Entries, p.state.Entries, false)
		case old != nil:
			changes.root(r, i == 0, []entry{}, p.state.Entries, false) // the root came back
		default:
			var b *rootState
			if baseline != nil {
				b = baseline.root(r.Name)
			}
			switch {
			case b != nil && b.Path == r.Path && b.Exists:
				changes.root(r, i == 0, b.Entries, p.state.Entries, false)
			case b != nil && b.Path == r.Path:
				changes.root(r, i == 0, []entry{}, p.state.Entries, false)
			default:
				changes.root(r, i == 0, nil, p.state.Entries, false)
				changes.ch.Baseline = true
			}
		}
		next.Roots = append(next.Roots, p.state)
		if !p.conv && changes.count() != seen {
			outside = true
		}
		seen = changes.count()
	}
	if kind == KindOutside && !outside {
		return nil, nil, errNothingOutside
	}
	meta.Roots = mroots
	meta.Full = sc.full
	meta.Changes = changes.result()

	incDir := filepath.Join(c.dir, incrementsDir)
	tmpName, size, err := c.writeTempIncrement(ctx, incDir, meta, plans, start)
	if tmpName != "" {
		defer os.Remove(tmpName)
	}
	if err != nil {
		return nil, nil, err
	}
	if res := c.opts.Reservation; res != nil {
		if err := res.Reserve(1, size); err != nil {
			return nil, nil, fmt.Errorf("increment %d of %d bytes refused: %w", req.Position, size, err)
		}
	}
	release := func() {
		if res := c.opts.Reservation; res != nil {
			_ = res.Release(1, size)
		}
	}
	final := c.incrementPath(req.Position)
	if err := c.failpoint("store", req.Position); err != nil {
		release()
		return nil, nil, err
	}
	if err := os.Link(tmpName, final); err != nil {
		release()
		return nil, nil, fmt.Errorf("store increment %d: %w", req.Position, err)
	}
	if err := fsutil.SyncDir(incDir); err != nil {
		os.Remove(final)
		release()
		return nil, nil, err
	}
	c.crashpoint("linked")
	inc := &Increment{Position: req.Position, Path: final, Size: size, Meta: *meta}
	if err := c.advanceState(st, next); err != nil {
		// The state may or may not have been replaced; keep the increment
		// only if it was.
		if again, lerr := c.loadState(); lerr != nil || again.LastPosition != req.Position {
			os.Remove(final)
			_ = fsutil.SyncDir(incDir)
			release()
			return nil, nil, err
		}
	}
	if st.LastPosition < 0 {
		c.dropBaseline()
	}
	c.crashpoint("advanced")
	return inc, next, nil
}

// writeTempIncrement writes meta's increment to a new temporary file in
// incDir and fsyncs it, returning its name (also on failure, once created,
// for the caller to remove) and its size.
func (c *Changelog) writeTempIncrement(ctx context.Context, incDir string, meta *incmeta.Meta, plans []*rootPlan, start time.Time) (string, int64, error) {
	tmp, err := createTempFile(incDir)
	if err != nil {
		return "", 0, err
	}
	if err := writeIncrement(ctx, tmp, meta, plans, start); err != nil {
		tmp.Close()
		return tmp.Name(), 0, fmt.Errorf("write increment %d: %w", meta.Position, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return tmp.Name(), 0, fmt.Errorf("sync increment: %w", err)
	}
	c.crashpoint("synced")
	fi, err := tmp.Stat()
	if err != nil {
		tmp.Close()
		return tmp.Name(), 0, err
	}
	if err := tmp.Close(); err != nil {
		return tmp.Name(), 0, fmt.Errorf("close increment: %w", err)
	}
	return tmp.Name(), fi.Size(), nil
}

func createTempFile(dir string) (*os.File, error) {
	var b [8]byte
	for range 10 {
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		name := filepath.Join(dir, fsutil.TempPrefix+hex.EncodeToString(b[:]))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, fsutil.FileMode)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("create temporary increment: %w", err)
		}
		return f, nil
	}
	return nil, errors.New("create temporary increment: too many collisions")
}

// rootPlan is what one root contributes to an increment.
type rootPlan struct {
	root   Root
	prefix string
	state  *rootState // the state to record once stored (updated while writing)
	full   bool
	dirs   []int // indexes into state.Entries of directories to dump, walk order
	files  []int // indexes of files and symlinks to store, walk order
	// children of each dumped directory: indexes into state.Entries.
	children map[int][]int
	deleted  int
	// conv marks a conversation root (see IsConversationRoot): its JSONL
	// transcripts are stored as the bytes appended since the last
	// increment (appends), each cut at its last complete line.
	conv    bool
	appends []appendPlan
	// sparseOld, in a fast capture, holds the stored entries of the
	// directories it re-examined (the counterpart of state.Entries).
	sparseOld []entry
}

// scanRoot walks one root, classifies excluded paths and diffs against old.
func (c *Changelog) scanRoot(ctx context.Context, r Root, old *rootState, start time.Time) (*rootPlan, error) {
	p := &rootPlan{root: r, state: &rootState{Name: r.Name, Path: r.Path}, conv: IsConversationRoot(r.Name, r.Path)}
	fi, err := os.Lstat(r.Path)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && !fi.IsDir()) {
		return p, nil // removed (or no longer a directory): nothing to capture
	}
	if err != nil {
		return nil, err
	}
	p.state.Exists = true
	useOld := old != nil && old.Exists
	// The repository whose ignore rules apply, found as git finds it: the
	// root may be a subdirectory of its repository or a linked worktree.
	var repo *gitRepo
	if r.Git && !r.IncludeIgnored {
		prev := ""
		if old != nil {
			prev = old.Stamp
		}
		if repo, err = locateRepo(ctx, c.opts.Git, r.Path, prev); err != nil {
			return nil, err
		}
	}
	gd := repo != nil
	stamp := ""
	if gd {
		stamp = ignoreStamp(repo, r.Path)
	}
	p.state.Stamp = stamp
	fixed := c.fixedExcludes(r)
	classifyFull := gd && (!useOld || old.Stamp != stamp)
	for attempt := 0; attempt < 2; attempt++ {
		var ignored map[string]bool
		var kept []string
		if classifyFull {
			if ignored, err = listIgnored(ctx, c.opts.Git, r.Path); err != nil {
				return nil, err
			}
			if useOld {
				// A captured path stays captured until it is deleted, even
				// once an ignore rule matches it: otherwise a rewind could
				// neither restore nor remove it.
				kept = keepCaptured(ignored, old.Entries)
			}
		} else if useOld {
			ignored = map[string]bool{}
			for i := range old.Entries {
				if e := &old.Entries[i]; e.Excluded {
					ignored[e.Path] = true
				}
			}
		}
		hint := 0
		if old != nil {
			hint = len(old.Entries) + 64
		}
		entries, err := walkRoot(ctx, r, ignored, fixed, fi, hint)
		if err != nil {
			return nil, err
		}
		if len(kept) > 0 {
			// Below a captured directory that git now ignores, what is
			// new is classified path by path.
			if entries, err = classifyBelow(ctx, c.opts.Git, r.Path, old.Entries, entries, kept); err != nil {
				return nil, err
			}
		}
		if gd && !classifyFull {
			// Paths new since the last capture are classified now; a changed
			// .gitignore reclassifies the whole root.
			fresh, gitignoreChanged := freshPaths(old.Entries, entries)
			if gitignoreChanged {
				classifyFull = true
				continue
			}
			ign, err := checkIgnored(ctx, c.opts.Git, r.Path, fresh)
			if err != nil {
				return nil, err
			}
			if len(ign) > 0 {
				entries = applyIgnored(entries, ign)
			}
		}
		p.state.Entries = entries
		break
	}
	p.full = !useOld
	p.plan(old, start)
	return p, nil
}

// AgentdiffDir is agentdiff's evidence store: never captured, never
// changed by a rewind, at any depth of any root.
const AgentdiffDir = ".agentdiff"

// fixedExcludes returns the paths below r (relative to it) that are never
// captured whatever the ignore rules say: the changelog's own directory and
// Options.Exclude.
func (c *Changelog) fixedExcludes(r Root) map[string]bool {
	var out map[string]bool
	for _, p := range append([]string{c.dir}, c.opts.Exclude...) {
		if p == "" || p == r.Path || !within(p, r.Path) {
			continue
		}
		if out == nil {
			out = map[string]bool{}
		}
		out[p[len(r.Path)+1:]] = true
	}
	return out
}

// walkRoot lists the root (its own entry first, Path "") in walk order,
// recording excluded entries (.git in a git root, .agentdiff, the fixed
// exclusions and the ignored paths) without descending into them, through
// scan.List (no-follow, directory fds, several directories at once). The
// root must still be the directory rootInfo describes.
func walkRoot(ctx context.Context, r Root, ignored, fixed map[string]bool, rootInfo fs.FileInfo, sizeHint int) ([]entry, error) {
	list, err := scan.List(ctx, r.Path, scan.ListOptions{Skip: func(rel string, isDir bool) bool {
		base := path.Base(rel)
		return (r.Git && base == ".git") || base == AgentdiffDir || ignored[rel] || fixed[rel]
	}})
	if err != nil {
		return nil, err
	}
	if st, ok := rootInfo.Sys().(*syscall.Stat_t); ok && (uint64(st.Dev) != list[0].Dev || st.Ino != list[0].Ino) {
		return nil, fmt.Errorf("capture root %s: %w", r.Path, scan.ErrChanged)
	}
	entries := make([]entry, len(list), max(sizeHint, len(list)))
	for i := range list {
		s := &list[i]
		if s.Skipped {
			entries[i] = entry{Path: s.Path, Type: s.Type, Excluded: true}
			continue
		}
		entries[i] = entry{Path: s.Path, Type: s.Type, Mode: s.Mode, Size: s.Size, MTime: s.MTime, CTime: s.CTime, Dev: s.Dev, Ino: s.Ino, Target: s.Target}
	}
	return entries, nil
}

// keepCaptured removes from ignored every path the state old captured (not
// excluded there) and returns the removed directories.
func keepCaptured(ignored map[string]bool, old []entry) []string {
	var dirs []string
	for p := range ignored {
		if e := findEntry(old, p); e != nil && !e.Excluded && e.Path != "" {
			delete(ignored, p)
			if e.Type == scan.Dir {
				dirs = append(dirs, p)
			}
		}
	}
	return dirs
}

// classifyBelow asks git which paths of entries below the directories dirs
// that old lacks are ignored, and marks them excluded.
func classifyBelow(ctx context.Context, git, root string, old, entries []entry, dirs []string) ([]entry, error) {
	var fresh []string
	for i := range entries {
		e := &entries[i]
		if e.Excluded || findEntry(old, e.Path) != nil {
			continue
		}
		for _, d := range dirs {
			if strings.HasPrefix(e.Path, d+"/") {
				fresh = append(fresh, e.Path)
				break
			}
		}
	}
	ign, err := checkIgnored(ctx, git, root, fresh)
	if err != nil || len(ign) == 0 {
		return entries, err
	}
	return applyIgnored(entries, ign), nil
}

// applyIgnored marks entries that git ignores as excluded and drops the
// contents of excluded directories.
func applyIgnored(entries []entry, ign map[string]bool) []entry {
	out := entries[:0]
	excludedDir := ""
	for _, e := range entries {
		if excludedDir != "" && len(e.Path) > len(excludedDir) && e.Path[:len(excludedDir)+1] == excludedDir+"/" {
			continue
		}
		excludedDir = ""
		if ign[e.Path] {
			e = entry{Path: e.Path, Type: e.Type, Excluded: true}
			if e.Type == scan.Dir {
				excludedDir = e.Path
			}
		}
		out = append(out, e)
	}
	return out
}

// mergeEntries walks two walk-ordered lists together, calling fn with the
// entry of each side (nil when a path is on one side only).
// freshPaths returns the paths of cur that old lacks (excluded ones left
// out), to be classified, and whether a .gitignore appeared, went or
// changed, which reclassifies the whole root.
func freshPaths(old, cur []entry) (fresh []string, gitignoreChanged bool) {
	mergeEntries(old, cur, func(o, n *entry) {
		switch {
		case n != nil && o == nil:
			if !n.Excluded {
				fresh = append(fresh, n.Path)
			}
			if path.Base(n.Path) == ".gitignore" {
				gitignoreChanged = true
			}
		case o != nil && n == nil:
			if path.Base(o.Path) == ".gitignore" {
				gitignoreChanged = true
			}
		case path.Base(n.Path) == ".gitignore" && !sameStat(o, n):
			gitignoreChanged = true
		}
	})
	return fresh, gitignoreChanged
}

func mergeEntries(old, cur []entry, fn func(o, n *entry)) {
	i, j := 0, 0
	for i < len(old) || j < len(cur) {
		switch {
		case j >= len(cur):
			fn(&old[i], nil)
			i++
		case i >= len(old):
			fn(nil, &cur[j])
			j++
		default:
			switch c := comparePaths(old[i].Path, cur[j].Path); {
			case c < 0:
				fn(&old[i], nil)
				i++
			case c > 0:
				fn(nil, &cur[j])
				j++
			default:
				fn(&old[i], &cur[j])
				i++
				j++
			}
		}
	}
}

// sameStat reports whether the walk found a path as the state recorded it:
// type, mode, size, mtime, ctime (0 in states written before it was
// recorded), device and inode, symlink target and exclusion.
func sameStat(o, n *entry) bool {
	return o.Type == n.Type && o.Mode == n.Mode && o.Size == n.Size && o.MTime == n.MTime &&
		(o.CTime == n.CTime || o.CTime == 0 || n.CTime == 0) &&
		o.Ino == n.Ino && o.Dev == n.Dev && o.Target == n.Target && o.Excluded == n.Excluded
}

// parentOf returns the parent of a clean relative path ("" for a top-level
// name), without allocating.
func parentOf(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}

// plan decides which directories to dump and which files to store.
func (p *rootPlan) plan(old *rootState, start time.Time) {
	ents := p.state.Entries
	index := make(map[string]int, 64)
	dumpSet := map[string]bool{}
	mark := func(dir string) { dumpSet[dir] = true }
	if p.full {
		for i := range ents {
			e := &ents[i]
			if e.Excluded {
				continue
			}
			switch e.Type {
			case scan.Dir:
				mark(e.Path)
			case scan.File, scan.Symlink:
				p.files = append(p.files, i)
			}
		}
	} else {
		j := 0
		mergeEntries(old.Entries, ents, func(o, n *entry) {
			if n != nil {
				defer func() { j++ }()
			}
			switch {
			case n == nil:
				if !o.Excluded {
					p.deleted++
					mark(parentOf(o.Path))
				}
			case o == nil || o.Excluded != n.Excluded || o.Type != n.Type:
				if o != nil && !o.Excluded {
					p.deleted++
				}
				if n.Path != "" {
					mark(parentOf(n.Path))
				}
				if n.Excluded {
					return
				}
				switch n.Type {
				case scan.Dir:
					mark(n.Path)
				case scan.File, scan.Symlink:
					p.files = append(p.files, j)
				}
			case n.Excluded:
			case n.Type == scan.Dir:
				if o.Mode != n.Mode {
					mark(n.Path)
				}
			case n.Type == scan.File:
				if p.conv && isTranscriptFile(n.Path) {
					// Append-only transcripts: a grown file of the same
					// identity stores only its new bytes.
					if !sameStat(o, n) {
						if canAppend(o, n) {
							p.appends = append(p.appends, appendPlan{idx: j, offset: o.Size, tail: o.Tail})
						} else {
							p.files = append(p.files, j)
						}
					} else {
						n.Tail = o.Tail
					}
					return
				}
				if !sameStat(o, n) || (o.Hash != nil && !hashMatches(p.root.Path, n.Path, o.Hash)) {
					p.files = append(p.files, j)
				} else if o.Hash != nil && time.Unix(0, n.MTime).After(start.Add(-racyWindow)) {
					n.Hash = o.Hash // still racy: verify again next time
				}
			case n.Type == scan.Symlink:
				if o.Target != n.Target || o.Mode != n.Mode {
					p.files = append(p.files, j)
				}
			}
		})
	}
	// A deleted directory's parent may itself be gone; dump only the
	// directories that exist now.
	for i := range ents {
		e := &ents[i]
		if dumpSet[e.Path] && e.Type == scan.Dir && !e.Excluded {
			p.dirs = append(p.dirs, i)
			index[e.Path] = i
		}
	}
	p.children = make(map[int][]int, len(p.dirs))
	for i := 1; i < len(ents); i++ {
		par := parentOf(ents[i].Path)
		if dumpSet[par] {
			if pi, ok := index[par]; ok {
				p.children[pi] = append(p.children[pi], i)
			}
		}
	}
}

func hashMatches(root, rel string, want *[32]byte) bool {
	f, err := scan.OpenFile(root, rel)
	if err != nil {
		return false
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return false
	}
	var got [32]byte
	copy(got[:], h.Sum(nil))
	return got == *want
}

func memberName(prefix, rel string) string {
	if rel == "" {
		return prefix
	}
	return prefix + "/" + rel
}

// writeIncrement writes the metadata, then every dumped directory, then the
// stored files and symlinks, as GNU tar orders an incremental archive. Files
// are opened one at a time; one that vanished or was replaced since the walk
// is left out and forgotten by the state (the next capture sees it afresh),
// any other read failure fails the capture.
func writeIncrement(ctx context.Context, w io.Writer, meta *incmeta.Meta, plans []*rootPlan, start time.Time) error {
	aw := newArchiveWriter(w)
	uid, gid := os.Geteuid(), os.Getegid()
	for _, p := range plans {
		meta.Deleted += p.deleted
		for _, i := range p.files {
			e := &p.state.Entries[i]
			meta.Files++
			if e.Type == scan.File {
				meta.Bytes += e.Size
			}
		}
	}
	conv, appends, err := planTranscripts(plans, meta)
	if err != nil {
		return err
	}
	if err := aw.meta(meta); err != nil {
		return err
	}
	for _, p := range plans {
		stored := make(map[int]bool, len(p.files))
		for _, i := range p.files {
			stored[i] = true
		}
		for _, di := range p.dirs {
			d := &p.state.Entries[di]
			var list []dumpEntry
			for _, ci := range p.children[di] {
				ce := &p.state.Entries[ci]
				flag := byte(flagNotInArchive)
				switch {
				case ce.Excluded:
				case ce.Type == scan.Dir:
					flag = flagDirectory
				case stored[ci]:
					flag = flagInArchive
				}
				list = append(list, dumpEntry{Flag: flag, Name: path.Base(ce.Path)})
			}
			if err := aw.dumpdir(memberName(p.prefix, d.Path), d.Mode, time.Unix(0, d.MTime), uid, gid, list); err != nil {
				return err
			}
		}
	}
	h := sha256.New()
	for _, p := range plans {
		for _, i := range p.files {
			if err := ctx.Err(); err != nil {
				return err
			}
			e := &p.state.Entries[i]
			name := memberName(p.prefix, e.Path)
			if e.Type == scan.Symlink {
				if err := aw.symlink(name, e.Mode, time.Unix(0, e.MTime), uid, gid, e.Target); err != nil {
					return err
				}
				continue
			}
			if it := conv[e]; it != nil {
				if err := it.write(aw, name, uid, gid); err != nil {
					return err
				}
				continue
			}
			if err := writeFileMember(aw, p.root.Path, name, e, start, h); err != nil {
				return err
			}
		}
	}
	// Appended transcript bytes come last, in members of the metadata
	// directory: GNU tar lists them and leaves them out of an extraction
	// that excludes that directory, as the documented command does.
	for _, it := range appends {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := it.write(aw, "", uid, gid); err != nil {
			return err
		}
	}
	return aw.close()
}

// writeFileMember stores one regular file and records in e what was stored.
func writeFileMember(aw *archiveWriter, root, name string, e *entry, start time.Time, h hash.Hash) error {
	f, err := scan.OpenFile(root, e.Path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, scan.ErrChanged) || errors.Is(err, scan.ErrNotRegular) ||
			errors.Is(err, scan.ErrSymlink) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ELOOP) {
			e.Type = scan.Other // changed since the walk: the next capture sees it afresh
			return nil
		}
		return fmt.Errorf("read %s: %w", e.Path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", e.Path, err)
	}
	fuid, fgid := os.Geteuid(), os.Getegid()
	st, ok := fi.Sys().(*syscall.Stat_t)
	if ok {
		fuid, fgid = int(st.Uid), int(st.Gid)
	}
	var r io.Reader = f
	racy := fi.ModTime().After(start.Add(-racyWindow))
	if racy {
		h.Reset()
		r = io.TeeReader(f, h)
	}
	mode := fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	short, err := aw.file(name, mode, fi.ModTime(), fuid, fgid, fi.Size(), r)
	if err != nil {
		return err
	}
	// Record what was stored, not what the walk saw.
	e.Mode, e.Size, e.MTime = mode, fi.Size(), fi.ModTime().UnixNano()
	if ok {
		e.Dev, e.Ino, e.CTime = uint64(st.Dev), st.Ino, fsutil.SysCtimeNS(st)
	}
	e.Hash = nil
	switch {
	case short:
		e.Type = scan.Other // truncated while read: capture it again next time
	case racy:
		var sum [32]byte
		copy(sum[:], h.Sum(nil))
		e.Hash = &sum
	}
	return nil
}
