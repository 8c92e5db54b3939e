package changelog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/redact"
	"github.com/agentscm/agentscm/internal/scan"
)

// secretFilesFile holds the checkout's adjustments of the secret-file set
// (changelog enable --withhold, --share); absent means the defaults
// (redact.DefaultWithheld). Older agentscm ignores it.
const secretFilesFile = "withheld.json"

// maxSecretFilesBytes bounds the stored set.
const maxSecretFilesBytes = 64 << 10

// SecretFiles returns the secret-file set of the changelog in dir: the
// defaults adjusted by what `changelog enable --withhold/--share` recorded.
// An unreadable or malformed record is an error (an upload then waits
// rather than share what the user withheld).
func SecretFiles(dir string) (redact.FileSet, error) {
	b, err := fsutil.ReadFileNoFollow(filepath.Join(dir, secretFilesFile), maxSecretFilesBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return redact.FileSet{}, nil
	}
	if err != nil {
		return redact.FileSet{}, fmt.Errorf("the changelog's secret-file set: %w", err)
	}
	var s redact.FileSet
	if err := json.Unmarshal(b, &s); err != nil {
		return redact.FileSet{}, fmt.Errorf("the changelog's secret-file set %s: %w", filepath.Join(dir, secretFilesFile), err)
	}
	for _, p := range slices.Concat(s.Withhold, s.Share) {
		if err := redact.CheckPattern(p); err != nil {
			return redact.FileSet{}, fmt.Errorf("the changelog's secret-file set %s: %w", filepath.Join(dir, secretFilesFile), err)
		}
	}
	return s, nil
}

// SetSecretFiles records the secret-file adjustments of the changelog in
// dir (durably: temporary file, fsync, rename).
func SetSecretFiles(dir string, s redact.FileSet) error {
	for _, p := range slices.Concat(s.Withhold, s.Share) {
		if err := redact.CheckPattern(p); err != nil {
			return err
		}
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := fsutil.WriteAtomic(filepath.Join(dir, secretFilesFile), append(b, '\n'), fsutil.FileMode); err != nil {
		return fmt.Errorf("changelog secret-file set: %w", err)
	}
	return nil
}

// mergeWithheld is the withheld-file list of a merge of metas: every
// record, the latest of each path, minus the paths the merge stores.
func mergeWithheld(metas []*incmeta.Meta, stored map[string]bool) []incmeta.WithheldFile {
	idx := map[string]int{}
	var out []incmeta.WithheldFile
	for _, m := range metas {
		for _, w := range m.WithheldFiles {
			k := vkey(w.Root, w.Path)
			if i, ok := idx[k]; ok {
				out[i] = w
				continue
			}
			idx[k] = len(out)
			out = append(out, w)
		}
	}
	return slices.DeleteFunc(out, func(w incmeta.WithheldFile) bool { return stored[vkey(w.Root, w.Path)] })
}

// MaxPreviewPaths bounds the withheld paths an UploadPreview lists; the
// rest are only counted.
const MaxPreviewPaths = 100

// UploadPreview is what an increment holding the whole workspace (the
// changelog's first one, or any apply onto an empty directory) would send
// to a Hub: the files of the workspace roots and their bytes, and the
// secret files it would withhold. The conversation roots are not counted:
// the capture mode decides them (see UploadFormOf).
type UploadPreview struct {
	// Files counts the regular files and symlinks uploaded, Bytes the
	// regular files' bytes.
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
	// Withheld lists the secret files found, at most MaxPreviewPaths of
	// them; WithheldCount and WithheldBytes count them all.
	Withheld      []WithheldPath `json:"withheld"`
	WithheldCount int            `json:"withheld_count"`
	WithheldBytes int64          `json:"withheld_bytes"`
	// SecretFiles is the checkout's adjustment of the default set.
	SecretFiles redact.FileSet `json:"secret_files"`
	// Captured is true when the preview is of the last captured state,
	// false when of the baseline (or a scan) before the first capture.
	Captured bool `json:"captured"`
}

// WithheldPath is a secret file found in a capture root.
type WithheldPath struct {
	Root    string `json:"root"`
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	Pattern string `json:"pattern"`
}

// UploadPreview returns what a whole-workspace increment would upload and
// withhold: from the last captured state, else the baseline recorded by
// RecordBaseline, else a scan of the roots now.
func (c *Changelog) UploadPreview(ctx context.Context) (*UploadPreview, error) {
	secret, err := SecretFiles(c.dir)
	if err != nil {
		return nil, err
	}
	lk, err := c.lock()
	if err != nil {
		return nil, err
	}
	defer lk.Unlock()
	st, err := c.loadState()
	if err != nil && !errors.Is(err, errBadState) {
		return nil, err
	}
	pv := &UploadPreview{Withheld: []WithheldPath{}, SecretFiles: secret}
	var roots []*rootState
	switch {
	case err == nil && st.LastPosition >= 0:
		roots, pv.Captured = st.Roots, true
	case c.loadBaseline() != nil:
		roots = c.loadBaseline().Roots
	default:
		for _, r := range c.opts.Roots {
			p, err := c.scanRoot(ctx, r, nil, c.opts.Now())
			if err != nil {
				return nil, fmt.Errorf("scan root %s: %w", r.Name, err)
			}
			roots = append(roots, p.state)
		}
	}
	for _, r := range roots {
		if IsConversationRoot(r.Name, r.Path) {
			continue
		}
		if err := r.materialize(); err != nil {
			return nil, err
		}
		for i := range r.Entries {
			e := &r.Entries[i]
			if e.Excluded || e.Path == "" {
				continue
			}
			switch e.Type {
			case scan.Symlink:
				pv.Files++
			case scan.File:
				if p, ok := secret.Withheld(e.Path); ok {
					pv.WithheldCount++
					pv.WithheldBytes += e.Size
					if len(pv.Withheld) < MaxPreviewPaths {
						pv.Withheld = append(pv.Withheld, WithheldPath{Root: r.Name, Path: e.Path, Size: e.Size, Pattern: p})
					}
					continue
				}
				pv.Files++
				pv.Bytes += e.Size
			}
		}
	}
	return pv, nil
}
