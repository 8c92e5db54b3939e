package changelog

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/redact"
)

// Secret files never leave the machine: the upload form of every increment
// (alone or merged) names them by path and digest without their bytes, in
// every mode; an apply of the uploaded forms onto a fresh directory restores
// everything else and lists them, and an apply onto a directory that holds
// the same bytes lists nothing.
func TestUploadFormWithholdsSecretFiles(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	co := filepath.Join(base, "repo")
	files := map[string]string{
		"a.txt":                       "ordinary-a",
		".env.example":                "TEMPLATE_MARK=1",
		".env.local":                  "ENV_LOCAL_MARK=1",
		"id_rsa":                      "RSA_KEY_MARK",
		".claude/settings.local.json": `{"env":{"TOKEN":"SETTINGS_MARK"}}`,
		"private/notes.txt":           "PRIVATE_NOTES_MARK",
		".npmrc":                      "NPMRC_SHARED_MARK",
	}
	for rel, s := range files {
		writeFile(t, filepath.Join(co, filepath.FromSlash(rel)), s)
	}
	c, err := Open(filepath.Join(base, "changelog"), Options{Roots: []Root{{Name: "checkout", Path: co}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := SetSecretFiles(c.Dir(), redact.FileSet{Withhold: []string{"private/"}, Share: []string{".npmrc"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Capture(ctx, CaptureRequest{Position: 0, SessionID: "S", Tool: "Bash"}); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(co, "a.txt"), "ordinary-a2")
	writeFile(t, filepath.Join(co, "app", ".env.production"), "ENV_PROD_MARK=1")
	if _, err := c.Capture(ctx, CaptureRequest{Position: 1, SessionID: "S", Tool: "Write"}); err != nil {
		t.Fatal(err)
	}
	markers := []string{"ENV_LOCAL_MARK", "RSA_KEY_MARK", "SETTINGS_MARK", "PRIVATE_NOTES_MARK", "ENV_PROD_MARK"}
	withheldAt := map[int][]string{
		0: {".claude/settings.local.json", ".env.local", "id_rsa", "private/notes.txt"},
		1: {"app/.env.production"},
	}
	policies := map[string]SharingPolicy{
		"nil":    nil,
		"shared": func(string) Sharing { return Sharing{Mode: "shared-conversation", Share: true} },
	}
	dl := filepath.Join(base, "download")
	if err := os.MkdirAll(dl, 0o700); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for name, policy := range policies {
		for pos := 0; pos < 2; pos++ {
			u, err := c.UploadForm(pos, policy)
			if err != nil {
				t.Fatal(err)
			}
			body := gunzipped(t, u.Body)
			for _, mk := range markers {
				if strings.Contains(body, mk) {
					t.Fatalf("%s: the upload form of %d carries %s", name, pos, mk)
				}
			}
			if pos == 0 && (!strings.Contains(body, "TEMPLATE_MARK") || !strings.Contains(body, "NPMRC_SHARED_MARK") || !strings.Contains(body, "ordinary-a")) {
				t.Fatalf("%s: the upload form of 0 lacks a shared file:\n%s", name, body)
			}
			m, err := ReadMetaFrom(bytes.NewReader(u.Body))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, w := range m.WithheldFiles {
				got = append(got, w.Path)
				content := files[w.Path]
				if w.Path == "app/.env.production" {
					content = "ENV_PROD_MARK=1"
				}
				sum := sha256.Sum256([]byte(content))
				if w.Root != "checkout" || w.Digest != hex.EncodeToString(sum[:]) || w.Size != int64(len(content)) || w.Pattern == "" {
					t.Fatalf("%s: withheld record %+v", name, w)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, withheldAt[pos]) {
				t.Fatalf("%s: increment %d withholds %v, want %v", name, pos, got, withheldAt[pos])
			}
			if name == "nil" {
				p := filepath.Join(dl, IncrementName(pos))
				if err := os.WriteFile(p, u.Body, 0o600); err != nil {
					t.Fatal(err)
				}
				paths = append(paths, p)
			}
		}
	}

	// A merged upload (position 0 refused, carried by 1) withholds them too.
	mb, _, err := c.buildUpload(&uploadState{Next: 0}, []int{0, 1}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	mm, _ := ReadMetaFrom(bytes.NewReader(mb))
	body := gunzipped(t, mb)
	for _, mk := range markers {
		if strings.Contains(body, mk) {
			t.Fatalf("the merged upload carries %s", mk)
		}
	}
	if len(mm.WithheldFiles) != 5 {
		t.Fatalf("merged upload withholds %+v", mm.WithheldFiles)
	}

	// Apply the uploaded forms onto a fresh directory.
	dst := filepath.Join(base, "fresh")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := Open(filepath.Join(base, "changelog-fresh"), Options{Roots: []Root{{Name: "checkout", Path: dst}}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.ApplyChain(ctx, paths, []int{0, 1}, ApplyRequest{To: 1})
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, u := range res.Unrestorable {
		if !u.Withheld || u.Digest == "" || !strings.Contains(u.Reason, "secret file") {
			t.Fatalf("unrestorable %+v", u)
		}
		listed = append(listed, u.Path)
	}
	want := []string{".claude/settings.local.json", ".env.local", "app/.env.production", "id_rsa", "private/notes.txt"}
	if !slices.Equal(listed, want) {
		t.Fatalf("listed %v, want %v", listed, want)
	}
	for rel, s := range map[string]string{"a.txt": "ordinary-a2", ".env.example": "TEMPLATE_MARK=1", ".npmrc": "NPMRC_SHARED_MARK"} {
		if b, err := os.ReadFile(filepath.Join(dst, rel)); err != nil || string(b) != s {
			t.Fatalf("%s: %q, %v", rel, b, err)
		}
	}
	for _, rel := range want {
		if _, err := os.Lstat(filepath.Join(dst, filepath.FromSlash(rel))); err == nil {
			t.Fatalf("%s was restored from the upload form", rel)
		}
	}

	// The local copy of a withheld file, verified by its digest, is kept
	// and no longer listed; another version is listed as such.
	writeFile(t, filepath.Join(dst, ".env.local"), files[".env.local"])
	writeFile(t, filepath.Join(dst, "id_rsa"), "ANOTHER KEY")
	res, err = d.ApplyChain(ctx, paths, []int{0, 1}, ApplyRequest{To: 1, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	listed = nil
	for _, u := range res.Unrestorable {
		listed = append(listed, u.Path)
		if u.Path == "id_rsa" && !strings.Contains(u.Reason, "another version") {
			t.Fatalf("id_rsa: %s", u.Reason)
		}
	}
	if !slices.Equal(listed, []string{".claude/settings.local.json", "app/.env.production", "id_rsa", "private/notes.txt"}) {
		t.Fatalf("second apply lists %v", listed)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, ".env.local")); string(b) != files[".env.local"] {
		t.Fatalf(".env.local became %q", b)
	}

	// The local increments keep everything: a local rewind restores them.
	if b, _ := os.ReadFile(c.incrementPath(0)); !strings.Contains(gunzipped(t, b), "ENV_LOCAL_MARK") {
		t.Fatal("the local increment lost .env.local")
	}
}

// A malformed secret-file record stops uploads rather than share what the
// user withheld.
func TestSecretFilesRecordRefused(t *testing.T) {
	dir := t.TempDir()
	if s, err := SecretFiles(dir); err != nil || !s.Empty() {
		t.Fatalf("no record: %+v, %v", s, err)
	}
	if err := SetSecretFiles(dir, redact.FileSet{Withhold: []string{"["}}); err == nil {
		t.Fatal("a bad pattern was recorded")
	}
	if err := os.WriteFile(filepath.Join(dir, secretFilesFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := SecretFiles(dir); err == nil {
		t.Fatal("a malformed record was read")
	}
}
