package changelog

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"
	"golang.org/x/sys/unix"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/agentscm/agentscm/internal/scan"
)

// ErrNoIncrement reports a rewind target with no stored increment.
var ErrNoIncrement = errors.New("no increment stored at that position")

// ApplyRequest asks to rewind the capture roots to a position.
type ApplyRequest struct {
	To        int
	SessionID string
	// AfterExtract, when set, runs once the increments are extracted and
	// before the resulting state is captured: the place to drop capture
	// hooks restored from a captured .claude/settings*.json.
	AfterExtract func(ctx context.Context, roots []Root) error
	// BeforeExtract, when set, runs once the increments are validated and
	// before anything changes, with the metadata of the increment rewound
	// to: the place to read what the rewind will replace (the live
	// transcript a resumed conversation continues).
	BeforeExtract func(ctx context.Context, target incmeta.Meta) error
	// Force rewinds although paths it changes were changed after the
	// newest captured position (the undo point still holds them).
	Force bool
	// DryRun computes what the rewind would create, modify and delete
	// (ApplyResult.Effects) and changes nothing: no increment is stored.
	DryRun bool
	// DiscardOutsideEdits rewinds although it changes or deletes work done
	// outside the agent after the target position (outside increments;
	// the undo point still holds it).
	DiscardOutsideEdits bool

	// later are the increments after the target (Apply reads them).
	later []laterIncrement
}

// ApplyResult reports a rewind.
type ApplyResult struct {
	// PreApply holds the state before the rewind: applying up to its
	// position undoes the rewind.
	PreApply *Increment
	Applied  []int
	// Target is the metadata of the increment rewound to: its SessionID is
	// the session whose transcript a resumed conversation continues.
	Target incmeta.Meta
	// Result holds the state the rewind produced, so the sequence stays
	// replayable from position 0.
	Result *Increment
	// Conflicts are the paths changed after the newest captured position
	// that the rewind changes (with Force it went ahead; without it, the
	// rewind was refused with a *ChangedError).
	Conflicts []PathChange
	// Outside is the work done outside the agent after the target (see
	// CaptureOutside) that the rewind changes (with DiscardOutsideEdits it
	// went ahead; without it, the rewind was refused).
	Outside []PathChange
	// Unrestorable lists what the rewind cannot restore to its state at
	// the target (the rewind is then partial): a symlink whose target lies
	// outside every capture root, a conversation root withheld from the
	// Hub, a transcript part that does not chain.
	Unrestorable []Unrestorable
	// Effects, for a dry run, lists every path the rewind would create,
	// modify or delete.
	Effects []PathChange
	DryRun  bool
}

// Apply rewinds the capture roots to position req.To: it validates every
// increment 0..To first (refusing one that is not a readable archive with
// ErrUnreadableArchive, or a hostile one, before anything is written),
// captures the current state as its own increment, extracts the increments
// in order with their deletions and removed roots, and captures the result.
func (c *Changelog) Apply(ctx context.Context, req ApplyRequest) (*ApplyResult, error) {
	lk, err := c.lock()
	if err != nil {
		return nil, err
	}
	defer lk.Unlock()
	st, err := c.stateForCapture()
	if err != nil {
		return nil, err
	}
	pos, err := c.positions()
	if err != nil {
		return nil, err
	}
	var paths []string
	var applied []int
	found := false
	for _, p := range pos {
		if p > req.To {
			m, err := ReadMeta(c.incrementPath(p))
			if err != nil {
				// A later increment is not replayed; without its metadata
				// it names no outside work (list shows it unreadable).
				if !found {
					return nil, fmt.Errorf("%w: %d", ErrNoIncrement, req.To)
				}
				continue
			}
			if !found {
				for _, h := range m.Holds {
					if h.Position == req.To {
						return nil, fmt.Errorf("%w: %d (its increment was not stored: %s; increment %d carries its writes together with its own)", ErrNoIncrement, req.To, h.Error, p)
					}
				}
				return nil, fmt.Errorf("%w: %d", ErrNoIncrement, req.To)
			}
			req.later = append(req.later, laterIncrement{Position: p, Kind: m.Kind, Changes: m.Changes})
			continue
		}
		paths = append(paths, c.incrementPath(p))
		applied = append(applied, p)
		found = found || p == req.To
	}
	if !found {
		return nil, fmt.Errorf("%w: %d", ErrNoIncrement, req.To)
	}
	to := req.To
	return c.applyLocked(ctx, paths, applied, req, st, "agentscm changelog apply", &to)
}

// ApplyFiles is Apply with the increments of another sequence (positions
// 0..req.To in order, such as a Work's downloaded from the Hub): they are
// validated first, the current state is stored as this changelog's next
// increment (the undo), they are extracted, and the result is stored too.
func (c *Changelog) ApplyFiles(ctx context.Context, paths []string, req ApplyRequest) (*ApplyResult, error) {
	lk, err := c.lock()
	if err != nil {
		return nil, err
	}
	defer lk.Unlock()
	st, err := c.stateForCapture()
	if err != nil {
		return nil, err
	}
	if len(paths) != req.To+1 {
		return nil, fmt.Errorf("%w: %d increments given for positions 0..%d", ErrNoIncrement, len(paths), req.To)
	}
	applied := make([]int, len(paths))
	for i := range applied {
		applied[i] = i
	}
	to := req.To
	return c.applyLocked(ctx, paths, applied, req, st, "agentscm changelog apply", &to)
}

// ApplySnapshot restores the snapshot at path (SaveSnapshot) into the roots
// as a rewind does: validated first, checked against the newest captured
// position (req.Force, req.DryRun), the current state stored as the undo
// point, the snapshot extracted, the result stored. req.To is ignored.
func (c *Changelog) ApplySnapshot(ctx context.Context, path string, req ApplyRequest) (*ApplyResult, error) {
	lk, err := c.lock()
	if err != nil {
		return nil, err
	}
	defer lk.Unlock()
	st, err := c.stateForCapture()
	if err != nil {
		return nil, err
	}
	return c.applyLocked(ctx, []string{path}, nil, req, st, "agentscm snapshot load", nil)
}

// applyLocked validates and extracts paths under the changelog lock; st is
// the state loaded once by the caller and reused for both captures. In
// order: every archive is read and validated; the roots are scanned against
// st (the scan the undo point stores); the extraction is simulated over that
// scan, leaving excluded paths alone; the paths changed since st that it
// would change refuse the rewind unless req.Force; a dry run stops there.
// Only then is anything written: the undo point, the extraction, the result.
func (c *Changelog) applyLocked(ctx context.Context, paths []string, applied []int, req ApplyRequest, st *captureState, tool string, appliedTo *int) (*ApplyResult, error) {
	// Conversation roots are extracted aside and merged (transcript.go):
	// a rewind never deletes a conversation. A staging directory found
	// here, under the lock, was left by a crashed apply.
	if old, _ := filepath.Glob(filepath.Join(c.dir, ".staging-*")); len(old) > 0 {
		for _, d := range old {
			os.RemoveAll(d)
		}
	}
	roots, staged, cleanup, err := stageConversation(c.opts.Roots, c.dir)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	rp, err := readReplay(ctx, paths, roots)
	if err != nil {
		return nil, err
	}
	defer rp.close()
	sc, err := c.scanLocked(ctx, st)
	if err != nil {
		return nil, fmt.Errorf("scan the state before the rewind: %w", err)
	}
	rp.prot, rp.disk = newProtection(sc.plans), newScanDisk(sc.plans)
	for name := range staged {
		// A staged conversation root is extracted into an empty staging
		// directory, not onto the live root the scan saw.
		delete(rp.disk.entries, name)
	}
	if err := rp.simulate(); err != nil {
		return nil, err
	}
	target := rp.archives[len(rp.archives)-1].a.Meta
	conflicts, err := rp.conflicts(sc)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, r := range c.opts.Roots {
		names = append(names, r.Name)
	}
	outside, err := rp.outsideConflicts(sc, planOutside(req.later, names))
	if err != nil {
		return nil, err
	}
	res := &ApplyResult{Applied: applied, Target: target, Conflicts: conflicts, Outside: outside, Unrestorable: rp.unrestorable(c.opts.Roots)}
	if req.DryRun {
		res.DryRun = true
		if res.Effects, err = rp.dryEffects(ctx, sc, c.opts.Roots, staged, rewoundSession(target)); err != nil {
			return nil, err
		}
		return res, nil
	}
	refused := &ChangedError{Position: st.LastPosition, Target: req.To}
	if len(conflicts) > 0 && !req.Force {
		refused.Paths = conflicts
	}
	if len(outside) > 0 && !req.DiscardOutsideEdits {
		refused.Outside = outside
	}
	if len(refused.Paths)+len(refused.Outside) > 0 {
		return nil, refused
	}
	if req.BeforeExtract != nil {
		if err := req.BeforeExtract(ctx, target); err != nil {
			return nil, err
		}
	}
	// The undo point takes the next free position: after a lost call's
	// too, whose writes it then carries (and says so).
	pre, st, err := c.storeLocked(ctx, sc, CaptureRequest{Position: -1, SessionID: req.SessionID, Tool: tool, holes: c.loadHoles()}, KindPreApply, nil)
	if err != nil {
		return nil, fmt.Errorf("capture the state before the rewind: %w", err)
	}
	if len(pre.Meta.Holds) > 0 {
		c.clearHoles()
	}
	res.PreApply = pre
	err = rp.extract(ctx)
	if err == nil && !c.opts.ConversationRefs {
		// In metadata-only mode the agent's transcripts stay as they
		// are, even where older increments hold copies.
		err = mergeConversations(c.opts.Roots, staged, rewoundSession(target))
	}
	if err != nil {
		return res, fmt.Errorf("rewind (undo with --to %d): %w", pre.Position, err)
	}
	if req.AfterExtract != nil {
		if err := req.AfterExtract(ctx, c.opts.Roots); err != nil {
			return res, err
		}
	}
	post, _, err := c.captureLocked(ctx, CaptureRequest{Position: pre.Position + 1, SessionID: req.SessionID, Tool: tool}, KindApply, appliedTo, st)
	if err != nil {
		return res, fmt.Errorf("capture the rewound state: %w", err)
	}
	res.Result = post
	return res, nil
}

// Replay validates the increments at paths (in order) and extracts them into
// roots, matched by name: the way to restore onto a fresh directory. Nothing
// is written unless every increment validates.
func Replay(ctx context.Context, paths []string, roots []Root) error {
	sroots, staged, cleanup, err := stageConversation(roots, "")
	if err != nil {
		return err
	}
	defer cleanup()
	rp, err := prepareReplay(ctx, paths, sroots)
	if err != nil {
		return err
	}
	defer rp.close()
	if err := rp.extract(ctx); err != nil {
		return err
	}
	if len(rp.archives) == 0 {
		return nil
	}
	return mergeConversations(roots, staged, rewoundSession(rp.archives[len(rp.archives)-1].a.Meta))
}

// rewoundSession is the session whose transcript a rewind to target cuts:
// the target tool call's session; none for any other increment (an undo
// restores, it never cuts).
func rewoundSession(target incmeta.Meta) string {
	if target.Kind == KindCall {
		return target.SessionID
	}
	return ""
}

type replayArchive struct {
	path string
	f    *os.File
	a    *Archive
}

type replay struct {
	roots    map[string]Root
	archives []*replayArchive
	// prot, when set, holds the paths the replay leaves alone (see
	// protection); disk, when set, answers what is on disk from a scan
	// instead of an lstat per path.
	prot *protection
	disk *scanDisk
	// sim is the simulated result, once simulate ran.
	sim *overlay
	// only, when set, limits an extraction to these roots (a dry run
	// extracts the staged conversation roots alone).
	only map[string]bool
}

func (rp *replay) close() {
	for _, a := range rp.archives {
		a.f.Close()
	}
}

func prepareReplay(ctx context.Context, paths []string, roots []Root) (*replay, error) {
	rp, err := readReplay(ctx, paths, roots)
	if err != nil {
		return nil, err
	}
	if err := rp.simulate(); err != nil {
		rp.close()
		return nil, err
	}
	return rp, nil
}

// readReplay reads and validates every archive at paths (in order), without
// simulating their extraction yet.
func readReplay(ctx context.Context, paths []string, roots []Root) (*replay, error) {
	mroots, err := metaRoots(roots)
	if err != nil {
		return nil, err
	}
	rp := &replay{roots: map[string]Root{}}
	for _, r := range roots {
		rp.roots[r.Name] = r
	}
	ok := false
	defer func() {
		if !ok {
			rp.close()
		}
	}()
	budget := int64(holdBudget)
	for _, p := range paths {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("open increment %s: %w", p, err)
		}
		a, err := readArchiveHolding(f, mroots, &budget)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("increment %s: %w", path.Base(p), err)
		}
		rp.archives = append(rp.archives, &replayArchive{path: p, f: f, a: a})
	}
	ok = true
	return rp, nil
}

// Kinds of objects in the simulated tree.
type vkind uint8

const (
	vUnknown vkind = iota
	vGone
	vDir
	vFile
	vSymlink
	vOther
)

// overlay simulates the extraction over the current disk so that hostile
// sequences (a member through a symlink or below a file) are refused before
// anything is written.
type overlay struct {
	roots    map[string]Root
	kinds    map[string]vkind
	children map[string][]string // keys with a kinds entry, by parent key
	listing  map[string]map[string]byte
	fresh    map[string]bool // directories created anew: their disk contents are gone
	rootGone map[string]bool
	// sizes tracks the transcripts the sequence stored: local bytes (what
	// the next appended part must start at) and the bytes on disk.
	sizes map[string][2]int64
	// src is the member that writes each simulated file or symlink (what
	// the path holds once extracted).
	src  map[string]memberRef
	prot *protection
	disk *scanDisk // nil: lstat the disk
	// withheld holds the secret files an uploaded increment named without
	// their bytes, by key, until a later member stores the path.
	withheld map[string]incmeta.WithheldFile
}

// memberRef is one member of one archive of a replay.
type memberRef struct {
	ra *replayArchive
	m  *Member
}

func vkey(root, rel string) string { return root + "\x00" + rel }

func diskKind(root Root, rel string) vkind {
	if rel == "" {
		fi, err := os.Lstat(root.Path)
		switch {
		case err != nil:
			return vGone
		case fi.IsDir():
			return vDir
		default:
			return vOther
		}
	}
	e, err := scan.Lstat(root.Path, rel)
	if err != nil {
		return vGone
	}
	switch e.Type {
	case scan.Dir:
		return vDir
	case scan.File:
		return vFile
	case scan.Symlink:
		return vSymlink
	}
	return vOther
}

// diskKind is what the disk held at the start of the replay.
func (o *overlay) diskKind(root, rel string) vkind {
	if o.disk == nil {
		return diskKind(o.roots[root], rel)
	}
	return o.disk.kind(root, rel)
}

// emptied records that the directory rel, which holds protected paths,
// stays a directory whose other contents are purged.
func (o *overlay) emptied(root, rel string) {
	k := vkey(root, rel)
	o.dropBelow(k)
	if _, ok := o.kinds[k]; !ok && rel != "" {
		pk := vkey(root, parentOf(rel))
		o.children[pk] = append(o.children[pk], rel)
	}
	o.kinds[k] = vDir
	delete(o.src, k)
	o.listing[k] = map[string]byte{}
}

func (o *overlay) lookup(root, rel string) vkind {
	k := vkey(root, rel)
	if rel == "" {
		if v, ok := o.kinds[k]; ok {
			return v
		}
		if o.rootGone[root] {
			return vGone
		}
		return o.diskKind(root, "")
	}
	par := parentOf(rel)
	if o.lookup(root, par) != vDir {
		return vGone
	}
	if v, ok := o.kinds[k]; ok {
		return v
	}
	pk := vkey(root, par)
	if o.fresh[pk] {
		return vGone
	}
	d := o.diskKind(root, rel)
	if l, ok := o.listing[pk]; ok {
		v := purged(l, path.Base(rel), d)
		if v == vGone && d != vGone && o.prot.keep(root, rel) {
			if o.prot.protected(root, rel) {
				return d
			}
			if d == vDir {
				o.emptied(root, rel)
				return vDir
			}
		}
		return v
	}
	return d
}

// purged applies GNU tar's purge rule: an entry not listed in its
// directory's dumpdir, a 'D' entry that is not a directory and a 'Y' entry
// that is one are removed.
func purged(l map[string]byte, name string, k vkind) vkind {
	flag, ok := l[name]
	if !ok || (flag == flagDirectory && k != vDir) || (flag == flagInArchive && k == vDir) {
		return vGone
	}
	return k
}

func (o *overlay) set(root, rel string, v vkind) {
	k := vkey(root, rel)
	o.dropBelow(k)
	delete(o.sizes, k)
	delete(o.src, k)
	if _, ok := o.kinds[k]; !ok && rel != "" {
		pk := vkey(root, parentOf(rel))
		o.children[pk] = append(o.children[pk], rel)
	}
	o.kinds[k] = v
}

// cache remembers a looked-up kind without changing the simulated tree, so
// deep paths are resolved once.
func (o *overlay) cache(root, rel string, v vkind) {
	k := vkey(root, rel)
	if _, ok := o.kinds[k]; ok {
		return
	}
	if rel != "" {
		pk := vkey(root, parentOf(rel))
		o.children[pk] = append(o.children[pk], rel)
	}
	o.kinds[k] = v
}

// dropBelow forgets everything simulated below key k.
func (o *overlay) dropBelow(k string) {
	root, _, _ := strings.Cut(k, "\x00")
	for _, rel := range o.children[k] {
		ck := vkey(root, rel)
		o.dropBelow(ck)
		delete(o.kinds, ck)
		delete(o.sizes, ck)
		delete(o.src, ck)
	}
	delete(o.children, k)
	delete(o.listing, k)
	delete(o.fresh, k)
}

// simulate runs the extraction over the disk (or the scan rp.disk) in
// memory, leaving rp.prot's paths alone as the extraction does: it refuses
// hostile sequences and records in rp.sim what every path becomes.
func (rp *replay) simulate() error {
	o := &overlay{
		roots: rp.roots, kinds: map[string]vkind{}, children: map[string][]string{},
		listing: map[string]map[string]byte{}, fresh: map[string]bool{}, rootGone: map[string]bool{},
		sizes: map[string][2]int64{},
		src:   map[string]memberRef{}, prot: rp.prot, disk: rp.disk,
		withheld: map[string]incmeta.WithheldFile{},
	}
	rp.sim = o
	for _, ra := range rp.archives {
		for _, name := range ra.a.Meta.RemovedRoots {
			if _, ok := rp.roots[name]; !ok {
				return fmt.Errorf("increment %s: %w: removed root %q is not configured", path.Base(ra.path), ErrUnreadableArchive, name)
			}
			if o.prot.holds(name, "") {
				// Its protected paths stay: the root is emptied instead.
				o.emptied(name, "")
				continue
			}
			o.set(name, "", vGone)
			o.rootGone[name] = true
		}
		for mi := range ra.a.Members {
			m := &ra.a.Members[mi]
			if rp.prot.skips(m) {
				continue
			}
			// Every ancestor must be (or become) a directory, never a
			// symlink or a file.
			var anc []string
			if m.Rel != "" {
				for p := parentOf(m.Rel); ; p = parentOf(p) {
					anc = append(anc, p)
					if p == "" {
						break
					}
				}
			}
			slices.Reverse(anc)
			for _, a := range anc {
				switch o.lookup(m.Root, a) {
				case vDir:
					o.cache(m.Root, a, vDir)
				case vGone:
					o.set(m.Root, a, vDir)
					o.fresh[vkey(m.Root, a)] = true
				case vSymlink:
					return fmt.Errorf("increment %s: %w: member %q traverses the symlink %q", path.Base(ra.path), ErrUnreadableArchive, m.Name, memberName(m.Root, a))
				default:
					return fmt.Errorf("increment %s: %w: member %q lies below the non-directory %q", path.Base(ra.path), ErrUnreadableArchive, m.Name, memberName(m.Root, a))
				}
			}
			switch m.Type {
			case typeDumpdir:
				// Renames run first, as GNU tar replays them before purging.
				for _, rn := range m.Renames {
					if o.prot.keep(m.Root, rn.From) || o.prot.keep(m.Root, rn.To) {
						continue // the extraction skips it too
					}
					for _, p := range []string{rn.From, rn.To} {
						for a := parentOf(p); ; a = parentOf(a) {
							if v := o.lookup(m.Root, a); v == vSymlink {
								return fmt.Errorf("increment %s: %w: rename %q traverses the symlink %q", path.Base(ra.path), ErrUnreadableArchive, p, a)
							}
							if a == "" {
								break
							}
						}
					}
					if o.lookup(m.Root, rn.From) == vDir {
						o.set(m.Root, rn.To, vDir)
						o.fresh[vkey(m.Root, rn.To)] = true
						o.set(m.Root, rn.From, vGone)
					}
				}
				k := vkey(m.Root, m.Rel)
				if o.lookup(m.Root, m.Rel) != vDir {
					o.set(m.Root, m.Rel, vDir)
					o.fresh[k] = true
				}
				l := make(map[string]byte, len(m.Dumpdir))
				for _, d := range m.Dumpdir {
					l[d.Name] = d.Flag
				}
				for _, rel := range slices.Clone(o.children[k]) {
					ck := vkey(m.Root, rel)
					if v := purged(l, path.Base(rel), o.kinds[ck]); v == vGone {
						if o.prot.keep(m.Root, rel) {
							if !o.prot.protected(m.Root, rel) && o.kinds[ck] == vDir {
								o.emptied(m.Root, rel)
							}
							continue
						}
						o.dropBelow(ck)
						o.kinds[ck] = vGone
						delete(o.sizes, ck)
						delete(o.src, ck)
					}
				}
				o.listing[k] = l
			case tar.TypeReg:
				delete(o.withheld, vkey(m.Root, m.Rel))
				o.set(m.Root, m.Rel, vFile)
				o.sizes[vkey(m.Root, m.Rel)] = [2]int64{m.localLen(), m.Size}
				o.src[vkey(m.Root, m.Rel)] = memberRef{ra: ra, m: m}
			case typeAppend:
				// An appended part extends the copy the sequence stored
				// before it, which must be exactly its offset long.
				k := vkey(m.Root, m.Rel)
				sz, ok := o.sizes[k]
				if (o.lookup(m.Root, m.Rel) != vFile || !ok || sz[0] != m.part.Offset) && ra.a.Meta.Conversation == incmeta.ConvRedacted {
					// An uploaded form shares a session's transcript only
					// while the session is shared: after the mode went
					// down and up again its parts no longer chain. The
					// copy stays as the sequence last held it.
					m.skip = true
					delete(o.sizes, k)
					continue
				}
				if o.lookup(m.Root, m.Rel) != vFile || !ok || sz[0] != m.part.Offset {
					have := "no stored copy"
					if ok {
						have = fmt.Sprintf("a stored copy of %d bytes", sz[0])
					}
					return fmt.Errorf("increment %s: %w: transcript part %q appends at byte %d of %q, but the increments before it hold %s", path.Base(ra.path), ErrUnreadableArchive, m.arch, m.part.Offset, m.Name, have)
				}
				ra.a.Members[mi].expect = sz[1]
				o.sizes[k] = [2]int64{sz[0] + m.part.Length, sz[1] + m.Size}
			case tar.TypeSymlink:
				delete(o.withheld, vkey(m.Root, m.Rel))
				o.set(m.Root, m.Rel, vSymlink)
				o.src[vkey(m.Root, m.Rel)] = memberRef{ra: ra, m: m}
			}
		}
		for _, w := range ra.a.Meta.WithheldFiles {
			if _, ok := rp.roots[w.Root]; ok && !rp.prot.keep(w.Root, w.Path) {
				o.withheld[vkey(w.Root, w.Path)] = w
			}
		}
	}
	return nil
}

// extract replays every archive in order.
func (rp *replay) extract(ctx context.Context) error {
	for _, ra := range rp.archives {
		if err := rp.extractOne(ctx, ra); err != nil {
			return fmt.Errorf("extract %s: %w", path.Base(ra.path), err)
		}
	}
	return nil
}

type dirTime struct {
	root  string
	rel   string
	mtime time.Time
}

func (rp *replay) extractOne(ctx context.Context, ra *replayArchive) error {
	for _, name := range ra.a.Meta.RemovedRoots {
		if rp.only != nil && !rp.only[name] {
			continue
		}
		if rp.prot.holds(name, "") {
			if err := rp.emptyRoot(name); err != nil {
				return fmt.Errorf("empty capture root %s: %w", name, err)
			}
			continue
		}
		if err := os.RemoveAll(rp.roots[name].Path); err != nil {
			return fmt.Errorf("remove capture root %s: %w", name, err)
		}
	}
	// An archive whose contents were held while validating is not read
	// again.
	var tr *tar.Reader
	if !ra.a.held {
		if _, err := ra.f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		gz, err := gzip.NewReader(ra.f)
		if err != nil {
			return err
		}
		defer gz.Close()
		gz.Multistream(false)
		tr = tar.NewReader(gz)
	}
	opened := map[string]*os.Root{}
	defer func() {
		for _, r := range opened {
			r.Close()
		}
	}()
	openRoot := func(name string) (*os.Root, error) {
		if r, ok := opened[name]; ok {
			return r, nil
		}
		p := rp.roots[name].Path
		if err := os.MkdirAll(p, 0o755); err != nil {
			return nil, err
		}
		r, err := os.OpenRoot(p)
		if err != nil {
			return nil, err
		}
		opened[name] = r
		return r, nil
	}
	var dirTimes []dirTime
	cache := &dirCache{}
	defer cache.drop()
	bufs := &replayBufs{}
	ordinal := 0 // of the next member tr returns
	for mi := range ra.a.Members {
		if err := ctx.Err(); err != nil {
			return err
		}
		m := &ra.a.Members[mi]
		if tr != nil {
			var h *tar.Header
			for ; ordinal <= m.offset; ordinal++ {
				var err error
				if h, err = tr.Next(); err != nil {
					return fmt.Errorf("%w: archive changed while being applied: %v", ErrUnreadableArchive, err)
				}
			}
			if strings.TrimSuffix(h.Name, "/") != m.archName() {
				return fmt.Errorf("%w: archive changed while being applied", ErrUnreadableArchive)
			}
		}
		if rp.prot.skips(m) || (rp.only != nil && !rp.only[m.Root]) {
			continue
		}
		root, err := openRoot(m.Root)
		if err != nil {
			return err
		}
		rel := m.Rel
		if rel == "" {
			rel = "."
		}
		if m.Type == typeDumpdir {
			// Purges and renames may remove the cached directory.
			cache.drop()
			if p := parentOf(m.Rel); m.Rel != "" && p != "" {
				if err := ensureDir(root, p); err != nil {
					return err
				}
			}
			renamed := true
			for _, rn := range m.Renames {
				if rp.prot.keep(m.Root, rn.From) || rp.prot.keep(m.Root, rn.To) {
					continue // a protected path is never moved
				}
				if err := renameDir(root, rn.From, rn.To); err != nil {
					renamed = false // GNU tar then leaves the directory unpurged
				}
			}
			if err := ensureDir(root, rel); err != nil {
				return err
			}
			if renamed {
				if err := purgeDir(root, m.Root, rel, m.Dumpdir, rp.prot); err != nil {
					return err
				}
			}
			if err := root.Chmod(rel, m.Mode); err != nil {
				return err
			}
			dirTimes = append(dirTimes, dirTime{root: m.Root, rel: rel, mtime: m.ModTime})
			continue
		}
		// Files and symlinks: operate by base name inside their directory,
		// opened once for the run of members it holds.
		dir, base := parentOf(m.Rel), path.Base(m.Rel)
		dr, err := cache.get(root, m.Root, dir)
		if err != nil {
			return err
		}
		switch m.Type {
		case tar.TypeReg:
			var content io.Reader
			if m.Size <= sameCheckMax {
				data := m.data
				if tr != nil {
					data = bufs.grow(&bufs.data, int(m.Size))
					if _, err := io.ReadFull(tr, data); err != nil {
						return fmt.Errorf("%w: %s: %v", ErrUnreadableArchive, m.Name, err)
					}
				}
				same, err := sameAsDisk(cache.fd(), base, m, data, bufs)
				if err != nil {
					return err
				}
				if same {
					continue
				}
				content = bytes.NewReader(data)
			} else {
				content = io.LimitReader(tr, m.Size)
			}
			if err := removeExisting(dr, base); err != nil {
				return err
			}
			f, err := dr.OpenFile(base, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, content)
			if err == nil {
				err = f.Chmod(m.Mode)
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("write %s: %w", m.Name, err)
			}
			if err := dr.Chtimes(base, m.ModTime, m.ModTime); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := removeExisting(dr, base); err != nil {
				return err
			}
			if err := dr.Symlink(m.Linkname, base); err != nil {
				return err
			}
		case typeAppend:
			if m.skip {
				continue
			}
			var content io.Reader
			if tr != nil {
				content = io.LimitReader(tr, m.Size)
			} else {
				content = bytes.NewReader(m.data)
			}
			if err := appendPart(dr, base, m, content); err != nil {
				return err
			}
		}
	}
	// Directory times last, as GNU tar does, since extracting into a
	// directory changes its mtime.
	for i := len(dirTimes) - 1; i >= 0; i-- {
		d := dirTimes[i]
		if r, err := openRoot(d.root); err == nil {
			_ = r.Chtimes(d.rel, d.mtime, d.mtime)
		}
	}
	return nil
}

// ensureDir makes rel a directory: a non-directory there is removed.
func ensureDir(root *os.Root, rel string) error {
	fi, err := root.Lstat(rel)
	if err == nil && fi.IsDir() {
		return nil
	}
	if err == nil {
		if err := root.Remove(rel); err != nil {
			return err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return root.MkdirAll(rel, 0o755)
}

// removeExisting clears the way for a file or symlink at rel.
func removeExisting(root *os.Root, rel string) error {
	fi, err := root.Lstat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return root.RemoveAll(rel)
	}
	return root.Remove(rel)
}

// purgeDir removes what GNU tar's incremental extraction removes: entries
// not in the dumpdir, 'D' entries that are not directories and 'Y' entries
// that are. Protected paths stay, and so do the directories that hold them
// (emptied of everything else).
func purgeDir(root *os.Root, rootName, rel string, dump []dumpEntry, prot *protection) error {
	l := make(map[string]byte, len(dump))
	for _, d := range dump {
		l[d.Name] = d.Flag
	}
	return purgeListed(root, rootName, rel, l, prot)
}

// purgeListed is purgeDir against the listing l (an empty one purges every
// unprotected entry).
func purgeListed(root *os.Root, rootName, rel string, l map[string]byte, prot *protection) error {
	d, err := root.Open(rel)
	if err != nil {
		return err
	}
	// The kinds come from the directory listing (d_type), not one stat per
	// child through the root.
	ents, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return err
	}
	for _, de := range ents {
		n := de.Name()
		k := vFile
		if de.IsDir() {
			k = vDir
		}
		if purged(l, n, k) == vGone {
			child := n
			if rel != "." {
				child = rel + "/" + n
			}
			if prot.keep(rootName, child) {
				if !prot.protected(rootName, child) && k == vDir {
					if err := purgeListed(root, rootName, child, nil, prot); err != nil {
						return err
					}
				}
				continue
			}
			if err := root.RemoveAll(child); err != nil {
				return err
			}
		}
	}
	return nil
}

// renameDir replays a GNU rename, creating the target's parents when missing.
func renameDir(root *os.Root, from, to string) error {
	fi, err := root.Lstat(from)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("rename source %s is not a directory", from)
	}
	if p := parentOf(to); p != "" {
		if err := ensureDir(root, p); err != nil {
			return err
		}
	}
	return root.Rename(from, to)
}

// sameCheckMax bounds the files a replay compares with the disk before
// writing: small files whose content, mode and mtime second already match
// are left untouched (no rewrite, so git's index stays clean).
const sameCheckMax = 1 << 20

// holdBudget bounds the small-file contents a replay keeps in memory from
// validation to extraction (saving a second gunzip and parse of each
// archive that fits).
const holdBudget = 256 << 20

// sameAsDisk reports whether the regular file base in the directory dfd
// already holds data, member m's content, with the same mode
// (fixing only a differing mtime second). It works on the directory fd with
// raw syscalls (fstatat and openat without following, fstat, read): no
// per-file *os.File and no path resolution through the root.
func sameAsDisk(dfd int, base string, m *Member, data []byte, buf *replayBufs) (bool, error) {
	var st unix.Stat_t
	if unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || !sameMeta(&st, m) {
		return false, nil
	}
	fd, err := unix.Openat(dfd, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return false, nil
	}
	var fst unix.Stat_t
	if unix.Fstat(fd, &fst) != nil || fst.Ino != st.Ino || fst.Dev != st.Dev || !sameMeta(&fst, m) {
		unix.Close(fd)
		return false, nil
	}
	disk := buf.grow(&buf.disk, int(m.Size)+1)
	n := 0
	for n < len(disk) {
		k, err := unix.Read(fd, disk[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || k == 0 {
			break
		}
		n += k
	}
	unix.Close(fd)
	if n != int(m.Size) || !bytes.Equal(disk[:n], data) {
		return false, nil
	}
	if st.Mtim.Sec != m.ModTime.Unix() {
		ts := unix.NsecToTimespec(m.ModTime.UnixNano())
		if err := unix.UtimesNanoAt(dfd, base, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return false, fmt.Errorf("set the time of %s: %w", m.Name, err)
		}
	}
	return true, nil
}

// sameMeta reports whether st is a regular file of m's size and permission
// bits, without setuid, setgid or sticky bits.
func sameMeta(st *unix.Stat_t, m *Member) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size == m.Size &&
		fs.FileMode(st.Mode&0o7777) == m.Mode.Perm()
}

// replayBufs are the buffers one extraction reuses for small files.
type replayBufs struct{ data, disk []byte }

func (b *replayBufs) grow(p *[]byte, n int) []byte {
	if cap(*p) < n {
		*p = make([]byte, n, max(n, 64<<10))
	}
	return (*p)[:n]
}

// dirCache keeps the directory of the last extracted file open: members come
// grouped by directory, so each directory is resolved once per run.
type dirCache struct {
	root string
	rel  string
	r    *os.Root
	d    *os.File // the same directory, for raw *at syscalls
}

func (c *dirCache) drop() {
	if c.d != nil {
		c.d.Close()
	}
	if c.r != nil {
		c.r.Close()
	}
	*c = dirCache{}
}

func (c *dirCache) get(root *os.Root, rootName, rel string) (*os.Root, error) {
	if c.r != nil && c.root == rootName && c.rel == rel {
		return c.r, nil
	}
	c.drop()
	if rel != "" {
		if err := ensureDir(root, rel); err != nil {
			return nil, err
		}
	} else {
		rel = "."
	}
	r, err := root.OpenRoot(rel)
	if err != nil {
		return nil, err
	}
	d, err := r.Open(".")
	if err != nil {
		r.Close()
		return nil, err
	}
	if rel == "." {
		rel = ""
	}
	c.root, c.rel, c.r, c.d = rootName, rel, r, d
	return r, nil
}

// fd is the cached directory's descriptor (valid until the next get or drop).
func (c *dirCache) fd() int { return int(c.d.Fd()) }
