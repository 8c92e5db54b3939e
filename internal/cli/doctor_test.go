package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCodexTrusted reads the forms of project trust Codex CLI writes in
// config.toml; anything else is not trusted.
func TestCodexTrusted(t *testing.T) {
	root := "/home/u/my proj"
	for _, tc := range []struct {
		name, toml string
		want       bool
	}{
		{"table", "model = \"x\"\n\n[projects.\"/home/u/my proj\"]\ntrust_level = \"trusted\"\n", true},
		{"table with a comment", "[projects.\"/home/u/my proj\"]\ntrust_level = \"trusted\" # by codex\n", true},
		{"literal string key", "[projects.'/home/u/my proj']\ntrust_level = 'trusted'\n", true},
		{"dotted key", "projects.\"/home/u/my proj\".trust_level = \"trusted\"\n", true},
		{"untrusted", "[projects.\"/home/u/my proj\"]\ntrust_level = \"untrusted\"\n", false},
		{"another project", "[projects.\"/home/u/other\"]\ntrust_level = \"trusted\"\n", false},
		{"trust in a later table", "[projects.\"/home/u/my proj\"]\nx = 1\n[model_providers.local]\ntrust_level = \"trusted\"\n", false},
		{"empty", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "config.toml")
			if err := os.WriteFile(p, []byte(tc.toml), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := codexTrusted(p, root)
			if err != nil || got != tc.want {
				t.Errorf("codexTrusted = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	if _, err := codexTrusted(filepath.Join(t.TempDir(), "none.toml"), root); !os.IsNotExist(err) {
		t.Errorf("a missing config: %v, want not-exist", err)
	}
}
