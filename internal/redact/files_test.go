package redact

import (
	"errors"
	"testing"
)

func TestFileSetWithheld(t *testing.T) {
	user := FileSet{Withhold: []string{"secrets/**", "/config/prod.yml", ".env.example"}, Share: []string{".env.test", "certs/"}}
	tests := []struct {
		set  FileSet
		rel  string
		want bool
	}{
		{FileSet{}, ".env", true},
		{FileSet{}, ".env.local", true},
		{FileSet{}, "app/.env.production", true},
		{FileSet{}, ".env.example", false},
		{FileSet{}, ".env.sample", false},
		{FileSet{}, ".env.template", false},
		{FileSet{}, ".env.local.example", false},
		{FileSet{}, "id_rsa", true},
		{FileSet{}, "keys/id_ed25519.pub", true},
		{FileSet{}, "tls/server.pem", true},
		{FileSet{}, "tls/server.key", true},
		{FileSet{}, "store.p12", true},
		{FileSet{}, ".netrc", true},
		{FileSet{}, ".npmrc", true},
		{FileSet{}, "pkg/.pypirc", true},
		{FileSet{}, ".aws/credentials", true},
		{FileSet{}, ".aws/config", false},
		{FileSet{}, "infra/terraform.tfstate", true},
		{FileSet{}, "infra/terraform.tfstate.backup", true},
		{FileSet{}, ".claude/settings.local.json", true},
		{FileSet{}, ".claude/settings.json", true},
		{FileSet{}, ".claude/commands/x.md", false},
		{FileSet{}, ".codex/hooks.json", true},
		{FileSet{}, ".gemini/settings.json", true},
		{FileSet{}, ".ssh/config", true},
		{FileSet{}, "main.go", false},
		{FileSet{}, "env.go", false},
		{FileSet{}, "docs/.environment", false},
		{FileSet{}, "keyboard.go", false},
		{FileSet{}, "", false},
		{user, "secrets/a/b.txt", true},
		{user, "x/secrets/a.txt", true},
		{user, "config/prod.yml", true},
		{user, "sub/config/prod.yml", false},
		{user, ".env.example", true},
		{user, ".env.test", false},
		{user, ".env.local", true},
		{user, "certs/ca.pem", false},
		{user, "other/ca.pem", true},
	}
	for _, tt := range tests {
		_, got := tt.set.Withheld(tt.rel)
		if got != tt.want {
			t.Errorf("%+v.Withheld(%q) = %v, want %v", tt.set, tt.rel, got, tt.want)
		}
	}
}

func TestCheckPattern(t *testing.T) {
	for _, p := range []string{".env", "secrets/**", "/a/b", "dir/", "*.x"} {
		if err := CheckPattern(p); err != nil {
			t.Errorf("CheckPattern(%q) = %v", p, err)
		}
	}
	for _, p := range []string{"", " ", "/", "[", "a/[b"} {
		if err := CheckPattern(p); !errors.Is(err, ErrBadPattern) {
			t.Errorf("CheckPattern(%q) = %v, want ErrBadPattern", p, err)
		}
	}
}
