package capture

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

// gitEnv is the environment git runs with: the hook's environment without
// any GIT_* variable (which could point git at another repository, index or
// worktree), and without optional locks so status never writes the index.
func gitEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") {
			env = append(env, kv)
		}
	}
	return append(env, "GIT_OPTIONAL_LOCKS=0", "LC_ALL=C")
}

// runGit runs git in root with a bounded output.
func runGit(ctx context.Context, root string, limit int64, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", root, "--no-optional-locks"}, args...)...)
	cmd.Env = gitEnv()
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

// CaptureSource binds the source of the checkout at root: HEAD and its tree
// (git rev-parse) and the worktree's differences from HEAD (git status,
// tracked changes and non-ignored untracked files), run concurrently. A
// dirty worktree gets a manifest of the differing paths with each file's
// SHA-256 read through a no-follow openat chain; its digest names the
// content. The bytes are not retained, so a dirty binding is partial. An
// unborn HEAD leaves Head and Tree empty.
func CaptureSource(ctx context.Context, root string) (*event.SourceBinding, error) {
	ctx, cancel := context.WithTimeout(ctx, sourceTimeout)
	defer cancel()
	type result struct {
		out []byte
		err error
	}
	heads := make(chan result, 1)
	go func() {
		out, err := runGit(ctx, root, 4096, "rev-parse", "HEAD", "HEAD^{tree}")
		heads <- result{out, err}
	}()
	status, serr := runGit(ctx, root, maxSourceStatus, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--ignore-submodules=none")
	h := <-heads
	if serr != nil {
		return nil, serr
	}
	sb := &event.SourceBinding{}
	if h.err == nil {
		lines := strings.Fields(string(h.out))
		if len(lines) != 2 || !isObjectID(lines[0]) || !isObjectID(lines[1]) {
			return nil, fmt.Errorf("git rev-parse: unexpected output %q", h.out)
		}
		sb.Head, sb.Tree = lines[0], lines[1]
	}
	entries, err := parseStatusZ(status)
	if err != nil {
		return nil, err
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

func isObjectID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// parseStatusZ parses `git status --porcelain=v1 -z`: "XY path\0", with a
// second "orig\0" field after a rename or copy.
func parseStatusZ(b []byte) ([]manifestEntry, error) {
	var out []manifestEntry
	fields := bytes.Split(b, []byte{0})
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		if len(f) == 0 {
			continue
		}
		if len(f) < 4 || f[2] != ' ' {
			return nil, fmt.Errorf("git status: malformed entry %q", f)
		}
		xy := string(f[:2])
		out = append(out, manifestEntry{Path: string(f[3:]), Status: xy})
		if xy[0] == 'R' || xy[0] == 'C' {
			i++ // the original path
		}
	}
	return out, nil
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

// sourceDrift compares the source at completion with the start's binding:
// none_observed when they agree, changed when they differ, unknown when
// either could not be captured.
func sourceDrift(start, now *event.SourceBinding) string {
	if start == nil || now == nil {
		return "unknown"
	}
	if *start == *now {
		return "none_observed"
	}
	return "changed"
}
