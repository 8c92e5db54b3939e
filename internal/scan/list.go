package scan

import (
	"context"
	"fmt"
	"io/fs"
	"runtime"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Stat is what List records about one object.
type Stat struct {
	Path     string // slash-separated, relative to the root; "" for the root itself
	Type     Type
	Mode     fs.FileMode // permission bits (plus setuid/setgid/sticky)
	Size     int64
	MTime    int64 // st_mtime in nanoseconds
	CTime    int64 // st_ctime in nanoseconds
	Dev, Ino uint64
	Target   string // symlink target, read with readlinkat and never followed
	// Skipped marks a path ListOptions.Skip pruned: only Path and Type
	// (Dir or File) are set, and a directory's contents are not listed.
	Skipped bool
}

// ListOptions tune List.
type ListOptions struct {
	// Skip prunes a path: it is listed with Skipped set and not descended.
	// It is called from several goroutines at once.
	Skip func(rel string, isDir bool) bool
	// MaxDepth bounds nesting; 0 means DefaultMaxDepth.
	MaxDepth int
	// Workers bounds the directories listed at once; 0 means GOMAXPROCS.
	Workers int
}

// maxQueued bounds the directories waiting for a worker, each holding an
// open fd; past it a worker lists a subdirectory itself, depth first.
const maxQueued = 64

// List returns the root (Path "") and every object below it, in Walk's order
// (depth first, names in byte order, a directory before its contents),
// without following symlinks: the root is opened with O_NOFOLLOW, each
// directory through its parent's fd with O_NOFOLLOW|O_DIRECTORY and checked
// to be the object its parent listed. Directories are listed by several
// workers at once. Names that are not valid UTF-8 are kept as raw bytes.
// Objects that vanish during the listing are left out; a directory replaced
// between its stat and its open fails with ErrChanged.
func List(ctx context.Context, root string, opts ListOptions) ([]Stat, error) {
	fd, err := openat(unix.AT_FDCWD, root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
	if err != nil {
		var st unix.Stat_t
		if (err == unix.ELOOP || err == unix.ENOTDIR) && fstatat(unix.AT_FDCWD, root, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			err = ErrSymlink
		}
		return nil, fmt.Errorf("scan: open root %s: %w", root, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("scan: stat root %s: %w", root, err)
	}
	if opts.MaxDepth <= 0 {
		opts.MaxDepth = DefaultMaxDepth
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	l := &lister{ctx: ctx, opts: opts}
	l.cond = sync.NewCond(&l.mu)
	top := &listNode{}
	l.queue = append(l.queue, listJob{fd: fd, depth: 1, node: top})
	l.pending = 1
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.work()
		}()
	}
	wg.Wait()
	if l.err != nil {
		return nil, l.err
	}
	rootStat := statOf("", &st)
	out := make([]Stat, 0, l.count.total()+1)
	out = append(out, rootStat)
	return top.flatten(out), nil
}

type listJob struct {
	fd    int
	rel   string
	depth int
	node  *listNode
	self  Stat // the directory's own stat (ListDirs)
}

// listNode holds one directory's children; subs[i] is the listing of
// items[i] when it is a directory that was descended.
type listNode struct {
	items []Stat
	subs  []*listNode
}

func (n *listNode) flatten(out []Stat) []Stat {
	for i := range n.items {
		out = append(out, n.items[i])
		if n.subs != nil && n.subs[i] != nil {
			out = n.subs[i].flatten(out)
		}
	}
	return out
}

type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) add(n int) {
	c.mu.Lock()
	c.n += n
	c.mu.Unlock()
}

func (c *counter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

type lister struct {
	ctx   context.Context
	opts  ListOptions
	count counter

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []listJob
	pending int // jobs queued or running
	err     error

	// ListDirs: visit receives each directory's listing (one call at a
	// time, under visitMu) instead of a tree; flat lists no subdirectory.
	visit   func(dir *Stat, items []Stat) error
	visitMu sync.Mutex
	flat    bool
}

func (l *lister) fail(err error) {
	l.mu.Lock()
	if l.err == nil {
		l.err = err
	}
	l.mu.Unlock()
}

func (l *lister) failed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err != nil
}

// push queues a subdirectory job, or reports false when the queue is full.
func (l *lister) push(j listJob) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.queue) >= maxQueued || l.err != nil {
		return false
	}
	l.queue = append(l.queue, j)
	l.pending++
	l.cond.Signal()
	return true
}

func (l *lister) work() {
	buf := make([]byte, 64<<10)
	for {
		l.mu.Lock()
		for len(l.queue) == 0 && l.pending > 0 {
			l.cond.Wait()
		}
		if len(l.queue) == 0 {
			l.mu.Unlock()
			return
		}
		j := l.queue[len(l.queue)-1]
		l.queue = l.queue[:len(l.queue)-1]
		stop := l.err != nil
		l.mu.Unlock()
		if !stop {
			if err := l.dir(j, buf); err != nil {
				l.fail(err)
			}
		}
		unix.Close(j.fd)
		l.mu.Lock()
		l.pending--
		if l.pending == 0 || l.err != nil {
			l.cond.Broadcast()
		}
		l.mu.Unlock()
	}
}

// dir lists the directory j.fd into j.node (it does not close j.fd).
func (l *lister) dir(j listJob, buf []byte) error {
	if j.depth > l.opts.MaxDepth {
		return &PathError{Op: "walk", Path: j.rel, Err: ErrTooDeep}
	}
	if err := l.ctx.Err(); err != nil {
		return err
	}
	var names []string
	for {
		n, err := getdentsRaw(j.fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &PathError{Op: "read directory", Path: j.rel, Err: err}
		}
		if n <= 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
	slices.Sort(names)
	items := make([]Stat, 0, len(names))
	var subs []*listNode
	for _, name := range names {
		p := name
		if j.rel != "" {
			p = j.rel + "/" + name
		}
		var st unix.Stat_t
		if err := fstatatRaw(j.fd, name, &st); err != nil {
			if err == unix.ENOENT {
				continue
			}
			return &PathError{Op: "stat", Path: p, Err: err}
		}
		s := statOf(p, &st)
		if l.opts.Skip != nil && l.opts.Skip(p, s.Type == Dir) {
			t := File
			if s.Type == Dir {
				t = Dir
			}
			items = append(items, Stat{Path: p, Type: t, Skipped: true})
			continue
		}
		if s.Type == Symlink {
			t, err := readlinkat(j.fd, name)
			if err != nil {
				if err == unix.ENOENT {
					continue
				}
				return &PathError{Op: "readlink", Path: p, Err: err}
			}
			s.Target = t
		}
		items = append(items, s)
		if s.Type != Dir || l.flat {
			continue
		}
		sub, err := openSubdir(j.fd, name, p, s.Dev, s.Ino)
		if err == errVanished {
			continue
		}
		if err != nil {
			return err
		}
		var child *listNode
		if l.visit == nil {
			if subs == nil {
				subs = make([]*listNode, len(names))
			}
			child = &listNode{}
			subs[len(items)-1] = child
		}
		cj := listJob{fd: sub, rel: p, depth: j.depth + 1, node: child, self: s}
		if l.push(cj) {
			continue
		}
		// The queue is full: list it here, depth first.
		err = l.dir(cj, buf)
		unix.Close(sub)
		if err != nil {
			return err
		}
		if l.failed() {
			return nil
		}
	}
	if l.visit != nil {
		l.visitMu.Lock()
		defer l.visitMu.Unlock()
		return l.visit(&j.self, items)
	}
	j.node.items = items
	if subs != nil {
		j.node.subs = subs[:len(items)]
	}
	l.count.add(len(items))
	return nil
}

func statOf(p string, st *unix.Stat_t) Stat {
	s := Stat{
		Path:  p,
		Size:  st.Size,
		MTime: st.Mtim.Sec*1e9 + st.Mtim.Nsec,
		CTime: st.Ctim.Sec*1e9 + st.Ctim.Nsec,
		Dev:   uint64(st.Dev),
		Ino:   st.Ino,
		Mode:  ModeFromUnix(uint32(st.Mode)),
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		s.Type = File
	case unix.S_IFDIR:
		s.Type = Dir
	case unix.S_IFLNK:
		s.Type = Symlink
	default:
		s.Type = Other
	}
	return s
}

// ListDirs lists the directories rels below root ("" is the root itself)
// and, when recursive, every directory beneath them, calling visit once per
// directory with the directory's own Stat (Path its relative path) and its
// children as List records them, in byte order. Nothing is retained between
// calls: the caller keeps what it needs, so memory stays bounded by the
// directories being listed. visit is called from one goroutine at a time,
// directories in no particular order. A rel that no longer is a directory
// (missing, replaced by a file or a symlink) is skipped: its parent's
// listing says what it became. Opens are no-follow as in List.
func ListDirs(ctx context.Context, root string, rels []string, recursive bool, opts ListOptions, visit func(dir *Stat, items []Stat) error) error {
	if opts.MaxDepth <= 0 {
		opts.MaxDepth = DefaultMaxDepth
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	l := &lister{ctx: ctx, opts: opts, visit: visit, flat: !recursive}
	l.cond = sync.NewCond(&l.mu)
	for _, rel := range rels {
		fd, st, err := openRelDir(root, rel)
		if err == errVanished {
			continue
		}
		if err != nil {
			for _, j := range l.queue {
				unix.Close(j.fd)
			}
			return err
		}
		depth := 1
		if rel != "" {
			depth += strings.Count(rel, "/") + 1
		}
		l.queue = append(l.queue, listJob{fd: fd, rel: rel, depth: depth, self: st})
		l.pending++
	}
	if l.pending == 0 {
		return nil
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.work()
		}()
	}
	wg.Wait()
	return l.err
}

// openRelDir opens the directory rel below root without following any
// symlink and returns its fd and stat; errVanished when it is no longer a
// directory.
func openRelDir(root, rel string) (int, Stat, error) {
	fd, err := openat(unix.AT_FDCWD, root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
	if err != nil {
		var st unix.Stat_t
		if (err == unix.ELOOP || err == unix.ENOTDIR) && fstatat(unix.AT_FDCWD, root, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			err = ErrSymlink
		}
		return -1, Stat{}, fmt.Errorf("scan: open root %s: %w", root, err)
	}
	if rel != "" {
		parts, err := SplitRel(rel)
		if err != nil {
			unix.Close(fd)
			return -1, Stat{}, err
		}
		for _, p := range parts {
			sub, err := openat(fd, p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
			unix.Close(fd)
			if err == unix.ENOENT || err == unix.ENOTDIR || err == unix.ELOOP {
				return -1, Stat{}, errVanished
			}
			if err != nil {
				return -1, Stat{}, &PathError{Op: "open directory", Path: rel, Err: err}
			}
			fd = sub
		}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, Stat{}, &PathError{Op: "stat", Path: rel, Err: err}
	}
	return fd, statOf(rel, &st), nil
}
