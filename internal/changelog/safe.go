package changelog

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/klauspost/compress/gzip"
	"golang.org/x/sys/unix"

	"github.com/agentscm/agentscm/internal/scan"
)

// protection holds the paths a rewind (and its undo) leaves alone: the
// entries the scan before it excluded (.git, .agentdiff, git-ignored paths,
// the changelog directory, Options.Exclude) and everything below them. They
// are outside the captured scope both ways: never deleted, replaced or
// written. The directories that hold them stay directories; a purge empties
// them of everything else instead of removing them.
type protection struct {
	excluded map[string]map[string]bool // root name -> relative path
	anc      map[string]map[string]bool // strict ancestors of excluded paths
}

// newProtection collects the excluded entries of a scan.
func newProtection(plans []*rootPlan) *protection {
	p := &protection{excluded: map[string]map[string]bool{}, anc: map[string]map[string]bool{}}
	for _, pl := range plans {
		for i := range pl.state.Entries {
			e := &pl.state.Entries[i]
			if !e.Excluded || e.Path == "" {
				continue
			}
			name := pl.root.Name
			if p.excluded[name] == nil {
				p.excluded[name] = map[string]bool{}
				p.anc[name] = map[string]bool{}
			}
			p.excluded[name][e.Path] = true
			for a := parentOf(e.Path); ; a = parentOf(a) {
				p.anc[name][a] = true
				if a == "" {
					break
				}
			}
		}
	}
	return p
}

// protected reports whether rel or one of its ancestors is excluded.
func (p *protection) protected(root, rel string) bool {
	if p == nil {
		return false
	}
	ex := p.excluded[root]
	if ex == nil {
		return false
	}
	for q := rel; q != ""; q = parentOf(q) {
		if ex[q] {
			return true
		}
	}
	return false
}

// holds reports whether rel is a directory above a protected path.
func (p *protection) holds(root, rel string) bool {
	return p != nil && p.anc[root][rel]
}

// keep reports whether a replay must leave rel in place.
func (p *protection) keep(root, rel string) bool {
	return p.holds(root, rel) || p.protected(root, rel)
}

// skips reports whether a replay leaves member m out: a file or symlink
// where a protected path (or a directory holding one) is, or a directory
// inside a protected one.
func (p *protection) skips(m *Member) bool {
	if p == nil {
		return false
	}
	if m.Type == typeDumpdir {
		return p.protected(m.Root, m.Rel)
	}
	return p.keep(m.Root, m.Rel)
}

// emptyRoot removes every unprotected path of the root name (a removed root
// that holds protected paths).
func (rp *replay) emptyRoot(name string) error {
	r, err := os.OpenRoot(rp.roots[name].Path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	defer r.Close()
	return purgeListed(r, name, ".", nil, rp.prot)
}

// scanDisk answers what the disk held from a scan: a binary search in each
// root's walk-ordered entries, no lstat and no per-path map.
type scanDisk struct {
	entries map[string][]entry // by root name; absent: the root does not exist
}

func newScanDisk(plans []*rootPlan) *scanDisk {
	d := &scanDisk{entries: map[string][]entry{}}
	for _, pl := range plans {
		if pl.state.Exists {
			d.entries[pl.root.Name] = pl.state.Entries
		}
	}
	return d
}

func (d *scanDisk) kind(root, rel string) vkind {
	ents, ok := d.entries[root]
	if !ok {
		return vGone
	}
	if rel == "" {
		return vDir
	}
	e := findEntry(ents, rel)
	if e == nil {
		return vGone
	}
	return kindOf(e.Type)
}

func kindOf(t scan.Type) vkind {
	switch t {
	case scan.Dir:
		return vDir
	case scan.File:
		return vFile
	case scan.Symlink:
		return vSymlink
	}
	return vOther
}

func (v vkind) String() string {
	switch v {
	case vDir:
		return "dir"
	case vFile:
		return "file"
	case vSymlink:
		return "symlink"
	case vGone:
		return "gone"
	}
	return "other"
}

// Changes a rewind makes to a path, and changes made to a path since the
// newest captured position.
const (
	ChangeCreated  = "created"
	ChangeModified = "modified"
	ChangeDeleted  = "deleted"
)

// PathChange is one path a rewind creates, modifies or deletes.
type PathChange struct {
	Root string `json:"root"`
	// Path is relative to the root ("" for the root itself).
	Path string `json:"path"`
	// Change is what the rewind does to it: created, modified or deleted.
	Change string `json:"change"`
	// Kind is the path's kind after the rewind (before it, for a deletion):
	// file, dir, symlink or other.
	Kind string `json:"kind"`
	// Since, for a path changed after the newest captured position (or,
	// with OutsideAt, by outside work), says how: created, modified or
	// deleted.
	Since string `json:"since,omitempty"`
	// OutsideAt is the outside increment that recorded the work done
	// outside the agent that the rewind would change (see CaptureOutside).
	OutsideAt *int `json:"outside_position,omitempty"`
}

// ErrChangedSinceCapture reports a rewind refused because paths it would
// change were changed after the newest captured position (by the user,
// another session or any uncaptured process).
var ErrChangedSinceCapture = errors.New("paths the rewind would change were changed after the newest captured position")

// ErrOutsideWork reports a rewind refused because it would change or
// delete work done outside the agent (an outside increment's) after its
// target position.
var ErrOutsideWork = errors.New("the rewind would change work done outside the agent after its target")

// ChangedError lists the paths of a refusal with ErrChangedSinceCapture
// (Paths) and ErrOutsideWork (Outside).
type ChangedError struct {
	// Position is the newest captured position (-1: none yet).
	Position int
	Paths    []PathChange
	// Target is the position rewound to; Outside the outside work after
	// it that the rewind would change.
	Target  int
	Outside []PathChange
}

func (e *ChangedError) Error() string {
	var b strings.Builder
	if len(e.Paths) == 0 {
		fmt.Fprintf(&b, "%v (position %d): ", ErrOutsideWork, e.Target)
		for i, p := range e.Outside {
			if i == 8 {
				fmt.Fprintf(&b, ", and %d more", len(e.Outside)-i)
				break
			}
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s:%s (%s outside, would be %s)", p.Root, p.Path, p.Since, p.Change)
		}
		return b.String()
	}
	fmt.Fprintf(&b, "%v (position %d): ", ErrChangedSinceCapture, e.Position)
	for i, p := range e.Paths {
		if i == 8 {
			fmt.Fprintf(&b, ", and %d more", len(e.Paths)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s:%s (%s since, would be %s)", p.Root, p.Path, p.Since, p.Change)
	}
	return b.String()
}

func (e *ChangedError) Is(target error) bool {
	return (target == ErrChangedSinceCapture && len(e.Paths) > 0) || (target == ErrOutsideWork && len(e.Outside) > 0)
}

// outsideConflicts returns the outside work (planOutside's paths) that the
// replay would change, in root and walk order. Conversation roots are
// never checked. An unnamed entry makes every change the replay makes
// outside the conversation roots suspect.
func (rp *replay) outsideConflicts(sc *walked, work []OutsidePath) ([]PathChange, error) {
	var out []PathChange
	seen := map[[2]string]bool{}
	plan := func(root string) *rootPlan {
		for _, pl := range sc.plans {
			if pl.root.Name == root {
				return pl
			}
		}
		return nil
	}
	for _, w := range work {
		at := w.Position
		if w.Unnamed {
			effects, err := rp.effects(sc)
			if err != nil {
				return nil, err
			}
			for _, e := range effects {
				if pl := plan(e.Root); pl == nil || pl.conv || seen[[2]string{e.Root, e.Path}] {
					continue
				}
				seen[[2]string{e.Root, e.Path}] = true
				e.Since, e.OutsideAt = ChangeModified, &at
				out = append(out, e)
			}
			continue
		}
		pl := plan(w.Root)
		if pl == nil || pl.conv || seen[[2]string{w.Root, w.Rel}] {
			continue
		}
		var cur *entry
		if pl.state.Exists {
			if e := findEntry(pl.state.Entries, w.Rel); e != nil && !e.Excluded {
				cur = e
			}
		}
		change, kind, err := rp.effect(w.Root, w.Rel, cur)
		if err != nil {
			return nil, err
		}
		if change == "" {
			continue
		}
		seen[[2]string{w.Root, w.Rel}] = true
		out = append(out, PathChange{Root: w.Root, Path: w.Rel, Change: change, Kind: kind.String(), Since: w.How, OutsideAt: &at})
	}
	return out, nil
}

// sinceChange is one path changed after the captured state.
type sinceChange struct {
	rel string
	how string
}

// changedSince lists the paths of the scanned root that differ from the
// captured state old (nil: nothing was captured, so every path is new):
// created, deleted, or modified (another kind, a file's content or mode, a
// symlink's target). Excluded paths are outside the captured scope; a path
// that was excluded and no longer is counts as created. Directory modes are
// not compared.
func changedSince(old *rootState, cur *rootPlan) []sinceChange {
	var out []sinceChange
	var oldEntries []entry
	if old != nil && old.Exists && old.Path == cur.root.Path {
		oldEntries = old.Entries
	}
	var curEntries []entry
	if cur.state.Exists {
		curEntries = cur.state.Entries
	}
	mergeEntries(oldEntries, curEntries, func(o, n *entry) {
		switch {
		case n == nil:
			if !o.Excluded && o.Path != "" {
				out = append(out, sinceChange{o.Path, ChangeDeleted})
			}
		case n.Excluded || n.Path == "":
		case o == nil || o.Excluded:
			out = append(out, sinceChange{n.Path, ChangeCreated})
		case o.Type != n.Type:
			out = append(out, sinceChange{n.Path, ChangeModified})
		case n.Type == scan.File:
			o2 := *o
			o2.Excluded = n.Excluded
			if !sameStat(&o2, n) || (o.Hash != nil && !hashMatches(cur.root.Path, n.Path, o.Hash)) {
				out = append(out, sinceChange{n.Path, ChangeModified})
			}
		case n.Type == scan.Symlink:
			if o.Target != n.Target {
				out = append(out, sinceChange{n.Path, ChangeModified})
			}
		}
	})
	return out
}

// effect says what the replay does to one path: "" (nothing), created,
// modified or deleted, with the kind the path has after it (before it, for
// a deletion).
func (rp *replay) effect(root, rel string, cur *entry) (string, vkind, error) {
	o := rp.sim
	final := o.lookup(root, rel)
	disk := vGone
	if cur != nil {
		disk = kindOf(cur.Type)
	}
	switch {
	case final == vGone && disk == vGone:
		return "", vGone, nil
	case final == vGone:
		return ChangeDeleted, disk, nil
	case disk == vGone:
		return ChangeCreated, final, nil
	case final != disk:
		return ChangeModified, final, nil
	}
	ref, ok := o.src[vkey(root, rel)]
	if !ok || (final != vFile && final != vSymlink) {
		return "", final, nil
	}
	same, err := rp.sameContent(root, rel, cur, ref)
	if err != nil || same {
		return "", final, err
	}
	return ChangeModified, final, nil
}

// sameContent reports whether the member ref would leave the scanned path
// cur as it is: a symlink with the same target, a file with the same
// permission bits and bytes.
func (rp *replay) sameContent(root, rel string, cur *entry, ref memberRef) (bool, error) {
	m := ref.m
	if m.Type == tar.TypeSymlink {
		return cur.Target == m.Linkname, nil
	}
	if cur.Size != m.Size || cur.Mode.Perm() != m.Mode.Perm() || cur.Mode&^0o777 != 0 {
		return false, nil
	}
	f, err := scan.OpenFile(rp.roots[root].Path, rel)
	if err != nil {
		return false, nil // gone or replaced since the scan: it changes
	}
	defer f.Close()
	var src io.Reader
	if m.data != nil || m.Size == 0 {
		src = bytes.NewReader(m.data)
	} else {
		r, done, err := memberContent(ref)
		if err != nil {
			return false, err
		}
		defer done()
		src = r
	}
	return sameStream(src, f, m.Size)
}

// memberContent opens the content of a member whose archive did not hold it.
func memberContent(ref memberRef) (io.Reader, func(), error) {
	f, err := os.Open(ref.ra.path)
	if err != nil {
		return nil, nil, err
	}
	gz, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%w: %v", ErrUnreadableArchive, err)
	}
	gz.Multistream(false)
	done := func() { gz.Close(); f.Close() }
	tr := tar.NewReader(gz)
	for i := 0; i <= ref.m.offset; i++ {
		h, err := tr.Next()
		if err != nil {
			done()
			return nil, nil, fmt.Errorf("%w: archive changed while being read: %v", ErrUnreadableArchive, err)
		}
		if i == ref.m.offset && strings.TrimSuffix(h.Name, "/") != ref.m.Name {
			done()
			return nil, nil, fmt.Errorf("%w: archive changed while being read", ErrUnreadableArchive)
		}
	}
	return io.LimitReader(tr, ref.m.Size), done, nil
}

// sameStream reports whether a and b both hold exactly n equal bytes.
func sameStream(a, b io.Reader, n int64) (bool, error) {
	ba, bb := make([]byte, 64<<10), make([]byte, 64<<10)
	for n > 0 {
		k := int(min(n, int64(len(ba))))
		if _, err := io.ReadFull(a, ba[:k]); err != nil {
			return false, err
		}
		if _, err := io.ReadFull(b, bb[:k]); err != nil {
			return false, nil
		}
		if !bytes.Equal(ba[:k], bb[:k]) {
			return false, nil
		}
		n -= int64(k)
	}
	var one [1]byte
	if k, _ := b.Read(one[:]); k > 0 {
		return false, nil
	}
	return true, nil
}

// conflicts returns the paths changed after the captured state sc.st that
// the replay would change, in root and walk order. The Claude transcript
// root is not checked: the host appends to it after every capture, and its
// replay rules are its own.
func (rp *replay) conflicts(sc *walked) ([]PathChange, error) {
	var out []PathChange
	for _, pl := range sc.plans {
		name := pl.root.Name
		if name == TranscriptRootName {
			continue
		}
		for _, ch := range changedSince(sc.st.root(name), pl) {
			var cur *entry
			if ch.how != ChangeDeleted {
				cur = findEntry(pl.state.Entries, ch.rel)
			}
			change, kind, err := rp.effect(name, ch.rel, cur)
			if err != nil {
				return nil, err
			}
			if change != "" {
				out = append(out, PathChange{Root: name, Path: ch.rel, Change: change, Kind: kind.String(), Since: ch.how})
			}
		}
	}
	return out, nil
}

// dryEffects is what a dry run lists: effects for the roots extracted in
// place and, for the staged conversation roots, what merging them would
// create or modify (a merge never deletes), found by extracting them into
// their staging directories (in the changelog directory, not the
// workspace) and merging without writing. Each path is listed once, in
// root and walk order, as the rewind then changes it.
func (rp *replay) dryEffects(ctx context.Context, sc *walked, roots []Root, staged map[string]string, session string) ([]PathChange, error) {
	out, err := rp.effects(sc)
	if err != nil || len(staged) == 0 {
		return out, err
	}
	rp.only = map[string]bool{}
	for name := range staged {
		rp.only[name] = true
	}
	defer func() { rp.only = nil }()
	if err := rp.extract(ctx); err != nil {
		return nil, err
	}
	conv := map[string][]PathChange{}
	err = mergeConversationsAs(roots, staged, session, func(root, rel, change, kind string) {
		conv[root] = append(conv[root], PathChange{Root: root, Path: rel, Change: change, Kind: kind})
	})
	if err != nil {
		return nil, err
	}
	var all []PathChange
	for _, r := range roots {
		if _, ok := staged[r.Name]; ok {
			list := conv[r.Name]
			slices.SortFunc(list, func(a, b PathChange) int { return comparePaths(a.Path, b.Path) })
			all = append(all, list...)
			continue
		}
		for _, pc := range out {
			if pc.Root == r.Name {
				all = append(all, pc)
			}
		}
	}
	return all, nil
}

// effects lists every path the replay creates, modifies or deletes, in root
// and walk order (conversation roots, which are merged, not replayed in
// place, aside: see dryEffects).
func (rp *replay) effects(sc *walked) ([]PathChange, error) {
	var out []PathChange
	for _, pl := range sc.plans {
		name := pl.root.Name
		if pl.conv {
			continue
		}
		var ents []entry
		if pl.state.Exists {
			ents = pl.state.Entries
		}
		var rootChanges []PathChange
		for i := range ents {
			e := &ents[i]
			if e.Excluded || e.Path == "" {
				continue
			}
			change, kind, err := rp.effect(name, e.Path, e)
			if err != nil {
				return nil, err
			}
			if change != "" {
				rootChanges = append(rootChanges, PathChange{Root: name, Path: e.Path, Change: change, Kind: kind.String()})
			}
		}
		// Paths the replay creates: simulated, not on disk.
		var keys []string
		for k, v := range rp.sim.kinds {
			if v != vGone && v != vOther && strings.HasPrefix(k, name+"\x00") {
				keys = append(keys, k)
			}
		}
		for _, k := range keys {
			_, rel, _ := strings.Cut(k, "\x00")
			v, ok := rp.sim.kinds[k]
			if rel == "" || !ok || v == vGone || v == vOther {
				continue
			}
			if rp.sim.diskKind(name, rel) != vGone {
				continue
			}
			if rp.sim.lookup(name, rel) == vGone {
				continue
			}
			rootChanges = append(rootChanges, PathChange{Root: name, Path: rel, Change: ChangeCreated, Kind: v.String()})
		}
		slices.SortFunc(rootChanges, func(a, b PathChange) int { return comparePaths(a.Path, b.Path) })
		out = append(out, rootChanges...)
	}
	return out, nil
}

// findEntry returns the entry of rel in walk-ordered entries, nil when none.
func findEntry(ents []entry, rel string) *entry {
	i, ok := slices.BinarySearchFunc(ents, rel, func(e entry, p string) int { return comparePaths(e.Path, p) })
	if !ok {
		return nil
	}
	return &ents[i]
}

// Unrestorable is a path a rewind cannot bring back to its state at the
// target, and why.
type Unrestorable struct {
	Root string `json:"root"`
	// Path is relative to the root ("" for the whole root).
	Path   string `json:"path"`
	Reason string `json:"reason"`
	// Withheld marks a conversation root left off the Hub by the
	// checkout's sharing choice, or a secret file whose bytes never leave
	// the machine; it makes a rewind partial like the rest.
	Withheld bool `json:"withheld,omitempty"`
	// Digest is the SHA-256 (hex) of a withheld secret file's bytes at the
	// target: a local copy with this digest is what the rewind wanted.
	Digest string `json:"digest,omitempty"`
}

// unrestorable lists what the simulated replay cannot restore: symlinks of
// the result whose target lies outside every capture root (the link is
// restored, what it points to is not captured), conversation roots an
// uploaded increment withheld, and transcript parts that do not chain. roots
// are the live roots (the replay's conversation roots are staged).
func (rp *replay) unrestorable(roots []Root) []Unrestorable {
	var out []Unrestorable
	live := map[string]Root{}
	for _, r := range roots {
		live[r.Name] = r
	}
	withheld := map[string]bool{}
	for _, ra := range rp.archives {
		for _, name := range ra.a.Meta.WithheldRoots {
			if !withheld[name] {
				withheld[name] = true
				out = append(out, Unrestorable{Root: name, Withheld: true, Reason: "withheld from the Hub (the checkout did not share its conversation when it was uploaded): not restored"})
			}
		}
		for mi := range ra.a.Members {
			if m := &ra.a.Members[mi]; m.Type == typeAppend && m.skip {
				out = append(out, Unrestorable{Root: m.Root, Path: m.Rel, Reason: "its uploaded parts do not chain (sharing was turned off and on again): left as the sequence last held it"})
			}
		}
	}
	if rp.sim == nil {
		return out
	}
	out = append(out, rp.withheldFiles()...)
	var links []Unrestorable
	for k, ref := range rp.sim.src {
		if ref.m.Type != tar.TypeSymlink {
			continue
		}
		root, rel, _ := strings.Cut(k, "\x00")
		r, ok := live[root]
		if !ok || IsConversationRoot(r.Name, r.Path) || rp.sim.lookup(root, rel) != vSymlink {
			continue
		}
		target := ref.m.Linkname
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(filepath.Join(r.Path, filepath.FromSlash(rel))), target)
		}
		target = filepath.Clean(target)
		inside := false
		for _, lr := range roots {
			inside = inside || within(target, lr.Path)
		}
		if !inside {
			links = append(links, Unrestorable{Root: root, Path: rel, Reason: fmt.Sprintf("a symlink to %s, outside the capture roots: the link is restored, what it points to is not", ref.m.Linkname)})
		}
	}
	slices.SortFunc(links, func(a, b Unrestorable) int {
		if a.Root != b.Root {
			return strings.Compare(a.Root, b.Root)
		}
		return comparePaths(a.Path, b.Path)
	})
	return append(out, links...)
}

// withheldFiles lists the secret files the simulated result holds whose
// bytes the replayed increments left out (an uploaded form: see
// UploadFormOf), sorted: each stays as the disk holds it, which restores it
// only when the disk's copy has the recorded digest.
func (rp *replay) withheldFiles() []Unrestorable {
	var out []Unrestorable
	for _, w := range rp.sim.withheld {
		par := parentOf(w.Path)
		if rp.sim.lookup(w.Root, par) != vDir {
			continue
		}
		if l, ok := rp.sim.listing[vkey(w.Root, par)]; ok {
			if _, in := l[path.Base(w.Path)]; !in {
				continue // removed by the target
			}
		}
		r, ok := rp.roots[w.Root]
		if !ok {
			continue
		}
		why := fmt.Sprintf("a secret file (%s), withheld from the Hub in every capture mode: its %d bytes stay in the local increments of the machine that captured it", w.Pattern, w.Size)
		if sum, err := fileDigest(filepath.Join(r.Path, filepath.FromSlash(w.Path))); err == nil {
			if sum == w.Digest {
				continue // the copy here is the one the target held
			}
			why += "; the file here is another version, left as it is"
		} else {
			why += "; not restored"
		}
		out = append(out, Unrestorable{Root: w.Root, Path: w.Path, Withheld: true, Digest: w.Digest, Reason: why})
	}
	slices.SortFunc(out, func(a, b Unrestorable) int {
		if a.Root != b.Root {
			return strings.Compare(a.Root, b.Root)
		}
		return comparePaths(a.Path, b.Path)
	})
	return out
}

// fileDigest is the SHA-256 (hex) of the regular file at p, not following a
// symlink.
func fileDigest(p string) (string, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", p)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
