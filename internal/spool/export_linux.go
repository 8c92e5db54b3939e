//go:build linux

package spool

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// Export writes a bounded, byte-verified, nonresumable archive of the spool
// at o.Spool to o.Destination without changing the source (docs/spool.md,
// "Export"). It holds the spool lock shared (never recovering, never
// bumping the summary token), so no guarded operation changes the spool
// while it copies; hooks that find the lock busy write to the intake, and
// intake files that appear after the snapshot are not in the archive.
//
// Order: refusals that need no creation (paths, nesting, an existing
// destination, the enumeration and its bounds, the 64 MiB per-entry digest
// limit); a 128-bit-random private anchor in the destination parent
// (finite collision budget), validated through its opened descriptor
// (directory, effective-user owner, no group/other bits) and verified
// empty through a fresh descriptor; the parent synced; the owned child
// created in the anchor and the anchor synced; the child installed at the
// destination with renameat2(RENAME_NOREPLACE) relative to the retained
// anchor and parent descriptors, both synced; then every archive entry
// written relative to the child's retained descriptor, each source file
// digested twice and each copy re-read, and manifest.json installed last.
// Every failure is an *ExportError naming every object left; nothing is
// removed.
func Export(ctx context.Context, o ExportOptions) (*ExportResult, error) {
	r := &exportRun{o: o, pfd: -1, afd: -1, cfd: -1, fp: &Spool{failpoint: os.Getenv(FailpointEnv)}}
	defer r.close()
	if r.o.MaxEntries <= 0 {
		r.o.MaxEntries = DefaultExportEntries
	}
	if r.o.MaxBytes <= 0 {
		r.o.MaxBytes = DefaultExportBytes
	}
	if r.o.LockWait <= 0 {
		r.o.LockWait = defaultLockWait
	}
	if r.o.Now.IsZero() {
		r.o.Now = time.Now()
	}
	if r.o.hooks == nil {
		r.o.hooks = &exportHooks{}
	}
	res, err := r.run(ctx)
	if err != nil {
		var ee *ExportError
		if errors.As(err, &ee) {
			return nil, ee
		}
		return nil, r.failure("export", err)
	}
	return res, nil
}

type exportRun struct {
	o  ExportOptions
	fp *Spool // failpoints only

	srcID      FileID
	srcOpened  bool
	parentID   *FileID
	parentPath string
	base       string
	dest       string
	pfd        int

	anchorPath     string
	anchorID       *FileID
	anchorVerified bool
	afd            int
	foreign        []string

	childCreated bool
	childID      *FileID
	cfd          int
	installed    bool
	complete     bool
	manifestIn   bool // manifest.json renamed into place (maybe not synced)
	syncFailed   bool

	// manifest being built
	m      ExportManifest
	copied int
	total  int
	buf    []byte
}

func (r *exportRun) close() {
	for _, fd := range []*int{&r.cfd, &r.afd, &r.pfd} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

// exportNode is one planned source entry.
type exportNode struct {
	name     string
	rel      string
	st       unix.Stat_t
	dir      bool
	children []*exportNode
}

func (r *exportRun) run(ctx context.Context) (*ExportResult, error) {
	o := r.o
	if err := checkExportPath("--spool", o.Spool); err != nil {
		return nil, r.failure("arguments", err)
	}
	if err := checkExportPath("--destination", o.Destination); err != nil {
		return nil, r.failure("arguments", err)
	}
	r.dest, r.parentPath, r.base = o.Destination, filepath.Dir(o.Destination), filepath.Base(o.Destination)
	if r.dest == "/" || r.base == "." || r.base == ".." || r.base == "/" {
		return nil, r.failure("arguments", fmt.Errorf("--destination %q names no new directory", r.dest))
	}
	if r.dest == o.Spool || strings.HasPrefix(r.dest, strings.TrimSuffix(o.Spool, "/")+"/") {
		return nil, r.failure("arguments", fmt.Errorf("%w: %s is inside %s; it is refused before anything is created", ErrExportNested, r.dest, o.Spool))
	}

	// The source root, opened without following a final symlink.
	sfd, err := openDir(unix.AT_FDCWD, o.Spool)
	if err != nil {
		return nil, r.failure("open source", fmt.Errorf("%w: spool %s: %v", ErrExportUnreadable, o.Spool, err))
	}
	defer unix.Close(sfd)
	var sst unix.Stat_t
	if err := unix.Fstat(sfd, &sst); err != nil {
		return nil, r.failure("open source", err)
	}
	r.srcID, r.srcOpened = statID(&sst), true

	// The destination parent, retained for the whole export.
	if r.pfd, err = unix.Open(r.parentPath, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		return nil, r.failure("open destination parent", fmt.Errorf("destination parent %s: %w", r.parentPath, err))
	}
	if pid, err := fstatID(r.pfd); err == nil {
		r.parentID = &pid
	}
	if err := r.checkNotNested(); err != nil {
		return nil, r.failure("destination check", err)
	}
	if id, ok := statAt(r.pfd, r.base); ok {
		return nil, r.failure("destination check", fmt.Errorf("%w: %s (dev %d, inode %d); an existing destination is never adopted, changed or deleted", ErrExportDestinationExists, r.dest, id.Dev, id.Ino))
	}

	// The spool lock, shared: guarded writers wait, nothing is recovered.
	held, unlockFn, err := r.lockSource(ctx, sfd)
	if err != nil {
		return nil, r.failure("spool lock", err)
	}
	unlocked, lockedAt := false, time.Now()
	unlock := func() {
		if !unlocked {
			unlocked = true
			unlockFn()
			if r.o.hooks.lockReleased != nil {
				r.o.hooks.lockReleased(time.Since(lockedAt))
			}
		}
	}
	defer unlock()
	r.m = ExportManifest{Format: ExportFormat, Version: ExportVersion, CreatedAt: r.o.Now.UTC(), Source: o.Spool,
		SourceIdentity: r.srcID, SpoolLockHeld: held, Entries: []ExportEntry{}, Excluded: []ExportExcluded{}}

	// Enumerate and bound everything before creating anything.
	root := &exportNode{rel: "", st: sst, dir: true}
	count, bytes := 0, int64(0)
	if err := r.plan(sfd, root, 0, &count, &bytes); err != nil {
		return nil, r.failure("enumerate source", err)
	}
	r.total = count

	if err := r.createAnchor(); err != nil {
		return nil, r.failure("anchor", err)
	}
	if err := r.createChild(); err != nil {
		return nil, r.failure("owned child", err)
	}
	if err := r.install(); err != nil {
		return nil, r.failure("install", err)
	}

	// Evidence: every entry relative to the retained child descriptor.
	r.buf = make([]byte, 256<<10)
	if err := unix.Mkdirat(r.cfd, ExportTreeName, uint32(fsutil.DirMode)); err != nil {
		return nil, r.failure("copy", fmt.Errorf("create %s in the archive: %w", ExportTreeName, err))
	}
	tfd, err := openDir(r.cfd, ExportTreeName)
	if err != nil {
		return nil, r.failure("copy", err)
	}
	defer unix.Close(tfd)
	r.m.Entries = append(r.m.Entries, ExportEntry{Path: "", Type: "dir", Mode: permString(sst.Mode)})
	r.m.Dirs++
	if err := r.copyTree(ctx, sfd, tfd, root); err != nil {
		return nil, r.failure("copy", err)
	}
	// Every source file was digested twice under the lock: the snapshot
	// is complete, so the spool is released before the copy is made
	// durable (one syncfs of the archive's filesystem instead of one
	// fsync per file, which held the lock for seconds on a loaded disk).
	unlock()
	r.fp.fail("export.copied")
	if err := r.syncFS(tfd, "export.tree-sync"); err != nil {
		return nil, r.failure("sync", err)
	}
	sum, err := r.writeManifest()
	if err != nil {
		return nil, r.failure("manifest", err)
	}
	r.complete = true
	r.fp.fail("export.manifest-installed")
	// A final observation: the destination name still resolves to the
	// archive. Another parent-authorized actor may still move it later.
	if id, ok := statAt(r.pfd, r.base); !ok || id != *r.childID {
		return nil, r.failure("final check", fmt.Errorf("%w: %s no longer resolves to the archive", ErrExportLocation, r.dest))
	}
	if fi, err := os.Lstat(r.dest); err != nil || fileID(fi) != *r.childID {
		return nil, r.failure("final check", fmt.Errorf("%w: the pathname %s no longer resolves to the archive (the parent may have been renamed)", ErrExportLocation, r.dest))
	}
	return &ExportResult{
		Spool: o.Spool, SourceIdentity: r.srcID, SpoolID: r.m.SpoolID, Committed: r.m.Committed, SpoolLockHeld: held,
		Destination: r.dest, DestinationIdentity: *r.childID, Manifest: filepath.Join(r.dest, ExportManifestName),
		ManifestSHA256: sum, Files: r.m.Files, Dirs: r.m.Dirs, Bytes: r.m.Bytes, Excluded: r.m.Excluded,
		Anchor: r.anchorPath, AnchorIdentity: *r.anchorID,
	}, nil
}

func checkExportPath(flag, p string) error {
	if p == "" {
		return fmt.Errorf("%s is required", flag)
	}
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return fmt.Errorf("%s %q is not an absolute clean path", flag, p)
	}
	return nil
}

// checkNotNested refuses a destination parent that is the source root or
// beneath it, by identity (so symlinks and bind paths cannot hide it): it
// walks ".." from the retained parent descriptor up to the root.
func (r *exportRun) checkNotNested() error {
	cur, err := unix.Dup(r.pfd)
	if err != nil {
		return err
	}
	defer func() { unix.Close(cur) }()
	for range 4096 {
		var st unix.Stat_t
		if err := unix.Fstat(cur, &st); err != nil {
			return err
		}
		if statID(&st) == r.srcID {
			return fmt.Errorf("%w: %s is beneath the source spool %s (dev %d, inode %d); it is refused before anything is created", ErrExportNested, r.dest, r.o.Spool, r.srcID.Dev, r.srcID.Ino)
		}
		up, err := unix.Openat(cur, "..", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("walk up from the destination parent: %w", err)
		}
		var ust unix.Stat_t
		if err := unix.Fstat(up, &ust); err != nil {
			unix.Close(up)
			return err
		}
		unix.Close(cur)
		cur = up
		if statID(&ust) == statID(&st) {
			return nil // the root
		}
	}
	return fmt.Errorf("%w: the destination parent is more than 4096 levels deep", ErrExportBound)
}

// lockSource takes spool.lock shared when the source has one (an
// uncommitted or earlier-format directory may not).
func (r *exportRun) lockSource(ctx context.Context, sfd int) (bool, func(), error) {
	lfd, err := unix.Openat(sfd, spoolLockFile, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		r.m.Excluded = append(r.m.Excluded, ExportExcluded{Path: spoolLockFile, Reason: "absent: the snapshot was taken without the spool lock"})
		return false, func() {}, nil
	}
	if err != nil {
		return false, nil, fmt.Errorf("%w: open %s: %v", ErrExportUnreadable, filepath.Join(r.o.Spool, spoolLockFile), err)
	}
	deadline := time.Now().Add(r.o.LockWait)
	delay := lockPollInitial
	for {
		err := unix.Flock(lfd, unix.LOCK_SH|unix.LOCK_NB)
		if err == nil {
			return true, func() { unix.Close(lfd) }, nil
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			unix.Close(lfd)
			return false, nil, fmt.Errorf("lock spool: %w", err)
		}
		if err := ctx.Err(); err != nil {
			unix.Close(lfd)
			return false, nil, fmt.Errorf("lock spool: %w", err)
		}
		if time.Now().After(deadline) {
			unix.Close(lfd)
			return false, nil, fmt.Errorf("lock spool: %w after %s", ErrLockTimeout, r.o.LockWait)
		}
		time.Sleep(delay)
		delay = min(delay*2, lockPollMax)
	}
}

// plan enumerates dir (bounded) into n's children.
func (r *exportRun) plan(fd int, n *exportNode, depth int, count *int, bytes *int64) error {
	names, err := readDirNames(fd, r.o.MaxEntries-*count+1)
	if err != nil {
		return fmt.Errorf("%w: list %s: %v", ErrExportUnreadable, r.srcPath(n.rel), err)
	}
	slices.Sort(names)
	for _, name := range names {
		rel := joinRel(n.rel, name)
		*count++
		if *count > r.o.MaxEntries {
			return fmt.Errorf("%w: more than %d entries", ErrExportBound, r.o.MaxEntries)
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) && isIntakeTemp(rel) {
				r.m.Excluded = append(r.m.Excluded, ExportExcluded{Path: rel, Reason: "an intake writer's temporary file, removed by its writer during the export"})
				continue
			}
			return fmt.Errorf("%w: %s: %v", ErrExportUnreadable, r.srcPath(rel), err)
		}
		c := &exportNode{name: name, rel: rel, st: st}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if depth+1 > exportMaxDepth {
				return fmt.Errorf("%w: %s is more than %d levels deep", ErrExportBound, r.srcPath(rel), exportMaxDepth)
			}
			c.dir = true
			sub, err := openDir(fd, name)
			if err != nil {
				return fmt.Errorf("%w: %s: %v", ErrExportUnreadable, r.srcPath(rel), err)
			}
			err = r.plan(sub, c, depth+1, count, bytes)
			unix.Close(sub)
			if err != nil {
				return err
			}
		case unix.S_IFREG:
			if st.Size > MaxExportEntryBytes {
				return fmt.Errorf("%w: %s is %d bytes; files above %d bytes are refused, never copied by size only", ErrExportEntryTooLarge, r.srcPath(rel), st.Size, MaxExportEntryBytes)
			}
			*bytes += st.Size
			if *bytes > r.o.MaxBytes {
				return fmt.Errorf("%w: more than %d bytes", ErrExportBound, r.o.MaxBytes)
			}
		default:
			return fmt.Errorf("%w: %s is %s, not a regular file or directory", ErrExportUnreadable, r.srcPath(rel), typeName(st.Mode))
		}
		n.children = append(n.children, c)
	}
	return nil
}

func (r *exportRun) srcPath(rel string) string {
	if rel == "" {
		return r.o.Spool
	}
	return filepath.Join(r.o.Spool, filepath.FromSlash(rel))
}

// isIntakeTemp: a temporary file of a writer that does not take the spool
// lock (an intake record, or a staged blob), which may vanish or still be
// written while the export runs.
func isIntakeTemp(rel string) bool {
	return strings.HasPrefix(rel, intakeDir+"/"+fsutil.TempPrefix) || strings.HasPrefix(rel, stagedDir+"/"+fsutil.TempPrefix)
}

// createAnchor creates the random private anchor in the retained parent and
// validates it through its opened descriptor.
func (r *exportRun) createAnchor() error {
	name := ""
	for i := range exportAnchorAttempts {
		cand := exportAnchorPrefix + randomHex(16)
		if r.o.hooks.anchorName != nil {
			cand = r.o.hooks.anchorName(i)
		}
		err := unix.Mkdirat(r.pfd, cand, uint32(fsutil.DirMode))
		if err == nil {
			name = cand
			break
		}
		if !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("%w: create an anchor in %s: %v", ErrExportAnchor, r.parentPath, err)
		}
	}
	if name == "" {
		return fmt.Errorf("%w: %d random anchor names already existed in %s (the collision budget); refused", ErrExportAnchor, exportAnchorAttempts, r.parentPath)
	}
	r.anchorPath = filepath.Join(r.parentPath, name)
	r.fp.fail("export.anchor-created")
	if r.o.hooks.afterAnchor != nil {
		r.o.hooks.afterAnchor(r.anchorPath)
	}
	afd, err := openDir(r.pfd, name)
	if err != nil {
		return fmt.Errorf("%w: open the anchor %s: %v", ErrExportAnchor, r.anchorPath, err)
	}
	r.afd = afd
	var st unix.Stat_t
	if err := unix.Fstat(afd, &st); err != nil {
		return fmt.Errorf("%w: stat the anchor: %v", ErrExportAnchor, err)
	}
	id := statID(&st)
	r.anchorID = &id
	if err := checkPrivateDirStat(&st); err != nil {
		return fmt.Errorf("%w: the opened anchor %s %v", ErrExportAnchor, r.anchorPath, err)
	}
	if err := clearAnchorACL(afd); err != nil {
		return fmt.Errorf("%w: %v", ErrExportAnchor, err)
	}
	r.anchorVerified = true
	// Empty, through a fresh descriptor; unexpected entries stay untouched.
	efd, err := unix.Openat(afd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: reopen the anchor: %v", ErrExportAnchor, err)
	}
	names, err := readDirNames(efd, 16)
	unix.Close(efd)
	if err != nil {
		return fmt.Errorf("%w: list the anchor: %v", ErrExportAnchor, err)
	}
	if len(names) > 0 {
		slices.Sort(names)
		r.foreign = names
		return fmt.Errorf("%w: the anchor %s is not empty (%s); its entries are left untouched", ErrExportAnchor, r.anchorPath, strings.Join(names, ", "))
	}
	// The anchor's name transition, durable before anything else.
	return r.syncFD(r.pfd, "export.anchor-sync")
}

func (r *exportRun) createChild() error {
	if err := unix.Mkdirat(r.afd, exportChildName, uint32(fsutil.DirMode)); err != nil {
		return fmt.Errorf("create the archive directory in the anchor: %w", err)
	}
	r.childCreated = true
	cfd, err := openDir(r.afd, exportChildName)
	if err != nil {
		return fmt.Errorf("open the archive directory: %w", err)
	}
	r.cfd = cfd
	var st unix.Stat_t
	if err := unix.Fstat(cfd, &st); err != nil {
		return err
	}
	id := statID(&st)
	r.childID = &id
	if err := checkPrivateDirStat(&st); err != nil {
		return fmt.Errorf("%w: the archive directory %v", ErrExportAnchor, err)
	}
	if err := r.syncFD(r.afd, "export.child-sync"); err != nil {
		return err
	}
	r.fp.fail("export.child-created")
	return nil
}

// install renames the owned child from the retained anchor to the
// destination in the retained parent, never replacing anything.
func (r *exportRun) install() error {
	if r.o.hooks.beforeInstall != nil {
		r.o.hooks.beforeInstall()
	}
	err := unix.Renameat2(r.afd, exportChildName, r.pfd, r.base, unix.RENAME_NOREPLACE)
	switch {
	case err == nil:
	case errors.Is(err, unix.EEXIST):
		id, _ := statAt(r.pfd, r.base)
		return fmt.Errorf("%w: %s appeared during the export (dev %d, inode %d); it was not adopted, changed or deleted", ErrExportDestinationExists, r.dest, id.Dev, id.Ino)
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EOPNOTSUPP):
		return fmt.Errorf("%w: the filesystem of %s has no atomic no-replace rename (renameat2 RENAME_NOREPLACE: %v)", ErrExportUnsupported, r.parentPath, err)
	default:
		return fmt.Errorf("install %s: %w", r.dest, err)
	}
	r.installed = true
	r.fp.fail("export.installed")
	if r.o.hooks.afterInstall != nil {
		r.o.hooks.afterInstall()
	}
	if err := r.syncFD(r.pfd, "export.install-sync"); err != nil {
		return err
	}
	if err := r.syncFD(r.afd, "export.install-sync"); err != nil {
		return err
	}
	r.fp.fail("export.install-synced")
	return nil
}

// syncFS makes everything written on fd's filesystem durable (syncfs
// reports writeback errors since Linux 5.8).
func (r *exportRun) syncFS(fd int, fp string) error {
	err := r.fp.injected(fp)
	if err == nil {
		err = unix.Syncfs(fd)
	}
	if err != nil {
		r.syncFailed = true
		return fmt.Errorf("%w: %v", ErrExportSync, err)
	}
	return nil
}

func (r *exportRun) syncFD(fd int, fp string) error {
	err := r.fp.injected(fp)
	if err == nil {
		err = unix.Fsync(fd)
	}
	if err != nil {
		r.syncFailed = true
		return fmt.Errorf("%w: %v", ErrExportSync, err)
	}
	return nil
}

// copyTree copies n's children from sfd into dfd.
func (r *exportRun) copyTree(ctx context.Context, sfd, dfd int, n *exportNode) error {
	for _, c := range n.children {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !c.dir {
			if err := r.copyFile(sfd, dfd, c); err != nil {
				return err
			}
			continue
		}
		sub, err := openDir(sfd, c.name)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrExportChanged, r.srcPath(c.rel), err)
		}
		err = r.copyDir(ctx, sub, dfd, c)
		unix.Close(sub)
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *exportRun) copyDir(ctx context.Context, sub, dfd int, c *exportNode) error {
	var st unix.Stat_t
	if err := unix.Fstat(sub, &st); err != nil {
		return err
	}
	if statID(&st) != statID(&c.st) {
		return fmt.Errorf("%w: directory %s was replaced", ErrExportChanged, r.srcPath(c.rel))
	}
	if err := unix.Mkdirat(dfd, c.name, uint32(fsutil.DirMode)); err != nil {
		return fmt.Errorf("create %s in the archive: %w", c.rel, err)
	}
	ddf, err := openDir(dfd, c.name)
	if err != nil {
		return err
	}
	defer unix.Close(ddf)
	r.m.Entries = append(r.m.Entries, ExportEntry{Path: c.rel, Type: "dir", Mode: permString(st.Mode)})
	r.m.Dirs++
	return r.copyTree(ctx, sub, ddf, c)
}

// copyFile copies one regular file: the source is digested while copying
// and again afterwards (with an unchanged fstat), and the copy is re-read;
// any difference refuses the export. The copy is made durable with the
// whole archive (syncFS) before the manifest is written.
func (r *exportRun) copyFile(sdir, ddir int, c *exportNode) error {
	path := r.srcPath(c.rel)
	sfd, err := unix.Openat(sdir, c.name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) && isIntakeTemp(c.rel) {
			r.m.Excluded = append(r.m.Excluded, ExportExcluded{Path: c.rel, Reason: "an intake writer's temporary file, removed by its writer during the export"})
			return nil
		}
		return fmt.Errorf("%w: open %s: %v", ErrExportUnreadable, path, err)
	}
	defer unix.Close(sfd)
	var st1 unix.Stat_t
	if err := unix.Fstat(sfd, &st1); err != nil {
		return fmt.Errorf("%w: stat %s: %v", ErrExportUnreadable, path, err)
	}
	if st1.Mode&unix.S_IFMT != unix.S_IFREG || statID(&st1) != statID(&c.st) {
		return fmt.Errorf("%w: %s was replaced", ErrExportChanged, path)
	}
	if isIntakeTemp(c.rel) {
		// A hook that found the lock busy may be writing it (flocked, or
		// younger than the writer's grace between open and flock).
		if err := unix.Flock(sfd, unix.LOCK_SH|unix.LOCK_NB); err != nil {
			r.m.Excluded = append(r.m.Excluded, ExportExcluded{Path: c.rel, Reason: "an intake writer's temporary file, still locked by its writer"})
			return nil
		}
		if time.Since(time.Unix(st1.Mtim.Unix())) < intakeTempGrace {
			r.m.Excluded = append(r.m.Excluded, ExportExcluded{Path: c.rel, Reason: "an intake writer's temporary file younger than the writer grace"})
			return nil
		}
	}
	if st1.Size > MaxExportEntryBytes {
		return fmt.Errorf("%w: %s is %d bytes", ErrExportEntryTooLarge, path, st1.Size)
	}
	dfd, err := unix.Openat(ddir, c.name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(fsutil.FileMode))
	if err != nil {
		return fmt.Errorf("create %s in the archive: %w", c.rel, err)
	}
	defer unix.Close(dfd)
	h := sha256.New()
	var n int64
	for {
		m, err := unix.Read(sfd, r.buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("%w: read %s: %v", ErrExportUnreadable, path, err)
		}
		if m == 0 {
			break
		}
		n += int64(m)
		if n > st1.Size {
			return fmt.Errorf("%w: %s grew while it was copied", ErrExportChanged, path)
		}
		h.Write(r.buf[:m])
		if err := writeFull(dfd, r.buf[:m]); err != nil {
			return fmt.Errorf("write %s in the archive: %w", c.rel, err)
		}
	}
	if n != st1.Size {
		return fmt.Errorf("%w: %s shrank while it was copied", ErrExportChanged, path)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if r.o.hooks.beforeRehash != nil {
		r.o.hooks.beforeRehash(c.rel)
	}
	again, an, err := digestAt(sfd, r.buf, st1.Size+1)
	if err != nil {
		return fmt.Errorf("%w: re-read %s: %v", ErrExportUnreadable, path, err)
	}
	var st2 unix.Stat_t
	if err := unix.Fstat(sfd, &st2); err != nil {
		return err
	}
	if again != sum || an != n || st2.Size != st1.Size || st2.Mtim != st1.Mtim || st2.Ctim != st1.Ctim {
		return fmt.Errorf("%w: the digest of %s changed while it was copied", ErrExportChanged, path)
	}
	copySum, cn, err := digestAt(dfd, r.buf, n+1)
	if err != nil || copySum != sum || cn != n {
		return fmt.Errorf("%w: the copy of %s reads back differently (%v)", ErrExportVerify, path, err)
	}
	if c.rel == commitFile {
		r.noteCommit(dfd, n)
	}
	r.m.Entries = append(r.m.Entries, ExportEntry{Path: c.rel, Type: "file", Mode: permString(st1.Mode), Bytes: n, SHA256: sum})
	r.m.Files++
	r.m.Bytes += n
	r.copied++
	if r.copied == r.total/2 {
		r.fp.fail("export.copy-midway")
	}
	return nil
}

// noteCommit records the spool id when the copied commit decodes.
func (r *exportRun) noteCommit(fd int, n int64) {
	if n > maxSmallFile {
		return
	}
	b := make([]byte, n)
	if m, err := unix.Pread(fd, b, 0); err != nil || int64(m) != n {
		return
	}
	f, err := decodeFrame(b)
	if err != nil || f.typ != typeCommit || f.key != "v4" {
		return
	}
	var c commitRecord
	if strictJSON(f.body, &c) == nil && c.Format == FormatName && c.Version == FormatVersion && c.SpoolID != "" {
		r.m.SpoolID, r.m.Committed = c.SpoolID, true
	}
}

// writeManifest installs manifest.json last (temporary file, sync, re-read,
// no-replace rename, directory sync) and returns its sha256.
func (r *exportRun) writeManifest() (string, error) {
	r.m.Complete = true
	b, err := json.MarshalIndent(&r.m, "", "  ")
	if err != nil {
		return "", err
	}
	b = append(b, '\n')
	tmp := ".manifest.tmp"
	fd, err := unix.Openat(r.cfd, tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(fsutil.FileMode))
	if err != nil {
		return "", fmt.Errorf("create the manifest: %w", err)
	}
	defer unix.Close(fd)
	if err := writeFull(fd, b); err != nil {
		return "", fmt.Errorf("write the manifest: %w", err)
	}
	if err := r.syncFD(fd, "export.manifest-sync"); err != nil {
		return "", err
	}
	s := sha256.Sum256(b)
	sum := hex.EncodeToString(s[:])
	if back, n, err := digestAt(fd, r.buf, int64(len(b))+1); err != nil || back != sum || n != int64(len(b)) {
		return "", fmt.Errorf("%w: the manifest reads back differently (%v)", ErrExportVerify, err)
	}
	r.fp.fail("export.manifest-written")
	if err := unix.Renameat2(r.cfd, tmp, r.cfd, ExportManifestName, unix.RENAME_NOREPLACE); err != nil {
		return "", fmt.Errorf("install the manifest: %w", err)
	}
	r.manifestIn = true
	if err := r.syncFD(r.cfd, "export.manifest-dir-sync"); err != nil {
		return "", err
	}
	return sum, nil
}

// failure builds the *ExportError naming every object this export left and
// what is known about it now.
func (r *exportRun) failure(step string, err error) *ExportError {
	e := &ExportError{Step: step, Err: err, Message: err.Error(), Artifacts: []ExportArtifact{}}
	where := func(path string, id *FileID) string {
		if id == nil {
			return "created, identity not recorded"
		}
		fi, lerr := os.Lstat(path)
		if lerr == nil && fileID(fi) == *id {
			return "present at this name"
		}
		return "this name no longer resolves to the recorded identity: it may have been moved or removed; its current location and existence are unknown"
	}
	if r.srcOpened {
		id := r.srcID
		e.Source = &ExportArtifact{Role: "source", Name: r.o.Spool, Identity: &id, State: where(r.o.Spool, &id) + "; not changed"}
	}
	if r.parentID != nil {
		e.Parent = &ExportArtifact{Role: "destination_parent", Name: r.parentPath, Identity: r.parentID, State: where(r.parentPath, r.parentID)}
	}
	if r.anchorPath != "" {
		a := ExportArtifact{Role: "anchor", Name: r.anchorPath, Identity: r.anchorID, State: where(r.anchorPath, r.anchorID)}
		if !r.anchorVerified {
			a.Uncertainty = append(a.Uncertainty, "privacy: its type, ownership and mode were not verified")
		}
		if r.childCreated && !r.installed {
			a.State += "; it holds the owned archive directory"
		} else if len(r.foreign) == 0 && r.anchorVerified {
			a.State += "; verified empty when created"
		}
		e.Artifacts = append(e.Artifacts, a)
		if len(r.foreign) > 0 {
			e.Artifacts = append(e.Artifacts, ExportArtifact{Role: "foreign_entries", Name: r.anchorPath + "/{" + strings.Join(r.foreign, ",") + "}",
				State: "unexpected entries found in the anchor, left untouched", Uncertainty: []string{"content: not created by this export"}})
		}
	}
	if r.childCreated {
		a := ExportArtifact{Role: "owned_child", Name: filepath.Join(r.anchorPath, exportChildName), Identity: r.childID}
		if r.installed {
			a.Role, a.Name = "destination", r.dest
		}
		a.State = where(a.Name, r.childID)
		switch {
		case r.complete:
			a.Uncertainty = append(a.Uncertainty, "content: complete (manifest.json installed and synced)")
		case r.manifestIn:
			a.Uncertainty = append(a.Uncertainty, "content: manifest.json is installed but its directory was not synced: the archive verifies now and may be incomplete after a machine crash")
		default:
			a.Uncertainty = append(a.Uncertainty, "content: incomplete archive without manifest.json; it is not evidence and export does not resume it")
		}
		if r.syncFailed {
			a.Uncertainty = append(a.Uncertainty, "crash: a sync failed, so this may not survive a machine crash")
		}
		e.Artifacts = append(e.Artifacts, a)
	}
	return e
}

func openDir(dirfd int, name string) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

func statAt(dirfd int, name string) (FileID, bool) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return FileID{}, false
	}
	return statID(&st), true
}

func fstatID(fd int) (FileID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return FileID{}, err
	}
	return statID(&st), nil
}

func statID(st *unix.Stat_t) FileID { return FileID{Dev: uint64(st.Dev), Ino: st.Ino} }

// checkPrivateDirStat validates an opened directory: a directory, owned by
// the effective user, no group/other bits.
func checkPrivateDirStat(st *unix.Stat_t) error {
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("is not a directory")
	}
	if int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("is owned by uid %d, not the effective user %d", st.Uid, os.Geteuid())
	}
	if st.Mode&0o077 != 0 {
		return fmt.Errorf("has mode %04o; it must allow no group or other access", st.Mode&0o777)
	}
	return nil
}

// readDirNames lists at most max names of the directory fd (without "."
// and ".."), through a duplicate so fd stays usable.
func readDirNames(fd, max int) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	names, err := f.Readdirnames(max)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return names, nil
}

func writeFull(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// digestAt hashes fd from offset 0, reading at most limit bytes.
func digestAt(fd int, buf []byte, limit int64) (string, int64, error) {
	h := sha256.New()
	var off int64
	for off < limit {
		want := min(int64(len(buf)), limit-off)
		m, err := unix.Pread(fd, buf[:want], off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", off, err
		}
		if m == 0 {
			break
		}
		h.Write(buf[:m])
		off += int64(m)
	}
	return hex.EncodeToString(h.Sum(nil)), off, nil
}

func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

func permString(mode uint32) string { return fmt.Sprintf("%04o", mode&0o7777) }

func typeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return "a symbolic link"
	case unix.S_IFIFO:
		return "a named pipe"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "a device"
	}
	return "of an unknown type"
}

// clearAnchorACL is the macOS extended-ACL step; Linux has none to clear:
// it relies on the requested 0700/0600 creation modes constraining the mask
// of an inherited POSIX default ACL.
func clearAnchorACL(int) error { return nil }
