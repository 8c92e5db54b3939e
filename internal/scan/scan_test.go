package scan

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func mustWrite(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func collect(t *testing.T, root string, opts Options) ([]*Entry, error) {
	t.Helper()
	var out []*Entry
	err := Walk(context.Background(), root, opts, func(e *Entry) error {
		out = append(out, e)
		return nil
	})
	return out, err
}

func paths(es []*Entry) []string {
	var p []string
	for _, e := range es {
		p = append(p, e.Path)
	}
	return p
}

func TestWalkOrderTypesAndNoFollow(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	mustWrite(t, filepath.Join(outside, "secret.txt"), "outside")
	mustWrite(t, filepath.Join(root, "b/z.txt"), "zz")
	mustWrite(t, filepath.Join(root, "b/a.txt"), "a")
	mustWrite(t, filepath.Join(root, "a.txt"), "hello")
	mustWrite(t, filepath.Join(root, "B.txt"), "upper")
	if err := os.Symlink(outside, filepath.Join(root, "link-dir")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("missing/target", filepath.Join(root, "dangling")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(root, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(root, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.Chmod(filepath.Join(root, "b"), 0o755|fs.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, "a.txt"), 0o755|fs.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	mt := time.Unix(1700000000, 123456789)
	if err := os.Chtimes(filepath.Join(root, "a.txt"), mt, mt); err != nil {
		t.Fatal(err)
	}

	es, err := collect(t, root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"B.txt", "a.txt", "b", "b/a.txt", "b/z.txt", "dangling", "fifo", "link-dir", "sock"}
	if got := paths(es); !slices.Equal(got, want) {
		t.Fatalf("paths = %q, want %q", got, want)
	}
	byPath := map[string]*Entry{}
	for _, e := range es {
		byPath[e.Path] = e
	}
	tests := []struct {
		path   string
		typ    Type
		mode   fs.FileMode
		size   int64
		target string
	}{
		{"a.txt", File, 0o755 | fs.ModeSetuid, 5, ""},
		{"b", Dir, 0o755 | fs.ModeSticky, -1, ""},
		{"link-dir", Symlink, 0o777, int64(len(outside)), outside},
		{"dangling", Symlink, 0o777, 14, "missing/target"},
		{"fifo", Other, 0o600, 0, ""},
		{"sock", Other, 0, 0, ""},
	}
	for _, tc := range tests {
		e := byPath[tc.path]
		if e == nil {
			t.Fatalf("%s missing", tc.path)
		}
		if e.Type != tc.typ {
			t.Errorf("%s type = %v, want %v", tc.path, e.Type, tc.typ)
		}
		if tc.path != "sock" && e.Mode != tc.mode {
			t.Errorf("%s mode = %v, want %v", tc.path, e.Mode, tc.mode)
		}
		if tc.size >= 0 && tc.typ != Other && e.Size != tc.size {
			t.Errorf("%s size = %d, want %d", tc.path, e.Size, tc.size)
		}
		if e.Target != tc.target {
			t.Errorf("%s target = %q, want %q", tc.path, e.Target, tc.target)
		}
		if e.Ino == 0 || e.Nlink == 0 {
			t.Errorf("%s: ino/nlink not filled: %+v", tc.path, e)
		}
	}
	if !byPath["a.txt"].ModTime.Equal(mt) {
		t.Errorf("mtime = %v, want %v (nanoseconds)", byPath["a.txt"].ModTime, mt)
	}
	for _, e := range es {
		if strings.Contains(e.Path, "secret") {
			t.Fatalf("walk followed a symlink: %s", e.Path)
		}
	}
}

func TestWalkSkipAndSkipDir(t *testing.T) {
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, ".git/HEAD"), "x")
	mustWrite(t, filepath.Join(root, "keep/a"), "x")
	mustWrite(t, filepath.Join(root, "prune/a"), "x")
	mustWrite(t, filepath.Join(root, "z"), "x")
	var got []string
	err := Walk(context.Background(), root, Options{Skip: func(rel string, isDir bool) bool {
		return rel == ".git" && isDir
	}}, func(e *Entry) error {
		got = append(got, e.Path)
		if e.Path == "prune" {
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"keep", "keep/a", "prune", "z"}; !slices.Equal(got, want) {
		t.Fatalf("got %q want %q", got, want)
	}
	stop := errors.New("stop")
	err = Walk(context.Background(), root, Options{}, func(e *Entry) error { return stop })
	if !errors.Is(err, stop) {
		t.Fatalf("callback error not returned: %v", err)
	}
}

func TestWalkNonUTF8(t *testing.T) {
	root := t.TempDir()
	bad := "caf\xe9.txt"
	mustWrite(t, filepath.Join(root, "dir", bad), "x")
	_, err := collect(t, root, Options{})
	if !errors.Is(err, ErrNotUTF8) {
		t.Fatalf("err = %v, want ErrNotUTF8", err)
	}
	var pe *PathError
	if !errors.As(err, &pe) || pe.Path != "dir/"+bad {
		t.Fatalf("err = %#v", err)
	}
	if !strings.Contains(err.Error(), `"dir/caf\xe9.txt"`) || !utf8Valid(err.Error()) {
		t.Fatalf("message does not quote the name clearly: %s", err)
	}
	es, err := collect(t, root, Options{AllowNonUTF8: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := paths(es); !slices.Equal(got, []string{"dir", "dir/" + bad}) {
		t.Fatalf("got %q", got)
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "?") == s }

// A directory swapped for a symlink between its stat and its open must not be
// traversed: the walk fails with ErrChanged and never reports outside content.
func TestWalkAncestorSwappedBeforeOpen(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	mustWrite(t, filepath.Join(outside, "secret"), "s")
	mustWrite(t, filepath.Join(root, "a/file"), "x")
	var got []string
	err := Walk(context.Background(), root, Options{}, func(e *Entry) error {
		got = append(got, e.Path)
		if e.Path == "a" {
			if err := os.Rename(filepath.Join(root, "a"), filepath.Join(root, "a-moved")); err != nil {
				return err
			}
			return os.Symlink(outside, filepath.Join(root, "a"))
		}
		return nil
	})
	if !errors.Is(err, ErrChanged) {
		t.Fatalf("err = %v, want ErrChanged", err)
	}
	for _, p := range got {
		if strings.Contains(p, "secret") {
			t.Fatalf("followed swapped symlink: %q", got)
		}
	}
	// Swapped for a different directory: identity check catches it.
	root2 := t.TempDir()
	mustWrite(t, filepath.Join(root2, "a/file"), "x")
	err = Walk(context.Background(), root2, Options{}, func(e *Entry) error {
		if e.Path == "a" {
			os.Rename(filepath.Join(root2, "a"), filepath.Join(root2, "old"))
			return os.Mkdir(filepath.Join(root2, "a"), 0o755)
		}
		return nil
	})
	if !errors.Is(err, ErrChanged) {
		t.Fatalf("directory replaced by another directory: err = %v, want ErrChanged", err)
	}
}

// Once a directory is open, replacing its path with a symlink cannot redirect
// the rest of its listing: the held fd keeps reading the original directory.
func TestWalkAncestorSwappedWhileInside(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	mustWrite(t, filepath.Join(outside, "sub/secret"), "s")
	mustWrite(t, filepath.Join(root, "a/1"), "x")
	mustWrite(t, filepath.Join(root, "a/sub/2"), "x")
	var got []string
	err := Walk(context.Background(), root, Options{}, func(e *Entry) error {
		got = append(got, e.Path)
		if e.Path == "a/1" {
			if err := os.Rename(filepath.Join(root, "a"), filepath.Join(root, "moved")); err != nil {
				return err
			}
			return os.Symlink(outside, filepath.Join(root, "a"))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "a/1", "a/sub", "a/sub/2"}; !slices.Equal(got[:4], want) {
		t.Fatalf("got %q, want prefix %q", got, want)
	}
	for _, p := range got {
		if strings.Contains(p, "secret") {
			t.Fatalf("walk was redirected outside the root: %q", got)
		}
	}
}

func TestOpenFile(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	mustWrite(t, filepath.Join(outside, "f"), "outside")
	mustWrite(t, filepath.Join(root, "d/f"), "inside")
	os.Symlink(outside, filepath.Join(root, "ld"))
	os.Symlink(filepath.Join(root, "d/f"), filepath.Join(root, "lf"))
	unix.Mkfifo(filepath.Join(root, "fifo"), 0o600)
	f, err := OpenFile(root, "d/f")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "inside" {
		t.Fatalf("read %q", b)
	}
	for _, tc := range []struct {
		rel  string
		want error
	}{
		{"ld/f", ErrSymlink},
		{"lf", ErrSymlink},
		{"fifo", ErrNotRegular},
		{"d", ErrNotRegular},
		{"../x", ErrBadPath},
		{"/etc/passwd", ErrBadPath},
		{"d//f", ErrBadPath},
		{"d/./f", ErrBadPath},
		{"", ErrBadPath},
		{"missing", fs.ErrNotExist},
	} {
		f, err := OpenFile(root, tc.rel)
		if err == nil {
			f.Close()
			t.Errorf("OpenFile(%q) succeeded", tc.rel)
			continue
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("OpenFile(%q) = %v, want %v", tc.rel, err, tc.want)
		}
	}
	if _, err := OpenDir(root, "ld"); !errors.Is(err, ErrSymlink) {
		t.Errorf("OpenDir through symlink = %v", err)
	}
	e, err := Lstat(root, "lf")
	if err != nil || e.Type != Symlink || e.Target != filepath.Join(root, "d/f") {
		t.Errorf("Lstat = %+v, %v", e, err)
	}
	if _, err := Lstat(root, "ld/f"); !errors.Is(err, ErrSymlink) {
		t.Errorf("Lstat through symlink = %v", err)
	}
}

func TestEntryOpen(t *testing.T) {
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "a"), "aaa")
	mustWrite(t, filepath.Join(root, "b"), "bbb")
	var kept *Entry
	err := Walk(context.Background(), root, Options{}, func(e *Entry) error {
		switch e.Path {
		case "a":
			kept = e
			f, err := e.Open()
			if err != nil {
				return err
			}
			defer f.Close()
			b, _ := io.ReadAll(f)
			if string(b) != "aaa" {
				t.Errorf("read %q", b)
			}
		case "b":
			// replace b between stat and open: Open must notice.
			// (the old inode stays linked so its number cannot be reused)
			os.Link(filepath.Join(root, "b"), filepath.Join(root, "b-old"))
			mustWrite(t, filepath.Join(root, "b-new"), "new")
			os.Rename(filepath.Join(root, "b-new"), filepath.Join(root, "b"))
			if _, err := e.Open(); !errors.Is(err, ErrChanged) {
				t.Errorf("Open of replaced file = %v, want ErrChanged", err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kept.Open(); err == nil {
		t.Fatal("Open after the callback succeeded")
	}
}

func TestWalkContextAndDepth(t *testing.T) {
	root := t.TempDir()
	for i := range 600 {
		mustWrite(t, filepath.Join(root, "f"+string(rune('a'+i%26))+strings.Repeat("x", i/26)), "")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Walk(ctx, root, Options{}, func(*Entry) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	deep := t.TempDir()
	p := deep
	for range 5 {
		p = filepath.Join(p, "d")
	}
	os.MkdirAll(p, 0o755)
	if _, err := collect(t, deep, Options{MaxDepth: 3}); !errors.Is(err, ErrTooDeep) {
		t.Fatalf("err = %v, want ErrTooDeep", err)
	}
	if _, err := collect(t, deep, Options{}); err != nil {
		t.Fatal(err)
	}
}

func TestWalkVanishingEntries(t *testing.T) {
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "a"), "")
	mustWrite(t, filepath.Join(root, "b"), "")
	mustWrite(t, filepath.Join(root, "c/d"), "")
	got, err := collect(t, root, Options{Skip: func(rel string, _ bool) bool {
		if rel == "a" {
			os.Remove(filepath.Join(root, "b"))
			os.RemoveAll(filepath.Join(root, "c"))
		}
		return false
	}})
	if err != nil {
		t.Fatal(err)
	}
	if p := paths(got); !slices.Equal(p, []string{"a"}) {
		t.Fatalf("got %q", p)
	}
}

func TestEntryCopy(t *testing.T) {
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "a"), strings.Repeat("x", 100000))
	mustWrite(t, filepath.Join(root, "b"), "short")
	mustWrite(t, filepath.Join(root, "c"), "swap me")
	var buf strings.Builder
	err := Walk(context.Background(), root, Options{}, func(e *Entry) error {
		switch e.Path {
		case "a":
			n, err := e.Copy(&buf, make([]byte, 4096))
			if err != nil || n != 100000 || buf.Len() != 100000 {
				t.Errorf("copy a: %d %v", n, err)
			}
		case "b":
			// The file grows after its stat: Copy must notice.
			f, _ := os.OpenFile(filepath.Join(root, "b"), os.O_APPEND|os.O_WRONLY, 0)
			f.WriteString(" and longer")
			f.Close()
			if _, err := e.Copy(io.Discard, nil); !errors.Is(err, ErrChanged) {
				t.Errorf("grown file: %v", err)
			}
		case "c":
			os.Link(filepath.Join(root, "c"), filepath.Join(root, "c-old"))
			mustWrite(t, filepath.Join(root, "c-new"), "other")
			os.Rename(filepath.Join(root, "c-new"), filepath.Join(root, "c"))
			if _, err := e.Copy(io.Discard, nil); !errors.Is(err, ErrChanged) {
				t.Errorf("swapped file: %v", err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
