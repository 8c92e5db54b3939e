package changelog

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/scan"
)

// Transcript storage. Claude Code appends to its JSONL transcripts, so an
// increment stores a conversation root's transcript whole only the first
// time it sees it (or after it was replaced, truncated or rewritten) and
// otherwise only the bytes appended since the previous increment: storage
// grows with the bytes appended, not with the session's length squared.
// Each stored copy ends at the transcript's last complete line, so every
// part is whole lines (which the redaction of an uploaded form relies on:
// a secret is never split between two parts); a line still being written
// waits for the next increment.

// tailBytes is how much of a transcript's stored end the state hashes: an
// append is stored as a delta only while those bytes are unchanged.
const tailBytes = 4096

// IsConversationRoot reports whether a capture root holds conversation
// bodies: the Claude Code transcript root (TranscriptRootName) or any root
// inside a ~/.claude/projects directory. The checkout never is one.
func IsConversationRoot(name, path string) bool {
	if name == "checkout" {
		return false
	}
	return name == TranscriptRootName || strings.Contains(path+"/", "/.claude/projects/")
}

// isTranscriptFile reports whether rel, a path in a conversation root, is
// an append-only JSONL transcript.
func isTranscriptFile(rel string) bool { return strings.HasSuffix(rel, ".jsonl") }

// appendPlan is a transcript that grew since the last increment.
type appendPlan struct {
	idx    int // into the root's state entries
	offset int64
	tail   *[32]byte
}

// canAppend reports whether n, found where the state recorded o, may be
// stored as the bytes appended to o: the same file (device and inode),
// not shorter, with a recorded tail (verified when it is read).
func canAppend(o, n *entry) bool {
	return o.Type == scan.File && n.Type == scan.File && !o.Excluded && !n.Excluded &&
		o.Dev == n.Dev && o.Ino == n.Ino && o.Size > 0 && n.Size >= o.Size && o.Tail != nil
}

// convItem is one transcript file an increment stores, decided before the
// metadata is written: the local bytes [offset, end) of the file, whole
// (offset 0, as the regular member of its path) or appended (in member).
type convItem struct {
	root   Root
	e      *entry
	member string // the AppendDir member of an appended part
	name   string // the member name of the file's path (a whole copy)
	offset int64
	end    int64
	dev    uint64
	ino    uint64
	tail   *[32]byte // hash of the stored end, recorded in the state
	// keep: nothing new to store (a grown file whose new bytes hold no
	// complete line yet); the state keeps the old size and tail.
	keep bool
	gone bool // vanished or replaced since the walk
}

// planTranscripts decides how each stored transcript of a conversation root
// is stored, opening each once: the whole files (among plan.files) are cut
// at their last complete line, the appends are verified (same file, same
// stored tail; otherwise stored whole once) and cut too. It records the
// parts in meta and returns the items by entry and the appended ones in
// order.
func planTranscripts(plans []*rootPlan, meta *incmeta.Meta) (map[*entry]*convItem, []*convItem, error) {
	conv := map[*entry]*convItem{}
	var appends []*convItem
	for _, p := range plans {
		if !p.conv {
			continue
		}
		for _, i := range p.files {
			e := &p.state.Entries[i]
			if e.Type != scan.File || !isTranscriptFile(e.Path) {
				continue
			}
			it := &convItem{root: p.root, e: e}
			if err := it.plan(nil); err != nil {
				return nil, nil, err
			}
			conv[e] = it
			if !it.gone {
				// Counted by the caller at the walk's size: count what is stored.
				meta.Bytes += it.end - e.Size
				meta.Transcripts = append(meta.Transcripts, it.part(p.root.Name))
			}
		}
		for _, ap := range p.appends {
			e := &p.state.Entries[ap.idx]
			it := &convItem{root: p.root, e: e, offset: ap.offset, name: memberName(p.prefix, e.Path)}
			if err := it.plan(ap.tail); err != nil {
				return nil, nil, err
			}
			switch {
			case it.gone:
				e.Type = scan.Other // the next capture sees it afresh
				continue
			case it.keep:
				e.Size, e.Tail, e.Hash = ap.offset, ap.tail, nil
				continue
			}
			meta.Files++
			meta.Bytes += it.end - it.offset
			if it.offset > 0 {
				it.member = fmt.Sprintf("%s/%06d", incmeta.AppendDir, len(appends))
				appends = append(appends, it)
			} else {
				// Rewritten in place: stored whole, as its own member, and
				// listed as such after the appended parts.
				it.member = ""
				appends = append(appends, it)
			}
			meta.Transcripts = append(meta.Transcripts, it.part(p.root.Name))
		}
	}
	return conv, appends, nil
}

func (it *convItem) part(root string) incmeta.Part {
	return incmeta.Part{Root: root, Path: it.e.Path, Member: it.member, Offset: it.offset, Length: it.end - it.offset, Dev: it.dev, Ino: it.ino}
}

// plan opens the file and decides its stored range. With tail set, the
// file must still end its first it.offset bytes with the bytes hashed in
// tail; otherwise it is stored whole (offset 0).
func (it *convItem) plan(tail *[32]byte) error {
	f, err := scan.OpenFile(it.root.Path, it.e.Path)
	if err != nil {
		if isVanished(err) {
			it.gone = true
			return nil
		}
		return fmt.Errorf("read %s: %w", it.e.Path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", it.e.Path, err)
	}
	size := fi.Size()
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		it.dev, it.ino = uint64(st.Dev), st.Ino
	}
	if tail != nil {
		got, err := hashRange(f, it.offset)
		if err != nil {
			return fmt.Errorf("read %s: %w", it.e.Path, err)
		}
		if it.dev != it.e.Dev || it.ino != it.e.Ino || size < it.offset || got != *tail {
			it.offset = 0 // replaced or rewritten: stored whole once
		}
	}
	end, err := lastLineEnd(f, it.offset, size)
	if err != nil {
		return fmt.Errorf("read %s: %w", it.e.Path, err)
	}
	it.end = end
	if it.offset > 0 && end == it.offset {
		it.keep = true
		return nil
	}
	sum, err := hashRange(f, end)
	if err != nil {
		return fmt.Errorf("read %s: %w", it.e.Path, err)
	}
	it.tail = &sum
	return nil
}

// write stores the planned range as the member name and records in the
// state entry what was stored.
func (it *convItem) write(aw *archiveWriter, name string, uid, gid int) error {
	e := it.e
	if it.gone {
		e.Type = scan.Other
		return nil
	}
	if it.member != "" {
		name = it.member
	} else if name == "" {
		name = it.name
	}
	n := it.end - it.offset
	f, err := scan.OpenFile(it.root.Path, e.Path)
	var r io.Reader = bytes.NewReader(nil)
	mode, mtime := e.Mode, time.Unix(0, e.MTime)
	fuid, fgid := uid, gid
	changed := true
	if err == nil {
		defer f.Close()
		if fi, serr := f.Stat(); serr == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && uint64(st.Dev) == it.dev && st.Ino == it.ino && fi.Size() >= it.end {
				changed = false
				r = io.NewSectionReader(f, it.offset, n)
				mode = fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
				mtime = fi.ModTime()
				fuid, fgid = int(st.Uid), int(st.Gid)
				e.Mode, e.MTime, e.CTime = mode, fi.ModTime().UnixNano(), fsutil.SysCtimeNS(st)
				e.Dev, e.Ino = it.dev, it.ino
			}
		}
	} else if !isVanished(err) {
		return fmt.Errorf("read %s: %w", e.Path, err)
	}
	short, err := aw.file(name, mode, mtime, fuid, fgid, n, r)
	if err != nil {
		return err
	}
	e.Size, e.Tail, e.Hash = it.end, it.tail, nil
	if short || changed {
		e.Type = scan.Other // changed while read: stored whole next time
	}
	return nil
}

func isVanished(err error) bool {
	for _, t := range []error{fs.ErrNotExist, scan.ErrChanged, scan.ErrNotRegular, scan.ErrSymlink, syscall.ENOTDIR, syscall.ELOOP} {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// hashRange hashes the tailBytes of f that end at end.
func hashRange(f *os.File, end int64) ([32]byte, error) {
	start := max(0, end-tailBytes)
	b := make([]byte, end-start)
	if _, err := f.ReadAt(b, start); err != nil && err != io.EOF {
		return [32]byte{}, err
	}
	return sha256.Sum256(b), nil
}

// lastLineEnd returns the offset just past the last newline of f in
// [from, size), or from when there is none.
func lastLineEnd(f *os.File, from, size int64) (int64, error) {
	buf := make([]byte, 64<<10)
	for end := size; end > from; {
		start := max(from, end-int64(len(buf)))
		b := buf[:end-start]
		if _, err := f.ReadAt(b, start); err != nil && err != io.EOF {
			return 0, err
		}
		if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
			return start + int64(i) + 1, nil
		}
		end = start
	}
	return from, nil
}

// indexedPart is a validated transcript part and its root's member prefix.
type indexedPart struct {
	incmeta.Part
	prefix string
}

// partIndex holds the transcript parts an increment's metadata lists, by
// archive member name: appended parts by their AppendDir member, whole
// copies by the member of their path. Each must be met exactly once.
type partIndex struct {
	appends map[string]*indexedPart
	whole   map[string]*indexedPart
}

// indexParts validates meta.Transcripts against the archive's roots.
func indexParts(meta *incmeta.Meta, roots []incmeta.Root) (*partIndex, error) {
	if len(meta.Transcripts) == 0 {
		return nil, nil
	}
	if len(meta.Transcripts) > maxMembers {
		return nil, fmt.Errorf("%d transcript parts", len(meta.Transcripts))
	}
	prefix := map[string]string{}
	for _, r := range roots {
		prefix[r.Name] = r.Prefix
	}
	ix := &partIndex{appends: map[string]*indexedPart{}, whole: map[string]*indexedPart{}}
	paths := map[string]bool{}
	for i := range meta.Transcripts {
		pt := meta.Transcripts[i]
		pre, ok := prefix[pt.Root]
		if !ok {
			return nil, fmt.Errorf("transcript part %d names the capture root %q, which the increment does not declare", i, pt.Root)
		}
		if n, err := cleanMemberName(pt.Path); err != nil || n != pt.Path {
			return nil, fmt.Errorf("transcript part %d has an invalid path %q", i, pt.Path)
		}
		if pt.Offset < 0 || pt.Length < 0 || pt.Offset > 1<<50 || pt.Length > 1<<50 {
			return nil, fmt.Errorf("transcript part %d has an invalid range %d+%d", i, pt.Offset, pt.Length)
		}
		full := memberName(pre, pt.Path)
		if paths[full] {
			return nil, fmt.Errorf("transcript %q is listed twice", full)
		}
		paths[full] = true
		ip := &indexedPart{Part: pt, prefix: pre}
		if pt.Member == "" {
			if pt.Offset != 0 {
				return nil, fmt.Errorf("whole transcript %q with offset %d", full, pt.Offset)
			}
			ix.whole[full] = ip
			continue
		}
		rest, ok := strings.CutPrefix(pt.Member, incmeta.AppendDir+"/")
		if n, err := cleanMemberName(pt.Member); !ok || err != nil || n != pt.Member || rest == "" || strings.Trim(rest, "0123456789") != "" {
			return nil, fmt.Errorf("transcript part %d has an invalid member %q", i, pt.Member)
		}
		if _, dup := ix.appends[pt.Member]; dup {
			return nil, fmt.Errorf("transcript member %q is listed twice", pt.Member)
		}
		ix.appends[pt.Member] = ip
	}
	return ix, nil
}

// appendPart extends the transcript base in dr, which the increments
// before m left m.expect bytes long, by m's stored bytes.
func appendPart(dr *os.Root, base string, m *Member, content io.Reader) error {
	f, err := dr.OpenFile(base, os.O_WRONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("extend %s: %w", m.Name, err)
	}
	fi, err := f.Stat()
	if err == nil && (!fi.Mode().IsRegular() || fi.Size() < m.expect) {
		err = fmt.Errorf("%w: %s changed while being applied (%d bytes, the increments hold %d)", ErrUnreadableArchive, m.Name, fi.Size(), m.expect)
	}
	if err == nil {
		err = f.Truncate(m.expect)
	}
	if err == nil {
		var n int64
		n, err = io.Copy(io.NewOffsetWriter(f, m.expect), content)
		if err == nil && n != m.Size {
			err = fmt.Errorf("%w: %s: short transcript part", ErrUnreadableArchive, m.Name)
		}
	}
	if err == nil {
		err = f.Chmod(m.Mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("extend %s: %w", m.Name, err)
	}
	return dr.Chtimes(base, m.ModTime, m.ModTime)
}

// Rewinds never delete a conversation. A replay extracts a conversation
// root into a private staging directory instead of the live one, then
// merges it: the rewound session's transcript (the target call's session,
// cut at that call) is set exactly to its restored copy; every other file
// is only ever added or extended (written when the live copy is missing or
// a strict prefix of the restored one), and nothing live is deleted. So an
// undo never deletes the conversation resumed after a rewind, and a rewind
// never deletes or shortens another session's transcript.

// stageConversation returns roots with every conversation root moved into
// a fresh directory under parent, and the staged roots by name.
func stageConversation(roots []Root, parent string) ([]Root, map[string]string, func(), error) {
	var staged map[string]string
	out := append([]Root(nil), roots...)
	dir := ""
	for i, r := range out {
		if !IsConversationRoot(r.Name, r.Path) {
			continue
		}
		if dir == "" {
			var err error
			if dir, err = os.MkdirTemp(parent, ".staging-"); err != nil {
				return nil, nil, nil, fmt.Errorf("stage the conversation roots: %w", err)
			}
			staged = map[string]string{}
		}
		out[i].Path = filepath.Join(dir, fmt.Sprintf("%d", i))
		staged[r.Name] = out[i].Path
	}
	cleanup := func() {
		if dir != "" {
			os.RemoveAll(dir)
		}
	}
	return out, staged, cleanup, nil
}

// mergeConversations merges every staged conversation root into its live
// root (see stageConversation); session is the rewound session ("" for
// none: an undo, or a rewind to a position that is not a tool call).
func mergeConversations(roots []Root, staged map[string]string, session string) error {
	return mergeConversationsAs(roots, staged, session, nil)
}

// mergeConversationsAs is mergeConversations; with dry set, nothing is
// written and dry is told each path the merge would create or modify (a
// merge never deletes), with its kind.
func mergeConversationsAs(roots []Root, staged map[string]string, session string, dry func(root, rel, change, kind string)) error {
	for _, r := range roots {
		if s, ok := staged[r.Name]; ok {
			var report func(rel, change, kind string)
			if dry != nil {
				name := r.Name
				report = func(rel, change, kind string) { dry(name, rel, change, kind) }
			}
			if err := mergeConversation(s, r.Path, session, report); err != nil {
				return fmt.Errorf("restore the conversation root %s: %w", r.Name, err)
			}
		}
	}
	return nil
}

// inSession reports whether rel, a path in a conversation root, belongs to
// session: its transcript <session>.jsonl or its directory <session>/.
func inSession(rel, session string) bool {
	return session != "" && (rel == session+".jsonl" || strings.HasPrefix(rel, session+"/"))
}

func mergeConversation(staged, live, session string, dry func(rel, change, kind string)) error {
	if fi, err := os.Lstat(staged); err != nil || !fi.IsDir() {
		return nil // the root did not exist at the target: nothing is removed
	}
	var lr *os.Root
	liveGone := false
	defer func() {
		if lr != nil {
			lr.Close()
		}
	}()
	return filepath.WalkDir(staged, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(staged, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if lr == nil && !liveGone {
			if dry != nil {
				if fi, err := os.Lstat(live); err != nil || !fi.IsDir() {
					liveGone = true // the merge would create the root and everything
				}
			} else if err := os.MkdirAll(live, 0o700); err != nil {
				return err
			}
			if !liveGone {
				if lr, err = os.OpenRoot(live); err != nil {
					return err
				}
			}
		}
		if rel == "." {
			return nil
		}
		lstat := func(rel string) (fs.FileInfo, error) {
			if liveGone {
				return nil, fs.ErrNotExist
			}
			return lr.Lstat(rel)
		}
		if d.IsDir() {
			fi, err := lstat(rel)
			if err == nil && !fi.IsDir() {
				return filepath.SkipDir // a live non-directory stays
			}
			if err != nil {
				if dry != nil {
					dry(rel, ChangeCreated, "dir")
					return nil
				}
				return lr.Mkdir(rel, 0o700)
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		want, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		change := ChangeCreated
		fi, err := lstat(rel)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return err
		case !fi.Mode().IsRegular():
			return nil // never replace a live directory or link
		default:
			have, err := readRootFile(lr, rel, int64(len(want))+1)
			if err != nil {
				return err
			}
			same := bytes.Equal(have, want)
			extends := len(have) < len(want) && bytes.HasPrefix(want, have)
			if same || !(extends || inSession(rel, session)) {
				return nil
			}
			change = ChangeModified
		}
		if dry != nil {
			dry(rel, change, "file")
			return nil
		}
		sfi, err := d.Info()
		if err != nil {
			return err
		}
		return writeRootFile(lr, rel, want, sfi.Mode().Perm(), sfi.ModTime())
	})
}

// readRootFile reads at most limit bytes of the regular file rel in r
// without following a final symlink; a longer file reads as its first
// limit bytes (enough to tell it is not a prefix).
func readRootFile(r *os.Root, rel string, limit int64) ([]byte, error) {
	f, err := r.OpenFile(rel, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}

// writeRootFile replaces rel in r atomically (temporary file in the same
// directory, fsync, rename).
func writeRootFile(r *os.Root, rel string, b []byte, mode fs.FileMode, mtime time.Time) error {
	tmp := path.Join(path.Dir(rel), fmt.Sprintf(".agentscm-restore-%d", time.Now().UnixNano()))
	f, err := r.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = r.Chtimes(tmp, mtime, mtime)
	}
	if err == nil {
		err = r.Rename(tmp, rel)
	}
	if err != nil {
		r.Remove(tmp)
		return fmt.Errorf("restore %s: %w", rel, err)
	}
	return nil
}
