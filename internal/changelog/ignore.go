package changelog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// gitEnv is the environment for every git command run during a capture: no
// optional locks (git --no-optional-locks), so a hook never takes
// index.lock, and none of gitStrip, so git finds the root's own repository.
func gitEnv() []string {
	env := os.Environ()
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		keep := true
		for _, p := range gitStrip {
			if strings.HasPrefix(kv, p) {
				keep = false
			}
		}
		if keep {
			out = append(out, kv)
		}
	}
	return append(out, "GIT_OPTIONAL_LOCKS=0")
}

// gitStrip are the variables that would point git at another repository
// than the one the capture root belongs to.
var gitStrip = []string{"GIT_DIR=", "GIT_WORK_TREE=", "GIT_INDEX_FILE=", "GIT_COMMON_DIR=", "GIT_OBJECT_DIRECTORY="}

// gitRepo is where git keeps the repository a capture root belongs to,
// found as git finds it from the root: the root may be the repository's top
// level, any subdirectory of it, or a linked worktree.
type gitRepo struct {
	dotGit    string // the nearest ".git" at or above the root
	dotID     string // its identity when the answer below was obtained
	gitDir    string // git rev-parse --git-dir (absolute): the index lives here
	commonDir string // git rev-parse --git-common-dir: info/exclude lives here
	top       string // git rev-parse --show-toplevel
}

// findDotGit returns the nearest ".git" entry at or above root and its
// identity, "" when there is none: a few lstats, so every capture can
// afford it.
func findDotGit(root string) (string, string) {
	for d := root; ; {
		p := filepath.Join(d, ".git")
		if fi, err := os.Lstat(p); err == nil {
			var ino uint64
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				ino = st.Ino
			}
			if fi.IsDir() {
				// A .git directory's mtime moves with every index write.
				return p, fmt.Sprintf("d:%d", ino)
			}
			return p, fmt.Sprintf("f:%d:%d:%d", ino, fi.Size(), fi.ModTime().UnixNano())
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", ""
		}
		d = parent
	}
}

// locateRepo finds the repository of root. The answer of git rev-parse is
// reused from the previous capture's stamp while the nearest .git is the
// same entry, so a capture runs git only when the layout changed. It
// returns nil when no .git lies at or above root.
func locateRepo(ctx context.Context, git, root, prevStamp string) (*gitRepo, error) {
	dot, id := findDotGit(root)
	if dot == "" {
		return nil, nil
	}
	if prev := parseStampRepo(prevStamp); prev != nil && prev.dotGit == dot && prev.dotID == id {
		return prev, nil
	}
	cmd := exec.CommandContext(ctx, git, "-C", root, "rev-parse", "--path-format=absolute", "--git-dir", "--git-common-dir", "--show-toplevel")
	cmd.Env = gitEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git rev-parse in %s (to find the repository whose ignore rules apply): %w: %s", root, err, strings.TrimSpace(stderr.String()))
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != 3 || !filepath.IsAbs(lines[0]) || !filepath.IsAbs(lines[1]) || !filepath.IsAbs(lines[2]) {
		return nil, fmt.Errorf("git rev-parse in %s: unexpected output %q", root, out)
	}
	return &gitRepo{dotGit: dot, dotID: id, gitDir: lines[0], commonDir: lines[1], top: lines[2]}, nil
}

// stampRepoMagic starts a stamp that records where the repository is.
const stampRepoMagic = "repo2"

func parseStampRepo(stamp string) *gitRepo {
	f := strings.SplitN(stamp, "\x00", 7)
	if len(f) != 7 || f[0] != stampRepoMagic {
		return nil
	}
	return &gitRepo{dotGit: f[1], dotID: f[2], gitDir: f[3], commonDir: f[4], top: f[5]}
}

// ignoreStamp identifies the inputs of git's ignore decisions that live
// outside the walked tree: the repository's location, the index (tracked
// paths are never ignored), info/exclude, the .gitignore files of the
// directories between the repository's top level and the root, and the
// default global excludes file. When it changes, the ignored set is
// classified afresh.
func ignoreStamp(g *gitRepo, root string) string {
	var b strings.Builder
	b.WriteString(stampRepoMagic)
	for _, f := range []string{g.dotGit, g.dotID, g.gitDir, g.commonDir, g.top} {
		b.WriteByte(0)
		b.WriteString(f)
	}
	b.WriteByte(0)
	files := []string{filepath.Join(g.gitDir, "index"), filepath.Join(g.commonDir, "info", "exclude")}
	if within(root, g.top) && root != g.top {
		for d := filepath.Dir(root); within(d, g.top); d = filepath.Dir(d) {
			files = append(files, filepath.Join(d, ".gitignore"))
			if d == g.top {
				break
			}
		}
	}
	if x := os.Getenv("XDG_CONFIG_HOME"); filepath.IsAbs(x) {
		files = append(files, filepath.Join(x, "git", "ignore"))
	} else if h := os.Getenv("HOME"); filepath.IsAbs(h) {
		files = append(files, filepath.Join(h, ".config", "git", "ignore"))
	}
	for _, name := range files {
		fi, err := os.Stat(name)
		if err != nil {
			fmt.Fprintf(&b, "%s:-;", name)
			continue
		}
		var ino uint64
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ino = st.Ino
		}
		fmt.Fprintf(&b, "%s:%d:%d:%d;", name, fi.ModTime().UnixNano(), fi.Size(), ino)
	}
	return b.String()
}

// listIgnored returns the git-ignored, untracked paths of the checkout at
// root (directories wholly ignored are reported once, without their contents).
func listIgnored(ctx context.Context, git, root string) (map[string]bool, error) {
	cmd := exec.CommandContext(ctx, git, "-C", root, "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory")
	cmd.Env = gitEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files --ignored in %s: %w: %s", root, err, strings.TrimSpace(stderr.String()))
	}
	set := map[string]bool{}
	for _, p := range bytes.Split(out, []byte{0}) {
		if len(p) == 0 {
			continue
		}
		set[strings.TrimSuffix(string(p), "/")] = true
	}
	return set, nil
}

// checkIgnored asks git which of paths (relative to root) are ignored.
func checkIgnored(ctx context.Context, git, root string, paths []string) (map[string]bool, error) {
	set := map[string]bool{}
	if len(paths) == 0 {
		return set, nil
	}
	cmd := exec.CommandContext(ctx, git, "-C", root, "check-ignore", "-z", "--stdin")
	cmd.Env = gitEnv()
	var in bytes.Buffer
	for _, p := range paths {
		in.WriteString(p)
		in.WriteByte(0)
	}
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 1 {
		return set, nil // none of the paths is ignored
	}
	if err != nil {
		return nil, fmt.Errorf("git check-ignore in %s: %w: %s", root, err, strings.TrimSpace(stderr.String()))
	}
	for _, p := range bytes.Split(out, []byte{0}) {
		if len(p) > 0 {
			set[string(p)] = true
		}
	}
	return set, nil
}
