package changelog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadFilesAt: what each increment records of a file: stored with its
// content, unchanged, absent after a deletion (of the file, or of a
// directory above it), stored again; and files over the limit.
func TestReadFilesAt(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	writeFile(t, filepath.Join(root, "d", "f.txt"), "one\n")
	writeFile(t, filepath.Join(root, "keep.txt"), "k\n")
	writeFile(t, filepath.Join(root, "big.txt"), strings.Repeat("b", 100))
	c, err := Open(filepath.Join(t.TempDir(), "log"), Options{Roots: []Root{{Name: "checkout", Path: root}}})
	if err != nil {
		t.Fatal(err)
	}
	mustCapture(t, c, 0)                                     // everything stored
	writeFile(t, filepath.Join(root, "keep.txt"), "k\nk2\n") // f.txt unchanged
	mustCapture(t, c, 1)                                     //
	os.Remove(filepath.Join(root, "d", "f.txt"))             // f.txt deleted
	mustCapture(t, c, 2)                                     //
	writeFile(t, filepath.Join(root, "d", "f.txt"), "two\n") // back
	mustCapture(t, c, 3)                                     //
	os.RemoveAll(filepath.Join(root, "d"))                   // its directory deleted
	mustCapture(t, c, 4)                                     //
	rels := []string{"d/f.txt", "big.txt", "keep.txt", "none.txt"}
	want := []string{
		"d/f.txt=stored:one big.txt=too-large keep.txt=stored:k none.txt=absent",
		"keep.txt=stored:k,k2",
		"d/f.txt=absent",
		"d/f.txt=stored:two",
		"d/f.txt=absent none.txt=absent", // the root's listing is in it: none.txt is not there either
	}
	for pos, w := range want {
		fa, err := ReadFilesAt(c.IncrementPath(pos), "checkout", rels, 50)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, rel := range rels {
			st, ok := fa.Files[rel]
			switch {
			case !ok:
			case st.Change == FileAbsent:
				got = append(got, rel+"=absent")
			case st.TooLarge:
				got = append(got, rel+"=too-large")
			default:
				got = append(got, rel+"=stored:"+strings.ReplaceAll(strings.TrimSpace(string(st.Data)), "\n", ","))
			}
		}
		if strings.Join(got, " ") != w {
			t.Errorf("position %d: %s, want %s", pos, strings.Join(got, " "), w)
		}
	}
}
