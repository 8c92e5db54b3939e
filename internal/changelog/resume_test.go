package changelog

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const transcript = `{"type":"user","sessionId":"S","message":{"role":"user","content":"go"}}
{"type":"assistant","sessionId":"S","message":{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{}}]}}
{"type":"user","sessionId":"S","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"R1"}]}}
{"type":"assistant","sessionId":"S","message":{"role":"assistant","content":[{"type":"tool_use","id":"t2","name":"Bash","input":{}}]}}
{"type":"user","sessionId":"S","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":"R2"}]}}
`

func TestResumeConversationCutsAfterResult(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "S.jsonl"), []byte(transcript), 0o600)
	r, err := ResumeConversation(dir, "S", "t1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(r.Transcript)
	s := string(b)
	if !r.IncludesResult || !strings.Contains(s, "R1") || strings.Contains(s, "t2") || strings.Contains(s, `"S"`) || strings.Count(s, r.SessionID) != 3 {
		t.Fatalf("resumed transcript:\n%s", s)
	}
	if filepath.Base(r.Transcript) != r.SessionID+".jsonl" || len(r.SessionID) != 36 {
		t.Fatalf("resumed %+v", r)
	}
	// The original is untouched.
	if o, _ := os.ReadFile(filepath.Join(dir, "S.jsonl")); string(o) != transcript {
		t.Fatal("original transcript changed")
	}
}

func TestResumeConversationRefusals(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "S.jsonl"), []byte(transcript), 0o600)
	os.WriteFile(filepath.Join(dir, "bad.jsonl"), []byte("{not json\n"), 0o600)
	outside := filepath.Join(t.TempDir(), "X.jsonl")
	os.WriteFile(outside, []byte(transcript), 0o600)
	os.Symlink(outside, filepath.Join(dir, "link.jsonl"))
	cases := []struct{ session, tool string }{
		{"../S", "t1"}, {"", "t1"}, {"missing", "t1"}, {"S", "t9"}, {"link", "t1"}, {"bad", "t1"},
	}
	for _, tc := range cases {
		if _, err := ResumeConversation(dir, tc.session, tc.tool); err == nil {
			t.Errorf("ResumeConversation(%q, %q) accepted it", tc.session, tc.tool)
		} else if tc.session != "bad" && !errors.Is(err, ErrNoTranscript) {
			t.Errorf("ResumeConversation(%q, %q): %v", tc.session, tc.tool, err)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 3 {
		t.Fatalf("a refused resume wrote a file: %v", entries)
	}
}

func TestClaudeProjectDir(t *testing.T) {
	if got := ClaudeProjectDir("/h", "/tmp/e1/my_repo.x"); got != "/h/.claude/projects/-tmp-e1-my-repo-x" {
		t.Fatal(got)
	}
}
