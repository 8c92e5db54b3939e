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
// optional locks, so a hook never takes index.lock.
func gitEnv() []string {
	return append(os.Environ(), "GIT_OPTIONAL_LOCKS=0")
}

// gitDir returns the checkout's git directory, following a ".git" file
// ("gitdir: ...") as worktrees and submodules have; "" when root has no .git.
func gitDir(root string) string {
	p := filepath.Join(root, ".git")
	fi, err := os.Lstat(p)
	if err != nil {
		return ""
	}
	if fi.IsDir() {
		return p
	}
	if !fi.Mode().IsRegular() {
		return ""
	}
	b, err := os.ReadFile(p)
	if err != nil || len(b) > 4096 {
		return ""
	}
	s := strings.TrimSpace(string(b))
	if !strings.HasPrefix(s, "gitdir: ") {
		return ""
	}
	d := strings.TrimPrefix(s, "gitdir: ")
	if !filepath.IsAbs(d) {
		d = filepath.Join(root, d)
	}
	return filepath.Clean(d)
}

// ignoreStamp identifies the inputs of git's ignore decisions that live
// outside the walked tree: the index (tracked paths are never ignored) and
// info/exclude. When it changes, the ignored set is classified afresh.
func ignoreStamp(gd string) string {
	var b strings.Builder
	for _, name := range []string{"index", "info/exclude"} {
		fi, err := os.Stat(filepath.Join(gd, name))
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
