package changelog

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
)

// tree is a comparable description of a directory tree: path -> kind,
// mode, content or target (and the file's mtime in seconds when withTimes).
type tree map[string]string

// snapshot describes dir, leaving out paths for which skip returns true.
func snapshot(t *testing.T, dir string, withTimes bool, skip func(rel string) bool) tree {
	t.Helper()
	out := tree{}
	if _, err := os.Lstat(dir); os.IsNotExist(err) {
		return nil
	}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		if skip != nil && skip(rel) {
			if fi.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			tgt, _ := os.Readlink(p)
			out[rel] = "symlink -> " + tgt
		case fi.IsDir():
			out[rel] = fmt.Sprintf("dir %o", fi.Mode().Perm())
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s := fmt.Sprintf("file %o %q", fi.Mode().Perm(), b)
			if withTimes {
				s += fmt.Sprintf(" t=%d", fi.ModTime().Unix())
			}
			out[rel] = s
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func diffTrees(want, got tree) string {
	var b strings.Builder
	keys := map[string]bool{}
	for k := range want {
		keys[k] = true
	}
	for k := range got {
		keys[k] = true
	}
	var ks []string
	for k := range keys {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	for _, k := range ks {
		w, wok := want[k]
		g, gok := got[k]
		switch {
		case !wok:
			fmt.Fprintf(&b, "  unexpected %s: %s\n", k, g)
		case !gok:
			fmt.Fprintf(&b, "  missing %s: %s\n", k, w)
		case w != g:
			fmt.Fprintf(&b, "  %s: want %s, got %s\n", k, w, g)
		}
	}
	return b.String()
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func run(t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_OPTIONAL_LOCKS=0", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

func needGNUTar(t *testing.T) {
	t.Helper()
	out, err := exec.Command("tar", "--version").Output()
	if err != nil || !strings.Contains(string(out), "GNU tar") {
		t.Skip("GNU tar is not available")
	}
}

// members lists an increment's member names with their typeflags, and the
// dumpdir of each directory member.
func members(t *testing.T, p string) (names []string, dumpdirs map[string]string) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	dumpdirs = map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, fmt.Sprintf("%c %s", h.Typeflag, h.Name))
		if h.Typeflag == typeDumpdir {
			b, _ := io.ReadAll(tr)
			dumpdirs[h.Name] = strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", ",")
		}
	}
	return names, dumpdirs
}

func mustCapture(t *testing.T, c *Changelog, pos int) *Increment {
	t.Helper()
	inc, err := c.Capture(context.Background(), CaptureRequest{Position: pos, SessionID: "s1", Tool: "Bash"})
	if err != nil {
		t.Fatalf("capture %d: %v", pos, err)
	}
	return inc
}
