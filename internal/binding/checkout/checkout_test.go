package checkout

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLookup(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	link := filepath.Join(dir, "link")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	realDir, err := filepath.EvalSymlinks(real)
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	only := func(want string) func(string) (string, bool) {
		return func(p string) (string, bool) {
			asked = append(asked, p)
			return p, p == want
		}
	}
	cases := []struct {
		name, cwd, want string
		ok              bool
		asks            int
	}{
		{"found at cwd", link, link, true, 1},
		{"found through the link", link, realDir, true, 2},
		{"not found", link, "", false, 2},
		{"missing cwd is asked once", filepath.Join(dir, "gone"), "", false, 1},
	}
	for _, tc := range cases {
		asked = nil
		want := tc.want
		if !tc.ok {
			want = "/nowhere"
		}
		got, ok := Find(Of(tc.cwd), only(want))
		if ok != tc.ok || (ok && got != tc.want) || len(asked) != tc.asks {
			t.Errorf("%s: Find(Of(%q)) = %q, %v after asking %q", tc.name, tc.cwd, got, ok, asked)
		}
	}
}

// One Lookup answers two parts' questions, each with the fallback to the
// resolved cwd on its own: the first part found at cwd itself, the second
// only through the link.
func TestOneLookupTwoQuestions(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	link := filepath.Join(dir, "link")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	realDir, err := filepath.EvalSymlinks(real)
	if err != nil {
		t.Fatal(err)
	}
	l := Of(link)
	first, ok1 := Find(l, func(p string) (string, bool) { return p, p == link })
	second, ok2 := Find(l, func(p string) (string, bool) { return p, p == realDir })
	if !ok1 || first != link || !ok2 || second != realDir || l.Cwd() != link {
		t.Fatalf("first %q %v, second %q %v", first, ok1, second, ok2)
	}
}
