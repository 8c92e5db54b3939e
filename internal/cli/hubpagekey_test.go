package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHubServePageKeyRefusals: hub serve refuses a page session key file
// that others can read, that is short, or that is a symlink, before it
// listens.
func TestHubServePageKeyRefusals(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.key")
	os.WriteFile(good, []byte(strings.Repeat("x", 40)), 0o600)
	open := filepath.Join(dir, "open.key")
	os.WriteFile(open, []byte(strings.Repeat("x", 40)), 0o644)
	short := filepath.Join(dir, "short.key")
	os.WriteFile(short, []byte("x"), 0o600)
	link := filepath.Join(dir, "link.key")
	os.Symlink(good, link)
	for _, tc := range []struct{ file, want string }{
		{open, "readable only by its owner"},
		{short, "at least 32 bytes"},
		{link, "must be a regular file"},
		{"rel.key", "absolute path"},
	} {
		r := runMain(t, nil, "", "hub", "serve", "--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "data"), "--page-session-key-file", tc.file)
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q", tc.file, r.code, r.stderr)
		}
	}
	if k, err := readPageKey(&Env{Getenv: func(k string) string {
		if k == PageKeyFileEnv {
			return good
		}
		return ""
	}}, ""); err != nil || len(k) != 32 {
		t.Fatalf("the env's key file: %v (%d bytes)", err, len(k))
	}
}
