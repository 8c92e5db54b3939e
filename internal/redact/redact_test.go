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
		{"assignment env", "DB_PASS=hunter2 make", "DB_PASS=[REDACTED:assignment] make"},
		{"assignment camel", "dbPwd: s3cret", "dbPwd: [REDACTED:assignment]"},
		{"assignment arrow bare", "client_secret => abc", "client_secret => [REDACTED:assignment]"},
		{"assignment inside a quoted value", `x: "password=abc"`, `x: "password=[REDACTED:assignment]"`},
		{"authorization basic keeps the scheme", "Authorization: Basic dXNlcjpwYXNz", "Authorization: Basic [REDACTED:assignment]"},
		{"json field", `{"password":"x","n":1}`, `{"password":"[REDACTED:field]","n":1}`},
		{"json subtree", `{"credentials":{"a":[1,"}"]},"n":1}`, `{"credentials":"[REDACTED:field]","n":1}`},
		{"json number", `{"apiKey": 12345, "max_tokens": 7}`, `{"apiKey": "[REDACTED:field]", "max_tokens": 7}`},
		{"query", "https://h/p?access_token=abc&x=1", "https://h/p?access_token=[REDACTED:assignment]&x=1"},
		{"curl in a pipeline", "echo hi | curl -sS -u bob:pw https://x; mysql -uroot -pS3cr3t app", "echo hi | curl -sS -u bob:[REDACTED:flag_value] https://x; mysql -uroot -p[REDACTED:flag_value] app"},
		{"curl quoted user", `curl -u 'bob:p w' https://x`, `curl -u 'bob:[REDACTED:flag_value]' https://x`},
		{"curl --user=", "curl --user=bob:pw https://x", "curl --user=bob:[REDACTED:flag_value] https://x"},
		{"curl glued -u", "/usr/bin/curl -ubob:pw https://x", "/usr/bin/curl -ubob:[REDACTED:flag_value] https://x"},
		{"curl user without password", "curl -u bob https://x", "curl -u bob https://x"},
		{"mysql -p in another command is kept", "grep -pattern file", "grep -pattern file"},
		{"mysql-family", "mysqldump -pA mysqladmin -pB; mariadb -pC", "mysqldump -p[REDACTED:flag_value] mysqladmin -p[REDACTED:flag_value]; mariadb -p[REDACTED:flag_value]"},
		{"mysql -p alone", "mysql -p", "mysql -p"},
		{"form parameter", "user[password]=hunter2&user[name]=bob", "user[password]=[REDACTED:assignment]&user[name]=bob"},
		{"quoted flag", `run "--token" "abc def"`, `run "--token" "[REDACTED:flag_value]"`},
		{"flag in quotes", `run '--token=abc'`, `run '--token=[REDACTED:flag_value]'`},
		{"name inside a marker is no name", "[REDACTED:github_token] =0", "[REDACTED:github_token] =0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkRedact(t, tc.in, tc.want, Options{})
		})
	}
}

// checkRedact checks one redaction and the properties every redaction has:
// the count agrees with the change, redacting again changes nothing, and
// the kinds name exactly the markers added.
func checkRedact(t *testing.T, in, want string, o Options) Result {
	t.Helper()
	r := Redact(in, o)
	if r.Text != want {
		t.Fatalf("Redact(%q)\n got %q\nwant %q", in, r.Text, want)
	}
	if (r.Redactions > 0) != (r.Text != in) || (len(r.Kinds) > 0) != (r.Redactions > 0) {
		t.Fatalf("count %d, kinds %v inconsistent with the change", r.Redactions, r.Kinds)
	}
	for _, k := range r.Kinds {
		if !strings.Contains(r.Text, Marker(k)) {
			t.Fatalf("kind %s listed but %q has no %s", k, r.Text, Marker(k))
		}
	}
	again := Redact(r.Text, o)
	if again.Text != r.Text || again.Redactions != 0 {
		t.Fatalf("not idempotent: %q -> %q (%d)", r.Text, again.Text, again.Redactions)
	}
	if s, n := String(in); !o.JSON && (s != r.Text || n != r.Redactions) {
		t.Fatalf("String differs from Redact: %q (%d)", s, n)
	}
	return r
}

// TestSeedExamples is built from the seed's redaction paragraph
// (seeds/000, "What leaves the machine, and when"), quoted phrase by phrase.
func TestSeedExamples(t *testing.T) {
	ghp := "ghp_" + strings.Repeat("Zq9", 12)
	tests := []struct {
		quote    string // the seed's words this case checks
		in, want string
		kind     string // the one kind expected ("" = nothing redacted)
	}{
		{"private_key (PEM blocks)", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END OPENSSH PRIVATE KEY-----", "[REDACTED:private_key]", PrivateKey},
		{"url_password (the password in scheme://user:password@host)", "scheme://user:password@host", "scheme://user:[REDACTED:url_password]@host", URLPassword},
		{"flag_value (the value after a secret-named --flag", "deploy --token abc123", "deploy --token [REDACTED:flag_value]", FlagValue},
		{"the password of curl -u user:pass", "curl -u user:pass https://api", "curl -u user:[REDACTED:flag_value] https://api", FlagValue},
		{"-pVALUE in a mysql ... command", "mysql -pVALUE db", "mysql -p[REDACTED:flag_value] db", FlagValue},
		{"-pVALUE in a ... mysqldump ... command", "mysqldump -pVALUE db", "mysqldump -p[REDACTED:flag_value] db", FlagValue},
		{"-pVALUE in a ... mysqladmin ... command", "mysqladmin -pVALUE status", "mysqladmin -p[REDACTED:flag_value] status", FlagValue},
		{"-pVALUE in a ... mariadb command", "mariadb -pVALUE", "mariadb -p[REDACTED:flag_value]", FlagValue},
		{"assignment (the value in a NAME=value", "API_TOKEN=value", "API_TOKEN=[REDACTED:assignment]", Assignment},
		{"NAME: value", "password: value", "password: [REDACTED:assignment]", Assignment},
		{"or NAME => value assignment whose name looks secret", "secret => value", "secret => [REDACTED:assignment]", Assignment},
		{"(issue 14: a quoted secret name)", `'auth_token' => 'v'`, `'auth_token' => '[REDACTED:assignment]'`, Assignment},
		{"(issue 14: a quoted secret name, double quotes)", `$cfg["db_password"] = "v";`, `$cfg["db_password"] = "[REDACTED:assignment]";`, Assignment},
		{"bearer (issue 14: Authorization: Bearer ... is bearer, not assignment)", "Authorization: Bearer abcdef0123456789xyz", "Authorization: Bearer [REDACTED:bearer]", Bearer},
		{"field (the value of a JSON field whose name ends in a secret word such as password", `{"password":"x"}`, `{"password":"[REDACTED:field]"}`, Field},
		{"token", `{"refresh_token":"x"}`, `{"refresh_token":"[REDACTED:field]"}`, Field},
		{"secret", `{"client_secret":"x"}`, `{"client_secret":"[REDACTED:field]"}`, Field},
		{"apikey", `{"apiKey":"x"}`, `{"apiKey":"[REDACTED:field]"}`, Field},
		{"secretkey", `{"aws_secret_key":"x"}`, `{"aws_secret_key":"[REDACTED:field]"}`, Field},
		{"signingkey", `{"signingKey":"x"}`, `{"signingKey":"[REDACTED:field]"}`, Field},
		{"dsn", `{"sentry_dsn":"x"}`, `{"sentry_dsn":"[REDACTED:field]"}`, Field},
		{"databaseurl", `{"databaseUrl":"x"}`, `{"databaseUrl":"[REDACTED:field]"}`, Field},
		{"authorization", `{"Authorization":"Basic x"}`, `{"Authorization":"[REDACTED:field]"}`, Field},
		{"or cookie", `{"cookie":"sid=1"}`, `{"cookie":"[REDACTED:field]"}`, Field},
		{"when that value is an object or array the whole subtree is replaced", `{"secret":{"a":["b",{"c":1}]},"n":2}`, `{"secret":"[REDACTED:field]","n":2}`, Field},
		{"... an object or array ...", `{"tokens_secret":[1,2,3]}`, `{"tokens_secret":"[REDACTED:field]"}`, Field},
		{"Matching on the name suffix keeps counters such as max_tokens and input_tokens readable", `{"max_tokens":100,"input_tokens":5} max_tokens=100`, `{"max_tokens":100,"input_tokens":5} max_tokens=100`, ""},
		{"pass ... count only as a separate name part (pass", "pass=x", "pass=[REDACTED:assignment]", Assignment},
		{"DB_PASS", "DB_PASS=x", "DB_PASS=[REDACTED:assignment]", Assignment},
		{"dbPwd", "dbPwd=x", "dbPwd=[REDACTED:assignment]", Assignment},
		{"auth)", "auth=x", "auth=[REDACTED:assignment]", Assignment},
		{"so bypass, compass and oauth_state stay readable", "bypass=1 compass=2 oauth_state=3", "bypass=1 compass=2 oauth_state=3", ""},
		{`Values inside JSON that was escaped into a string (\"password\":\"x\")`, `"{\"password\":\"x\"}"`, `"{\"password\":\"[REDACTED:field]\"}"`, Field},
		{"token shapes glued to an identifier after _ or - (X_ghp_...)", "X_" + ghp, "X_[REDACTED:github_token]", GitHubToken},
		{"... after _ or - ...", "X-" + ghp, "X-[REDACTED:github_token]", GitHubToken},
		{"--password-file PATH is not redacted", "tool --password-file /run/secrets/db", "tool --password-file /run/secrets/db", ""},
		{"and neither is mysql -p VALUE (the value is a database name there)", "mysql -p VALUE", "mysql -p VALUE", ""},
	}
	for _, tc := range tests {
		t.Run(tc.quote, func(t *testing.T) {
			r := checkRedact(t, tc.in, tc.want, Options{})
			want := []string(nil)
			if tc.kind != "" {
				want = []string{tc.kind}
			}
			if !slices.Equal(r.Kinds, want) {
				t.Fatalf("kinds %v, want %v", r.Kinds, want)
			}
		})
	}
	// Every kind the seed lists has a constant, a marker of the seed's form
	// and a place in Kinds' order.
	seedKinds := "aws_access_key_id, github_token, gitlab_token, slack_token, anthropic_key, openai_key, stripe_key, google_api_key, npm_token, pypi_token, huggingface_token, jwt, bearer, private_key, url_password, flag_value, assignment, field"
	if got := strings.Join(allKinds, ", "); got != seedKinds {
		t.Fatalf("kinds %s\nseed  %s", got, seedKinds)
	}
	if Marker(Field) != "[REDACTED:field]" {
		t.Fatalf("marker %s", Marker(Field))
	}
}

func TestRedactJSON(t *testing.T) {
	ghp := "ghp_" + strings.Repeat("x", 36)
	tests := []struct {
		name, in, want string
	}{
		{"unchanged bytes stay", `{ "a" : "b",  "n":1.50 }`, `{ "a" : "b",  "n":1.50 }`},
		{"secret field", `{"password": "x y", "n": 1}`, `{"password": "[REDACTED:field]", "n": 1}`},
		{"subtree", `{"headers":{"Cookie":["a","b"]},"ok":true}`, `{"headers":{"Cookie":"[REDACTED:field]"},"ok":true}`},
		{"escaped string value", `{"command":"curl -u bob:pw \"https://x\"\nmysql -pQ"}`, `{"command":"curl -u bob:[REDACTED:flag_value] \"https://x\"\nmysql -p[REDACTED:flag_value]"}`},
		{"escaped quotes around an assignment", `{"c":"PASSWORD=\"x y\" make"}`, `{"c":"PASSWORD=\"[REDACTED:assignment]\" make"}`},
		{"unicode escape hides a name", `{"pass\u0077ord":"x"}`, `{"pass\u0077ord":"[REDACTED:field]"}`},
		{"unicode escape hides a token", `{"t":"\u0067hp_` + strings.Repeat("x", 36) + `"}`, `{"t":"[REDACTED:github_token]"}`},
		{"escaped slashes hide a URL", `{"u":"https:\/\/u:pw@h\/x"}`, `{"u":"https://u:[REDACTED:url_password]@h/x"}`},
		{"escaped JSON in a string", `{"text":"{\"token\":\"abc\"}"}`, `{"text":"{\"token\":\"[REDACTED:field]\"}"}`},
		{"key that is not secret", `{"max_tokens":5,"input_tokens":{"a":1}}`, `{"max_tokens":5,"input_tokens":{"a":1}}`},
		{"array of strings", `["x", "` + ghp + `"]`, `["x", "[REDACTED:github_token]"]`},
		{"invalid JSON is text", `{"password":"x"` + "\n", `{"password":"[REDACTED:field]"` + "\n"},
		{"a JSONL line", `{"type":"user","message":{"content":"export GITHUB_TOKEN=abc"}}` + "\n", `{"type":"user","message":{"content":"export GITHUB_TOKEN=[REDACTED:assignment]"}}` + "\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := checkRedact(t, tc.in, tc.want, Options{JSON: true})
			if json.Valid([]byte(tc.in)) && !json.Valid([]byte(r.Text)) {
				t.Fatalf("valid JSON became invalid: %s", r.Text)
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
		{[]string{"curl", "--user=bob:pw"}, []string{"curl", "--user=bob:[REDACTED:flag_value]"}},
		{[]string{"/usr/bin/curl", "-ubob:pw"}, []string{"/usr/bin/curl", "-ubob:[REDACTED:flag_value]"}},
		{[]string{"mysql", "-psecret", "db"}, []string{"mysql", "-p[REDACTED:flag_value]", "db"}},
		{[]string{"mariadb", "-psecret"}, []string{"mariadb", "-p[REDACTED:flag_value]"}},
		{[]string{"mysql", "-p", "dbname"}, []string{"mysql", "-p", "dbname"}},
		{[]string{"tool", "--password-file", "/p"}, []string{"tool", "--password-file", "/p"}},
		{[]string{"env", "GITHUB_TOKEN=abc", "make"}, []string{"env", "GITHUB_TOKEN=[REDACTED:assignment]", "make"}},
		{[]string{"sh", "-c", "curl -u a:b x"}, []string{"sh", "-c", "curl -u a:[REDACTED:flag_value] x"}},
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
		if again, n2 := Args(got); !slices.Equal(again, got) || n2 != 0 {
			t.Errorf("Args not idempotent on %q: %q (%d)", got, again, n2)
		}
		// The same command as one line of text gets the same markers.
		if line, _ := String(strings.Join(tc.in, " ")); tc.in[0] != "sh" && line != strings.Join(tc.want, " ") {
			t.Errorf("String(%q) = %q, want %q", strings.Join(tc.in, " "), line, strings.Join(tc.want, " "))
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

// Result.Kinds lists each kind once, in the seed's order.
func TestResultKinds(t *testing.T) {
	in := "curl -u a:b x; DB_PASS=x; AKIAIOSFODNN7EXAMPLE; mysql -pY"
	r := Redact(in, Options{})
	if r.Redactions != 4 || !slices.Equal(r.Kinds, []string{AWSAccessKeyID, FlagValue, Assignment}) {
		t.Fatalf("%+v", r)
	}
}
