// Package changelog records each tool call's writes and deletions under a set
// of capture roots as one increment in the GNU incremental tar format
// (<position:06d>.tgz), and applies increments in order to rewind the roots
// to any recorded tool call.
package changelog

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/klauspost/compress/gzip"
)

// typeDumpdir is GNU tar's 'D' typeflag: a directory whose data is the
// dumpdir listing of its entries.
const typeDumpdir = 'D'

// Dumpdir entry flags, as GNU tar writes them.
const (
	flagInArchive    = 'Y' // a non-directory stored in this archive
	flagNotInArchive = 'N' // a non-directory (or excluded entry) present but not stored
	flagDirectory    = 'D' // a subdirectory
)

// Bounds applied when reading an archive, which may be hostile.
const (
	maxMetaBytes    = 1 << 20
	maxDumpdirBytes = 64 << 20
	maxNameBytes    = 4096
	maxMembers      = 4 << 20
	maxDepth        = 256
)

// Increment kinds.
const (
	KindCall     = "call"      // a tool call's writes and deletions
	KindPreApply = "pre-apply" // the state captured before a rewind, to undo it
	KindApply    = "apply"     // the state a rewind produced
	// KindOutside holds changes made between tool calls by the user or any
	// other process (see CaptureOutside); it is never a tool call's.
	KindOutside = "outside"
	// KindRevert is the state a revert of one tool call produced (Revert);
	// its undo point is a KindPreApply increment.
	KindRevert = "revert"
)

// dumpEntry is one line of a GNU dumpdir.
type dumpEntry struct {
	Flag byte
	Name string
}

// encodeDumpdir renders entries in GNU tar's dumpdir format: each entry is its
// flag, its name and a NUL, sorted by name, and the list ends with one more NUL.
func encodeDumpdir(entries []dumpEntry) []byte {
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
	n := 1
	for _, e := range entries {
		n += len(e.Name) + 2
	}
	b := make([]byte, 0, n)
	for _, e := range entries {
		b = append(b, e.Flag)
		b = append(b, e.Name...)
		b = append(b, 0)
	}
	return append(b, 0)
}

// dumpRename is an R/T pair of a GNU dumpdir: GNU tar records a directory
// it saw renamed (same device and inode) as a rename of full member names,
// replayed before the directory is purged.
type dumpRename struct{ From, To string }

// decodeDumpdir parses a GNU dumpdir: Y, N and D entries (single path
// components, no duplicates) and R/T rename pairs (full member names,
// validated by the caller). X (temporary names for cyclic renames) is refused.
func decodeDumpdir(b []byte) ([]dumpEntry, []dumpRename, error) {
	var out []dumpEntry
	var renames []dumpRename
	seen := map[string]bool{}
	pendingR := ""
	terminated := false
	for len(b) > 0 {
		i := bytes.IndexByte(b, 0)
		if i < 0 {
			return nil, nil, errors.New("dumpdir entry without NUL terminator")
		}
		if i == 0 {
			// The terminating empty entry; anything after it must be padding.
			if len(bytes.Trim(b, "\x00")) != 0 {
				return nil, nil, errors.New("data after dumpdir terminator")
			}
			terminated = true
			break
		}
		ent := b[:i]
		b = b[i+1:]
		flag, name := ent[0], string(ent[1:])
		if pendingR != "" && flag != 'T' {
			return nil, nil, errors.New("dumpdir rename source without a target")
		}
		switch flag {
		case flagInArchive, flagNotInArchive, flagDirectory:
		case 'R':
			if name == "" {
				return nil, nil, errors.New("dumpdir rename through a temporary directory is not supported")
			}
			pendingR = name
			continue
		case 'T':
			if pendingR == "" || name == "" {
				return nil, nil, errors.New("dumpdir rename target without a source")
			}
			renames = append(renames, dumpRename{From: pendingR, To: name})
			pendingR = ""
			continue
		default:
			return nil, nil, fmt.Errorf("unsupported dumpdir flag %q", flag)
		}
		if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
			return nil, nil, fmt.Errorf("invalid dumpdir name %q", name)
		}
		if seen[name] {
			return nil, nil, fmt.Errorf("duplicate dumpdir name %q", name)
		}
		seen[name] = true
		out = append(out, dumpEntry{Flag: flag, Name: name})
	}
	if pendingR != "" {
		return nil, nil, errors.New("dumpdir rename source without a target")
	}
	// GNU tar always writes the terminator; tolerate its absence only for an
	// empty listing.
	if !terminated && (out != nil || renames != nil) {
		return nil, nil, errors.New("dumpdir without terminator")
	}
	return out, renames, nil
}

// archiveWriter writes one increment: a gzip stream of a GNU-format tar.
type archiveWriter struct {
	gz *gzip.Writer
	tw *tar.Writer
}

func newArchiveWriter(w io.Writer) *archiveWriter {
	gz := gzip.NewWriter(w)
	return &archiveWriter{gz: gz, tw: tar.NewWriter(gz)}
}

// header builds the GNU header GNU tar itself writes in incremental mode:
// permission bits only in the mode, atime and ctime filled.
func gnuHeader(name string, flag byte, mode fs.FileMode, mtime time.Time, uid, gid int) *tar.Header {
	m := int64(mode.Perm())
	if mode&fs.ModeSetuid != 0 {
		m |= 0o4000
	}
	if mode&fs.ModeSetgid != 0 {
		m |= 0o2000
	}
	if mode&fs.ModeSticky != 0 {
		m |= 0o1000
	}
	mt := mtime.Truncate(time.Second)
	return &tar.Header{
		Typeflag:   flag,
		Name:       name,
		Mode:       m,
		Uid:        uid,
		Gid:        gid,
		ModTime:    mt,
		AccessTime: mt,
		ChangeTime: mt,
		Format:     tar.FormatGNU,
	}
}

func (w *archiveWriter) meta(m *incmeta.Meta) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode metadata: %w", err)
	}
	h := gnuHeader(incmeta.Member, tar.TypeReg, 0o600, m.CreatedAt, 0, 0)
	h.Size = int64(len(b))
	if err := w.tw.WriteHeader(h); err != nil {
		return fmt.Errorf("write metadata header: %w", err)
	}
	if _, err := w.tw.Write(b); err != nil {
		return fmt.Errorf("write metadata: %w", err)
	}
	return nil
}

func (w *archiveWriter) dumpdir(name string, mode fs.FileMode, mtime time.Time, uid, gid int, entries []dumpEntry) error {
	data := encodeDumpdir(entries)
	h := gnuHeader(strings.TrimSuffix(name, "/")+"/", typeDumpdir, mode, mtime, uid, gid)
	h.Size = int64(len(data))
	if err := w.tw.WriteHeader(h); err != nil {
		return fmt.Errorf("write directory %s: %w", name, err)
	}
	if _, err := w.tw.Write(data); err != nil {
		return fmt.Errorf("write dumpdir %s: %w", name, err)
	}
	return nil
}

func (w *archiveWriter) symlink(name string, mode fs.FileMode, mtime time.Time, uid, gid int, target string) error {
	h := gnuHeader(name, tar.TypeSymlink, 0o777, mtime, uid, gid)
	h.Linkname = target
	if err := w.tw.WriteHeader(h); err != nil {
		return fmt.Errorf("write symlink %s: %w", name, err)
	}
	return nil
}

// file writes a regular file of exactly size bytes from r; a short read is
// padded with zeros (the caller then treats the file as not captured).
func (w *archiveWriter) file(name string, mode fs.FileMode, mtime time.Time, uid, gid int, size int64, r io.Reader) (short bool, err error) {
	h := gnuHeader(name, tar.TypeReg, mode, mtime, uid, gid)
	h.Size = size
	if err := w.tw.WriteHeader(h); err != nil {
		return false, fmt.Errorf("write header %s: %w", name, err)
	}
	n, err := io.Copy(w.tw, io.LimitReader(r, size))
	if err != nil {
		return false, fmt.Errorf("copy %s: %w", name, err)
	}
	if n < size {
		if _, err := io.CopyN(w.tw, zeroReader{}, size-n); err != nil {
			return true, fmt.Errorf("pad %s: %w", name, err)
		}
		return true, nil
	}
	return false, nil
}

func (w *archiveWriter) close() error {
	if err := w.tw.Close(); err != nil {
		return fmt.Errorf("close tar: %w", err)
	}
	if err := w.gz.Close(); err != nil {
		return fmt.Errorf("close gzip: %w", err)
	}
	return nil
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// ErrUnreadableArchive reports an increment that is not a readable,
// well-formed changelog archive (the seed's 422). Hostile archives (absolute
// or ".." names, members through symlinks, members outside every capture
// root) are refused with it too.
var ErrUnreadableArchive = errors.New("not a readable changelog archive")

// Member is one validated archive member.
type Member struct {
	Name     string // full member name without trailing slash
	Root     string // capture root name the member belongs to
	Rel      string // path inside the root ("" for the root itself)
	Type     byte   // tar.TypeReg, tar.TypeSymlink or typeDumpdir
	Mode     fs.FileMode
	ModTime  time.Time
	Size     int64
	Linkname string
	Dumpdir  []dumpEntry
	Renames  []memberRename
	offset   int    // ordinal of the member in the archive
	data     []byte // the content, when the archive was read holding it
	// arch is the member's name in the archive when it differs from Name
	// (the AppendDir member of an appended transcript part).
	arch string
	// part is the transcript part a conversation file's member stores
	// (nil for other members and increments written before parts).
	part *incmeta.Part
	// expect is the size the file must have on disk when an appended part
	// is extracted (set by the replay's simulation).
	expect int64
	// skip marks an appended part of an uploaded form that does not extend
	// what the sequence holds (see simulate): it is not extracted.
	skip bool
}

// typeAppend marks a Member holding the bytes appended to a transcript
// (an AppendDir member of the archive, see incmeta.Part). It is never a
// tar typeflag: the archive stores such a member as a regular file.
const typeAppend = 'a'

// archName is the member's name in the archive.
func (m *Member) archName() string {
	if m.arch != "" {
		return m.arch
	}
	return m.Name
}

// localLen is the local transcript bytes a member represents: its part's
// length, else its size.
func (m *Member) localLen() int64 {
	if m.part != nil {
		return m.part.Length
	}
	return m.Size
}

// memberRename is a validated rename inside one capture root.
type memberRename struct{ From, To string }

// Archive is a fully read and validated increment. File contents are held
// only when read with readArchiveHolding and within its budget; otherwise
// extraction reads the archive a second time.
type Archive struct {
	Meta    incmeta.Meta
	Members []Member
	// held is set when every regular file's content is in its Member (see
	// readArchiveHolding); otherwise extraction reads the archive again.
	held bool
}

// archiveError wraps a validation failure as ErrUnreadableArchive.
func archiveError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnreadableArchive, fmt.Sprintf(format, args...))
}

// rootMatcher maps member names to capture roots.
type rootMatcher struct {
	roots []incmeta.Root
}

// match returns the root whose prefix holds name, and the path inside it.
func (m rootMatcher) match(name string) (incmeta.Root, string, bool) {
	for _, r := range m.roots {
		if name == r.Prefix {
			return r, "", true
		}
		if strings.HasPrefix(name, r.Prefix+"/") {
			return r, name[len(r.Prefix)+1:], true
		}
	}
	return incmeta.Root{}, "", false
}

// cleanMemberName validates a member name and returns it without a trailing
// slash: relative, no empty, "." or ".." components, no NUL, bounded.
func cleanMemberName(name string) (string, error) {
	if len(name) > maxNameBytes {
		return "", fmt.Errorf("member name longer than %d bytes", maxNameBytes)
	}
	if strings.IndexByte(name, 0) >= 0 {
		return "", fmt.Errorf("member name %q contains NUL", name)
	}
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("absolute member name %q", name)
	}
	n := strings.TrimSuffix(name, "/")
	if n == "" {
		return "", fmt.Errorf("empty member name")
	}
	if strings.Count(n, "/") >= maxDepth {
		return "", fmt.Errorf("member name %q is deeper than %d components", name[:64], maxDepth)
	}
	for _, c := range strings.Split(n, "/") {
		if c == "" || c == "." || c == ".." {
			return "", fmt.Errorf("member name %q has a %q component", name, c)
		}
	}
	return n, nil
}

// readArchive reads and validates a whole increment from r. roots, when not
// nil, are the capture roots the caller allows (matched by Name); members
// must lie inside one of them. File contents are read and discarded.
func readArchive(r io.Reader, allowed []incmeta.Root) (*Archive, error) {
	return readArchiveHolding(r, allowed, nil)
}

// readArchiveHolding is readArchive that also keeps the content of regular
// files of at most sameCheckMax bytes while *budget allows (it is decreased
// by what is kept). When every file's content is kept, Archive.held is set
// and extraction needs no second read of the archive.
func readArchiveHolding(r io.Reader, allowed []incmeta.Root, budget *int64) (*Archive, error) {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return nil, archiveError("%v", err)
	}
	defer gz.Close()
	gz.Multistream(false)
	tr := tar.NewReader(gz)
	a := &Archive{held: budget != nil}
	var chunk []byte
	var matcher rootMatcher
	var parts *partIndex
	var arch *indexedPart
	haveMeta := false
	seen := map[string]byte{}
	symlinks := map[string]bool{}
	for i := 0; ; i++ {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, archiveError("tar: %v", err)
		}
		if i >= maxMembers {
			return nil, archiveError("more than %d members", maxMembers)
		}
		name, err := cleanMemberName(h.Name)
		if err != nil {
			return nil, archiveError("%v", err)
		}
		if (name == incmeta.Dir || strings.HasPrefix(name, incmeta.Dir+"/")) && name != incmeta.Member && haveMeta && parts != nil {
			// An appended transcript part: listed in the metadata, read
			// as the file it extends.
			pt, ok := parts.appends[name]
			if !ok || h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeRegA {
				return nil, archiveError("unexpected metadata member %q", h.Name)
			}
			delete(parts.appends, name)
			h.Typeflag = typeAppend
			h.Name = memberName(pt.prefix, pt.Path)
			name = h.Name
			arch = pt
		}
		if name == incmeta.Dir || strings.HasPrefix(name, incmeta.Dir+"/") {
			if name != incmeta.Member || h.Typeflag != tar.TypeReg || haveMeta || i != 0 {
				return nil, archiveError("unexpected metadata member %q", h.Name)
			}
			b, err := readAllBounded(tr, maxMetaBytes)
			if err != nil {
				return nil, archiveError("metadata: %v", err)
			}
			if err := json.Unmarshal(b, &a.Meta); err != nil {
				return nil, archiveError("metadata: %v", err)
			}
			roots, err := checkMetaRoots(a.Meta.Roots, allowed)
			if err != nil {
				return nil, archiveError("%v", err)
			}
			matcher = rootMatcher{roots: roots}
			haveMeta = true
			if parts, err = indexParts(&a.Meta, roots); err != nil {
				return nil, archiveError("%v", err)
			}
			continue
		}
		if !haveMeta {
			if allowed == nil {
				return nil, archiveError("first member is not the metadata")
			}
			// A plain GNU incremental archive (no metadata): members must
			// lie inside the allowed roots.
			matcher = rootMatcher{roots: allowed}
			haveMeta = true
			a.Meta.Roots = allowed
			a.Meta.Kind = "external"
		}
		root, rel, ok := matcher.match(name)
		if !ok {
			return nil, archiveError("member %q is outside every capture root", h.Name)
		}
		if prev, dup := seen[name]; dup {
			return nil, archiveError("member %q appears twice (as %q and %q)", name, prev, h.Typeflag)
		}
		// No member may lie below a symlink stored earlier in this archive.
		for p := parentOf(name); p != ""; p = parentOf(p) {
			if symlinks[p] {
				return nil, archiveError("member %q lies below the symlink %q", h.Name, p)
			}
		}
		m := Member{
			Name: name, Root: root.Name, Rel: rel, Type: h.Typeflag,
			Mode: fs.FileMode(h.Mode & 0o7777), ModTime: h.ModTime, offset: i,
		}
		if arch != nil {
			if arch.Root != root.Name {
				return nil, archiveError("transcript part %q is not in its capture root %q", arch.Member, arch.Root)
			}
			m.arch, m.part = arch.Member, &arch.Part
			arch = nil
		} else if parts != nil && h.Typeflag != typeDumpdir {
			if pt, ok := parts.whole[name]; ok {
				m.part = &pt.Part
				delete(parts.whole, name)
			}
		}
		switch h.Typeflag {
		case typeAppend:
			if rel == "" || h.Size < 0 {
				return nil, archiveError("transcript part %q is invalid", m.arch)
			}
			for k := range h.PAXRecords {
				if strings.HasPrefix(k, "GNU.sparse.") {
					return nil, archiveError("member %q is a sparse file (%s), which increments never hold", m.arch, k)
				}
			}
			m.Size = h.Size
			if a.held && h.Size <= sameCheckMax && h.Size <= *budget {
				if int64(cap(chunk)-len(chunk)) < h.Size {
					chunk = make([]byte, 0, max(h.Size, 1<<20))
				}
				m.data = chunk[len(chunk) : len(chunk)+int(h.Size) : len(chunk)+int(h.Size)]
				chunk = chunk[:len(chunk)+int(h.Size)]
				if _, err := io.ReadFull(tr, m.data); err != nil {
					return nil, archiveError("member %q: %v", m.arch, err)
				}
				*budget -= h.Size
				break
			}
			a.held = false
			if _, err := io.Copy(io.Discard, tr); err != nil {
				return nil, archiveError("member %q: %v", m.arch, err)
			}
		case typeDumpdir:
			if h.Size > maxDumpdirBytes {
				return nil, archiveError("dumpdir %q of %d bytes", h.Name, h.Size)
			}
			b, err := readAllBounded(tr, maxDumpdirBytes)
			if err != nil {
				return nil, archiveError("dumpdir %q: %v", h.Name, err)
			}
			var renames []dumpRename
			if m.Dumpdir, renames, err = decodeDumpdir(b); err != nil {
				return nil, archiveError("dumpdir %q: %v", h.Name, err)
			}
			for _, rn := range renames {
				from, ferr := cleanMemberName(rn.From)
				to, terr := cleanMemberName(rn.To)
				if ferr != nil || terr != nil {
					return nil, archiveError("dumpdir %q: invalid rename %q -> %q", h.Name, rn.From, rn.To)
				}
				fr, frel, fok := matcher.match(from)
				tr, trel, tok := matcher.match(to)
				if !fok || !tok || fr.Name != tr.Name || frel == "" || trel == "" {
					return nil, archiveError("dumpdir %q: rename %q -> %q leaves its capture root", h.Name, rn.From, rn.To)
				}
				if within(trel, frel) {
					return nil, archiveError("dumpdir %q: rename %q into itself", h.Name, rn.From)
				}
				m.Renames = append(m.Renames, memberRename{From: frel, To: trel})
			}
		case tar.TypeReg, tar.TypeRegA:
			m.Type = tar.TypeReg
			if rel == "" {
				return nil, archiveError("capture root %q stored as a file", root.Name)
			}
			if h.Size < 0 {
				return nil, archiveError("member %q has negative size", h.Name)
			}
			// A PAX sparse member declares its real size apart from the
			// bytes stored: a few hundred bytes could claim (and extract
			// as) terabytes of zeros. Neither agentscm nor GNU tar's
			// incremental mode without --sparse writes one.
			for k := range h.PAXRecords {
				if strings.HasPrefix(k, "GNU.sparse.") {
					return nil, archiveError("member %q is a sparse file (%s), which increments never hold", h.Name, k)
				}
			}
			m.Size = h.Size
			if a.held && h.Size <= sameCheckMax && h.Size <= *budget {
				// Contents share 1 MiB chunks: one allocation per chunk.
				if int64(cap(chunk)-len(chunk)) < h.Size {
					chunk = make([]byte, 0, max(h.Size, 1<<20))
				}
				m.data = chunk[len(chunk) : len(chunk)+int(h.Size) : len(chunk)+int(h.Size)]
				chunk = chunk[:len(chunk)+int(h.Size)]
				if _, err := io.ReadFull(tr, m.data); err != nil {
					return nil, archiveError("member %q: %v", h.Name, err)
				}
				*budget -= h.Size
				break
			}
			a.held = false
			if _, err := io.Copy(io.Discard, tr); err != nil {
				return nil, archiveError("member %q: %v", h.Name, err)
			}
		case tar.TypeSymlink:
			if rel == "" {
				return nil, archiveError("capture root %q stored as a symlink", root.Name)
			}
			if h.Linkname == "" || len(h.Linkname) > maxNameBytes || strings.IndexByte(h.Linkname, 0) >= 0 {
				return nil, archiveError("symlink %q has an invalid target", h.Name)
			}
			m.Linkname = h.Linkname
			symlinks[name] = true
		default:
			return nil, archiveError("member %q has unsupported type %q", h.Name, h.Typeflag)
		}
		seen[name] = m.Type
		a.Members = append(a.Members, m)
	}
	if !haveMeta && allowed == nil {
		return nil, archiveError("empty archive")
	}
	if parts != nil {
		for n := range parts.appends {
			return nil, archiveError("transcript part %q listed in the metadata is missing", n)
		}
		for n := range parts.whole {
			return nil, archiveError("transcript %q listed in the metadata is missing", n)
		}
	}
	if _, err := io.Copy(io.Discard, gz); err != nil {
		return nil, archiveError("gzip trailer: %v", err)
	}
	// A directory listed after a symlink of the same name, or a member
	// whose parent directory is stored as a non-directory, is refused.
	for _, m := range a.Members {
		for p := parentOf(m.Name); p != ""; p = parentOf(p) {
			if t, ok := seen[p]; ok && t != typeDumpdir {
				return nil, archiveError("member %q lies below the non-directory %q", m.Name, p)
			}
		}
	}
	return a, nil
}

// checkMetaRoots validates the roots an archive declares against the roots
// the caller allows (matched by name: the caller decides where each root is
// extracted, the archive's prefixes only name its members).
func checkMetaRoots(declared, allowed []incmeta.Root) ([]incmeta.Root, error) {
	names := map[string]bool{}
	var out []incmeta.Root
	for _, r := range declared {
		p, err := cleanMemberName(r.Prefix)
		if err != nil || p != r.Prefix {
			return nil, fmt.Errorf("capture root %q has an invalid prefix %q", r.Name, r.Prefix)
		}
		if p == incmeta.Dir || strings.HasPrefix(p, incmeta.Dir+"/") {
			return nil, fmt.Errorf("capture root %q overlaps the metadata directory", r.Name)
		}
		if r.Name == "" || names[r.Name] {
			return nil, fmt.Errorf("capture root name %q is empty or repeated", r.Name)
		}
		names[r.Name] = true
		if allowed != nil {
			found := false
			for _, a := range allowed {
				if a.Name == r.Name {
					found = true
				}
			}
			if !found {
				return nil, fmt.Errorf("capture root %q (%s) is not one of the configured roots", r.Name, r.Prefix)
			}
		}
		out = append(out, r)
	}
	for i := range out {
		for j := range out {
			if i != j && (out[i].Prefix == out[j].Prefix || strings.HasPrefix(out[i].Prefix, out[j].Prefix+"/")) {
				return nil, fmt.Errorf("capture roots %q and %q overlap", out[i].Name, out[j].Name)
			}
		}
	}
	return out, nil
}

func readAllBounded(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return b, nil
}

// ReadMeta reads only the metadata of the increment at path (its first
// member), without validating the rest.
func ReadMeta(path string) (*incmeta.Meta, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadMetaFrom(f)
}

// ReadMetaFrom reads only the metadata of an increment (its first member)
// from r, without validating the rest.
func ReadMetaFrom(r io.Reader) (*incmeta.Meta, error) {
	m, err := incmeta.ReadFrom(r)
	if err != nil {
		return nil, archiveError("%v", err)
	}
	return m, nil
}
