package changelog

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/klauspost/compress/gzip"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
)

// mergeNode is one path the merged increments leave changed: a dumped
// directory (its latest dumpdir) or a stored file or symlink (its latest
// member).
type mergeNode struct {
	dir    bool
	root   string
	rel    string
	src    int // index of the increment the member comes from
	offset int // the member's ordinal in that increment
	m      *Member
}

// mergeIncrements composes the increments bodies (in position order) into
// one increment whose extraction onto the state before the first has the
// effect of extracting them all in order: the roots any of them removes are
// removed; each directory a part dumps is dumped with its latest listing,
// where an entry a part stored and no later part purged is stored; each file
// or symlink keeps the content of the last part storing it, unless a later
// part removed it. The metadata is the last part's, with merged recording the
// positions carried and Changes composed from the parts'. Every part is
// validated against roots first.
func mergeIncrements(bodies [][]byte, roots []Root, merged []incmeta.Merged) ([]byte, error) {
	if len(bodies) == 0 {
		return nil, errors.New("merge: no increments")
	}
	allowed, err := metaRoots(roots)
	if err != nil {
		return nil, err
	}
	nodes := map[string]*mergeNode{}
	var removed []string
	var metas []*incmeta.Meta
	rootIndex := map[string]int{}
	for i, r := range roots {
		rootIndex[r.Name] = i
	}
	dropUnder := func(root, rel string, keep func(n *mergeNode) bool) {
		prefix := root + "\x00"
		if rel != "" {
			prefix += rel + "/"
		}
		for k, n := range nodes {
			if strings.HasPrefix(k, prefix) && (keep == nil || !keep(n)) {
				delete(nodes, k)
			}
		}
	}
	for i, b := range bodies {
		a, err := readArchive(bytes.NewReader(b), allowed)
		if err != nil {
			return nil, fmt.Errorf("merge: part %d: %w", i, err)
		}
		if a.Meta.Kind == "external" {
			return nil, fmt.Errorf("merge: part %d has no metadata", i)
		}
		metas = append(metas, &a.Meta)
		for _, name := range a.Meta.RemovedRoots {
			dropUnder(name, "", nil)
			delete(nodes, vkey(name, ""))
			if !slices.Contains(removed, name) {
				removed = append(removed, name)
			}
		}
		for mi := range a.Members {
			m := &a.Members[mi]
			switch m.Type {
			case typeDumpdir:
				if len(m.Renames) > 0 {
					return nil, fmt.Errorf("merge: part %d: directory %s holds renames, which captures never write", i, m.Name)
				}
				flags := make(map[string]byte, len(m.Dumpdir))
				for _, d := range m.Dumpdir {
					flags[d.Name] = d.Flag
				}
				// The purge: what the listing does not keep goes, with
				// everything below it.
				base := ""
				if m.Rel != "" {
					base = m.Rel + "/"
				}
				for k, n := range nodes {
					if n.root != m.Root || !strings.HasPrefix(n.rel, base) || n.rel == m.Rel {
						continue
					}
					rest := n.rel[len(base):]
					name, deeper, _ := strings.Cut(rest, "/")
					flag, ok := flags[name]
					child := nodes[vkey(m.Root, base+name)]
					drop := !ok
					switch {
					case drop:
					case flag == flagDirectory && child != nil && !child.dir:
						drop = true
					case flag == flagInArchive && child != nil && child.dir:
						drop = true
					case flag == flagInArchive && child == nil && deeper != "":
						drop = true // below what is now a file
					}
					if drop {
						delete(nodes, k)
					}
				}
				nodes[vkey(m.Root, m.Rel)] = &mergeNode{dir: true, root: m.Root, rel: m.Rel, src: i, offset: m.offset, m: m}
			default:
				dropUnder(m.Root, m.Rel, nil)
				nodes[vkey(m.Root, m.Rel)] = &mergeNode{root: m.Root, rel: m.Rel, src: i, offset: m.offset, m: m}
			}
		}
	}
	var dirs, files []*mergeNode
	for _, n := range nodes {
		if n.dir {
			dirs = append(dirs, n)
		} else {
			files = append(files, n)
		}
	}
	byPath := func(x, y *mergeNode) int {
		if c := rootIndex[x.root] - rootIndex[y.root]; c != 0 {
			return c
		}
		return comparePaths(x.rel, y.rel)
	}
	slices.SortFunc(dirs, byPath)
	slices.SortFunc(files, func(x, y *mergeNode) int {
		if x.src != y.src {
			return x.src - y.src
		}
		return x.offset - y.offset
	})
	headers, err := partHeaders(bodies, dirs)
	if err != nil {
		return nil, err
	}

	last := metas[len(metas)-1]
	meta := *last
	meta.RemovedRoots = append([]string{}, removed...)
	meta.Merged = append([]incmeta.Merged(nil), merged...)
	meta.Files, meta.Bytes, meta.Deleted = 0, 0, 0
	for _, m := range metas {
		meta.Deleted += m.Deleted
	}
	for _, n := range files {
		meta.Files++
		if n.m.Type == tar.TypeReg {
			meta.Bytes += n.m.Size
		}
	}
	meta.Changes = composeChanges(metas)
	stored := make(map[string]bool, len(files))
	for _, n := range files {
		stored[vkey(n.root, n.rel)] = true
	}
	meta.WithheldFiles = mergeWithheld(metas, stored)

	var out bytes.Buffer
	aw := newArchiveWriter(&out)
	if err := aw.meta(&meta); err != nil {
		return nil, err
	}
	for _, n := range dirs {
		h := headers[n]
		list := make([]dumpEntry, 0, len(n.m.Dumpdir))
		for _, d := range n.m.Dumpdir {
			if d.Flag == flagNotInArchive {
				if c := nodes[vkey(n.root, joinRel(n.rel, d.Name))]; c != nil && !c.dir {
					d.Flag = flagInArchive
				}
			}
			list = append(list, d)
		}
		data := encodeDumpdir(list)
		nh := copyHeader(h)
		nh.Size = int64(len(data))
		if err := aw.tw.WriteHeader(nh); err != nil {
			return nil, fmt.Errorf("merge: write directory %s: %w", n.m.Name, err)
		}
		if _, err := aw.tw.Write(data); err != nil {
			return nil, fmt.Errorf("merge: write dumpdir %s: %w", n.m.Name, err)
		}
	}
	// Files and symlinks, streamed from their parts in order.
	k := 0
	for src := range bodies {
		if k >= len(files) || files[k].src != src {
			continue
		}
		gz, err := gzip.NewReader(bytes.NewReader(bodies[src]))
		if err != nil {
			return nil, fmt.Errorf("merge: part %d: %w", src, err)
		}
		gz.Multistream(false)
		tr := tar.NewReader(gz)
		for ord := 0; k < len(files) && files[k].src == src; ord++ {
			h, err := tr.Next()
			if err != nil {
				gz.Close()
				return nil, fmt.Errorf("merge: part %d: %w", src, err)
			}
			if ord != files[k].offset {
				continue
			}
			nh := copyHeader(h)
			if err := aw.tw.WriteHeader(nh); err != nil {
				gz.Close()
				return nil, fmt.Errorf("merge: write %s: %w", h.Name, err)
			}
			if nh.Typeflag == tar.TypeReg {
				if _, err := io.CopyN(aw.tw, tr, nh.Size); err != nil {
					gz.Close()
					return nil, fmt.Errorf("merge: copy %s: %w", h.Name, err)
				}
			}
			k++
		}
		gz.Close()
	}
	if err := aw.close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// copyHeader returns h as the capture writes headers: GNU format, no PAX
// records, regular files as TypeReg.
func copyHeader(h *tar.Header) *tar.Header {
	nh := &tar.Header{
		Typeflag: h.Typeflag, Name: h.Name, Linkname: h.Linkname, Size: h.Size, Mode: h.Mode,
		Uid: h.Uid, Gid: h.Gid, ModTime: h.ModTime, AccessTime: h.ModTime, ChangeTime: h.ModTime, Format: tar.FormatGNU,
	}
	if nh.Typeflag == tar.TypeRegA {
		nh.Typeflag = tar.TypeReg
	}
	if nh.Typeflag != tar.TypeReg {
		nh.Size = 0
	}
	return nh
}

// partHeaders reads the tar headers of the dumped directories dirs from
// their parts.
func partHeaders(bodies [][]byte, dirs []*mergeNode) (map[*mergeNode]*tar.Header, error) {
	want := map[[2]int]*mergeNode{}
	for _, n := range dirs {
		want[[2]int{n.src, n.offset}] = n
	}
	out := make(map[*mergeNode]*tar.Header, len(dirs))
	for src, b := range bodies {
		need := 0
		for key := range want {
			if key[0] == src {
				need++
			}
		}
		if need == 0 {
			continue
		}
		gz, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("merge: part %d: %w", src, err)
		}
		gz.Multistream(false)
		tr := tar.NewReader(gz)
		for ord := 0; need > 0; ord++ {
			h, err := tr.Next()
			if err != nil {
				gz.Close()
				return nil, fmt.Errorf("merge: part %d: %w", src, err)
			}
			if n, ok := want[[2]int{src, ord}]; ok {
				out[n] = h
				need--
			}
		}
		gz.Close()
	}
	return out, nil
}

// composeChanges composes the parts' Changes path by path: created then
// modified is created, created then deleted is nothing, deleted then
// created is modified. Counts of omitted paths and bytes add up.
func composeChanges(metas []*incmeta.Meta) *incmeta.Changes {
	const (
		cNone = iota
		cCreated
		cModified
		cDeleted
	)
	state := map[string]int{}
	var order []string
	out := &incmeta.Changes{Created: []string{}, Modified: []string{}, Deleted: []string{}}
	any := false
	for _, m := range metas {
		ch := m.Changes
		if ch == nil {
			continue
		}
		any = true
		out.Bytes += ch.Bytes
		out.TranscriptBytes += ch.TranscriptBytes
		out.CreatedOmitted += ch.CreatedOmitted
		out.ModifiedOmitted += ch.ModifiedOmitted
		out.DeletedOmitted += ch.DeletedOmitted
		out.Baseline = out.Baseline || ch.Baseline
		apply := func(paths []string, ev int) {
			for _, p := range paths {
				prev, seen := state[p]
				if !seen {
					order = append(order, p)
				}
				next := ev
				switch {
				case prev == cCreated && ev == cModified:
					next = cCreated
				case prev == cCreated && ev == cDeleted:
					next = cNone
				case prev == cDeleted && ev == cCreated:
					next = cModified
				}
				state[p] = next
			}
		}
		apply(ch.Deleted, cDeleted)
		apply(ch.Created, cCreated)
		apply(ch.Modified, cModified)
	}
	if !any {
		return nil
	}
	for _, p := range order {
		switch state[p] {
		case cCreated:
			addBounded(&out.Created, &out.CreatedOmitted, p)
		case cModified:
			addBounded(&out.Modified, &out.ModifiedOmitted, p)
		case cDeleted:
			addBounded(&out.Deleted, &out.DeletedOmitted, p)
		}
	}
	return out
}
