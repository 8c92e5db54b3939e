// Package redact is the project's one, best-effort secret redaction. Every
// path that retains a body (hook payload bodies, transcript records, the
// changelog's transcript copies, imports, agentdiff's stored argv and
// events) goes through Redact; String, Args and Value are thin wrappers
// over it. It replaces well-known credential shapes, secret-named flag
// values (including curl -u user:pass and -pVALUE after mysql, mysqldump,
// mysqladmin and mariadb), secret assignments and secret JSON fields with
// [REDACTED:<kind>]. Each rule is guarded by literal ASCII keywords, found in
// one pass over the text through a first-byte table, so text without them
// costs that pass only; regular expressions compile lazily on first use,
// never at package init.
//
// Redaction is heuristic: a secret with no distinctive shape or name is not
// recognised, and the package does not remove personal data or code.
package redact

import (
	"encoding/json"
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
	reField = lazy(`(\\*")([A-Za-z0-9_.$@-]{1,128})(\\*"\s*:\s*)`)
	// The name-based rules start at a name that contains a secret word
	// (namedSpans) and match what follows it, anchored, within its line:
	// reFlagTail after --name (groups: 1 a closing quote of a quoted flag,
	// "--token" "v"; 2 the separator; 3 the value) and
	// reAssignTail after NAME (groups: 1 a closing quote of a quoted name,
	// 'auth_token' => 'v'; 2 the separator, also after an index bracket,
	// cfg["db_password"] = "v"; 3 an auth scheme kept readable, Basic,
	// Bearer, ...; 4 the value).
	reFlagTail   = lazy(`^(['"]?)(=|[ \t]+)("[^"\n]*"|'[^'\n]*'|[^\s"']+)`)
	reAssignTail = lazy(`^(['"]?)(\]?[ \t]*(?:=>|=|:)[ \t]*)((?i:(?:basic|bearer|digest|token|negotiate)[ \t]+)?)("[^"\n]*"|'[^'\n]*'|[^\s,;"'&}<>?]+)`)
)

// keyword is one prefilter literal; mask has the bit of every rule it enables
// (bit i for shapeRules[i], bitNamed for the name-based rules, bitCommand for
// the command rules).
type keyword struct {
	text string
	fold bool
	mask uint64
}

const (
	bitNamed   = uint64(1) << 63
	bitCommand = uint64(1) << 62
)

// commandWords prefilter the command rules (mysqldump and mysqladmin
// contain mysql).
var commandWords = []string{"curl", "mysql", "mariadb"}

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
	for _, w := range commandWords {
		add(keyword{w, false, bitCommand})
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

// allKinds is every kind in the seed's order; Result.Kinds follows it.
var allKinds = []string{AWSAccessKeyID, GitHubToken, GitLabToken, SlackToken, AnthropicKey, OpenAIKey,
	StripeKey, GoogleAPIKey, NPMToken, PyPIToken, HuggingFaceToken, JWT, Bearer, PrivateKey, URLPassword,
	FlagValue, Assignment, Field}

// tally counts redactions and the kinds seen.
type tally struct {
	n     int
	kinds uint32
}

func (t *tally) add(kind string, n int) {
	if n <= 0 {
		return
	}
	t.n += n
	for i, k := range allKinds {
		if k == kind {
			t.kinds |= 1 << i
		}
	}
}

func (t *tally) result(s string) Result {
	r := Result{Text: s, Redactions: t.n}
	for i, k := range allKinds {
		if t.kinds&(1<<i) != 0 {
			r.Kinds = append(r.Kinds, k)
		}
	}
	return r
}

// Options say what kind of text a body is.
type Options struct {
	// JSON says the input is one JSON text (a document, a JSONL line, a tool
	// input). When it is valid JSON, every string value is decoded,
	// redacted as text and re-encoded in place, and a field whose name is
	// secret has its whole value (a subtree too) replaced with
	// [REDACTED:field]; all other bytes are kept, so the result is valid
	// JSON. Input that is not valid JSON is redacted as plain text.
	JSON bool
}

// Result is the outcome of Redact.
type Result struct {
	// Text is the redacted text (the input itself when nothing matched).
	Text string
	// Redactions is the number of values replaced.
	Redactions int
	// Kinds lists the distinct kinds replaced, in the seed's order.
	Kinds []string
}

// Redact is the project's one redaction function: every retained body
// passes through it. It replaces every credential shape and secret value
// it recognises with [REDACTED:<kind>] and counts the replacements.
// Redacting its output again changes nothing.
func Redact(s string, o Options) Result {
	var t tally
	if o.JSON {
		s = redactJSON(s, &t)
	} else {
		s = redactText(s, &t)
	}
	return t.result(s)
}

// String redacts s as plain text and returns the result and the number of
// redactions: Redact(s, Options{}).
func String(s string) (string, int) {
	r := Redact(s, Options{})
	return r.Text, r.Redactions
}

func redactText(s string, t *tally) string {
	m := prefilter(s)
	if m == 0 {
		return s
	}
	for i := range shapeRules {
		if m&(1<<i) == 0 {
			continue
		}
		var c int
		s, c = replaceGroup(shapeRules[i].re(), s, shapeRules[i].kind)
		t.add(shapeRules[i].kind, c)
	}
	if m&bitCommand != 0 {
		var c int
		s, c = redactCommands(s)
		t.add(FlagValue, c)
	}
	if m&bitNamed == 0 {
		return s
	}
	var c int
	if strings.Contains(s, `":`) || strings.Contains(s, `" :`) {
		s, c = redactFields(s)
		t.add(Field, c)
	}
	if strings.ContainsAny(s, "=:") || strings.Contains(s, "-") {
		var f, a int
		s, f, a = redactNamed(s)
		t.add(FlagValue, f)
		t.add(Assignment, a)
	}
	return s
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

// isNameByte reports whether c can be part of a flag, variable or field
// name as the name-based rules see it.
func isNameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-'
}

// namedSpans returns the maximal name runs of s that contain a secret word
// (the only names IsSecretName can accept), in order, without overlap.
func namedSpans(s string) [][2]int {
	t := keywordTable()
	var spans [][2]int
	for i := 0; i < len(s); i++ {
		for _, k := range t[s[i]] {
			if k.mask != bitNamed || len(s)-i < len(k.text) || !strings.EqualFold(s[i:i+len(k.text)], k.text) {
				continue
			}
			a, b := i, i
			for a > 0 && isNameByte(s[a-1]) {
				a--
			}
			for b < len(s) && isNameByte(s[b]) {
				b++
			}
			spans = append(spans, [2]int{a, b})
			i = b - 1
			break
		}
	}
	return spans
}

// redactNamed applies the flag rule (the value after a secret-named
// --flag, as --flag=v or --flag v) and the assignment rule (NAME=value,
// NAME: value, NAME => value, also with the name quoted) to s. A name
// inside a marker ([REDACTED:github_token]) and a value that already is a
// marker are left alone; a flag followed by another flag has no value.
func redactNamed(s string) (string, int, int) {
	spans := namedSpans(s)
	if len(spans) == 0 {
		return s, 0, 0
	}
	var b strings.Builder
	last, flags, assigns := 0, 0, 0
	for _, sp := range spans {
		a, e := sp[0], sp[1]
		if a < last || strings.HasSuffix(s[:a], markerPrefix) {
			continue
		}
		name := s[a:e]
		line := s[e:]
		if i := strings.IndexByte(line, '\n'); i >= 0 {
			line = line[:i]
		}
		var m []int
		var kind string
		if name[0] == '-' {
			// --?[A-Za-z]... after start, blank or quote.
			bare := strings.TrimPrefix(strings.TrimPrefix(name, "-"), "-")
			if bare == "" || !isLetter(bare[0]) || (a > 0 && !strings.ContainsRune(" \t\n\r\f\v\"'", rune(s[a-1]))) || !IsSecretName(bare) {
				continue
			}
			if m = reFlagTail().FindStringSubmatchIndex(line); m == nil {
				continue
			}
			if cq := line[m[2]:m[3]]; cq != "" && (a == 0 || s[a-1] != cq[0]) {
				continue
			}
			m = []int{m[6], m[7]} // the value
			kind = FlagValue
		} else {
			if !isLetter(name[0]) && name[0] != '_' || !IsSecretName(name) {
				continue
			}
			if m = reAssignTail().FindStringSubmatchIndex(line); m == nil {
				continue
			}
			if cq := line[m[2]:m[3]]; cq != "" && (a == 0 || s[a-1] != cq[0]) {
				continue
			}
			m = []int{m[8], m[9]}
			kind = Assignment
		}
		vs, ve := e+m[0], e+m[1]
		val := s[vs:ve]
		if strings.HasPrefix(strings.Trim(val, `"'`), markerPrefix) || (kind == FlagValue && strings.HasPrefix(val, "-")) {
			continue
		}
		q := ""
		if len(val) >= 2 && (val[0] == '"' || val[0] == '\'') && val[len(val)-1] == val[0] {
			q = val[:1]
		}
		b.WriteString(s[last:vs])
		b.WriteString(q + Marker(kind) + q)
		last = ve
		if kind == FlagValue {
			flags++
		} else {
			assigns++
		}
	}
	if last == 0 {
		return s, 0, 0
	}
	b.WriteString(s[last:])
	return b.String(), flags, assigns
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

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
		if strings.HasPrefix(s[vstart:], markerPrefix) {
			// An unquoted marker another rule left ("auth":[REDACTED:assignment]).
			continue
		}
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

// reCommand finds a curl, mysql, mysqldump, mysqladmin or mariadb command
// (with or without a directory) and its arguments up to the end of the
// line or the next ;, |, && or lone &.
var reCommand = lazy(`(^|[^A-Za-z0-9_.-])((?:[A-Za-z0-9_.~-]*/)*(?:curl|mysql|mysqldump|mysqladmin|mariadb)(?:\.exe)?)([ \t](?:[^\n;|&]|&[^&\n;|])*)`)

// commandProg is the program name of argv[0] as the command rules see it.
func commandProg(arg0 string) string {
	return strings.TrimSuffix(filepath.Base(arg0), ".exe")
}

func isMySQL(prog string) bool {
	return prog == "mysql" || prog == "mysqldump" || prog == "mysqladmin" || prog == "mariadb"
}

// cmdHit says that argument arg holds a secret: it becomes keep + marker.
type cmdHit struct {
	arg  int
	keep string
}

// commandSecrets applies the command rules to the (unquoted) arguments of
// prog: the password of curl -u/--user/-U/--proxy-user user:pass and
// -pVALUE of a mysql, mysqldump, mysqladmin or mariadb command. mysql -p
// VALUE is kept (the value is a database name there). Text and argv share
// these rules.
func commandSecrets(prog string, args []string) []cmdHit {
	var hits []cmdHit
	done := func(v string) bool { return v == "" || strings.HasPrefix(v, markerPrefix) }
	userPass := func(arg int, keep, v string) {
		if u, p, ok := strings.Cut(v, ":"); ok && !done(p) {
			hits = append(hits, cmdHit{arg, keep + u + ":"})
		}
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case prog == "curl" && (a == "-u" || a == "--user" || a == "-U" || a == "--proxy-user"):
			if i+1 < len(args) {
				userPass(i+1, "", args[i+1])
				i++
			}
		case prog == "curl" && (strings.HasPrefix(a, "--user=") || strings.HasPrefix(a, "--proxy-user=")):
			k, v, _ := strings.Cut(a, "=")
			userPass(i, k+"=", v)
		case prog == "curl" && len(a) > 2 && (a[:2] == "-u" || a[:2] == "-U"):
			userPass(i, a[:2], a[2:])
		case isMySQL(prog) && len(a) > 2 && a[:2] == "-p" && !done(a[2:]):
			hits = append(hits, cmdHit{i, "-p"})
		}
	}
	return hits
}

// redactCommands applies the command rules to every curl or mysql-family
// command line in s, splitting its arguments like a shell (quotes kept).
func redactCommands(s string) (string, int) {
	ms := reCommand().FindAllStringSubmatchIndex(s, -1)
	if len(ms) == 0 {
		return s, 0
	}
	var b strings.Builder
	last, n := 0, 0
	for _, m := range ms {
		prog := commandProg(s[m[4]:m[5]])
		spans := shellWords(s, m[6], m[7])
		args := make([]string, len(spans))
		for i, sp := range spans {
			args[i] = unquote(s[sp[0]:sp[1]])
		}
		for _, h := range commandSecrets(prog, args) {
			sp := spans[h.arg]
			raw := s[sp[0]:sp[1]]
			q := ""
			if len(raw) >= 2 && (raw[0] == '"' || raw[0] == '\'') && raw[len(raw)-1] == raw[0] {
				q = raw[:1]
			}
			b.WriteString(s[last:sp[0]])
			b.WriteString(q + h.keep + Marker(FlagValue) + q)
			last = sp[1]
			n++
		}
	}
	if n == 0 {
		return s, 0
	}
	b.WriteString(s[last:])
	return b.String(), n
}

// shellWords splits s[from:to] at unquoted blanks into word spans.
func shellWords(s string, from, to int) [][2]int {
	var spans [][2]int
	i := from
	for i < to {
		for i < to && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		if i >= to {
			break
		}
		start := i
		var q byte
		for i < to && (q != 0 || (s[i] != ' ' && s[i] != '\t')) {
			switch c := s[i]; {
			case q == 0 && (c == '"' || c == '\''):
				q = c
			case c == q:
				q = 0
			case c == '\\' && q != '\'' && i+1 < to:
				i++
			}
			i++
		}
		spans = append(spans, [2]int{start, i})
	}
	return spans
}

// unquote removes shell quotes and backslash escapes (best effort).
func unquote(w string) string {
	if !strings.ContainsAny(w, `"'\`) {
		return w
	}
	var b strings.Builder
	var q byte
	for i := 0; i < len(w); i++ {
		switch c := w[i]; {
		case q == 0 && (c == '"' || c == '\''):
			q = c
		case c == q:
			q = 0
		case c == '\\' && q != '\'' && i+1 < len(w):
			i++
			b.WriteByte(w[i])
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// redactJSON redacts one JSON text: secret-named fields whole, every other
// string value as text, re-encoded in place. Invalid JSON is redacted as
// text.
func redactJSON(s string, t *tally) string {
	if prefilter(s) == 0 && !strings.Contains(s, `\u`) && !strings.Contains(s, `\/`) {
		return s
	}
	if !json.Valid([]byte(s)) {
		// Redacting may make it valid JSON ({"a":00} -> {"a":"[REDACTED:field]"}):
		// then it gets the JSON pass too, as redacting it again would.
		s = redactText(s, t)
		if !json.Valid([]byte(s)) {
			return s
		}
	}
	var b strings.Builder
	last := 0
	for i := 0; i < len(s); {
		if s[i] != '"' {
			i++
			continue
		}
		end := jsonStringEnd(s, i)
		lit := s[i:end]
		j := end
		for j < len(s) && (s[j] == ' ' || s[j] == '\t' || s[j] == '\r' || s[j] == '\n') {
			j++
		}
		if j < len(s) && s[j] == ':' {
			// A key: a credential shape in it is replaced like in a value,
			// and a secret name replaces its whole value. A key holding a
			// marker is never a secret name (so redacting again is a no-op).
			i = end
			if !mayHide(lit, ^uint64(0)) {
				continue
			}
			k := jsonUnquote(lit)
			if r := redactText(k, t); r != k {
				b.WriteString(s[last : end-len(lit)])
				appendJSONString(&b, r)
				last = end
			}
			if strings.Contains(k, markerPrefix) || !IsSecretName(k) {
				continue
			}
			vs := j + 1
			for vs < len(s) && (s[vs] == ' ' || s[vs] == '\t' || s[vs] == '\r' || s[vs] == '\n') {
				vs++
			}
			ve, quoted := jsonValueEnd(s, vs, "")
			i = ve
			if quoted && strings.HasPrefix(jsonUnquote(s[vs:ve]), markerPrefix) {
				continue
			}
			b.WriteString(s[last:vs])
			b.WriteString(`"` + Marker(Field) + `"`)
			last = ve
			t.add(Field, 1)
			continue
		}
		i = end
		if strings.Contains(lit, `\`) && !mayHide(lit, ^uint64(0)) {
			continue // (without an escape, redactText's own prefilter is the check)
		}
		v := jsonUnquote(lit)
		if r := redactText(v, t); r != v {
			b.WriteString(s[last : i-len(lit)])
			appendJSONString(&b, r)
			last = end
		}
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// mayHide reports whether the JSON string literal lit may decode to text
// that a rule in mask looks at: a keyword in its raw form, or an escape
// (\u, \/) that could hide one.
func mayHide(lit string, mask uint64) bool {
	return prefilter(lit)&mask != 0 || strings.Contains(lit, `\u`) || strings.Contains(lit, `\/`)
}

// jsonStringEnd returns the offset after the string literal starting at i.
func jsonStringEnd(s string, i int) int {
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(s)
}

// jsonUnquote decodes a valid JSON string literal.
func jsonUnquote(lit string) string {
	if !strings.Contains(lit, `\`) {
		return lit[1 : len(lit)-1]
	}
	var v string
	if json.Unmarshal([]byte(lit), &v) != nil {
		return lit[1 : len(lit)-1]
	}
	return v
}

// appendJSONString writes s as a JSON string literal.
func appendJSONString(b *strings.Builder, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
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
// flag (--token VALUE), the command rules Redact applies to command lines
// (curl -u user:pass, -pVALUE in a mysql-family command), and every shape
// Redact recognises in each argument. --password-file PATH and mysql -p
// VALUE are kept (a path and a database name).
func Args(argv []string) ([]string, int) {
	out := make([]string, len(argv))
	copy(out, argv)
	if len(argv) == 0 {
		return out, 0
	}
	n := 0
	prog := commandProg(argv[0])
	for _, h := range commandSecrets(prog, out[1:]) {
		out[h.arg+1] = h.keep + Marker(FlagValue)
		n++
	}
	for i := 1; i < len(out); i++ {
		a := out[i]
		if strings.HasPrefix(a, "-") && !strings.Contains(a, "=") && i+1 < len(out) && !strings.HasPrefix(out[i+1], "-") &&
			!strings.HasPrefix(out[i+1], markerPrefix) && IsSecretName(strings.TrimLeft(a, "-")) && !(isMySQL(prog) && a == "-p") {
			out[i+1] = Marker(FlagValue)
			n++
			i++
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
