package redact

import (
	"encoding/json"
	"strings"
	"testing"
)

// plantedSecret is the secret value the fuzz tests plant; planted forms put
// it where the seed says a secret is recognised.
const plantedSecret = "Zq7Wm3Kp9Xv2Lr8Tn4"

var plantedForms = []string{
	"ghp_" + plantedSecret + plantedSecret, // a shape: found whatever surrounds it
	"--password " + plantedSecret,
	"--api-key=" + plantedSecret,
	"curl -u bob:" + plantedSecret + " https://x",
	"mysql -p" + plantedSecret + " db",
	"DB_PASS=" + plantedSecret,
	"'auth_token' => '" + plantedSecret + "'",
	"Authorization: Bearer " + plantedSecret,
	`{"password":"` + plantedSecret + `"}`,
	`"{\"token\":\"` + plantedSecret + `\"}"`,
	"https://u:" + plantedSecret + "@host/x",
}

// checkProperties is what every redaction must satisfy whatever the input:
// no panic, redacting again changes nothing, the count agrees with the
// change, and valid JSON stays valid in JSON mode.
func checkProperties(t *testing.T, s string, o Options) Result {
	r := Redact(s, o)
	again := Redact(r.Text, o)
	if again.Text != r.Text || again.Redactions != 0 {
		t.Fatalf("not idempotent (%+v): %q -> %q -> %q", o, s, r.Text, again.Text)
	}
	if (r.Redactions > 0) != (r.Text != s) || (len(r.Kinds) > 0) != (r.Redactions > 0) {
		t.Fatalf("count %d, kinds %v inconsistent: %q -> %q", r.Redactions, r.Kinds, s, r.Text)
	}
	if o.JSON && json.Valid([]byte(s)) && !json.Valid([]byte(r.Text)) {
		t.Fatalf("valid JSON became invalid: %q -> %q", s, r.Text)
	}
	return r
}

func FuzzRedact(f *testing.F) {
	f.Add(`{"password":"x"}`, false)
	f.Add(`"{\"token\":{\"a\":[\"]\"]}}"`, true)
	f.Add("A=1 --token x postgres://u:p@h", false)
	f.Add(`{"c":"curl -u a:b x\nmysql -pQ","auth":{"k":[1]},"ghp_`+strings.Repeat("q", 36)+`":1}`, true)
	f.Add("'auth_token' => 'v' Authorization: Bearer abcdefgh12345678", false)
	f.Fuzz(func(t *testing.T, s string, js bool) {
		checkProperties(t, s, Options{JSON: js})
	})
}

// FuzzPlanted plants a secret in one of the seed's forms between fuzzed
// text: the result never holds it (more often than the fuzzed text itself
// did), and keeps the properties.
func FuzzPlanted(f *testing.F) {
	f.Add("echo start;", "; echo end", uint8(0))
	f.Add("", "", uint8(3))
	f.Add("x'", "\"", uint8(6))
	f.Fuzz(func(t *testing.T, before, after string, form uint8) {
		// The fuzzed text must not end a line or a command in a way that
		// changes what the planted form is (a shape is found regardless).
		p := plantedForms[int(form)%len(plantedForms)]
		if form%uint8(len(plantedForms)) != 0 && (strings.ContainsAny(before+after, "\"'`\\\n\r;|&$(){}[]<>=:,@#") || strings.Contains(before+after, "-----")) {
			t.Skip()
		}
		s := before + " " + p + " " + after
		r := checkProperties(t, s, Options{})
		if strings.Count(r.Text, plantedSecret) > strings.Count(before+after, plantedSecret) {
			t.Fatalf("planted secret survived: %q -> %q", s, r.Text)
		}
	})
}

// prefilter must agree with plain (case-folded where declared) substring search.
func FuzzPrefilter(f *testing.F) {
	f.Add("Bearer x AKIA sk-ant- PASS token curl")
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
		for _, w := range commandWords {
			if strings.Contains(s, w) {
				want |= bitCommand
			}
		}
		if got != want {
			t.Fatalf("prefilter(%q) = %b, want %b", s, got, want)
		}
	})
}

// TestPlantedForms runs every planted form alone and in a JSON string.
func TestPlantedForms(t *testing.T) {
	for _, p := range plantedForms {
		r := checkProperties(t, p, Options{})
		if strings.Contains(r.Text, plantedSecret) {
			t.Errorf("text: %q -> %q", p, r.Text)
		}
		enc, _ := json.Marshal(map[string]string{"content": p})
		r = checkProperties(t, string(enc), Options{JSON: true})
		if strings.Contains(r.Text, plantedSecret) {
			t.Errorf("json: %s -> %s", enc, r.Text)
		}
	}
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
