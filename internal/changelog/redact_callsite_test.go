package changelog

import (
	"encoding/json"
	"strings"
	"testing"
)

// A transcript copy is redacted line by line by the one redaction function
// in JSON mode: the escaped command inside a JSONL record comes out with the
// same marker as a hook body, the line stays valid JSON, and a line without
// a secret keeps its exact bytes.
func TestTranscriptCopyUsesTheOneRedaction(t *testing.T) {
	const secret = "S3cr3tPw-9q"
	line := `{"type":"assistant","message":{"content":[{"type":"tool_use","input":{"command":"curl -u bob:` + secret + ` https://api.example\nmysql -p` + secret + ` app"}}]}}` + "\n"
	clean := `{"type":"user","message":{"content":"max_tokens: 5, \"quoted\""},"usage":{"input_tokens":3}}` + "\n"
	out, n := redactLines([]byte(clean + line))
	got := string(out)
	want := clean + `{"type":"assistant","message":{"content":[{"type":"tool_use","input":{"command":"curl -u bob:[REDACTED:flag_value] https://api.example\nmysql -p[REDACTED:flag_value] app"}}]}}` + "\n"
	if got != want || n != 2 {
		t.Fatalf("redactLines (%d):\n%s\nwant\n%s", n, got, want)
	}
	for _, l := range strings.Split(strings.TrimSpace(got), "\n") {
		if !json.Valid([]byte(l)) {
			t.Fatalf("invalid JSON line %s", l)
		}
	}
}
