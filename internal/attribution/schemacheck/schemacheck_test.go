package schemacheck

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// example is the example record of the specification's section 6.2.
const example = `{
  "version": "0.1.0",
  "id": "550e8400-e29b-41d4-a716-446655440000",
  "timestamp": "2026-01-23T14:30:00Z",
  "vcs": {"type": "git", "revision": "a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0"},
  "tool": {"name": "cursor", "version": "2.4.0"},
  "files": [
    {"path": "src/utils/parser.ts", "conversations": [
      {"url": "https://api.cursor.com/v1/conversations/12345",
       "contributor": {"type": "ai", "model_id": "anthropic/claude-opus-4-5-20251101"},
       "ranges": [{"start_line": 42, "end_line": 67, "content_hash": "murmur3:9f2e8a1b"}],
       "related": [{"type": "session", "url": "https://api.cursor.com/v1/sessions/67890"}]}]}
  ],
  "metadata": {"confidence": 0.95, "dev.cursor": {"workspace_id": "ws-abc123"}}
}`

func schema(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("../testdata/agent-trace-0.1.0.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCheck: the specification's example passes; each break of a required
// field, type, enum, pattern, bound or format is found.
func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(m map[string]any)
		want string // "" for valid
	}{
		{"the example", func(map[string]any) {}, ""},
		{"no id", func(m map[string]any) { delete(m, "id") }, `$: lacks the required "id"`},
		{"no files", func(m map[string]any) { delete(m, "files") }, `$: lacks the required "files"`},
		{"bad version", func(m map[string]any) { m["version"] = "1.0" }, `$.version: "1.0" does not match`},
		{"bad uuid", func(m map[string]any) { m["id"] = "nope" }, `$.id: "nope" is not a uuid`},
		{"bad timestamp", func(m map[string]any) { m["timestamp"] = "yesterday" }, `$.timestamp: "yesterday" is not an RFC 3339`},
		{"bad vcs type", func(m map[string]any) { m["vcs"].(map[string]any)["type"] = "cvs" }, `$.vcs.type: cvs is not one of`},
		{"vcs without revision", func(m map[string]any) { delete(m["vcs"].(map[string]any), "revision") }, `$.vcs: lacks the required "revision"`},
		{"file without conversations", func(m map[string]any) { delete(file(m), "conversations") }, `$.files[0]: lacks the required "conversations"`},
		{"bad contributor", func(m map[string]any) { conv(m)["contributor"].(map[string]any)["type"] = "robot" }, `contributor.type: robot is not one of`},
		{"long model id", func(m map[string]any) { conv(m)["contributor"].(map[string]any)["model_id"] = strings.Repeat("m", 251) }, "longer than 250"},
		{"line 0", func(m map[string]any) { rng(m)["start_line"] = 0 }, "start_line: 0 is below the minimum 1"},
		{"fractional line", func(m map[string]any) { rng(m)["end_line"] = 1.5 }, "end_line: is number, not integer"},
		{"range without end", func(m map[string]any) { delete(rng(m), "end_line") }, `lacks the required "end_line"`},
		{"relative url", func(m map[string]any) { conv(m)["url"] = "conversations/1" }, `url: "conversations/1" is not an absolute URI`},
		{"string ranges", func(m map[string]any) { conv(m)["ranges"] = "1-2" }, "ranges: is string, not array"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m map[string]any
			if err := json.Unmarshal([]byte(example), &m); err != nil {
				t.Fatal(err)
			}
			tc.edit(m)
			doc, _ := json.Marshal(m)
			errs, err := Check(schema(t), doc)
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(errs, "\n")
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("violations %q, want %q", got, tc.want)
			}
		})
	}
}

func file(m map[string]any) map[string]any { return m["files"].([]any)[0].(map[string]any) }
func conv(m map[string]any) map[string]any {
	return file(m)["conversations"].([]any)[0].(map[string]any)
}
func rng(m map[string]any) map[string]any { return conv(m)["ranges"].([]any)[0].(map[string]any) }
