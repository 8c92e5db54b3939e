package changelog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/agentscm/agentscm/internal/scan"
)

// The fast capture (Capture's path): each root is listed directory by
// directory (scan.ListDirs) and each listing is compared, as bytes, with the
// stored section of that directory; only the directories that differ are
// decoded, diffed and stored. The rest of the capture (plan, increment,
// changes) runs on the sparse lists of those directories' entries, which
// hold every entry that changed; the sections of all other directories are
// carried over as stored. A Hint from a watcher narrows the listing to the
// directories it saw change. Anything the fast path does not handle (a
// first capture, a moved or removed root, changed ignore rules, a state of
// an older format) takes the full path (captureLocked).

// errFullPath makes the fast capture give way to the full one.
var errFullPath = errors.New("capture needs the full path")

// sparseInfo records how a fast capture's root state relates to the stored
// one it advances from.
type sparseInfo struct {
	base *rootState
	// dirty: directories whose sections are rebuilt from Entries (each with
	// its own entry and all its children there); gone: directories whose
	// sections (and their descendants') are removed.
	dirty map[string]bool
	gone  map[string]bool
}

// Hint narrows a capture to what a watcher saw change since the state's
// token: Dirs are re-listed (with their parents), Trees re-listed with
// everything beneath them. A nil *Hint, or one that cannot vouch, means a
// full listing.
type Hint struct {
	Dirs  []string // relative to the root, slash-separated; "" the root
	Trees []string
}

// entryOf converts a listed object to a state entry (no allocation).
func entryOf(s *scan.Stat) entry {
	if s.Skipped {
		return entry{Path: s.Path, Type: s.Type, Excluded: true}
	}
	return entry{Path: s.Path, Type: s.Type, Mode: s.Mode, Size: s.Size, MTime: s.MTime, CTime: s.CTime, Dev: s.Dev, Ino: s.Ino, Target: s.Target}
}

// captureFast tries the fast path; ok false means the full path must run
// (nothing was stored).
func (c *Changelog) captureFast(ctx context.Context, req CaptureRequest) (_ *Increment, ok bool, _ error) {
	if c.forceFull {
		return nil, false, nil
	}
	st, err := c.loadStateLazy()
	if err != nil {
		return nil, false, nil
	}
	defer st.release()
	if !st.v3 || st.LastPosition < 0 || len(st.Roots) != len(c.opts.Roots) {
		return nil, false, nil
	}
	for i, r := range c.opts.Roots {
		o := st.Roots[i]
		if o.Name != r.Name || o.Path != r.Path || !o.lazy {
			return nil, false, nil
		}
		if !o.Exists {
			// Still missing (a transcript root before the first session):
			// nothing to list; one that appeared takes the full path.
			if fi, err := os.Lstat(r.Path); err == nil && fi.IsDir() {
				return nil, false, nil
			}
		}
	}
	if _, ok, err := c.behind(st); err != nil || ok {
		return nil, false, nil // the full path says why
	}
	if req.Position >= 0 && (req.Position <= st.LastPosition || req.Position > 999999) {
		return nil, true, fmt.Errorf("%w: position %d, last stored %d", ErrPosition, req.Position, st.LastPosition)
	}
	mroots, err := metaRoots(c.opts.Roots)
	if err != nil {
		return nil, true, err
	}
	var hints []*Hint
	token := ""
	if c.opts.Watch != nil {
		paths := make([]string, len(c.opts.Roots))
		for i, r := range c.opts.Roots {
			paths[i] = r.Path
		}
		// A watcher that fails or cannot vouch costs the full listing,
		// never a wrong increment.
		if tok, h, err := c.opts.Watch.Since(ctx, paths, st.token); err == nil && len(h) == len(paths) {
			token = tok
			if st.token != "" {
				hints = h
			}
		}
	}
	sc := &walked{st: st, start: c.opts.Now(), mroots: mroots, removed: []string{}, token: token}
	hinted, listed := 0, 0
	for i, r := range c.opts.Roots {
		if !st.Roots[i].Exists {
			sc.plans = append(sc.plans, &rootPlan{root: r, prefix: sc.mroots[i].Prefix, state: &rootState{Name: r.Name, Path: r.Path}})
			continue
		}
		var h *Hint
		if hints != nil {
			h = hints[i]
		}
		if h != nil {
			hinted++
		}
		listed++
		p, err := c.scanRootFast(ctx, r, st.Roots[i], sc.start, h)
		if errors.Is(err, errFullPath) || errors.Is(err, errBadState) {
			return nil, false, nil
		}
		if err != nil {
			return nil, true, fmt.Errorf("capture root %s: %w", r.Name, err)
		}
		sc.mroots[i].Exists = true
		p.prefix = sc.mroots[i].Prefix
		sc.plans = append(sc.plans, p)
	}
	inc, _, err := c.storeLocked(ctx, sc, req, req.Kind, nil)
	if err == nil {
		c.fastCaptures++
		c.hintedRoots += hinted
		inc.Watched = listed > 0 && hinted == listed
	}
	return inc, true, err
}

// scanRootFast lists one root against its lazily loaded state old.
func (c *Changelog) scanRootFast(ctx context.Context, r Root, old *rootState, start time.Time, hint *Hint) (*rootPlan, error) {
	fi, err := os.Lstat(r.Path)
	if err != nil || !fi.IsDir() || old.rootEnt == nil {
		return nil, errFullPath
	}
	var repo *gitRepo
	if r.Git && !r.IncludeIgnored {
		if repo, err = locateRepo(ctx, c.opts.Git, r.Path, old.Stamp); err != nil {
			return nil, err
		}
	}
	gd := repo != nil
	stamp := ""
	if gd {
		stamp = ignoreStamp(repo, r.Path)
	}
	if stamp != old.Stamp {
		return nil, fmt.Errorf("stamp %q vs %q: %w", stamp, old.Stamp, errFullPath) // the ignore inputs changed: classify the whole root
	}
	ignored := make(map[string]bool, len(old.excl))
	for _, x := range old.excl {
		ignored[x] = true
	}
	fixed := c.fixedExcludes(r)
	opts := scan.ListOptions{Skip: func(rel string, isDir bool) bool {
		base := path.Base(rel)
		return (r.Git && base == ".git") || base == AgentdiffDir || ignored[rel] || fixed[rel]
	}}

	visited := map[string]bool{}
	dirty := map[string]bool{}
	newKids := map[string][]entry{}
	own := map[string]entry{}
	var buf []byte
	var rootNew *entry
	visit := func(d *scan.Stat, items []scan.Stat) error {
		visited[d.Path] = true
		if d.Path == "" {
			e := entryOf(d)
			rootNew = &e
		}
		sec := old.section(d.Path)
		buf = buf[:0]
		for i := range items {
			e := entryOf(&items[i])
			prev := secPrefix(d.Path)
			if i > 0 {
				prev = items[i-1].Path
			}
			buf = appendEntry(buf, &e, prev)
		}
		if sec != nil && sec.flags == 0 && sec.n == len(items) {
			raw, err := sec.bytes()
			if err != nil {
				return err
			}
			if bytes.Equal(buf, raw) {
				return nil // unchanged
			}
		}
		dirty[d.Path] = true
		own[d.Path] = entryOf(d)
		kids := make([]entry, len(items))
		for i := range items {
			kids[i] = entryOf(&items[i])
		}
		newKids[d.Path] = kids
		return nil
	}
	if hint == nil {
		// Every directory is compared: read all sections at once.
		if len(old.secs) > 0 && old.secs[0].src != nil {
			if err := old.secs[0].src.loadAll(); err != nil {
				return nil, err
			}
		}
		if err := scan.ListDirs(ctx, r.Path, []string{""}, true, opts, visit); err != nil {
			return nil, err
		}
	} else {
		// A watcher sees excluded directories change too (an ignored
		// build/ directory, node_modules): they are never listed.
		excluded := func(rel string) bool {
			for p := rel; p != ""; p = parentOf(p) {
				base := path.Base(p)
				if (r.Git && base == ".git") || base == AgentdiffDir || ignored[p] || fixed[p] {
					return true
				}
			}
			return false
		}
		flat := []string{""}
		for _, d := range hint.Dirs {
			if d != "" && !excluded(d) {
				flat = append(flat, d, parentOf(d))
			}
		}
		var hintTrees []string
		for _, d := range hint.Trees {
			if d != "" && !excluded(d) {
				flat = append(flat, parentOf(d))
				hintTrees = append(hintTrees, d)
			}
		}
		slices.Sort(flat)
		flat = slices.Compact(flat)
		if err := scan.ListDirs(ctx, r.Path, flat, false, opts, visit); err != nil {
			return nil, err
		}
		trees := hintTrees
		// New or replaced directories below what was listed are listed in
		// full, repeatedly, until none is left.
		for {
			for d, kids := range newKids {
				osec := old.section(d)
				var oldKids []entry
				if osec != nil {
					var err error
					if oldKids, err = decodeSection(&arena{}, osec); err != nil {
						return nil, err
					}
				}
				for i := range kids {
					k := &kids[i]
					if k.Type != scan.Dir || k.Excluded || visited[k.Path] {
						continue
					}
					o := findEntry(oldKids, k.Path)
					if o == nil || o.Type != scan.Dir || o.Excluded || o.Ino != k.Ino || o.Dev != k.Dev || old.section(k.Path) == nil {
						trees = append(trees, k.Path)
					}
				}
			}
			var todo []string
			for _, t := range trees {
				if !visited[t] {
					todo = append(todo, t)
				}
			}
			if len(todo) == 0 {
				break
			}
			slices.Sort(todo)
			todo = slices.Compact(todo)
			if err := scan.ListDirs(ctx, r.Path, todo, true, opts, visit); err != nil {
				return nil, err
			}
			trees = trees[:0]
		}
	}
	if rootNew == nil {
		return nil, errFullPath
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && (uint64(st.Dev) != rootNew.Dev || st.Ino != rootNew.Ino) {
		return nil, fmt.Errorf("capture root %s: %w", r.Path, scan.ErrChanged)
	}

	// Old children of every dirty directory; a directory whose mode changed
	// is dumped, so its (unchanged) children join the lists too.
	a := &arena{}
	oldKids := map[string][]entry{}
	decodeOld := func(d string) ([]entry, error) {
		if k, ok := oldKids[d]; ok {
			return k, nil
		}
		var k []entry
		if s := old.section(d); s != nil {
			var err error
			if k, err = decodeSection(a, s); err != nil {
				return nil, err
			}
		}
		oldKids[d] = k
		return k, nil
	}
	addSame := func(d string, e entry) error {
		k, err := decodeOld(d)
		if err != nil {
			return err
		}
		dirty[d] = true
		own[d] = e
		newKids[d] = slices.Clone(k)
		return nil
	}
	if rootNew.Mode != old.rootEnt.Mode && !dirty[""] {
		if err := addSame("", *rootNew); err != nil {
			return nil, err
		}
	}
	for _, d := range sortedKeys(dirty) {
		ok, err := decodeOld(d)
		if err != nil {
			return nil, err
		}
		for i := range newKids[d] {
			n := &newKids[d][i]
			if n.Type != scan.Dir || n.Excluded || dirty[n.Path] {
				continue
			}
			if o := findEntry(ok, n.Path); o != nil && o.Type == scan.Dir && !o.Excluded && o.Mode != n.Mode {
				if err := addSame(n.Path, *n); err != nil {
					return nil, err
				}
			}
		}
	}

	// The sparse lists: the root's entry, each dirty directory's own entry
	// (unchanged when its parent is clean) and children.
	var newList, oldList []entry
	newList = append(newList, *rootNew)
	oldList = append(oldList, *old.rootEnt)
	for d := range dirty {
		if d != "" && !dirty[parentOf(d)] {
			newList = append(newList, own[d])
			oldList = append(oldList, own[d])
		}
		newList = append(newList, newKids[d]...)
		k, err := decodeOld(d)
		if err != nil {
			return nil, err
		}
		oldList = append(oldList, k...)
	}
	byPath := func(x, y entry) int { return comparePaths(x.Path, y.Path) }
	slices.SortFunc(newList, byPath)
	slices.SortFunc(oldList, byPath)

	if gd {
		fresh, gitignoreChanged := freshPaths(oldList, newList)
		if gitignoreChanged {
			return nil, fmt.Errorf("gitignore: %w", errFullPath)
		}
		ign, err := checkIgnored(ctx, c.opts.Git, r.Path, fresh)
		if err != nil {
			return nil, err
		}
		if len(ign) > 0 {
			newList = applyIgnored(newList, ign)
		}
	}

	// Directories that are gone (deleted, replaced by another type, now
	// excluded): their stored sections and everything beneath are removed
	// and their old entries join the old list, as deletions.
	gone := map[string]bool{}
	for _, d := range sortedKeys(dirty) {
		k, err := decodeOld(d)
		if err != nil {
			return nil, err
		}
		for i := range k {
			o := &k[i]
			if o.Type != scan.Dir || o.Excluded {
				continue
			}
			if n := findEntry(newList, o.Path); n != nil && n.Type == scan.Dir && !n.Excluded {
				continue
			}
			j, _ := findSection(old.secs, o.Path)
			for ; j < len(old.secs) && (old.secs[j].dir == o.Path || strings.HasPrefix(old.secs[j].dir, o.Path+"/")); j++ {
				gone[old.secs[j].dir] = true
			}
		}
	}
	if len(gone) > 0 {
		for _, g := range sortedKeys(gone) {
			if dirty[g] {
				continue // listed too (a race): its old children are in already
			}
			k, err := decodeOld(g)
			if err != nil {
				return nil, err
			}
			oldList = append(oldList, k...)
		}
		slices.SortFunc(oldList, byPath)
		oldList = slices.CompactFunc(oldList, func(x, y entry) bool { return x.Path == y.Path })
	}

	p := &rootPlan{root: r, conv: IsConversationRoot(r.Name, r.Path), sparseOld: oldList}
	p.state = &rootState{Name: r.Name, Path: r.Path, Exists: true, Stamp: stamp, Entries: newList,
		sparse: &sparseInfo{base: old, dirty: dirty, gone: gone}}
	p.plan(&rootState{Entries: oldList}, start)
	return p, nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, comparePaths)
	return out
}

// buildSections sets the root's stored form (own entry, excluded paths,
// sections) from its entries and returns the section operations from prev
// (nil when prev is nil: the state is then stored in full).
func (rs *rootState) buildSections(prev *rootState) []secOp {
	if rs.sparse == nil {
		if !rs.lazy {
			if !rs.Exists {
				rs.rootEnt, rs.excl, rs.secs = nil, nil, nil
			} else {
				rs.rootEnt, rs.excl, rs.secs = sectionsOf(rs.Entries)
			}
		}
		if prev == nil {
			return nil
		}
		return diffSections(prev.secs, rs.secs)
	}
	sp := rs.sparse
	base := sp.base
	kids := map[string][]entry{}
	ents := map[string]*entry{}
	for i := range rs.Entries {
		e := &rs.Entries[i]
		ents[e.Path] = e
		if e.Path == "" {
			continue
		}
		if par := parentOf(e.Path); sp.dirty[par] {
			kids[par] = append(kids[par], *e)
		}
	}
	rs.rootEnt = ents[""]
	if rs.rootEnt != nil {
		re := *rs.rootEnt
		rs.rootEnt = &re
	}
	under := func(p string, set map[string]bool) bool {
		for q := parentOf(p); ; q = parentOf(q) {
			if set[q] {
				return true
			}
			if q == "" {
				return false
			}
		}
	}
	rs.excl = nil
	for _, x := range base.excl {
		if !sp.dirty[parentOf(x)] && !sp.gone[x] && !under(x, sp.gone) {
			rs.excl = append(rs.excl, x)
		}
	}
	var ops []secOp
	dirs := make(map[string]bool, len(sp.dirty)+len(sp.gone))
	for d := range sp.dirty {
		dirs[d] = true
	}
	for d := range sp.gone {
		dirs[d] = true
	}
	for _, d := range sortedKeys(dirs) {
		osec := base.section(d)
		e := ents[d]
		live := !sp.gone[d] && e != nil && e.Type == scan.Dir && !e.Excluded
		if !live {
			if osec != nil {
				ops = append(ops, secOp{del: true, sec: section{dir: d}})
			}
			continue
		}
		for i := range kids[d] {
			if kids[d][i].Excluded {
				rs.excl = append(rs.excl, kids[d][i].Path)
			}
		}
		raw, flags := encodeChildren(nil, d, kids[d])
		ns := section{dir: d, n: len(kids[d]), flags: flags, raw: raw}
		if osec != nil && osec.n == ns.n && osec.flags == ns.flags {
			if ob, err := osec.bytes(); err == nil && bytes.Equal(ob, ns.raw) {
				continue
			}
		}
		ops = append(ops, secOp{sec: ns})
	}
	rs.secs = applySecOps(base.secs, ops)
	return ops
}
