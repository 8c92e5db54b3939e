package codex

import (
	"slices"
	"testing"
)

func TestCapabilitiesNeverClaimCompleteCapture(t *testing.T) {
	d := Capabilities()
	if d.CompleteCapture {
		t.Fatal("Codex must not claim complete capture")
	}
	if got := d.Available(); !slices.Equal(got, []string{"session_boundaries", "selected_edit_starts"}) {
		t.Fatalf("available = %v", got)
	}
	for _, f := range []string{"user_prompts", "assistant_messages", "tool_completions", "retrospective_history"} {
		if !slices.Contains(d.Unavailable(), f) {
			t.Fatalf("%s must be declared unavailable: %v", f, d.Unavailable())
		}
	}
	seen := map[string]bool{}
	for _, f := range d.Fields {
		if seen[f.Name] || f.Note == "" {
			t.Fatalf("field %+v repeated or unexplained", f)
		}
		seen[f.Name] = true
	}
}
