package spool

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Export archive layout (docs/spool.md, "Export"):
//
//	DEST/                 0700, the directory this export created
//	  spool/...           byte copies of every spool entry (dirs 0700, files 0600)
//	  manifest.json       written last: every entry's path, type, size and sha256
//
// An archive without manifest.json is incomplete and is not evidence.
const (
	ExportFormat       = "agentscm-spool-export"
	ExportVersion      = 1
	ExportManifestName = "manifest.json"
	ExportTreeName     = "spool"
	// MaxExportEntryBytes is the bounded per-entry digest limit: a larger
	// file is refused, never copied by size only.
	MaxExportEntryBytes = 64 << 20
	// DefaultExportEntries bounds the entries one export enumerates.
	DefaultExportEntries = 1 << 18
	// DefaultExportBytes bounds the bytes one export copies.
	DefaultExportBytes = 64 << 30
	// exportMaxDepth bounds the directory depth below the spool root.
	exportMaxDepth = 8
	// exportAnchorAttempts is the anchor's finite collision budget.
	exportAnchorAttempts = 16
	// exportAnchorPrefix starts every anchor name (128 random bits follow).
	exportAnchorPrefix = ".agentscm-export-"
	// exportChildName is the owned child created inside the anchor and
	// installed as the destination.
	exportChildName = "archive"
)

// Export refusals callers branch on (errors.Is through *ExportError).
var (
	ErrExportDestinationExists = errors.New("the destination already exists")
	ErrExportNested            = errors.New("the destination is beneath the source spool")
	ErrExportEntryTooLarge     = errors.New("an entry is above the 64 MiB per-entry digest limit")
	ErrExportChanged           = errors.New("a source entry changed during the export")
	ErrExportUnreadable        = errors.New("a source entry is unreadable or of an unsupported type")
	ErrExportBound             = errors.New("the spool exceeds the export bound")
	ErrExportAnchor            = errors.New("the private export anchor failed its checks")
	ErrExportVerify            = errors.New("the archive did not verify byte for byte")
	ErrExportSync              = errors.New("a sync failed: the installation is crash-uncertain")
	ErrExportUnsupported       = errors.New("export is not supported here")
	ErrExportLocation          = errors.New("an export object no longer resolves to its recorded identity")
)

// ExportOptions configures one export.
type ExportOptions struct {
	// Spool is the absolute path of the source spool (any directory: an
	// uncommitted, damaged or earlier-format spool is exported read-only
	// too).
	Spool string
	// Destination is the absolute path the archive is installed at; it
	// must not exist.
	Destination string
	// MaxEntries and MaxBytes bound the export (0: the defaults).
	MaxEntries int
	MaxBytes   int64
	// LockWait bounds the wait for the spool lock (0: 10 s).
	LockWait time.Duration
	// Now stamps the manifest (zero: time.Now).
	Now time.Time

	hooks *exportHooks // tests only
}

// exportHooks let tests act at exact points of a real export.
type exportHooks struct {
	anchorName    func(attempt int) string
	afterAnchor   func(anchorPath string)
	beforeInstall func()
	beforeRehash  func(rel string)
	afterInstall  func()
	lockReleased  func(held time.Duration)
}

// ExportEntry is one archived entry of the manifest.
type ExportEntry struct {
	// Path is slash-separated, relative to the spool root ("" is the root).
	Path   string `json:"path"`
	Type   string `json:"type"` // "dir" or "file"
	Mode   string `json:"mode"` // the source's permission bits, e.g. "0600"
	Bytes  int64  `json:"bytes,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
}

// ExportExcluded is an entry the snapshot did not include, with the reason.
type ExportExcluded struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// ExportManifest is manifest.json, the archive's evidence, written last.
type ExportManifest struct {
	Format         string           `json:"format"`
	Version        int              `json:"version"`
	Complete       bool             `json:"complete"`
	CreatedAt      time.Time        `json:"created_at"`
	Source         string           `json:"source"`
	SourceIdentity FileID           `json:"source_identity"`
	SpoolID        string           `json:"spool_id,omitempty"`
	Committed      bool             `json:"committed"`
	SpoolLockHeld  bool             `json:"spool_lock_held"`
	Files          int              `json:"files"`
	Dirs           int              `json:"dirs"`
	Bytes          int64            `json:"bytes"`
	Entries        []ExportEntry    `json:"entries"`
	Excluded       []ExportExcluded `json:"excluded"`
}

// ExportResult says what a successful export created.
type ExportResult struct {
	Spool               string           `json:"spool"`
	SourceIdentity      FileID           `json:"source_identity"`
	SpoolID             string           `json:"spool_id,omitempty"`
	Committed           bool             `json:"committed"`
	SpoolLockHeld       bool             `json:"spool_lock_held"`
	Destination         string           `json:"destination"`
	DestinationIdentity FileID           `json:"destination_identity"`
	Manifest            string           `json:"manifest"`
	ManifestSHA256      string           `json:"manifest_sha256"`
	Files               int              `json:"files"`
	Dirs                int              `json:"dirs"`
	Bytes               int64            `json:"bytes"`
	Excluded            []ExportExcluded `json:"excluded"`
	// Anchor is the verified-empty random private anchor the export
	// intentionally leaves in place (it cannot be removed by descriptor,
	// and removing it by pathname could remove a replacement).
	Anchor         string `json:"anchor"`
	AnchorIdentity FileID `json:"anchor_identity"`
}

// ExportArtifact is one object a failed export may have left, with what is
// known about it.
type ExportArtifact struct {
	// Role: "anchor", "owned_child" (the archive directory while still
	// inside the anchor), "destination" (the archive directory after
	// install), "foreign_entries" (unexpected entries found in the anchor).
	Role string `json:"role"`
	// Name is the pathname the object was created at or last observed at.
	Name string `json:"name"`
	// Identity is the object's device and inode when known.
	Identity *FileID `json:"identity,omitempty"`
	// State says where the object is now, as far as is known.
	State string `json:"state"`
	// Uncertainty lists location, privacy or content uncertainty.
	Uncertainty []string `json:"uncertainty,omitempty"`
}

// ExportError is a failed export: the step, the cause and every object it
// may have left. Nothing is ever cleaned up through a mutable pathname, and
// the source is never changed.
type ExportError struct {
	Step      string           `json:"step"`
	Err       error            `json:"-"`
	Message   string           `json:"error"`
	Artifacts []ExportArtifact `json:"artifacts"`
	// Source and Parent are the source spool and the destination parent as
	// opened (name and identity), when known; neither is ever changed.
	Source *ExportArtifact `json:"source,omitempty"`
	Parent *ExportArtifact `json:"destination_parent,omitempty"`
}

func (e *ExportError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "export failed (%s): %v", e.Step, e.Err)
	if len(e.Artifacts) == 0 {
		b.WriteString("; nothing was created")
	}
	for _, a := range e.Artifacts {
		fmt.Fprintf(&b, "; left %s %s", strings.ReplaceAll(a.Role, "_", " "), a.Name)
		if a.Identity != nil {
			fmt.Fprintf(&b, " (dev %d, inode %d)", a.Identity.Dev, a.Identity.Ino)
		}
		fmt.Fprintf(&b, ": %s", a.State)
		for _, u := range a.Uncertainty {
			fmt.Fprintf(&b, "; %s", u)
		}
	}
	for _, o := range []*ExportArtifact{e.Source, e.Parent} {
		if o != nil && o.Identity != nil {
			fmt.Fprintf(&b, "; %s %s (dev %d, inode %d): %s", strings.ReplaceAll(o.Role, "_", " "), o.Name, o.Identity.Dev, o.Identity.Ino, o.State)
		}
	}
	if len(e.Artifacts) > 0 {
		b.WriteString("; nothing was removed (export never cleans through a mutable pathname): inspect and remove these yourself")
	}
	b.WriteString("; the source spool was not changed")
	return b.String()
}

func (e *ExportError) Unwrap() error { return e.Err }
