// Package connections holds a user's client connections file (which Hub and
// repository each checkout delivers to) and nothing that talks to a Hub,
// so that the capture hook's intake binary can find a checkout's
// connection without linking the Hub's store or HTTP client (package
// client uses it; callers import it directly).
package connections

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// File names under the agentscm config directory.
const (
	ConnectionsFile = "connections.json"
	ConnectionsLock = "connections.lock"
	// LocalHubDir is the embedded Hub's data directory under the config
	// directory.
	LocalHubDir = "hub"
	// maxConnectionsBytes bounds the connections file read from disk.
	maxConnectionsBytes = 4 << 20
)

// ConnectionsVersion is the connections file format this binary writes; a
// file with another version is refused, never half-read.
const ConnectionsVersion = 1

// Connection kinds.
const (
	KindLocal = "local"
	KindHub   = "hub"
)

// LocalHub is the Hub name of the embedded connection.
const LocalHub = "local"

// ErrNoConnection reports a checkout without a client connection.
var ErrNoConnection = errors.New("no client connection for this checkout")

// ErrUnknownVersion reports a connections file of another format version.
var ErrUnknownVersion = errors.New("connections file version not supported by this agentscm")

// Connection binds one checkout root to a Hub and a repository.
type Connection struct {
	// Root is the canonical absolute checkout root.
	Root string `json:"root"`
	Kind string `json:"kind"`
	// Hub is the Hub's base URL, or "local" for the embedded store.
	Hub        string `json:"hub"`
	Repository string `json:"repository"`
	// WorktreeID names this checkout on the Hub: random, not derived from
	// the path.
	WorktreeID string `json:"worktree_id"`
	// Token is the bearer token of a Hub connection (the file is 0600).
	Token string `json:"token,omitempty"`
	// Human is the local human of an embedded connection.
	Human string `json:"human,omitempty"`
	// Data is the embedded Hub's data directory.
	Data      string    `json:"data,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// File is the connections file.
type File struct {
	Version     int          `json:"version"`
	Connections []Connection `json:"connections"`
}

// ConnectionsPath returns the connections file of a config directory.
func ConnectionsPath(configDir string) string { return filepath.Join(configDir, ConnectionsFile) }

// Load reads the connections file without taking its lock (writes replace
// it atomically). A missing file is an empty one.
func Load(configDir string) (*File, error) {
	b, err := fsutil.ReadFileNoFollow(ConnectionsPath(configDir), maxConnectionsBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return &File{Version: ConnectionsVersion}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read connections file: %w", err)
	}
	var f File
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("connections file %s: %w", ConnectionsPath(configDir), err)
	}
	if f.Version != ConnectionsVersion {
		return nil, fmt.Errorf("%w: version %d (this agentscm reads %d)", ErrUnknownVersion, f.Version, ConnectionsVersion)
	}
	return &f, nil
}

// Find returns the connection of a canonical checkout root.
func (f *File) Find(root string) (Connection, bool) {
	for _, c := range f.Connections {
		if c.Root == root {
			return c, true
		}
	}
	return Connection{}, false
}

// Lookup returns the connection of a canonical checkout root: one bounded
// file read, cheap enough for every hook invocation.
func Lookup(configDir, root string) (Connection, error) {
	f, err := Load(configDir)
	if err != nil {
		return Connection{}, err
	}
	c, ok := f.Find(root)
	if !ok {
		return Connection{}, ErrNoConnection
	}
	return c, nil
}

// FindContaining returns the connection whose root is dir or its deepest
// ancestor (dir canonical and absolute), for commands run inside a checkout.
func (f *File) FindContaining(dir string) (Connection, bool) {
	best := -1
	for i, c := range f.Connections {
		if dir == c.Root || strings.HasPrefix(dir, strings.TrimSuffix(c.Root, "/")+"/") {
			if best < 0 || len(c.Root) > len(f.Connections[best].Root) {
				best = i
			}
		}
	}
	if best < 0 {
		return Connection{}, false
	}
	return f.Connections[best], true
}

// LookupContaining is Lookup for a directory inside a checkout: the deepest
// connected root that contains dir.
func LookupContaining(configDir, dir string) (Connection, error) {
	f, err := Load(configDir)
	if err != nil {
		return Connection{}, err
	}
	c, ok := f.FindContaining(dir)
	if !ok {
		return Connection{}, ErrNoConnection
	}
	return c, nil
}

// Lock takes the connections lock. Callers that also need the capture config
// lock take this one first.
func Lock(configDir string) (*fsutil.Lock, error) {
	if err := fsutil.MkdirPrivate(configDir); err != nil {
		return nil, err
	}
	return fsutil.LockFile(filepath.Join(configDir, ConnectionsLock))
}

// Update changes the connections file under its lock: it reads the file,
// calls fn and writes the result atomically when fn returns nil.
func Update(configDir string, fn func(*File) error) error {
	l, err := Lock(configDir)
	if err != nil {
		return err
	}
	defer l.Unlock()
	f, err := Load(configDir)
	if err != nil {
		return err
	}
	if err := fn(f); err != nil {
		return err
	}
	f.Version = ConnectionsVersion
	sort.Slice(f.Connections, func(i, j int) bool { return f.Connections[i].Root < f.Connections[j].Root })
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := fsutil.WriteAtomic(ConnectionsPath(configDir), append(b, '\n'), fsutil.FileMode); err != nil {
		return fmt.Errorf("write connections file: %w", err)
	}
	return nil
}

// Put installs c as the connection of c.Root, replacing any previous one,
// and returns the previous connection (if any).
func Put(configDir string, c Connection) (prev *Connection, err error) {
	err = Update(configDir, func(f *File) error {
		for i, old := range f.Connections {
			if old.Root == c.Root {
				o := old
				prev = &o
				f.Connections[i] = c
				return nil
			}
		}
		f.Connections = append(f.Connections, c)
		return nil
	})
	return prev, err
}

// Remove deletes the connection of a root and returns it.
func Remove(configDir, root string) (Connection, error) {
	var removed Connection
	err := Update(configDir, func(f *File) error {
		for i, c := range f.Connections {
			if c.Root == root {
				removed = c
				f.Connections = append(f.Connections[:i], f.Connections[i+1:]...)
				return nil
			}
		}
		return ErrNoConnection
	})
	return removed, err
}

// NewWorktreeID returns a fresh random worktree id, checkout_<32 hex>.
func NewWorktreeID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return "checkout_" + hex.EncodeToString(b[:])
}

// CanonicalRoot returns the canonical form of an absolute checkout root: an
// existing directory with symlinks resolved.
func CanonicalRoot(root string) (string, error) {
	if !filepath.IsAbs(root) {
		return "", fmt.Errorf("--root %q is not an absolute path", root)
	}
	r, err := filepath.EvalSymlinks(filepath.Clean(root))
	if err != nil {
		return "", fmt.Errorf("checkout root: %w", err)
	}
	fi, err := os.Stat(r)
	if err != nil {
		return "", fmt.Errorf("checkout root: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("checkout root %s is not a directory", r)
	}
	return r, nil
}

// NormalizeHubURL validates a Hub base URL (http or https, a host, no user
// info, query or fragment) and returns it without a trailing slash.
func NormalizeHubURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("hub URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("hub URL %q must start with http:// or https://", raw)
	}
	if u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", fmt.Errorf("hub URL %q must name a host and carry no user info, query or fragment", raw)
	}
	return strings.TrimRight(u.String(), "/"), nil
}
