package scan

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// List reports what Walk reports, in the same order, plus the root and the
// skipped paths, whatever the number of workers.
func TestListMatchesWalk(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	mustWrite(t, filepath.Join(outside, "secret"), "x")
	for i := range 150 {
		mustWrite(t, filepath.Join(root, fmt.Sprintf("d%d/e%d/f%d", i%7, i%3, i)), fmt.Sprint(i))
	}
	mustWrite(t, filepath.Join(root, "skip/inner"), "x")
	mustWrite(t, filepath.Join(root, "a-b"), "x")
	mustWrite(t, filepath.Join(root, "\xff\xfe"), "non-utf8")
	if err := os.Symlink(outside, filepath.Join(root, "d1/link")); err != nil {
		t.Fatal(err)
	}
	skip := func(rel string, isDir bool) bool { return rel == "skip" || strings.HasSuffix(rel, "f7") }
	var want []string
	err := Walk(context.Background(), root, Options{AllowNonUTF8: true, Skip: func(rel string, isDir bool) bool {
		if skip(rel, isDir) {
			want = append(want, "skipped:"+rel)
			return true
		}
		return false
	}}, func(e *Entry) error {
		want = append(want, fmt.Sprintf("%s %v %d %d %s", e.Path, e.Type, e.Size, e.ModTime.UnixNano(), e.Target))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, workers := range []int{1, 2, 8} {
		list, err := List(context.Background(), root, ListOptions{Skip: skip, Workers: workers})
		if err != nil {
			t.Fatal(err)
		}
		if list[0].Path != "" || list[0].Type != Dir {
			t.Fatalf("first entry %+v is not the root", list[0])
		}
		var got []string
		for _, s := range list[1:] {
			if s.Skipped {
				got = append(got, "skipped:"+s.Path)
				continue
			}
			if s.CTime == 0 || s.Ino == 0 {
				t.Fatalf("%s: no ctime or inode", s.Path)
			}
			got = append(got, fmt.Sprintf("%s %v %d %d %s", s.Path, s.Type, s.Size, s.MTime, s.Target))
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("workers %d: List differs from Walk:\n%s\n---\n%s", workers, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

func TestListRefusesSymlinkRootAndHonoursContext(t *testing.T) {
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "real/a"), "a")
	if err := os.Symlink(filepath.Join(root, "real"), filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := List(context.Background(), filepath.Join(root, "link"), ListOptions{}); !errors.Is(err, ErrSymlink) {
		t.Errorf("List through a symlinked root: %v, want ErrSymlink", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := List(ctx, root, ListOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("List with a cancelled context: %v", err)
	}
	deep := root
	for range 5 {
		deep = filepath.Join(deep, "d")
	}
	mustWrite(t, filepath.Join(deep, "f"), "x")
	if _, err := List(context.Background(), root, ListOptions{MaxDepth: 3}); !errors.Is(err, ErrTooDeep) {
		t.Errorf("List past MaxDepth: %v, want ErrTooDeep", err)
	}
}

// ListDirs delivers, per directory, exactly the children List reports, and
// lists only the named directories when not recursive; a named directory
// that is gone or is a symlink is skipped.
func TestListDirsMatchesList(t *testing.T) {
	root := t.TempDir()
	for i := range 120 {
		mustWrite(t, filepath.Join(root, fmt.Sprintf("d%d/e%d/f%d", i%5, i%3, i)), fmt.Sprint(i))
	}
	mustWrite(t, filepath.Join(root, "skip/inner"), "x")
	if err := os.Symlink(filepath.Join(root, "d1"), filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	opts := ListOptions{Skip: func(rel string, isDir bool) bool { return rel == "skip" }}
	list, err := List(context.Background(), root, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{}
	for _, s := range list[1:] {
		par := ""
		if i := strings.LastIndexByte(s.Path, '/'); i >= 0 {
			par = s.Path[:i]
		}
		want[par] = append(want[par], fmt.Sprintf("%s %v %d %v", s.Path, s.Type, s.Size, s.Skipped))
	}
	for _, workers := range []int{1, 4} {
		got := map[string][]string{}
		opts.Workers = workers
		err := ListDirs(context.Background(), root, []string{""}, true, opts, func(d *Stat, items []Stat) error {
			if d.Type != Dir {
				t.Errorf("directory %q has type %v", d.Path, d.Type)
			}
			if _, dup := got[d.Path]; dup {
				t.Errorf("directory %q visited twice", d.Path)
			}
			got[d.Path] = []string{}
			for _, s := range items {
				got[d.Path] = append(got[d.Path], fmt.Sprintf("%s %v %d %v", s.Path, s.Type, s.Size, s.Skipped))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for d, w := range want {
			if fmt.Sprint(got[d]) != fmt.Sprint(w) {
				t.Fatalf("workers %d, directory %q: got %v, want %v", workers, d, got[d], w)
			}
		}
		if _, ok := got["skip"]; ok {
			t.Fatal("a skipped directory was listed")
		}
	}
	var seen []string
	err = ListDirs(context.Background(), root, []string{"d1/e1", "gone", "link", "d2"}, false, opts, func(d *Stat, items []Stat) error {
		seen = append(seen, d.Path)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(sortStrings(seen)) != "[d1/e1 d2]" {
		t.Fatalf("flat listing visited %v", seen)
	}
}

func sortStrings(s []string) []string {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}
