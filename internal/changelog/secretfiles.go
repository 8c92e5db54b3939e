package changelog

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/redact"
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
func mergeWithheld(metas []*Meta, stored map[string]bool) []incmeta.WithheldFile {
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
