package spool

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// maxManifestBytes bounds manifest.json read back by VerifyExport.
const maxManifestBytes = 128 << 20

// VerifyExport re-reads an export archive at dir against its manifest.json:
// every listed entry must exist with its type, size and sha256, and the
// tree must hold nothing the manifest does not list. It opens nothing
// through a symlink and reads each file at most MaxExportEntryBytes+1
// bytes. It changes nothing.
func VerifyExport(dir string) (*ExportManifest, error) {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return nil, fmt.Errorf("archive path %q is not an absolute clean path", dir)
	}
	b, err := fsutil.ReadFileNoFollow(filepath.Join(dir, ExportManifestName), maxManifestBytes)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s has no %s: an incomplete export, not evidence", ErrExportVerify, dir, ExportManifestName)
		}
		return nil, fmt.Errorf("%w: read the manifest: %v", ErrExportVerify, err)
	}
	var m ExportManifest
	if err := strictJSON(b, &m); err != nil {
		return nil, fmt.Errorf("%w: the manifest does not decode: %v", ErrExportVerify, err)
	}
	if m.Format != ExportFormat || m.Version != ExportVersion || !m.Complete {
		return nil, fmt.Errorf("%w: the manifest is not a complete %s v%d manifest", ErrExportVerify, ExportFormat, ExportVersion)
	}
	tree := filepath.Join(dir, ExportTreeName)
	listed := make(map[string]ExportEntry, len(m.Entries))
	for _, e := range m.Entries {
		if _, dup := listed[e.Path]; dup {
			return nil, fmt.Errorf("%w: the manifest lists %q twice", ErrExportVerify, e.Path)
		}
		if e.Path != "" && (!fs.ValidPath(e.Path) || filepath.ToSlash(filepath.Clean(e.Path)) != e.Path) {
			return nil, fmt.Errorf("%w: the manifest lists an unsafe path %q", ErrExportVerify, e.Path)
		}
		listed[e.Path] = e
	}
	// Walk the tree without following symlinks; every entry must be listed.
	seen := 0
	err = filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(tree, p)
		if rel == "." {
			rel = ""
		}
		rel = filepath.ToSlash(rel)
		e, ok := listed[rel]
		if !ok {
			return fmt.Errorf("%w: %s is in the archive but not in the manifest", ErrExportVerify, p)
		}
		seen++
		switch {
		case d.Type().IsDir():
			if e.Type != "dir" {
				return fmt.Errorf("%w: %s is a directory, the manifest says %s", ErrExportVerify, p, e.Type)
			}
		case d.Type().IsRegular():
			if e.Type != "file" {
				return fmt.Errorf("%w: %s is a file, the manifest says %s", ErrExportVerify, p, e.Type)
			}
			sum, n, err := digestFileNoFollow(p, MaxExportEntryBytes+1)
			if err != nil {
				return fmt.Errorf("%w: %v", ErrExportVerify, err)
			}
			if n != e.Bytes || sum != e.SHA256 {
				return fmt.Errorf("%w: %s has %d bytes with sha256 %s, the manifest says %d bytes, %s", ErrExportVerify, p, n, sum, e.Bytes, e.SHA256)
			}
		default:
			return fmt.Errorf("%w: %s is not a regular file or directory", ErrExportVerify, p)
		}
		return nil
	})
	if err != nil {
		if !errors.Is(err, ErrExportVerify) {
			err = fmt.Errorf("%w: %v", ErrExportVerify, err)
		}
		return nil, err
	}
	if seen != len(listed) {
		return nil, fmt.Errorf("%w: the manifest lists %d entries, the archive holds %d", ErrExportVerify, len(listed), seen)
	}
	return &m, nil
}

func digestFileNoFollow(path string, limit int64) (string, int64, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, limit))
	if err != nil {
		return "", n, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
