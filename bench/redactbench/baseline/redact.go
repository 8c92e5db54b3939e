// Package baseline is a verbatim copy of internal/redact as it was on main
// before the one-function change (505a60c), kept only as the benchmark
// reference of bench/redactbench. The original package comment follows.
//
// Package redact is the project's central, best-effort secret redaction. It
// replaces well-known credential shapes, secret-named flag values, secret
// assignments and secret JSON fields with [REDACTED:<kind>]. Each rule is
// guarded by literal ASCII keywords, found in one pass over the text through a
// first-byte table, so text without them costs that pass only; regular
// expressions compile lazily on first use, never at package init.
//
// Redaction is heuristic: a secret with no distinctive shape or name is not
// recognised, and the package does not remove personal data or code.
package baseline

import (
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"unicode"
)

// Kinds of redaction, as they appear in [REDACTED:<kind>].
const (
	AWSAccessKeyID   = "aws_access_key_id"
	GitHubToken      = "github_token"
	GitLabToken      = "gitlab_token"
	SlackToken       = "slack_token"
	AnthropicKey     = "anthropic_key"
	OpenAIKey        = "openai_key"
	StripeKey        = "stripe_key"
	GoogleAPIKey     = "google_api_key"
	NPMToken         = "npm_token"
	PyPIToken        = "pypi_token"
	HuggingFaceToken = "huggingface_token"
	JWT              = "jwt"
	Bearer           = "bearer"
	PrivateKey       = "private_key"
	URLPassword      = "url_password"
	FlagValue        = "flag_value"
	Assignment       = "assignment"
	Field            = "field"
)

// Marker returns the replacement text for kind.
func Marker(kind string) string { return "[REDACTED:" + kind + "]" }

const markerPrefix = "[REDACTED:"

// shapeRule replaces group 2 of every match of re (group 1 is leading
// context kept as is) when s contains one of keywords (or, with fold, one of
// them case-insensitively).
type shapeRule struct {
	kind     string
	keywords []string
	fold     bool
	re       func() *regexp.Regexp
}

func lazy(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// boundary is the leading context of shapes whose prefix is short enough to
// occur inside ordinary words; '_' and '-' count as boundaries so a token glued
// to an identifier (X_ghp_...) is still recognised.
const boundary = `(^|[^A-Za-z0-9])`

var shapeRules = []shapeRule{
	{PrivateKey, []string{"PRIVATE KEY-----"}, false, lazy(`()(-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?s:.*?)(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\z))`)},
	{AWSAccessKeyID, []string{"AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA", "ANVA", "AIPA", "ABIA", "ACCA"}, false, lazy(`()((?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA|ABIA|ACCA)[0-9A-Z]{16})`)},
	{GitHubToken, []string{"ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"}, false, lazy(`()((?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,}))`)},
	{GitLabToken, []string{"glpat-", "gldt-", "glrt-"}, false, lazy(`()((?:glpat|gldt|glrt)-[A-Za-z0-9_-]{20,})`)},
	{SlackToken, []string{"xox"}, false, lazy(`()(xox[abposr]-[A-Za-z0-9-]{10,})`)},
	{AnthropicKey, []string{"sk-ant-"}, false, lazy(`()(sk-ant-[A-Za-z0-9_-]{20,})`)},
	{OpenAIKey, []string{"sk-"}, false, lazy(boundary + `(sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,})`)},
	{StripeKey, []string{"_live_", "_test_"}, false, lazy(boundary + `((?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,})`)},
	{GoogleAPIKey, []string{"AIza"}, false, lazy(`()(AIza[0-9A-Za-z_-]{35})`)},
	{NPMToken, []string{"npm_"}, false, lazy(`()(npm_[A-Za-z0-9]{36})`)},
	{PyPIToken, []string{"pypi-"}, false, lazy(`()(pypi-[A-Za-z0-9_-]{50,})`)},
	{HuggingFaceToken, []string{"hf_"}, false, lazy(boundary + `(hf_[A-Za-z0-9]{30,})`)},
	{JWT, []string{"eyJ"}, false, lazy(`()(eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*)`)},
	{Bearer, []string{"bearer"}, true, lazy(`(?i)(\bbearer\s+)([A-Za-z0-9._~+/-]{8,}=*)`)},
	{URLPassword, []string{"://"}, false, lazy(`([A-Za-z][A-Za-z0-9+.-]*://[^/\s:@"'<>]+:)([^/\s@"'<>]+)(?:@)`)},
}

// secretWords are the keywords a secret name contains (lowercase); they
// prefilter the name-based rules.
var secretWords = []string{"pass", "pwd", "auth", "token", "secret", "key", "dsn", "databaseurl", "database_url", "cookie", "credential", "connectionstring"}

// secretSuffixes end a normalised (lowercase, separators removed) secret name.
var secretSuffixes = []string{"password", "passwd", "passphrase", "token", "secret", "apikey", "secretkey", "signingkey", "accesskey", "privatekey", "dsn", "databaseurl", "connectionstring", "authorization", "cookie", "credential", "credentials"}

// secretParts count only as a whole name part (DB_PASS, dbPwd, auth; not bypass or oauth_state).
var secretParts = []string{"pass", "pwd", "auth"}

// IsSecretName reports whether a flag, variable or field name looks like it
// holds a secret: its normalised form ends in a secret word (so max_tokens
// stays readable) or one of its parts is pass, pwd or auth.
func IsSecretName(name string) bool {
	parts := nameParts(name)
	if len(parts) == 0 {
		return false
	}
	joined := strings.Join(parts, "")
	for _, s := range secretSuffixes {
		if strings.HasSuffix(joined, s) {
			return true
		}
	}
	for _, p := range parts {
		for _, s := range secretParts {
			if p == s {
				return true
			}
		}
	}
	return false
}

// nameParts splits a name at non-alphanumerics and lower-to-upper case
// boundaries and lowercases the parts.
func nameParts(name string) []string {
	var parts []string
	var cur []rune
	var prev rune
	flush := func() {
		if len(cur) > 0 {
			parts = append(parts, strings.ToLower(string(cur)))
			cur = cur[:0]
		}
	}
	for _, r := range name {
		switch {
		case !unicode.IsLetter(r) && !unicode.IsDigit(r):
			flush()
		case unicode.IsUpper(r) && prev != 0 && (unicode.IsLower(prev) || unicode.IsDigit(prev)):
			flush()
			cur = append(cur, r)
		default:
			cur = append(cur, r)
		}
		prev = r
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			prev = 0
		}
	}
	flush()
	return parts
}

var (
	reField      = lazy(`(\\*")([A-Za-z0-9_.$@-]{1,128})(\\*"\s*:\s*)`)
	reFlag       = lazy(`(^|[\s"'])(--?[A-Za-z][A-Za-z0-9_.-]*)(=|[ \t]+)("[^"\n]*"|'[^'\n]*'|[^\s"']+)`)
	reAssignment = lazy(`(^|[^A-Za-z0-9_.-])([A-Za-z_][A-Za-z0-9_.-]*)([ \t]*(?:=>|=|:)[ \t]*)((?i:(?:basic|bearer|digest|token|negotiate)[ \t]+)?(?:"[^"\n]*"|'[^'\n]*'|[^\s,;"'&}<>?]+))`)
)

// keyword is one prefilter literal; mask has the bit of every rule it enables
// (bit i for shapeRules[i], bitNamed for the name-based rules).
type keyword struct {
	text string
	fold bool
	mask uint64
}

const bitNamed = uint64(1) << 63

// keywordTable indexes the prefilter literals by first byte (both cases for
// case-insensitive ones), built on first use.
var keywordTable = sync.OnceValue(func() *[256][]keyword {
	var t [256][]keyword
	add := func(k keyword) {
		c := k.text[0]
		t[c] = append(t[c], k)
		if k.fold {
			if u := strings.ToUpper(string(c))[0]; u != c {
				t[u] = append(t[u], k)
			}
		}
	}
	for i, r := range shapeRules {
		for _, w := range r.keywords {
			add(keyword{w, r.fold, 1 << i})
		}
	}
	for _, w := range secretWords {
		add(keyword{w, true, bitNamed})
	}
	return &t
})

// prefilter returns the mask of rules whose keywords occur in s, in one pass.
func prefilter(s string) uint64 {
	t := keywordTable()
	var m uint64
	for i := 0; i < len(s); i++ {
		for _, k := range t[s[i]] {
			if m&k.mask == k.mask || len(s)-i < len(k.text) {
				continue
			}
			// Cheap second-byte check before the full comparison (keywords are ASCII, len >= 2).
			if c := s[i+1]; c != k.text[1] && !(k.fold && c|0x20 == k.text[1]) {
				continue
			}
			if k.fold {
				if strings.EqualFold(s[i:i+len(k.text)], k.text) {
					m |= k.mask
				}
			} else if s[i:i+len(k.text)] == k.text {
				m |= k.mask
			}
		}
	}
	return m
}

// String redacts s and returns the result and the number of redactions.
func String(s string) (string, int) {
	n := 0
	m := prefilter(s)
	if m == 0 {
		return s, 0
	}
	for i := range shapeRules {
		if m&(1<<i) == 0 {
			continue
		}
		var c int
		s, c = replaceGroup(shapeRules[i].re(), s, shapeRules[i].kind)
		n += c
	}
	if m&bitNamed == 0 {
		return s, n
	}
	var c int
	if strings.Contains(s, `":`) || strings.Contains(s, `" :`) {
		s, c = redactFields(s)
		n += c
	}
	if strings.Contains(s, "-") {
		s, c = replaceNamed(reFlag(), s, FlagValue, func(name string) bool {
			return IsSecretName(strings.TrimLeft(name, "-"))
		})
		n += c
	}
	if strings.ContainsAny(s, "=:") {
		s, c = replaceNamed(reAssignment(), s, Assignment, IsSecretName)
		n += c
	}
	return s, n
}

func containsAny(s string, words []string) bool {
	for _, w := range words {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// replaceGroup replaces submatch 2 of every match with the kind's marker.
func replaceGroup(re *regexp.Regexp, s, kind string) (string, int) {
	ms := re.FindAllStringSubmatchIndex(s, -1)
	if len(ms) == 0 {
		return s, 0
	}
	var b strings.Builder
	last, n := 0, 0
	for _, m := range ms {
		if strings.HasPrefix(s[m[4]:], markerPrefix) {
			continue
		}
		b.WriteString(s[last:m[4]])
		b.WriteString(Marker(kind))
		last = m[5]
		n++
	}
	if n == 0 {
		return s, 0
	}
	b.WriteString(s[last:])
	return b.String(), n
}

// replaceNamed replaces submatch 4 (the value) when submatch 2 (the name) is
// secret and the value is not already a marker.
func replaceNamed(re *regexp.Regexp, s, kind string, secret func(string) bool) (string, int) {
	ms := re.FindAllStringSubmatchIndex(s, -1)
	var b strings.Builder
	last, n := 0, 0
	for _, m := range ms {
		name, val := s[m[4]:m[5]], s[m[8]:m[9]]
		if !secret(name) || strings.HasPrefix(strings.Trim(val, `"'`), markerPrefix) || (kind == FlagValue && strings.HasPrefix(val, "-")) {
			continue
		}
		b.WriteString(s[last:m[8]])
		q := ""
		if len(val) >= 2 && (val[0] == '"' || val[0] == '\'') && val[len(val)-1] == val[0] {
			q = val[:1]
		}
		b.WriteString(q + Marker(kind) + q)
		last = m[9]
		n++
	}
	if n == 0 {
		return s, 0
	}
	b.WriteString(s[last:])
	return b.String(), n
}

// redactFields replaces the values of JSON fields with secret names, also in
// JSON escaped into a string (\"password\":\"x\"). An object or array value is
// replaced as a whole.
func redactFields(s string) (string, int) {
	re := reField()
	var b strings.Builder
	last, n, pos := 0, 0, 0
	for pos < len(s) {
		m := re.FindStringSubmatchIndex(s[pos:])
		if m == nil {
			break
		}
		for i := range m {
			m[i] += pos
		}
		name := s[m[4]:m[5]]
		openQ := s[m[2]:m[3]]
		closeQ := s[m[6]:m[7]]
		vstart := m[1]
		pos = m[1]
		if !IsSecretName(name) || !strings.HasPrefix(closeQ, strings.TrimSuffix(openQ, `"`)+`"`) {
			continue
		}
		esc := strings.TrimSuffix(openQ, `"`) // "" for plain JSON, `\` for one level of escaping
		vend, quoted := jsonValueEnd(s, vstart, esc)
		if vend <= vstart {
			continue
		}
		if quoted && strings.HasPrefix(s[vstart+len(esc)+1:], markerPrefix) {
			pos = vend
			continue
		}
		b.WriteString(s[last:vstart])
		b.WriteString(esc + `"` + Marker(Field) + esc + `"`)
		last, pos = vend, vend
		n++
	}
	if n == 0 {
		return s, 0
	}
	b.WriteString(s[last:])
	return b.String(), n
}

// jsonValueEnd finds the end of the JSON value starting at i, where quotes
// appear as esc+`"`. It returns the end offset and whether it was a string.
func jsonValueEnd(s string, i int, esc string) (int, bool) {
	q := esc + `"`
	if strings.HasPrefix(s[i:], q) {
		j := i + len(q)
		for j < len(s) {
			if esc == "" {
				switch s[j] {
				case '\\':
					j += 2
					continue
				case '"':
					return j + 1, true
				}
				j++
				continue
			}
			if strings.HasPrefix(s[j:], q) && !strings.HasPrefix(s[j:], esc+esc+`"`) {
				return j + len(q), true
			}
			j++
		}
		return len(s), true
	}
	if i < len(s) && (s[i] == '{' || s[i] == '[') {
		depth := 0
		inStr := false
		for j := i; j < len(s); j++ {
			if strings.HasPrefix(s[j:], q) {
				inStr = !inStr
				j += len(q) - 1
				continue
			}
			if inStr {
				if esc == "" && s[j] == '\\' {
					j++
				}
				continue
			}
			switch s[j] {
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, false
				}
			}
		}
		return len(s), false
	}
	j := i
	for j < len(s) && !strings.ContainsRune(",}] \t\r\n\\", rune(s[j])) {
		j++
	}
	return j, false
}

// Args redacts a command's argv for storage: the value after a secret-named
// flag (--token VALUE), the password of curl -u user:pass, -pVALUE in a
// mysql, mysqldump, mysqladmin or mariadb command, and every shape String
// recognises in each argument. --password-file PATH and mysql -p VALUE are
// kept (a path and a database name).
func Args(argv []string) ([]string, int) {
	out := make([]string, len(argv))
	copy(out, argv)
	n := 0
	prog := ""
	if len(argv) > 0 {
		prog = filepath.Base(argv[0])
	}
	mysql := prog == "mysql" || prog == "mysqldump" || prog == "mysqladmin" || prog == "mariadb"
	for i := 1; i < len(out); i++ {
		a := out[i]
		switch {
		case prog == "curl" && (a == "-u" || a == "--user" || a == "-U" || a == "--proxy-user") && i+1 < len(out):
			if u, _, ok := strings.Cut(out[i+1], ":"); ok {
				out[i+1] = u + ":" + Marker(FlagValue)
				n++
			}
			i++
			continue
		case prog == "curl" && (strings.HasPrefix(a, "-u") || strings.HasPrefix(a, "-U")) && len(a) > 2 && !strings.HasPrefix(a, "--"):
			if u, _, ok := strings.Cut(a[2:], ":"); ok {
				out[i] = a[:2] + u + ":" + Marker(FlagValue)
				n++
			}
			continue
		case mysql && strings.HasPrefix(a, "-p") && len(a) > 2 && !strings.HasPrefix(a, "--"):
			out[i] = "-p" + Marker(FlagValue)
			n++
			continue
		case strings.HasPrefix(a, "-") && !strings.Contains(a, "=") && i+1 < len(out) && !strings.HasPrefix(out[i+1], "-") &&
			IsSecretName(strings.TrimLeft(a, "-")) && !(mysql && a == "-p"):
			out[i+1] = Marker(FlagValue)
			n++
			i++
			continue
		}
	}
	for i, a := range out {
		r, c := String(a)
		out[i] = r
		n += c
	}
	return out, n
}

// Value redacts a decoded JSON-like value: a map entry whose key is a secret
// name is replaced whole (object and array subtrees too), and every string
// passes through String. The input is not modified.
func Value(v any) (any, int) {
	switch t := v.(type) {
	case string:
		return String(t)
	case map[string]any:
		out := make(map[string]any, len(t))
		n := 0
		for k, x := range t {
			if IsSecretName(k) {
				if s, ok := x.(string); ok && strings.HasPrefix(s, markerPrefix) {
					out[k] = s
					continue
				}
				out[k] = Marker(Field)
				n++
				continue
			}
			r, c := Value(x)
			out[k] = r
			n += c
		}
		return out, n
	case []any:
		out := make([]any, len(t))
		n := 0
		for i, x := range t {
			r, c := Value(x)
			out[i] = r
			n += c
		}
		return out, n
	case []string:
		out := make([]string, len(t))
		n := 0
		for i, x := range t {
			r, c := String(x)
			out[i] = r
			n += c
		}
		return out, n
	}
	return v, 0
}
