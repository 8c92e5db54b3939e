package hookcore

import (
	"bytes"
	"testing"
)

// TestWarningsFlush: a hook's warnings become one line on stderr, a panic
// one more warning of it (and the hook returns normally); nothing to say
// prints nothing.
func TestWarningsFlush(t *testing.T) {
	for _, tc := range []struct {
		name  string
		add   []string
		panic bool
		want  string
	}{
		{"nothing", []string{"", ""}, false, ""},
		{"two", []string{"a", "", "b"}, false, "agentscm: warning: a; b\n"},
		{"panic", []string{"a"}, true, "agentscm: warning: a; hook failed: internal error: boom\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			code := func() int {
				var w Warnings
				defer w.Flush(&out)
				for _, s := range tc.add {
					w.Add(s)
				}
				if tc.panic {
					panic("boom")
				}
				return 0
			}()
			if code != 0 || out.String() != tc.want {
				t.Fatalf("exit %d, stderr %q, want %q", code, out.String(), tc.want)
			}
		})
	}
}
