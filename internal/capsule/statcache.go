package capsule

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
	"golang.org/x/sys/unix"
)

// The stat cache lets a run skip re-reading regular files whose stat identity
// (dev, inode, size, mtime, ctime) is unchanged since agentdiff last hashed
// them. It is a base manifest (basefile.go) plus the files that changed since
// it, so a run rewrites a few kilobytes, not the whole tree:
//
//	agentdiff-statcache-v2 <HMAC-SHA256 of the rest>
//	base <sha256> <dev> <ino> <size> <mtime_ns> <ctime_ns> <taken_ns>
//	time <taken_ns>
//	objdir <xx> <dev> <ino> <mtime_ns> <ctime_ns>      (object store subdirectories)
//	<base lines of the regular files that differ from the base>
//
// It lives in <root>/.agentdiff/statcache and is authenticated with
// HMAC-SHA256 under a per-user key kept outside the root
// (KeyDir/statcache.key, 0600), so a process that can write only the
// workspace cannot plant hashes. The base file is trusted when its stat
// identity is the recorded one (a process cannot rewrite it without changing
// its ctime), and otherwise re-hashed against its name. An entry is reused
// only when its mtime and ctime are older than racyWindow before the time of
// the manifest that hashed it. The objdir lines let a run trust that the
// object of a reused hash is still in the store without a stat per file: a
// subdirectory whose stat changed is listed again. It is written by agentdiff
// after the command and its process group are gone. A cache that fails
// authentication or parsing is ignored and every file is hashed.

const (
	statCacheName   = "statcache"
	statCacheHeader = "agentdiff-statcache-v2"
	statCacheKey    = "statcache.key"
	racyWindow      = 2 * time.Second
	maxStatCache    = 256 << 20
)

// statID is the stat identity of a file or directory.
type statID struct {
	dev, ino       uint64
	size           int64
	mtime, ctimeNS int64
}

func statIDOf(st *unix.Stat_t) statID {
	return statID{dev: uint64(st.Dev), ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano(), ctimeNS: st.Ctim.Nano()}
}

// statCache is a loaded cache.
type statCache struct {
	baseSum   string
	baseStat  statID
	baseTaken int64
	base      []ManifestEntry // walk order; reuse set on the entries whose hash may be reused
	taken     int64
	delta     map[string]*ManifestEntry // regular files that differ from the base, reuse set
	objDirs   map[string]statID
}

// cacheKey reads or creates the per-user key in dir ("" disables the cache).
func cacheKey(dir string) ([]byte, error) {
	if dir == "" {
		return nil, nil
	}
	p := filepath.Join(dir, statCacheKey)
	k, err := fsutil.ReadFileNoFollow(p, 64)
	if err == nil && len(k) == 32 {
		return k, nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err := fsutil.MkdirPrivate(dir); err != nil {
		return nil, err
	}
	k = make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, err
	}
	if err := fsutil.WriteNew(p, k, fsutil.FileMode); err != nil {
		if errors.Is(err, fs.ErrExist) { // a concurrent creator won
			return cacheKey(dir)
		}
		return nil, err
	}
	return k, nil
}

func mac(key, body []byte) string {
	h := hmac.New(sha256.New, key)
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

func fields(line []byte, n int) ([][]byte, bool) {
	f := bytes.Fields(line)
	return f, len(f) == n
}

// parseStatCache parses an authenticated cache body (everything after the
// header line) without the base.
func parseStatCache(body []byte) (*statCache, error) {
	c := &statCache{delta: map[string]*ManifestEntry{}, objDirs: map[string]statID{}}
	bad := errors.New("stat cache: malformed")
	line, body, ok := bytes.Cut(body, []byte("\n"))
	f, n := fields(line, 8)
	if !ok || !n || string(f[0]) != "base" || !validSum(string(f[1])) {
		return nil, bad
	}
	c.baseSum = string(f[1])
	var v [6]int64
	for i := range v {
		x, ok := parseInt(f[2+i])
		if !ok {
			return nil, bad
		}
		v[i] = x
	}
	c.baseStat = statID{dev: uint64(v[0]), ino: uint64(v[1]), size: v[2], mtime: v[3], ctimeNS: v[4]}
	c.baseTaken = v[5]
	line, body, ok = bytes.Cut(body, []byte("\n"))
	if f, n := fields(line, 2); !ok || !n || string(f[0]) != "time" {
		return nil, bad
	} else if c.taken, ok = parseInt(f[1]); !ok {
		return nil, bad
	}
	modes := map[string]internedMode{}
	limit := c.taken - int64(racyWindow)
	for len(body) > 0 {
		line, body, ok = bytes.Cut(body, []byte("\n"))
		if !ok {
			return nil, bad
		}
		if bytes.HasPrefix(line, []byte("objdir ")) {
			f, n := fields(line, 6)
			if !n || len(f[1]) != 2 {
				return nil, bad
			}
			var v [4]int64
			for i := range v {
				x, ok := parseInt(f[2+i])
				if !ok {
					return nil, bad
				}
				v[i] = x
			}
			c.objDirs[string(f[1])] = statID{dev: uint64(v[0]), ino: uint64(v[1]), mtime: v[2], ctimeNS: v[3]}
			continue
		}
		e, err := parseEntryLine(line, modes)
		if err != nil || e.Type != "file" {
			return nil, bad
		}
		e.reuse = e.MtimeNS < limit && e.ctimeNS < limit
		ep := new(ManifestEntry)
		*ep = e
		c.delta[e.Path] = ep
	}
	return c, nil
}

// loadStatCache returns the authenticated cache with its base, or nil.
func loadStatCache(state string, key []byte) *statCache {
	if key == nil {
		return nil
	}
	b, err := fsutil.ReadFileNoFollow(filepath.Join(state, statCacheName), maxStatCache)
	if err != nil {
		return nil
	}
	head, body, ok := bytes.Cut(b, []byte("\n"))
	if !ok {
		return nil
	}
	f := bytes.Fields(head)
	if len(f) != 2 || string(f[0]) != statCacheHeader || !hmac.Equal(f[1], []byte(mac(key, body))) {
		return nil
	}
	c, err := parseStatCache(body)
	if err != nil {
		return nil
	}
	p := filepath.Join(state, dirBases, c.baseSum)
	bf, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer bf.Close()
	var st unix.Stat_t
	if unix.Fstat(int(bf.Fd()), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil
	}
	want := c.baseSum
	if statIDOf(&st) == c.baseStat {
		want = "" // unchanged since agentdiff wrote and hashed it
	}
	lines, err := countLines(bf, st.Size)
	if err != nil {
		return nil
	}
	// (A valid line has at least 24 bytes: a hostile file of newlines
	// allocates no more than a valid one of its size.)
	c.base, err = readBaseN(bf, want, min(lines, int(st.Size/24)))
	if err != nil {
		return nil
	}
	limit := c.baseTaken - int64(racyWindow)
	for i := range c.base {
		e := &c.base[i]
		e.inBase = true
		e.reuse = e.Type == "file" && e.MtimeNS < limit && e.ctimeNS < limit
	}
	return c
}

// lookup returns the cached entry of path (nil when none may be reused).
// b is path's base entry, if any.
func (c *statCache) lookup(path string, b *ManifestEntry) *ManifestEntry {
	if c == nil {
		return nil
	}
	if d := c.delta[path]; d != nil {
		if d.reuse {
			return d
		}
		return nil
	}
	if b != nil && b.reuse {
		return b
	}
	return nil
}

// saveStatCache writes the cache: the base (sum, stat identity, time) and
// the regular files of the post-run state that differ from it.
func saveStatCache(state string, key []byte, baseSum string, baseTaken int64, taken time.Time, files []*ManifestEntry, store *objectStore) error {
	if key == nil || baseSum == "" {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(state, dirBases, baseSum), &st); err != nil {
		return err
	}
	bs := statIDOf(&st)
	var body bytes.Buffer
	bw := bufio.NewWriter(&body)
	fmt.Fprintf(bw, "base %s %d %d %d %d %d %d\n", baseSum, int64(bs.dev), int64(bs.ino), bs.size, bs.mtime, bs.ctimeNS, baseTaken)
	fmt.Fprintf(bw, "time %d\n", taken.UnixNano())
	for _, d := range store.subdirStats() {
		fmt.Fprintf(bw, "objdir %s %d %d %d %d\n", d.name, int64(d.id.dev), int64(d.id.ino), d.id.mtime, d.id.ctimeNS)
	}
	line := make([]byte, 0, 512)
	for _, e := range files {
		line = appendEntryLine(line[:0], e)
		bw.Write(line)
	}
	bw.Flush()
	out := append([]byte(statCacheHeader+" "+mac(key, body.Bytes())+"\n"), body.Bytes()...)
	return writeUnsynced(filepath.Join(state, statCacheName), out)
}

// writeUnsynced replaces path through a temporary file and a rename without
// fsync: the stat cache is an optimisation, and a cache a crash leaves torn
// fails authentication and is ignored.
func writeUnsynced(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), fsutil.TempPrefix+"statcache-")
	if err != nil {
		return err
	}
	name := f.Name()
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(name, path)
	}
	if err != nil {
		os.Remove(name)
	}
	return err
}
