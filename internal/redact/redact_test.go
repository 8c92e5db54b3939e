package redact

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	ghp := "ghp_" + strings.Repeat("a1B2", 9)
	tests := []struct {
		name, in, want string
	}{
		{"plain", "go test ./...", "go test ./..."},
		{"aws", "key AKIAIOSFODNN7EXAMPLE here", "key [REDACTED:aws_access_key_id] here"},
		{"github", "token " + ghp, "token [REDACTED:github_token]"},
		{"github glued", "X_" + ghp, "X_[REDACTED:github_token]"},
		{"github pat", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "[REDACTED:github_token]"},
		{"gitlab", "glpat-abcdefghij0123456789", "[REDACTED:gitlab_token]"},
		{"slack", "xoxb-1234567890-abcdefghij", "[REDACTED:slack_token]"},
		{"anthropic", "sk-ant-api03-abcdefghijklmnopqrstuvwxyz", "[REDACTED:anthropic_key]"},
		{"openai", "OPENAI sk-proj-abcdefghijklmnopqrstuvwxyz0123", "OPENAI [REDACTED:openai_key]"},
		{"openai not inside word", "task-abcdefghijklmnopqrstuvwxyz", "task-abcdefghijklmnopqrstuvwxyz"},
		{"stripe", "sk_live_abcdefghijklmnop1234", "[REDACTED:stripe_key]"},
		{"google", "AIza" + strings.Repeat("x", 35), "[REDACTED:google_api_key]"},
		{"npm", "npm_" + strings.Repeat("a", 36), "[REDACTED:npm_token]"},
		{"pypi", "pypi-" + strings.Repeat("A", 60), "[REDACTED:pypi_token]"},
		{"huggingface", "hf_" + strings.Repeat("a", 34), "[REDACTED:huggingface_token]"},
		{"jwt", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig_abc-1", "[REDACTED:jwt]"},
		{"bearer", "curl -H 'X: Bearer abcdefgh12345678'", "curl -H 'X: Bearer [REDACTED:bearer]'"},
		{"pem", "a\n-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----\nb", "a\n[REDACTED:private_key]\nb"},
		{"url password", "postgres://user:hunter2@db/x", "postgres://user:[REDACTED:url_password]@db/x"},
		{"flag eq", "tool --api-key=abc123 --verbose", "tool --api-key=[REDACTED:flag_value] --verbose"},
		{"flag space", "tool --password hunter2 -v", "tool --password [REDACTED:flag_value] -v"},
		{"password-file kept", "tool --password-file /run/pw", "tool --password-file /run/pw"},
		{"assignment env", "DB_PASS=hunter2 make", "DB_PASS=[REDACTED:assignment] make"},
		{"assignment camel", "dbPwd: s3cret", "dbPwd: [REDACTED:assignment]"},
		{"assignment arrow", "'secret' => 'x'", "'secret' => 'x'"},
		{"assignment arrow bare", "client_secret => abc", "client_secret => [REDACTED:assignment]"},
		{"authorization basic", "Authorization: Basic dXNlcjpwYXNz", "Authorization: [REDACTED:assignment]"},
		{"counters readable", "max_tokens=100 input_tokens: 5", "max_tokens=100 input_tokens: 5"},
		{"bypass compass oauth_state", "bypass=1 compass=2 oauth_state=3 author=me", "bypass=1 compass=2 oauth_state=3 author=me"},
		{"json field", `{"password":"x","n":1}`, `{"password":"[REDACTED:field]","n":1}`},
		{"json subtree", `{"credentials":{"a":[1,"}"]},"n":1}`, `{"credentials":"[REDACTED:field]","n":1}`},
		{"json number", `{"apiKey": 12345, "max_tokens": 7}`, `{"apiKey": "[REDACTED:field]", "max_tokens": 7}`},
		{"escaped json", `"{\"password\":\"x y\",\"ok\":1}"`, `"{\"password\":\"[REDACTED:field]\",\"ok\":1}"`},
		{"query", "https://h/p?access_token=abc&x=1", "https://h/p?access_token=[REDACTED:assignment]&x=1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, n := String(tc.in)
			if got != tc.want {
				t.Fatalf("String(%q)\n got %q\nwant %q", tc.in, got, tc.want)
			}
			if (n > 0) != (got != tc.in) {
				t.Fatalf("count %d inconsistent", n)
			}
			again, n2 := String(got)
			if again != got || n2 != 0 {
				t.Fatalf("not idempotent: %q -> %q (%d)", got, again, n2)
			}
		})
	}
}

func TestArgs(t *testing.T) {
	tests := []struct {
		in, want []string
	}{
		{[]string{"deploy", "--token", "abc", "--dry-run"}, []string{"deploy", "--token", "[REDACTED:flag_value]", "--dry-run"}},
		{[]string{"curl", "-u", "bob:pw", "https://x"}, []string{"curl", "-u", "bob:[REDACTED:flag_value]", "https://x"}},
		{[]string{"/usr/bin/curl", "-ubob:pw"}, []string{"/usr/bin/curl", "-ubob:[REDACTED:flag_value]"}},
		{[]string{"mysql", "-psecret", "db"}, []string{"mysql", "-p[REDACTED:flag_value]", "db"}},
		{[]string{"mysql", "-p", "dbname"}, []string{"mysql", "-p", "dbname"}},
		{[]string{"tool", "--password-file", "/p"}, []string{"tool", "--password-file", "/p"}},
		{[]string{"env", "GITHUB_TOKEN=abc", "make"}, []string{"env", "GITHUB_TOKEN=[REDACTED:assignment]", "make"}},
		{[]string{"sh", "-c", "echo hi"}, []string{"sh", "-c", "echo hi"}},
	}
	for _, tc := range tests {
		got, n := Args(tc.in)
		if !slices.Equal(got, tc.want) {
			t.Errorf("Args(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if (n > 0) != !slices.Equal(tc.in, tc.want) {
			t.Errorf("Args(%q) count %d", tc.in, n)
		}
	}
}

func TestValue(t *testing.T) {
	var v any
	json.Unmarshal([]byte(`{"cookie":{"a":1},"list":["ghp_`+strings.Repeat("x", 36)+`"],"max_tokens":5}`), &v)
	got, n := Value(v)
	b, _ := json.Marshal(got)
	want := `{"cookie":"[REDACTED:field]","list":["[REDACTED:github_token]"],"max_tokens":5}`
	if string(b) != want || n != 2 {
		t.Fatalf("Value = %s (%d), want %s", b, n, want)
	}
}

func TestIsSecretName(t *testing.T) {
	for name, want := range map[string]bool{
		"password": true, "DB_PASS": true, "dbPwd": true, "auth": true, "X-Auth-Token": true,
		"databaseUrl": true, "SESSION_COOKIE": true, "signingKey": true, "dsn": true,
		"max_tokens": false, "input_tokens": false, "bypass": false, "compass": false,
		"oauth_state": false, "password_file": false, "author": false, "primary_key": false,
	} {
		if got := IsSecretName(name); got != want {
			t.Errorf("IsSecretName(%q) = %v, want %v", name, got, want)
		}
	}
}

func FuzzString(f *testing.F) {
	f.Add(`{"password":"x"}`)
	f.Add(`"{\"token\":{\"a\":[\"]\"]}}"`)
	f.Add("A=1 --token x postgres://u:p@h")
	f.Fuzz(func(t *testing.T, s string) {
		out, _ := String(s)
		again, n := String(out)
		if again != out {
			t.Fatalf("not idempotent (%d): %q -> %q -> %q", n, s, out, again)
		}
	})
}

func BenchmarkStringClean(b *testing.B) {
	s := strings.Repeat("go test ./internal/... -run TestSomething -count=1 ", 20)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		String(s)
	}
}

// prefilter must agree with plain (case-folded where declared) substring search.
func FuzzPrefilter(f *testing.F) {
	f.Add("Bearer x AKIA sk-ant- PASS token")
	f.Add("go test ./... -run TestX")
	f.Fuzz(func(t *testing.T, s string) {
		got := prefilter(s)
		var want uint64
		lower := asciiLower(s) // keywords are matched ASCII case-insensitively only
		for i, r := range shapeRules {
			for _, w := range r.keywords {
				if (!r.fold && strings.Contains(s, w)) || (r.fold && strings.Contains(lower, w)) {
					want |= 1 << i
				}
			}
		}
		for _, w := range secretWords {
			if strings.Contains(lower, w) {
				want |= bitNamed
			}
		}
		if got != want {
			t.Fatalf("prefilter(%q) = %b, want %b", s, got, want)
		}
	})
}

func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 32
		}
	}
	return string(b)
}
