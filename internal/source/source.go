// Package source binds the Git source an action runs on: HEAD, its tree,
// the merge-base with the configured base ref, and for a dirty or
// transformed checkout a content-addressed manifest of the worktree.
package source

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/scan"
)

// Bounds of a source capture on the hook path. Past a bound the binding is
// partial (the omitted paths are named in the manifest), never cut silently.
const (
	sourceTimeout       = 3 * time.Second
	maxSourceStatus     = 4 << 20 // git status output
	maxManifestPaths    = 2000
	maxManifestFile     = 16 << 20
	maxManifestAllBytes = 64 << 20
)

// manifestEntry is one dirty path of a source manifest.
type manifestEntry struct {
	Path   string `json:"path"`
	Status string `json:"status"`
	// Kind is file, symlink, deleted or omitted (with Reason).
	Kind   string `json:"kind"`
	Size   int64  `json:"size,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	Target string `json:"target,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// GitEnv is the environment git runs with: the hook's environment without
// any GIT_* variable (which could point git at another repository, index or
// worktree), and without optional locks so status never writes the index.
func GitEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") {
			env = append(env, kv)
		}
	}
	return append(env, "GIT_OPTIONAL_LOCKS=0", "LC_ALL=C")
}

// RunGit runs git in root with a bounded output.
func RunGit(ctx context.Context, root string, limit int64, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", root, "--no-optional-locks"}, args...)...)
	cmd.Env = GitEnv()
	var out bytes.Buffer
	cmd.Stdout = &limitedBuffer{buf: &out, limit: limit}
	var stderr bytes.Buffer
	cmd.Stderr = &limitedBuffer{buf: &stderr, limit: 4096}
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("git %s: %w: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	if out.Len() > int(limit) {
		return nil, fmt.Errorf("git %s: output exceeds %d bytes", args[0], limit)
	}
	return out.Bytes(), nil
}

// limitedBuffer keeps at most limit+1 bytes and discards the rest, so an
// overflow is detectable without unbounded memory.
type limitedBuffer struct {
	buf   *bytes.Buffer
	limit int64
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.limit + 1 - int64(l.buf.Len()); room > 0 {
		if int64(len(p)) > room {
			l.buf.Write(p[:room])
		} else {
			l.buf.Write(p)
		}
	}
	return len(p), nil
}

// CaptureSource binds the source of the checkout at root: the worktree's
// differences from HEAD (one `git status --porcelain=v2 --branch`, tracked
// changes and non-ignored untracked files), HEAD from the same output and
// HEAD's tree (git rev-parse). A dirty worktree gets a manifest of the
// differing paths with each file's SHA-256 read through a no-follow openat
// chain; its digest names the content. The bytes are not retained, so a
// dirty binding is partial. An unborn HEAD leaves Head and Tree empty.
func CaptureSource(ctx context.Context, root string) (*event.SourceBinding, error) {
	return Capture(ctx, root, Options{})
}

// Options tunes a capture on the hook path.
type Options struct {
	// TreeCache is a private file remembering the tree of recent HEAD
	// commits (a commit's tree never changes), so a capture usually runs a
	// single git process; empty: always ask git.
	TreeCache string
	// NoTree leaves Tree empty (a drift check compares HEAD, which fixes
	// the tree).
	NoTree bool
}

func Capture(ctx context.Context, root string, o Options) (*event.SourceBinding, error) {
	ctx, cancel := context.WithTimeout(ctx, sourceTimeout)
	defer cancel()
	status, err := RunGit(ctx, root, maxSourceStatus, "status", "--porcelain=v2", "--branch", "-z", "--untracked-files=all", "--ignore-submodules=none")
	if err != nil {
		return nil, err
	}
	head, entries, err := parseStatusV2(status)
	if err != nil {
		return nil, err
	}
	sb := &event.SourceBinding{Head: head}
	if head != "" && !o.NoTree {
		if sb.Tree, err = treeOf(ctx, root, head, o.TreeCache); err != nil {
			return nil, err
		}
	}
	if len(entries) == 0 {
		return sb, nil
	}
	sb.Dirty, sb.Partial = true, true
	digest, err := manifestDigest(root, entries)
	if err != nil {
		return nil, err
	}
	sb.ManifestDigest = digest
	return sb, nil
}

// treeOf returns the tree of commit head, from the cache when it holds it.
// The cache is a small private file of "commit tree" lines, newest last,
// at most 64; a malformed cache is ignored and rewritten.
func treeOf(ctx context.Context, root, head, cache string) (string, error) {
	var lines []string
	if cache != "" {
		if b, err := fsutil.ReadFileNoFollow(cache, 64<<10); err == nil {
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				c, t, ok := strings.Cut(l, " ")
				if !ok || !isObjectID(c) || !isObjectID(t) {
					lines = nil // malformed: ignored whole, rewritten below
					break
				}
				lines = append(lines, l)
			}
			for _, l := range lines {
				if c, t, _ := strings.Cut(l, " "); c == head {
					return t, nil
				}
			}
		}
	}
	out, err := RunGit(ctx, root, 4096, "rev-parse", head+"^{tree}")
	if err != nil {
		return "", err
	}
	tree := strings.TrimSpace(string(out))
	if !isObjectID(tree) {
		return "", fmt.Errorf("git rev-parse: unexpected output %q", out)
	}
	if cache != "" {
		lines = append(lines, head+" "+tree)
		if len(lines) > 64 {
			lines = lines[len(lines)-64:]
		}
		// A cache: a failed write costs one more git process next time.
		_ = fsutil.WriteAtomic(cache, []byte(strings.Join(lines, "\n")+"\n"), fsutil.FileMode)
	}
	return tree, nil
}

func isObjectID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

// parseStatusV2 parses `git status --porcelain=v2 --branch -z`: the
// "# branch.oid" header (a commit, or "(initial)" for an unborn branch) and
// one entry per changed (1), renamed or copied (2, followed by the
// original path), unmerged (u) or untracked (?) path. A submodule entry is
// kept with status "S" so the manifest names it as omitted.
func parseStatusV2(b []byte) (string, []manifestEntry, error) {
	var head string
	var out []manifestEntry
	fields := bytes.Split(b, []byte{0})
	for i := 0; i < len(fields); i++ {
		f := string(fields[i])
		if f == "" {
			continue
		}
		switch f[0] {
		case '#':
			if oid, ok := strings.CutPrefix(f, "# branch.oid "); ok && oid != "(initial)" {
				if !isObjectID(oid) {
					return "", nil, fmt.Errorf("git status: malformed branch.oid %q", oid)
				}
				head = oid
			}
			continue
		case '?':
			if len(f) < 3 || f[1] != ' ' {
				return "", nil, fmt.Errorf("git status: malformed entry %q", f)
			}
			out = append(out, manifestEntry{Path: f[2:], Status: "??"})
			continue
		}
		n := map[byte]int{'1': 9, '2': 10, 'u': 11}[f[0]]
		parts := strings.SplitN(f, " ", n)
		if n == 0 || len(parts) != n || len(parts[1]) != 2 || len(parts[2]) != 4 {
			return "", nil, fmt.Errorf("git status: malformed entry %q", f)
		}
		e := manifestEntry{Path: parts[n-1], Status: parts[1]}
		if parts[2][0] == 'S' {
			e.Status += " S"
		}
		out = append(out, e)
		if f[0] == '2' {
			i++ // the original path
		}
	}
	return head, out, nil
}

// manifestDigest hashes the canonical JSON of the sorted manifest of the
// dirty paths.
func manifestDigest(root string, entries []manifestEntry) (string, error) {
	sort.Slice(entries, func(i, j int) bool { return entries[i].Path < entries[j].Path })
	var total int64
	for i := range entries {
		e := &entries[i]
		switch {
		case i >= maxManifestPaths:
			e.Kind, e.Reason = "omitted", "path_bound"
			continue
		case !utf8.ValidString(e.Path):
			e.Kind, e.Reason = "omitted", "not_utf8"
			continue
		case strings.HasSuffix(e.Status, " S"):
			e.Kind, e.Reason = "omitted", "submodule"
			continue
		}
		st, err := scan.Lstat(root, e.Path)
		if errors.Is(err, fs.ErrNotExist) {
			e.Kind = "deleted"
			continue
		}
		if err != nil {
			e.Kind, e.Reason = "omitted", "unreadable"
			continue
		}
		switch st.Type {
		case scan.Symlink:
			e.Kind, e.Target = "symlink", st.Target
		case scan.File:
			if st.Size > maxManifestFile || total+st.Size > maxManifestAllBytes {
				e.Kind, e.Reason, e.Size = "omitted", "size_bound", st.Size
				continue
			}
			sum, n, err := hashFile(root, e.Path, st.Size)
			if err != nil {
				e.Kind, e.Reason = "omitted", "unreadable"
				continue
			}
			total += n
			e.Kind, e.Size, e.SHA256 = "file", n, sum
		default:
			// A submodule, directory or special file.
			e.Kind, e.Reason = "omitted", "unsupported_type_"+st.Type.String()
		}
	}
	b, err := json.Marshal(entries)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// hashFile hashes a regular file beneath root read without following any
// symlink, refusing one that grew past the size it was admitted with.
func hashFile(root, rel string, size int64) (string, int64, error) {
	f, err := scan.OpenFile(root, rel)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, size+1))
	if err != nil {
		return "", 0, err
	}
	if n > size {
		return "", 0, errors.New("file grew while it was read")
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// Drift compares the source at completion with the start's binding:
// none_observed when they agree, changed when they differ, unknown when
// either could not be captured.
func Drift(start, now *event.SourceBinding) string {
	if start == nil || now == nil {
		return "unknown"
	}
	// HEAD fixes the tree, which a drift capture does not look up.
	if start.Head == now.Head && start.Dirty == now.Dirty && start.ManifestDigest == now.ManifestDigest && start.Partial == now.Partial {
		return "none_observed"
	}
	return "changed"
}
