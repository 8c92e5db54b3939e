package changelog

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"syscall"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/klauspost/compress/gzip"
)

// IncrementPath returns the path of the increment stored at position pos
// (which may not exist).
func (c *Changelog) IncrementPath(pos int) string { return c.incrementPath(pos) }

// FileChange says what one increment records of one file.
type FileChange int

// What an increment records of a file (FileAt.Change).
const (
	// FileUnchanged: the increment does not touch the file (it is as the
	// increments before left it).
	FileUnchanged FileChange = iota
	// FileStored: the file exists and its content is in the increment.
	FileStored
	// FileAbsent: the file does not exist at this position.
	FileAbsent
)

// FileAt is what one increment records of one file of a capture root.
type FileAt struct {
	Change FileChange
	// Data is the content of a stored regular file (FileStored), unless it
	// is longer than the limit given (TooLarge) or a symlink (Symlink).
	Data     []byte
	TooLarge bool
	Symlink  bool
}

// FilesAt is what one increment records of the files a caller asked for.
type FilesAt struct {
	Meta incmeta.Meta
	// Files holds an entry for every path asked for that the increment
	// stores or says is absent; a path it leaves unchanged is missing.
	Files map[string]FileAt
	// Stored lists every regular file of the root the increment stores,
	// asked for or not (so a caller can look for where a deleted file
	// went, and ask for it).
	Stored []string
}

// ReadFilesAt reads the increment at incPath (validated as an apply
// validates it, ErrUnreadableArchive) and reports what it records of the
// regular files rels of capture root root: stored (with their content up
// to limit bytes each), absent, or unchanged. An absent file is one the
// increment's directory listings leave out (a deletion), or one below a
// directory they leave out.
func ReadFilesAt(incPath, root string, rels []string, limit int64) (*FilesAt, error) {
	f, err := os.OpenFile(incPath, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open increment: %w", err)
	}
	defer f.Close()
	return ReadFilesAtFrom(f, root, rels, limit)
}

// ReadFilesAtFrom is ReadFilesAt on an increment read from f (an uploaded
// form too).
func ReadFilesAtFrom(f io.ReadSeeker, root string, rels []string, limit int64) (*FilesAt, error) {
	a, err := readArchive(f, nil)
	if err != nil {
		return nil, err
	}
	out := &FilesAt{Meta: a.Meta, Files: map[string]FileAt{}}
	dumps := map[string]map[string]byte{} // dumped directory -> entry name -> flag
	byRel := map[string]*Member{}
	for i := range a.Members {
		m := &a.Members[i]
		if m.Root != root {
			continue
		}
		switch m.Type {
		case typeDumpdir:
			ents := make(map[string]byte, len(m.Dumpdir))
			for _, e := range m.Dumpdir {
				ents[e.Name] = e.Flag
			}
			dumps[m.Rel] = ents
		case tar.TypeReg, tar.TypeSymlink:
			byRel[m.Rel] = m
			if m.Type == tar.TypeReg {
				out.Stored = append(out.Stored, m.Rel)
			}
		}
	}
	for _, rel := range rels {
		if _, done := out.Files[rel]; done {
			continue
		}
		if m := byRel[rel]; m != nil {
			out.Files[rel] = FileAt{Change: FileStored, Symlink: m.Type == tar.TypeSymlink, TooLarge: m.Type == tar.TypeReg && m.Size > limit}
			continue
		}
		if absentIn(dumps, rel) {
			out.Files[rel] = FileAt{Change: FileAbsent}
		}
	}
	if err := readStoredData(f, out, byRel, limit); err != nil {
		return nil, err
	}
	return out, nil
}

// absentIn reports whether the dumped directories leave rel (or one of its
// directories) out.
func absentIn(dumps map[string]map[string]byte, rel string) bool {
	for p := rel; p != ""; p = parentOf(p) {
		ents, ok := dumps[parentOf(p)]
		if !ok {
			continue
		}
		flag, listed := ents[path.Base(p)]
		if !listed {
			return true
		}
		if p != rel && flag != flagDirectory {
			return true // a file stands where a directory of rel was
		}
		if p == rel && flag == flagDirectory {
			return true
		}
	}
	return false
}

// readStoredData reads, in a second pass, the content of the stored regular
// files out lists within limit.
func readStoredData(f io.ReadSeeker, out *FilesAt, byRel map[string]*Member, limit int64) error {
	need := map[string]string{} // archive name -> rel
	for rel, fa := range out.Files {
		if m := byRel[rel]; fa.Change == FileStored && !fa.Symlink && !fa.TooLarge && m != nil {
			need[m.archName()] = rel
		}
	}
	if len(need) == 0 {
		return nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	gz, err := gzip.NewReader(f)
	if err != nil {
		return archiveError("%v", err)
	}
	defer gz.Close()
	gz.Multistream(false)
	tr := tar.NewReader(gz)
	for len(need) > 0 {
		h, err := tr.Next()
		if err != nil {
			return fmt.Errorf("%w: archive changed while being read: %v", ErrUnreadableArchive, err)
		}
		rel, ok := need[strings.TrimSuffix(h.Name, "/")]
		if !ok {
			continue
		}
		delete(need, strings.TrimSuffix(h.Name, "/"))
		b, err := readAllBounded(tr, limit)
		if err != nil {
			return archiveError("member %q: %v", h.Name, err)
		}
		fa := out.Files[rel]
		fa.Data = b
		out.Files[rel] = fa
	}
	return nil
}
