package api

import (
	"strings"
	"testing"
)

// TestSourceBindingValidation: the coverage fields of a source binding are
// bounded names; a manifest size is not negative.
func TestSourceBindingValidation(t *testing.T) {
	h := strings.Repeat("a", 40)
	for _, tc := range []struct {
		name string
		s    SourceBinding
		ok   bool
	}{
		{"exact", SourceBinding{Head: h, Tree: h, MergeBase: h}, true},
		{"dirty retained", SourceBinding{Head: h, Dirty: true, ManifestDigest: strings.Repeat("b", 64), ManifestBytes: 300, Retained: true}, true},
		{"partial", SourceBinding{Head: h, Partial: true, Omissions: []string{"index_state", "submodule"}}, true},
		{"stopped", SourceBinding{Head: h, Partial: true, Stopped: "not_utf8"}, true},
		{"negative size", SourceBinding{ManifestBytes: -1}, false},
		{"omission with a slash", SourceBinding{Omissions: []string{"a/b"}}, false},
		{"empty omission", SourceBinding{Omissions: []string{""}}, false},
		{"too many omissions", SourceBinding{Omissions: strings.Split(strings.Repeat("x,", MaxSourceOmissions)+"x", ",")}, false},
		{"stopped control character", SourceBinding{Stopped: "a\nb"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &Envelope{Identity: strings.Repeat("ab", 32), Type: TypeActionStart, WorkID: "wrk_1", Generation: 1, Session: "default",
				ActionStart: &ActionStart{ActionID: "a", Tool: "Bash", Class: "execution", Source: &tc.s}}
			if err := e.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}
