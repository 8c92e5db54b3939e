package fsutil

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestWriteAtomicReplacesWithMode(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	for _, content := range []string{"one", "two"} {
		if err := WriteAtomic(p, []byte(content), FileMode); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(p)
		fi, _ := os.Stat(p)
		if string(b) != content || fi.Mode().Perm() != 0o600 {
			t.Fatalf("content %q mode %v", b, fi.Mode())
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("temporary files left: %v", entries)
	}
}

func TestWriteNewRefusesExisting(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := WriteNew(p, []byte("a"), FileMode); err != nil {
		t.Fatal(err)
	}
	if err := WriteNew(p, []byte("b"), FileMode); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("err = %v, want ErrExist", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "a" {
		t.Fatalf("existing file changed to %q", b)
	}
	entries, _ := os.ReadDir(filepath.Dir(p))
	if len(entries) != 1 {
		t.Fatalf("temporary files left: %v", entries)
	}
}

func TestMkdirPrivateIgnoresUmask(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	d := filepath.Join(t.TempDir(), "a", "b")
	if err := MkdirPrivate(d); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{d, filepath.Dir(d)} {
		fi, _ := os.Stat(p)
		if fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s mode %v", p, fi.Mode())
		}
	}
	if err := CheckPrivateDir(d); err != nil {
		t.Fatal(err)
	}
}

func TestReadFileNoFollow(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	os.WriteFile(target, []byte("12345"), 0o600)
	link := filepath.Join(dir, "link")
	os.Symlink(target, link)
	if _, err := ReadFileNoFollow(link, 100); err == nil {
		t.Fatal("followed a symlink")
	}
	if _, err := ReadFileNoFollow(target, 4); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
	if b, err := ReadFileNoFollow(target, 5); err != nil || string(b) != "12345" {
		t.Fatalf("%q %v", b, err)
	}
	for _, tc := range []struct {
		size, limit int
		tooLarge    bool
	}{{0, 0, false}, {0, 3, false}, {1, 0, true}, {4096, 4096, false}, {4097, 4096, true}, {5000, 1 << 20, false}} {
		p := filepath.Join(dir, fmt.Sprint("f", tc.size, "-", tc.limit))
		want := strings.Repeat("x", tc.size)
		os.WriteFile(p, []byte(want), 0o600)
		b, err := ReadFileNoFollow(p, int64(tc.limit))
		if tc.tooLarge != errors.Is(err, ErrTooLarge) || (!tc.tooLarge && (err != nil || string(b) != want)) {
			t.Fatalf("size %d limit %d: %d bytes, %v", tc.size, tc.limit, len(b), err)
		}
	}
	if _, err := ReadFileNoFollow(dir, 5); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("directory read: %v", err)
	}
}

func TestCheckPrivateDirRefusals(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	os.Mkdir(open, 0o755)
	os.Chmod(open, 0o755)
	link := filepath.Join(dir, "link")
	os.Symlink(open, link)
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o600)
	for _, p := range []string{open, link, file, filepath.Join(dir, "missing")} {
		if err := CheckPrivateDir(p); err == nil {
			t.Errorf("CheckPrivateDir(%s) accepted it", p)
		}
	}
}

func TestLockFileExcludes(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lock")
	l, err := LockFile(p)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(p, os.O_RDWR, 0)
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
		t.Fatal("second lock succeeded while the first is held")
	}
	l.Unlock()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatalf("lock not released: %v", err)
	}
}
