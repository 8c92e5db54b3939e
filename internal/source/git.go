package source

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/agentscm/agentscm/internal/fsutil"
)

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
	return append(env, "GIT_OPTIONAL_LOCKS=0", "LC_ALL=C", "GIT_TERMINAL_PROMPT=0")
}

// RunGit runs git in root with a bounded output.
func RunGit(ctx context.Context, root string, limit int64, args ...string) ([]byte, error) {
	return runGitIn(ctx, root, limit, nil, args...)
}

// runGitIn is RunGit with stdin.
func runGitIn(ctx context.Context, root string, limit int64, stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", root, "--no-optional-locks"}, args...)...)
	cmd.Env = GitEnv()
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout = &limitedBuffer{buf: &out, limit: limit}
	var stderr bytes.Buffer
	cmd.Stderr = &limitedBuffer{buf: &stderr, limit: 4096}
	if err := cmd.Run(); err != nil {
		return out.Bytes(), &gitError{args: args[0], err: err, stderr: strings.TrimSpace(stderr.String())}
	}
	if out.Len() > int(limit) {
		return nil, fmt.Errorf("git %s: output exceeds %d bytes", args[0], limit)
	}
	return out.Bytes(), nil
}

type gitError struct {
	args   string
	err    error
	stderr string
}

func (e *gitError) Error() string { return fmt.Sprintf("git %s: %v: %s", e.args, e.err, e.stderr) }
func (e *gitError) Unwrap() error { return e.err }

// exitCode is git's exit status, or -1 when it did not run to an exit.
func exitCode(err error) int {
	if ge, ok := err.(*gitError); ok {
		if ee, ok := ge.err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
	}
	return -1
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

func isObjectID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

// UnresolvedBaseRefError is ResolveBaseRef's error when the ref names no
// commit in the repository (no such remote, branch not fetched).
type UnresolvedBaseRefError struct {
	Ref, Root string
}

func (e *UnresolvedBaseRefError) Error() string {
	return fmt.Sprintf("base ref %q does not resolve to a commit in %s (git rev-parse --verify %s^{commit})", e.Ref, e.Root, e.Ref)
}

// ResolveBaseRef resolves ref to the commit it names in the repository at
// root, or fails naming it (an *UnresolvedBaseRefError when it names no
// commit): configure refuses a base ref that does not resolve. The error
// gives no advice; callers know which remedy their command offers.
func ResolveBaseRef(ctx context.Context, root, ref string) (string, error) {
	if ref == "" || strings.HasPrefix(ref, "-") {
		return "", fmt.Errorf("base ref %q is not a ref name", ref)
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	out, err := RunGit(ctx, root, 4096, "rev-parse", "--verify", "--quiet", "--end-of-options", ref+"^{commit}")
	c := strings.TrimSpace(string(out))
	if err != nil || !isObjectID(c) {
		return "", &UnresolvedBaseRefError{Ref: ref, Root: root}
	}
	return c, nil
}

// cached looks key up in the small private cache file path ("key value"
// lines, newest last, at most 64; keys are one or two object ids, values
// one): immutable facts such as a commit's tree or the merge-base of two
// commits. A miss runs compute and remembers its answer; a malformed cache
// is ignored whole and rewritten; a failed write costs one more git
// process next time.
func cached(path, key string, compute func() (string, error)) (string, error) {
	var lines []string
	if path != "" {
		if b, err := fsutil.ReadFileNoFollow(path, 64<<10); err == nil {
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				i := strings.LastIndexByte(l, ' ')
				if i < 0 || !validKey(l[:i]) || !isObjectID(l[i+1:]) {
					lines = nil
					break
				}
				lines = append(lines, l)
			}
			for _, l := range lines {
				i := strings.LastIndexByte(l, ' ')
				if l[:i] == key {
					return l[i+1:], nil
				}
			}
		}
	}
	v, err := compute()
	if err != nil {
		return "", err
	}
	if path != "" {
		lines = append(lines, key+" "+v)
		if len(lines) > 64 {
			lines = lines[len(lines)-64:]
		}
		_ = fsutil.WriteAtomic(path, []byte(strings.Join(lines, "\n")+"\n"), fsutil.FileMode)
	}
	return v, nil
}

func validKey(k string) bool {
	a, b, two := strings.Cut(k, " ")
	return isObjectID(a) && (!two || isObjectID(b))
}

// treeOf returns the tree of commit head, from the cache when it holds it.
func treeOf(ctx context.Context, root, head, cache string) (string, error) {
	return cached(cache, head, func() (string, error) {
		out, err := RunGit(ctx, root, 4096, "rev-parse", head+"^{tree}")
		if err != nil {
			return "", err
		}
		tree := strings.TrimSpace(string(out))
		if !isObjectID(tree) {
			return "", fmt.Errorf("git rev-parse: unexpected output %q", out)
		}
		return tree, nil
	})
}

// mergeBaseOf returns the merge-base of commits head and base, from the
// cache when it holds it; "" with no error when they share no history.
func mergeBaseOf(ctx context.Context, root, head, base, cache string) (string, error) {
	mb, err := cached(cache, head+" "+base, func() (string, error) {
		out, err := RunGit(ctx, root, 4096, "merge-base", head, base)
		if err != nil {
			if exitCode(err) == 1 {
				return "", errNoMergeBase
			}
			return "", err
		}
		mb := strings.TrimSpace(string(out))
		if !isObjectID(mb) {
			return "", fmt.Errorf("git merge-base: unexpected output %q", out)
		}
		return mb, nil
	})
	if err == errNoMergeBase {
		return "", nil
	}
	return mb, err
}

var errNoMergeBase = fmt.Errorf("no merge base")

// statusEntry is one path git status reports.
type statusEntry struct {
	Path string
	// Status is git's XY; " S" is appended for a submodule.
	Status string
	// Orig marks the original path of a rename or copy.
	Orig bool
}

// staged reports whether the entry has index state differing from HEAD
// (a staged change or an unmerged path).
func (e statusEntry) staged() bool {
	return e.Status != "??" && !e.Orig && len(e.Status) >= 2 && (e.Status[0] != '.' || e.Status[1] == 'U')
}

// parseStatusV2 parses `git status --porcelain=v2 --branch -z`: the
// "# branch.oid" header (a commit, or "(initial)" for an unborn branch) and
// one entry per changed (1), renamed or copied (2, followed by the
// original path, kept as an Orig entry), unmerged (u) or untracked (?)
// path. A submodule entry is kept with status "... S" so the manifest names
// it as omitted.
func parseStatusV2(b []byte) (string, []statusEntry, error) {
	var head string
	var out []statusEntry
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
			out = append(out, statusEntry{Path: f[2:], Status: "??"})
			continue
		}
		n := map[byte]int{'1': 9, '2': 10, 'u': 11}[f[0]]
		parts := strings.SplitN(f, " ", n)
		if n == 0 || len(parts) != n || len(parts[1]) != 2 || len(parts[2]) != 4 {
			return "", nil, fmt.Errorf("git status: malformed entry %q", f)
		}
		e := statusEntry{Path: parts[n-1], Status: parts[1]}
		if parts[2][0] == 'S' {
			e.Status += " S"
		}
		out = append(out, e)
		if f[0] == '2' {
			i++ // the original path: gone from the worktree after a rename
			if i >= len(fields) || len(fields[i]) == 0 {
				return "", nil, fmt.Errorf("git status: rename entry %q without its original path", f)
			}
			out = append(out, statusEntry{Path: string(fields[i]), Status: parts[1], Orig: true})
		}
	}
	return head, out, nil
}
