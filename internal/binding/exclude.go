package binding

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// excludeRecordName is the file beside the repository's info/exclude that
// records which lines one-step setup added for which checkout.
const excludeRecordName = "agentscm-exclude.json"

type excludeRecord struct {
	Version int            `json:"version"`
	Entries []excludeEntry `json:"entries"`
}

type excludeEntry struct {
	Root     string   `json:"root"`
	Settings string   `json:"settings"`
	Lines    []string `json:"lines"`
}

// excludePath returns the absolute info/exclude of the repository of root,
// shared by all its worktrees.
func excludePath(ctx context.Context, root string) (string, error) {
	out, err := gitOut(ctx, root, "rev-parse", "--path-format=absolute", "--git-path", "info/exclude")
	if err != nil {
		return "", err
	}
	p := strings.TrimSpace(out)
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("git returned a relative exclude path %q", p)
	}
	return p, nil
}

// ignored reports whether Git already ignores rel in root.
func ignored(ctx context.Context, root, rel string) bool {
	_, err := gitOut(ctx, root, "check-ignore", "-q", "--no-index", "--", rel)
	return err == nil
}

// excludeLines are the patterns for a settings file and the transaction
// (temporary) files saved beside it.
func excludeLines(rel string) []string {
	lines := []string{"/" + rel}
	dir := path.Dir(rel)
	tmp := "/" + fsutil.TempPrefix + "*"
	if dir != "." {
		tmp = "/" + dir + tmp
	}
	return append(lines, tmp)
}

// addExclude adds the settings file and its transaction files to the local
// exclude unless Git already ignores them, creating info/ when missing and
// recording the added lines beside the exclude. A checkout outside Git is
// left alone.
func addExclude(ctx context.Context, root, rel string) ([]string, error) {
	if _, err := gitOut(ctx, root, "rev-parse", "--git-dir"); err != nil {
		return nil, nil
	}
	excl, err := excludePath(ctx, root)
	if err != nil {
		return nil, err
	}
	var want []string
	for i, line := range excludeLines(rel) {
		probe := rel
		if i == 1 {
			probe = path.Join(path.Dir(rel), fsutil.TempPrefix+"probe")
		}
		if !ignored(ctx, root, probe) {
			want = append(want, line)
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	if err := os.MkdirAll(filepath.Dir(excl), 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", filepath.Dir(excl), err)
	}
	cur, perm, err := readText(excl)
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, l := range strings.Split(cur, "\n") {
		have[strings.TrimSpace(l)] = true
	}
	var added []string
	text := cur
	for _, l := range want {
		if have[l] {
			continue
		}
		if text != "" && !strings.HasSuffix(text, "\n") {
			text += "\n"
		}
		text += l + "\n"
		added = append(added, l)
	}
	if len(added) == 0 {
		return nil, nil
	}
	if err := fsutil.WriteAtomic(excl, []byte(text), perm); err != nil {
		return nil, err
	}
	rec, err := readExcludeRecord(excl)
	if err != nil {
		return added, err
	}
	rec.Entries = append(rec.Entries, excludeEntry{Root: root, Settings: rel, Lines: added})
	return added, writeExcludeRecord(excl, rec)
}

// removeExclude removes the lines recorded for root's settings file rel,
// unless another binding of the same repository uses the same relative
// settings path.
func removeExclude(ctx context.Context, root, rel string, others []Binding) ([]string, error) {
	if _, err := gitOut(ctx, root, "rev-parse", "--git-dir"); err != nil {
		return nil, nil
	}
	excl, err := excludePath(ctx, root)
	if err != nil {
		return nil, err
	}
	rec, err := readExcludeRecord(excl)
	if err != nil {
		return nil, err
	}
	idx := slices.IndexFunc(rec.Entries, func(e excludeEntry) bool { return e.Root == root && e.Settings == rel })
	if idx < 0 {
		return nil, nil
	}
	entry := rec.Entries[idx]
	for _, o := range others {
		if !slices.ContainsFunc(o.Hooks(), func(h AgentHooks) bool { return settingsRel(h.Path(o.Root), o.Root) == entry.Settings }) {
			continue
		}
		if fi, err := os.Stat(o.Root); err != nil || !fi.IsDir() {
			continue
		}
		if oe, err := excludePath(ctx, o.Root); err == nil && oe == excl {
			return nil, nil // still used by another binding of this repository
		}
	}
	rec.Entries = slices.Delete(rec.Entries, idx, idx+1)
	stillRecorded := map[string]bool{}
	for _, e := range rec.Entries {
		for _, l := range e.Lines {
			stillRecorded[l] = true
		}
	}
	cur, perm, err := readText(excl)
	if err != nil {
		return nil, err
	}
	drop := map[string]bool{}
	for _, l := range entry.Lines {
		if !stillRecorded[l] {
			drop[l] = true
		}
	}
	var kept []string
	var removed []string
	lines := strings.SplitAfter(cur, "\n")
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if drop[t] {
			removed = append(removed, t)
			delete(drop, t) // remove one occurrence: the one setup added
			continue
		}
		kept = append(kept, l)
	}
	if len(removed) > 0 {
		if err := fsutil.WriteAtomic(excl, []byte(strings.Join(kept, "")), perm); err != nil {
			return nil, err
		}
	}
	return removed, writeExcludeRecord(excl, rec)
}

func readText(p string) (string, fs.FileMode, error) {
	b, err := fsutil.ReadFileNoFollow(p, 4<<20)
	if errors.Is(err, fs.ErrNotExist) {
		return "", 0o644, nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("read %s: %w", p, err)
	}
	perm := fs.FileMode(0o644)
	if fi, err := os.Lstat(p); err == nil {
		perm = fi.Mode().Perm()
	}
	return string(b), perm, nil
}

func readExcludeRecord(excl string) (*excludeRecord, error) {
	p := filepath.Join(filepath.Dir(excl), excludeRecordName)
	b, err := fsutil.ReadFileNoFollow(p, 1<<20)
	if errors.Is(err, fs.ErrNotExist) {
		return &excludeRecord{Version: 1}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	var r excludeRecord
	if err := json.Unmarshal(b, &r); err != nil || r.Version != 1 {
		return nil, fmt.Errorf("%s is not a version-1 exclude record", p)
	}
	return &r, nil
}

func writeExcludeRecord(excl string, r *excludeRecord) error {
	p := filepath.Join(filepath.Dir(excl), excludeRecordName)
	if len(r.Entries) == 0 {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	b, _ := json.MarshalIndent(r, "", "  ")
	return fsutil.WriteAtomic(p, append(b, '\n'), 0o644)
}
