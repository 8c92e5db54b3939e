// Package spool is the private, durable local store where captured events
// live before anything leaves the machine. Directories are 0700, files 0600,
// and every record is one file written atomically.
package spool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/fsutil"
)

// Layout names inside a spool directory.
const (
	formatFile = "format.json"
	lockFile   = "spool.lock"
	eventsDir  = "events"
	// recordDigits is the zero-padded width of record file names, so that
	// lexical order is arrival order.
	recordDigits = 16
	// maxRecordBytes bounds one record file read back from disk.
	maxRecordBytes = 32 << 20
)

// FormatName and FormatVersion identify the on-disk layout.
const (
	FormatName    = "agentscm-spool"
	FormatVersion = 1
)

// ErrNotSpool reports a directory that is not empty and not a spool.
var ErrNotSpool = errors.New("not an agentscm spool")

type format struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
}

// Spool is an opened spool.
type Spool struct {
	dir string
}

// Dir returns the spool directory.
func (s *Spool) Dir() string { return s.dir }

// Init creates the spool at dir (absolute) if it does not exist or is empty,
// and validates it otherwise. The format file is written last, so a crash
// during initialisation leaves a directory that Init completes.
func Init(dir string) (*Spool, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("spool path %q is not absolute", dir)
	}
	if err := fsutil.MkdirPrivate(dir); err != nil {
		return nil, fmt.Errorf("create spool: %w", err)
	}
	if err := fsutil.CheckPrivateDir(dir); err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	if _, err := readFormat(dir); err == nil {
		return Open(dir)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read spool: %w", err)
	}
	for _, e := range entries {
		n := e.Name()
		if n != lockFile && n != eventsDir && n != lineageFile && !strings.HasPrefix(n, fsutil.TempPrefix) {
			return nil, fmt.Errorf("%s: %w: it is not empty and has no %s", dir, ErrNotSpool, formatFile)
		}
	}
	if err := fsutil.MkdirPrivate(filepath.Join(dir, eventsDir)); err != nil {
		return nil, err
	}
	lf, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, fsutil.FileMode)
	if err != nil {
		return nil, fmt.Errorf("create spool lock: %w", err)
	}
	lf.Close()
	b, _ := json.Marshal(format{Format: FormatName, Version: FormatVersion})
	if err := fsutil.WriteAtomic(filepath.Join(dir, formatFile), append(b, '\n'), fsutil.FileMode); err != nil {
		return nil, fmt.Errorf("write spool format: %w", err)
	}
	return &Spool{dir: dir}, nil
}

// Open opens an existing spool, refusing a directory without a valid format
// file.
func Open(dir string) (*Spool, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("spool path %q is not absolute", dir)
	}
	f, err := readFormat(dir)
	if err != nil {
		return nil, err
	}
	if f.Format != FormatName || f.Version != FormatVersion {
		return nil, fmt.Errorf("%s: %w: format %q version %d", dir, ErrNotSpool, f.Format, f.Version)
	}
	return &Spool{dir: dir}, nil
}

func readFormat(dir string) (format, error) {
	var f format
	b, err := fsutil.ReadFileNoFollow(filepath.Join(dir, formatFile), 4096)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return f, fmt.Errorf("%s: %w", dir, fs.ErrNotExist)
		}
		return f, fmt.Errorf("read spool format: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return f, fmt.Errorf("%s: %w: bad %s: %v", dir, ErrNotSpool, formatFile, err)
	}
	return f, nil
}

// Append durably retains rec, assigning the next arrival sequence number
// under the spool lock. It returns the assigned sequence.
func (s *Spool) Append(rec *event.Record) (uint64, error) {
	lock, err := fsutil.LockFile(filepath.Join(s.dir, lockFile))
	if err != nil {
		return 0, err
	}
	defer lock.Unlock()
	dir := filepath.Join(s.dir, eventsDir)
	last, err := lastSeq(dir)
	if err != nil {
		return 0, err
	}
	rec.Seq = last + 1
	b, err := json.Marshal(rec)
	if err != nil {
		return 0, fmt.Errorf("encode record: %w", err)
	}
	name := filepath.Join(dir, recordName(rec.Seq))
	if err := fsutil.WriteNew(name, append(b, '\n'), fsutil.FileMode); err != nil {
		return 0, fmt.Errorf("append record %d: %w", rec.Seq, err)
	}
	return rec.Seq, nil
}

func recordName(seq uint64) string {
	return fmt.Sprintf("%0*d.json", recordDigits, seq)
}

func parseRecordName(n string) (uint64, bool) {
	base, ok := strings.CutSuffix(n, ".json")
	if !ok || len(base) != recordDigits {
		return 0, false
	}
	v, err := strconv.ParseUint(base, 10, 64)
	return v, err == nil && v > 0
}

func lastSeq(dir string) (uint64, error) {
	names, err := recordNames(dir)
	if err != nil {
		return 0, err
	}
	if len(names) == 0 {
		return 0, nil
	}
	v, _ := parseRecordName(names[len(names)-1])
	return v, nil
}

// recordNames lists record files in arrival order.
func recordNames(dir string) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("open spool events: %w", err)
	}
	defer d.Close()
	all, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list spool events: %w", err)
	}
	names := all[:0]
	for _, n := range all {
		if _, ok := parseRecordName(n); ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names, nil
}

// Events reads every retained record in arrival order. It never writes.
func (s *Spool) Events() ([]event.Record, error) {
	dir := filepath.Join(s.dir, eventsDir)
	names, err := recordNames(dir)
	if err != nil {
		return nil, err
	}
	out := make([]event.Record, 0, len(names))
	for _, n := range names {
		b, err := fsutil.ReadFileNoFollow(filepath.Join(dir, n), maxRecordBytes)
		if err != nil {
			return nil, fmt.Errorf("read record %s: %w", n, err)
		}
		var r event.Record
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("decode record %s: %w", n, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// lineageFile durably binds a spool to one Hub, repository and worktree.
const lineageFile = "lineage.json"

// Lineage is the canonical Hub, repository and worktree namespace a spool
// belongs to.
type Lineage struct {
	Hub        string `json:"hub"`
	Repository string `json:"repository"`
	WorktreeID string `json:"worktree_id"`
}

// ErrLineageMismatch reports reuse of a spool for another Hub, repository or
// worktree.
var ErrLineageMismatch = errors.New("spool belongs to another Hub, repository or worktree")

// BindLineage records the spool's lineage the first time and afterwards
// refuses any other one.
func (s *Spool) BindLineage(l Lineage) error {
	lock, err := fsutil.LockFile(filepath.Join(s.dir, lockFile))
	if err != nil {
		return err
	}
	defer lock.Unlock()
	path := filepath.Join(s.dir, lineageFile)
	b, err := fsutil.ReadFileNoFollow(path, 4096)
	if err == nil {
		var cur Lineage
		if err := json.Unmarshal(b, &cur); err != nil {
			return fmt.Errorf("read spool lineage: %w", err)
		}
		if cur != l {
			return fmt.Errorf("%w: %s is bound to %s on %s (worktree %s)", ErrLineageMismatch, s.dir, cur.Repository, cur.Hub, cur.WorktreeID)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read spool lineage: %w", err)
	}
	nb, _ := json.Marshal(l)
	return fsutil.WriteNew(path, append(nb, '\n'), fsutil.FileMode)
}
