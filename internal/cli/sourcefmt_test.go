package cli

import (
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/hub/api"
)

func TestDescribeSource(t *testing.T) {
	h := strings.Repeat("a", 40)
	for _, tc := range []struct {
		s    *api.SourceBinding
		want string
	}{
		{nil, "source=unbound"},
		{&api.SourceBinding{Head: h, MergeBase: h}, "source=aaaaaaaaaaaa merge-base=aaaaaaaaaaaa exact"},
		{&api.SourceBinding{Head: h, Dirty: true, ManifestDigest: strings.Repeat("b", 64), Partial: true, Omissions: []string{"index_state"}},
			"source=aaaaaaaaaaaa dirty manifest=sha256:bbbbbbbbbbbb partial(index_state)"},
		{&api.SourceBinding{Dirty: true, Partial: true, Stopped: "not_utf8"}, "source=unborn dirty stopped=not_utf8"},
	} {
		if got := describeSource(tc.s); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.s, got, tc.want)
		}
	}
}
