package client

import (
	"github.com/agentscm/agentscm/internal/connfile"
	"github.com/agentscm/agentscm/internal/fsutil"
)

// The client connections file lives in package connfile (which links
// nothing that talks to a Hub); these are its names as client has always
// offered them.

// File names under the agentscm config directory.
const (
	ConnectionsFile = connfile.ConnectionsFile
	ConnectionsLock = connfile.ConnectionsLock
	// LocalHubDir is the embedded Hub's data directory under the config
	// directory.
	LocalHubDir = connfile.LocalHubDir
)

// ConnectionsVersion is the connections file format this binary writes.
const ConnectionsVersion = connfile.ConnectionsVersion

// Connection kinds.
const (
	KindLocal = connfile.KindLocal
	KindHub   = connfile.KindHub
)

// LocalHub is the Hub name of the embedded connection.
const LocalHub = connfile.LocalHub

// ErrNoConnection reports a checkout without a client connection.
var ErrNoConnection = connfile.ErrNoConnection

// ErrUnknownVersion reports a connections file of another format version.
var ErrUnknownVersion = connfile.ErrUnknownVersion

// Connection binds one checkout root to a Hub and a repository.
type Connection = connfile.Connection

// File is the connections file's content.
type File = connfile.File

// ConnectionsPath is connfile.ConnectionsPath.
func ConnectionsPath(configDir string) string { return connfile.ConnectionsPath(configDir) }

// Load is connfile.Load.
func Load(configDir string) (*File, error) { return connfile.Load(configDir) }

// Lookup is connfile.Lookup.
func Lookup(configDir, root string) (Connection, error) { return connfile.Lookup(configDir, root) }

// LookupContaining is connfile.LookupContaining.
func LookupContaining(configDir, dir string) (Connection, error) {
	return connfile.LookupContaining(configDir, dir)
}

// Lock is connfile.Lock.
func Lock(configDir string) (*fsutil.Lock, error) { return connfile.Lock(configDir) }

// Update is connfile.Update.
func Update(configDir string, fn func(*File) error) error { return connfile.Update(configDir, fn) }

// Put is connfile.Put.
func Put(configDir string, c Connection) (prev *Connection, err error) {
	return connfile.Put(configDir, c)
}

// Remove is connfile.Remove.
func Remove(configDir, root string) (Connection, error) { return connfile.Remove(configDir, root) }

// NewWorktreeID is connfile.NewWorktreeID.
func NewWorktreeID() string { return connfile.NewWorktreeID() }

// CanonicalRoot is connfile.CanonicalRoot.
func CanonicalRoot(root string) (string, error) { return connfile.CanonicalRoot(root) }

// NormalizeHubURL is connfile.NormalizeHubURL.
func NormalizeHubURL(raw string) (string, error) { return connfile.NormalizeHubURL(raw) }
