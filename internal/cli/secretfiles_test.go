package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/changelog"
)

// changelog enable --withhold/--share record the checkout's secret-file
// set; enable and status say which files the first increment withholds; a
// bad pattern is a usage error; and the first capture's upload form holds
// none of them.
func TestChangelogEnableSecretFiles(t *testing.T) {
	base := t.TempDir()
	repo := filepath.Join(base, "repo")
	os.MkdirAll(filepath.Join(repo, "private"), 0o755)
	if out, err := exec.Command("git", "-C", repo, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	for rel, s := range map[string]string{"a.txt": "a", ".env.local": "X=1", ".npmrc": "t", "private/p.txt": "p", "id_ed25519": "k"} {
		if err := os.WriteFile(filepath.Join(repo, rel), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"HOME": filepath.Join(base, "home")}
	if r := runMain(t, env, "", "changelog", "enable", "--root", repo, "--no-transcript-root", "--withhold", "a/["); r.code != ExitUsage || !strings.Contains(r.stderr, "invalid secret-file pattern") {
		t.Fatalf("a bad pattern: %d %s", r.code, r.stderr)
	}
	r := runMain(t, env, "", "changelog", "enable", "--root", repo, "--no-transcript-root", "--withhold", "private/", "--share", ".npmrc", "--format", "json")
	if r.code != 0 {
		t.Fatalf("enable: %d %s", r.code, r.stderr)
	}
	var en struct {
		Dir    string `json:"dir"`
		Upload struct {
			First changelog.UploadPreview `json:"first_increment"`
		} `json:"upload"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &en); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, w := range en.Upload.First.Withheld {
		paths = append(paths, w.Path)
	}
	// .claude/settings.local.json: enable created it for the hooks.
	if got := strings.Join(paths, " "); got != ".claude/settings.local.json .env.local id_ed25519 private/p.txt" || en.Upload.First.Files != 2 || en.Upload.First.Bytes != 2 {
		t.Fatalf("first increment: withheld %q, %+v", got, en.Upload.First)
	}
	// Without the flags the recorded set is kept, and status shows it.
	if r := runMain(t, env, "", "changelog", "enable", "--root", repo, "--no-transcript-root"); r.code != 0 || !strings.Contains(r.stdout, "4 secret files") ||
		!strings.Contains(r.stdout, "also withheld (--withhold): private/") || !strings.Contains(r.stdout, "shared anyway (--share): .npmrc") {
		t.Fatalf("enable again: %d %s %s", r.code, r.stdout, r.stderr)
	}
	st := runMain(t, env, "", "changelog", "status", "--root", repo)
	if st.code != 0 || !strings.Contains(st.stdout, "uploads:       2 files, 2 bytes") || !strings.Contains(st.stdout, "4 secret files") || !strings.Contains(st.stdout, ".env.local") {
		t.Fatalf("status: %d %s %s", st.code, st.stdout, st.stderr)
	}
	c, err := changelog.Open(en.Dir, changelog.Options{Roots: []changelog.Root{{Name: "checkout", Path: repo, Git: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := runMain(t, env, "", "changelog", "capture", "--root", repo, "--tool", "Bash", "--session", "s1"); r.code != 0 {
		t.Fatalf("capture: %d %s", r.code, r.stderr)
	}
	u, err := c.UploadForm(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := changelog.ReadMeta(writeTemp(t, u.Body))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.WithheldFiles) != 4 || m.Files != 2 {
		t.Fatalf("upload form: %d files, withheld %+v", m.Files, m.WithheldFiles)
	}
	// An empty value clears a list: back to the defaults.
	if r := runMain(t, env, "", "changelog", "enable", "--root", repo, "--no-transcript-root", "--withhold=", "--share="); r.code != 0 || strings.Contains(r.stdout, "--withhold") || !strings.Contains(r.stdout, "4 secret files") {
		t.Fatalf("enable --withhold= --share=: %d %s %s", r.code, r.stdout, r.stderr)
	}
}

func writeTemp(t *testing.T, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "inc.tgz")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
