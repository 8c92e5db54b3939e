// Package watch answers "what changed below these roots since token T" from
// a filesystem watch (fsnotify: inotify on Linux, kqueue on darwin), so a
// capture lists only the directories that changed instead of walking the
// whole tree.
//
// A Tracker holds the watches and, per root, the generation at which each
// directory last changed. A token names a Tracker instance and a generation;
// Since answers for a token only when the watch vouches for every change
// after it: the root was fully watched before the token, no event was lost
// since (queue overflow, a watch error, a watch limit), and nothing it
// forgot (a bound on remembered directories) is newer than the token. Every
// other case answers nil for the root: the caller walks it. Before it
// answers, Since syncs with the kernel's event queue by creating a cookie
// file in its own directory and waiting for that file's event: events are
// delivered in order, so every change made before the call is accounted for.
//
// The Tracker is hosted by Serve (a small process on a Unix socket in a
// private directory, started on demand by a Client and exiting when idle);
// it needs only a private directory and the roots, so another long-running
// process can host it as well.
package watch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Changes is what changed below one root since a token: Dirs are the
// directories whose listing changed (relative, slash-separated; "" the root
// itself); Trees the directories created (or moved in) whose whole contents
// are new.
type Changes struct {
	Dirs  []string `json:"dirs"`
	Trees []string `json:"trees"`
}

// Options tune a Tracker.
type Options struct {
	// MaxWatches bounds the directories watched over all roots; a root
	// that would exceed it is not watched (Since answers nil for it).
	// 0 means 100,000.
	MaxWatches int
	// MaxDirs bounds the changed directories remembered per root; past it
	// the root forgets them and cannot vouch for older tokens. 0 means
	// 20,000.
	MaxDirs int
	// SyncTimeout bounds the wait for the cookie event; 0 means 2 s.
	SyncTimeout time.Duration
	// Skip names directories never watched (their contents are never
	// captured); nil skips ".git".
	Skip func(name string) bool
}

// Tracker watches roots and remembers what changed when.
type Tracker struct {
	w         *fsnotify.Watcher
	id        string
	cookieDir string
	opts      Options

	mu       sync.Mutex
	gen      uint64
	roots    map[string]*root
	watched  map[string]bool // absolute directories with a watch
	waiters  map[string]chan struct{}
	cookieN  uint64
	lastUsed time.Time
	closed   bool
	done     chan struct{}
	gone     chan struct{} // closed once the cookie directory is removed
	goneSet  bool
	lastErr  error // the last event-queue failure (overflow), for Status
}

type root struct {
	path string
	// ready is the generation at which the root's watches were all set
	// up (0: not yet); broken the generation of the last event that may
	// have been lost; pruned the newest generation forgotten.
	ready, broken, pruned uint64
	dead                  error // cannot be watched: never vouches
	dirs, trees           map[string]uint64
}

// New starts a Tracker whose cookies live in cookieDir (a private directory
// of the caller; it is watched too).
func New(cookieDir string, opts Options) (*Tracker, error) {
	if opts.MaxWatches <= 0 {
		opts.MaxWatches = 100_000
	}
	if opts.MaxDirs <= 0 {
		opts.MaxDirs = 20_000
	}
	if opts.SyncTimeout <= 0 {
		opts.SyncTimeout = 2 * time.Second
	}
	if opts.Skip == nil {
		opts.Skip = func(name string) bool { return name == ".git" }
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	// NewWatcher's channels are unbuffered: an overflow reported on Errors
	// is received before any later event, so a cookie never overtakes it.
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	if err := w.Add(cookieDir); err != nil {
		w.Close()
		return nil, fmt.Errorf("watch: cookie directory: %w", err)
	}
	t := &Tracker{w: w, id: hex.EncodeToString(b[:]), cookieDir: filepath.Clean(cookieDir), opts: opts,
		roots: map[string]*root{}, watched: map[string]bool{}, waiters: map[string]chan struct{}{},
		lastUsed: time.Now(), done: make(chan struct{}), gone: make(chan struct{})}
	go t.loop()
	return t, nil
}

// Close stops the watch.
func (t *Tracker) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.mu.Unlock()
	err := t.w.Close()
	<-t.done
	return err
}

// LastUsed is when Since was last called.
func (t *Tracker) LastUsed() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastUsed
}

// touch records a use of the server (an operation of ServeOptions.Ops),
// which keeps it from its idle exit.
func (t *Tracker) touch() {
	t.mu.Lock()
	t.lastUsed = time.Now()
	t.mu.Unlock()
}

func (t *Tracker) loop() {
	defer close(t.done)
	for {
		select {
		case ev, ok := <-t.w.Events:
			if !ok {
				return
			}
			t.event(ev)
		case err, ok := <-t.w.Errors:
			if !ok {
				return
			}
			t.fail(err)
		}
	}
}

// fail records a lost or uncertain stretch of events: no root vouches for a
// token taken before it.
func (t *Tracker) fail(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gen++
	for _, r := range t.roots {
		r.broken = t.gen
		clear(r.dirs)
		clear(r.trees)
	}
	t.lastErr = err
}

// rootOf returns the root holding p and p's path relative to it.
func (t *Tracker) rootOf(p string) (*root, string, bool) {
	for _, r := range t.roots {
		if p == r.path {
			return r, "", true
		}
		if strings.HasPrefix(p, r.path+"/") {
			return r, p[len(r.path)+1:], true
		}
	}
	return nil, "", false
}

func parentOf(rel string) string {
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		return rel[:i]
	}
	return ""
}

// Gone is closed once the Tracker's cookie directory is removed or moved
// away: its host has lost its private directory (a test's temporary
// directory removed, the changelog deleted) and should stop.
func (t *Tracker) Gone() <-chan struct{} { return t.gone }

func (t *Tracker) event(ev fsnotify.Event) {
	name := filepath.Clean(ev.Name)
	if name == t.cookieDir && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)) {
		t.mu.Lock()
		if !t.goneSet {
			t.goneSet = true
			close(t.gone)
		}
		t.mu.Unlock()
		return
	}
	if filepath.Dir(name) == t.cookieDir {
		if ev.Has(fsnotify.Create) {
			t.mu.Lock()
			if ch := t.waiters[filepath.Base(name)]; ch != nil {
				close(ch)
				delete(t.waiters, filepath.Base(name))
			}
			t.mu.Unlock()
		}
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gen++
	r, rel, ok := t.rootOf(name)
	if !ok {
		return
	}
	if rel == "" {
		if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
			// The root itself went away: forget it; the next Since
			// watches it afresh (and vouches only after that).
			t.unwatchLocked(name)
			delete(t.roots, r.path)
			return
		}
		r.dirs[""] = t.gen // its own mode or times
		return
	}
	if (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)) && t.watched[name] {
		// A watched directory moved away keeps its inode's watches under
		// the old names: drop them; where it went is a Create.
		t.unwatchLocked(name)
	}
	r.dirs[parentOf(rel)] = t.gen
	if ev.Has(fsnotify.Create) {
		if fi, err := os.Lstat(name); err == nil && fi.IsDir() && !t.opts.Skip(fi.Name()) {
			r.trees[rel] = t.gen
			// Everything in it before its watch existed is new to the
			// capture anyway (the tree is listed in full).
			if err := t.watchTreeLocked(name); err != nil {
				r.broken = t.gen
			}
		}
	}
	if len(r.dirs)+len(r.trees) > t.opts.MaxDirs {
		r.pruned = t.gen
		clear(r.dirs)
		clear(r.trees)
	}
}

// unwatchLocked removes the watches of dir and every directory below it.
func (t *Tracker) unwatchLocked(dir string) {
	for p := range t.watched {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			_ = t.w.Remove(p)
			delete(t.watched, p)
		}
	}
}

// watchTreeLocked adds a watch on dir and every directory below it (no
// symlink followed).
func (t *Tracker) watchTreeLocked(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // gone already: its parent's event says so
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if p != dir && t.opts.Skip(d.Name()) {
			return filepath.SkipDir
		}
		if t.watched[p] {
			return nil
		}
		if len(t.watched) >= t.opts.MaxWatches {
			return fmt.Errorf("watch: more than %d directories", t.opts.MaxWatches)
		}
		if err := t.w.Add(p); err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				return filepath.SkipDir
			}
			return fmt.Errorf("watch %s: %w", p, err) // ENOSPC: the user's watch limit
		}
		t.watched[p] = true
		return nil
	})
}

// addRoot starts watching a new root (in the background).
func (t *Tracker) addRootLocked(path string) *root {
	r := &root{path: path, dirs: map[string]uint64{}, trees: map[string]uint64{}}
	t.roots[path] = r
	go func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.closed || t.roots[path] != r {
			return
		}
		if fi, err := os.Lstat(path); err != nil || !fi.IsDir() {
			delete(t.roots, path) // not (yet) a directory: retried by the next Since
			return
		}
		if err := t.watchTreeLocked(path); err != nil {
			r.dead = err
			return
		}
		t.gen++
		r.ready = t.gen
	}()
	return r
}

// sync waits until every event queued before it has been handled.
func (t *Tracker) sync(ctx context.Context) error {
	t.mu.Lock()
	t.cookieN++
	name := "cookie." + strconv.FormatUint(t.cookieN, 10) + "." + t.id
	ch := make(chan struct{})
	t.waiters[name] = ch
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.waiters, name)
		t.mu.Unlock()
	}()
	p := filepath.Join(t.cookieDir, name)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("watch: cookie: %w", err)
	}
	f.Close()
	defer os.Remove(p)
	ctx, cancel := context.WithTimeout(ctx, t.opts.SyncTimeout)
	defer cancel()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("watch: no event for the cookie: %w", ctx.Err())
	}
}

// Token formats.
func (t *Tracker) token(gen uint64) string { return t.id + "." + strconv.FormatUint(gen, 10) }

func (t *Tracker) parse(tok string) (uint64, bool) {
	id, g, ok := strings.Cut(tok, ".")
	if !ok || id != t.id {
		return 0, false
	}
	n, err := strconv.ParseUint(g, 10, 64)
	return n, err == nil
}

// Since returns a token for now and, per root (absolute, clean paths), what
// changed since the token since, or nil where the watch cannot vouch (a
// root watched for the first time, another instance's token, a lost
// event). Roots not yet watched start being watched.
func (t *Tracker) Since(ctx context.Context, roots []string, since string) (string, []*Changes, error) {
	t.mu.Lock()
	t.lastUsed = time.Now()
	for _, p := range roots {
		if t.roots[p] == nil {
			t.addRootLocked(p)
		}
	}
	t.mu.Unlock()
	if err := t.sync(ctx); err != nil {
		return "", nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	tok := t.token(t.gen)
	out := make([]*Changes, len(roots))
	tg, ok := t.parse(since)
	if !ok {
		return tok, out, nil
	}
	for i, p := range roots {
		r := t.roots[p]
		if r == nil || r.dead != nil || r.ready == 0 || r.ready > tg || r.broken > tg || r.pruned > tg {
			continue
		}
		ch := &Changes{Dirs: []string{}, Trees: []string{}}
		for d, g := range r.dirs {
			if g > tg {
				ch.Dirs = append(ch.Dirs, d)
			}
		}
		for d, g := range r.trees {
			if g > tg {
				ch.Trees = append(ch.Trees, d)
			}
		}
		slices.Sort(ch.Dirs)
		slices.Sort(ch.Trees)
		out[i] = ch
	}
	return tok, out, nil
}

// RootStatus says whether a Tracker vouches for one root's changes since a
// token, and why not when it does not.
type RootStatus struct {
	Root    string `json:"root"`
	Vouches bool   `json:"vouches"`
	// Reason, when the Tracker does not vouch, says why (the capture then
	// lists every directory of the root).
	Reason string `json:"reason,omitempty"`
	// Changed counts the directories it would report (when it vouches).
	Changed int `json:"changed"`
}

// Vouch reports, per root, whether Since would answer for the token since
// (without syncing with the kernel's queue nor starting any watch).
func (t *Tracker) Vouch(roots []string, since string) []RootStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	tg, ok := t.parse(since)
	out := make([]RootStatus, len(roots))
	for i, p := range roots {
		st := RootStatus{Root: p}
		r := t.roots[p]
		switch {
		case since == "":
			st.Reason = "no token: the capture state holds none yet (first capture with the watcher)"
		case !ok:
			st.Reason = "the token is from another watch server instance (a restart)"
		case r == nil:
			st.Reason = "the root is not watched (not yet asked for, or it was removed)"
		case r.dead != nil:
			st.Reason = "the root cannot be watched: " + r.dead.Error()
		case r.ready == 0:
			st.Reason = "the root's watches are still being set up"
		case r.ready > tg:
			st.Reason = "the root's watch started after the token"
		case r.broken > tg:
			reason := "events may have been lost since the token"
			if t.lastErr != nil {
				reason += " (" + t.lastErr.Error() + ")"
			}
			st.Reason = reason
		case r.pruned > tg:
			st.Reason = fmt.Sprintf("more than %d directories changed since the token", t.opts.MaxDirs)
		default:
			st.Vouches = true
			for _, g := range r.dirs {
				if g > tg {
					st.Changed++
				}
			}
			for _, g := range r.trees {
				if g > tg {
					st.Changed++
				}
			}
		}
		out[i] = st
	}
	return out
}

// Status describes one root's watch (for diagnostics and tests).
func (t *Tracker) Status(path string) (watching bool, ready bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.roots[path]
	if r == nil {
		return false, false, nil
	}
	return true, r.ready != 0, r.dead
}
