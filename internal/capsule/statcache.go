package capsule

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// The stat cache lets a run skip re-reading regular files whose stat identity
// (dev, inode, size, mtime, ctime) is unchanged since the previous run's
// after-manifest. It lives in <root>/.agentdiff/statcache and is
// authenticated with HMAC-SHA256 under a per-user key kept outside the root
// (KeyDir/statcache.key, 0600), so a process that can write only the
// workspace cannot plant hashes. It is written by agentdiff after the command
// and its process group are gone. Entries whose ctime is within racyWindow of
// the manifest time are not cached (their content could still change without
// a visible stat difference). A cache that fails authentication or parsing is
// ignored and every file is hashed.

const (
	statCacheName   = "statcache"
	statCacheHeader = "agentdiff-statcache-v1"
	statCacheKey    = "statcache.key"
	racyWindow      = 2 * time.Second
	maxStatCache    = 256 << 20
)

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

// loadStatCache returns the authenticated cache entries, or nil.
func loadStatCache(state string, key []byte) map[string]*ManifestEntry {
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
	f := strings.Fields(string(head))
	if len(f) != 2 || f[0] != statCacheHeader || !hmac.Equal([]byte(f[1]), []byte(mac(key, body))) {
		return nil
	}
	lines := bytes.Count(body, []byte("\n"))
	out := make(map[string]*ManifestEntry, lines)
	ents := make([]ManifestEntry, 0, lines)
	for len(body) > 0 {
		nl := bytes.IndexByte(body, '\n')
		if nl < 0 {
			return nil
		}
		line := string(body[:nl])
		body = body[nl+1:]
		// sha dev ino size mtime ctime "path"
		if len(line) < 66 || line[64] != ' ' || !validSum(line[:64]) {
			return nil
		}
		rest := line[65:]
		var n [5]int64
		for i := range n {
			sp := strings.IndexByte(rest, ' ')
			if sp < 0 {
				return nil
			}
			v, err := strconv.ParseInt(rest[:sp], 10, 64)
			if err != nil {
				return nil
			}
			n[i], rest = v, rest[sp+1:]
		}
		p := ""
		if len(rest) >= 2 && rest[0] == '"' && rest[len(rest)-1] == '"' && !strings.ContainsAny(rest[1:len(rest)-1], "\\\"") {
			p = rest[1 : len(rest)-1]
		} else {
			var err error
			if p, err = strconv.Unquote(rest); err != nil {
				return nil
			}
		}
		ents = append(ents, ManifestEntry{Path: p, Type: "file", SHA256: line[:64], dev: uint64(n[0]), ino: uint64(n[1]), Size: n[2],
			MtimeNS: n[3], ctimeNS: n[4], hasStatID: true})
	}
	for i := range ents {
		out[ents[i].Path] = &ents[i]
	}
	return out
}

// saveStatCache writes the cache from a manifest agentdiff itself took.
func saveStatCache(state string, key []byte, m *Manifest) error {
	if key == nil {
		return nil
	}
	limit := m.TakenAt.Add(-racyWindow).UnixNano()
	var body bytes.Buffer
	for i := range m.Entries {
		e := &m.Entries[i]
		if e.Type != "file" || !e.hasStatID || e.SHA256 == "" || e.ctimeNS >= limit || e.MtimeNS >= limit {
			continue
		}
		fmt.Fprintf(&body, "%s %d %d %d %d %d %s\n", e.SHA256, int64(e.dev), int64(e.ino), e.Size, e.MtimeNS, e.ctimeNS, strconv.Quote(e.Path))
	}
	out := append([]byte(statCacheHeader+" "+mac(key, body.Bytes())+"\n"), body.Bytes()...)
	return fsutil.WriteAtomic(filepath.Join(state, statCacheName), out, fsutil.FileMode)
}
