package capsule

import (
	"errors"
	"strings"
	"testing"
)

func TestParsePolicyStrict(t *testing.T) {
	good := string(DefaultPolicy().Marshal())
	if _, err := ParsePolicy([]byte(good)); err != nil {
		t.Fatalf("default policy does not round-trip: %v", err)
	}
	tests := []struct{ name, doc, want string }{
		{"unknown top key", strings.Replace(good, `"version": 1,`, `"version": 1, "extra": true,`, 1), "unknown field"},
		{"unknown nested key", strings.Replace(good, `"max_files": 100000`, `"max_files": 100000, "compress": true`, 1), "unknown field"},
		{"duplicate key", strings.Replace(good, `"version": 1,`, `"version": 1, "version": 1,`, 1), "duplicate key"},
		{"version 2", strings.Replace(good, `"version": 1,`, `"version": 2,`, 1), "unsupported version 2"},
		{"no version", `{"paths":{}}`, "missing \"version\""},
		{"trailing", good + "{}", "trailing data"},
		{"missing section", `{"version":1,"paths":{"default":"allow","rules":[]},"commands":{"default":"allow","rules":[]},"limits":{}}`, `missing section "backups"`},
		{"bad decision", strings.Replace(good, `"default": "review"`, `"default": "maybe"`, 1), "paths.default"},
		{"bad pattern", strings.Replace(good, `"pattern": ".git"`, `"pattern": "../x"`, 1), "pattern"},
		{"bad glob", strings.Replace(good, `"pattern": ".git"`, `"pattern": "a**"`, 1), "whole segment"},
		{"relative exe", strings.Replace(good, `"rules": []`, `"rules": [{"executable":"bin/rm","decision":"deny"}]`, 1), "executable"},
		{"bad duration", strings.Replace(good, `"max_duration": "1h0m0s"`, `"max_duration": 5`, 1), "duration"},
		{"backup bounds", strings.Replace(good, `"max_file_bytes": 8388608`, `"max_file_bytes": 999999999999`, 1), "exceeds"},
		{"not json", `version: 1`, "invalid character"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.doc == good {
				t.Fatal("test case did not change the document")
			}
			_, err := ParsePolicy([]byte(tc.doc))
			if !errors.Is(err, ErrPolicy) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestMatchPattern(t *testing.T) {
	tests := []struct {
		pat, name string
		want      bool
	}{
		{".git/**", ".git/config", true},
		{".git/**", ".git/refs/heads/main", true},
		{".git/**", ".gitignore", false},
		{"**/.env", ".env", true},
		{"**/.env", "a/b/.env", true},
		{"**/.env.*", "x/.env.local", true},
		{"**/*.pem", "certs/server.pem", true},
		{"*.go", "a/b.go", false},
		{"**/*.go", "a/b.go", true},
		{"src/**/test_*.py", "src/test_a.py", true},
		{"src/**/test_*.py", "src/x/y/test_a.py", true},
		{"**", "anything/at/all", true},
		{"docs/*", "docs/a/b", false},
	}
	for _, tc := range tests {
		if got := MatchPattern(tc.pat, tc.name); got != tc.want {
			t.Errorf("MatchPattern(%q, %q) = %v", tc.pat, tc.name, got)
		}
	}
}

func TestDecisionPrecedence(t *testing.T) {
	p := DefaultPolicy()
	p.Paths.Default = Allow
	p.Paths.Rules = []PathRule{
		{Pattern: "**", Decision: Allow},
		{Pattern: "src/**", Decision: Review},
		{Pattern: "src/secret/**", Decision: Deny},
		{Pattern: "src/**", Decision: Deny, Reason: "second deny"},
	}
	tests := []struct {
		path  string
		want  Decision
		index int
	}{
		{"README", Allow, 0},
		{"src/a.go", Deny, 3},
		{"src/secret/k", Deny, 2},
	}
	for _, tc := range tests {
		d := p.DecidePath(tc.path)
		if d.Decision != tc.want || d.Provenance.Index != tc.index {
			t.Errorf("%s: %+v", tc.path, d)
		}
	}
	p.Paths.Rules = nil
	if d := p.DecidePath("x"); d.Decision != Allow || d.Provenance.Source != "default" {
		t.Errorf("default: %+v", d)
	}
	p.Commands.Rules = []CommandRule{{Executable: "rm", Decision: Deny}, {Executable: "/usr/bin/curl", Decision: Review}}
	if d := p.DecideCommand("/bin/rm", "/bin/rm"); d.Decision != Deny {
		t.Errorf("rm: %+v", d)
	}
	if d := p.DecideCommand("curl", "/usr/bin/curl"); d.Decision != Review || d.Provenance.Index != 1 {
		t.Errorf("curl: %+v", d)
	}
	if d := p.DecideCommand("ls", "/bin/ls"); d.Decision != Allow || d.Provenance.Source != "default" {
		t.Errorf("ls: %+v", d)
	}
}

func FuzzParsePolicy(f *testing.F) {
	f.Add(DefaultPolicy().Marshal())
	f.Add([]byte(`{"version":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePolicy(b)
		if err != nil {
			return
		}
		q, err := ParsePolicy(p.Marshal())
		if err != nil {
			t.Fatalf("valid policy does not round-trip: %v", err)
		}
		if string(q.Marshal()) != string(p.Marshal()) {
			t.Fatal("round trip changed the policy")
		}
	})
}
