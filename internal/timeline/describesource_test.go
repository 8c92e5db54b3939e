package timeline

import (
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/hub/api"
)

// TestDescribeSourceRetention: show says the dirty bytes are kept in the
// private spool only when the binding says they were retained.
func TestDescribeSourceRetention(t *testing.T) {
	h, m := strings.Repeat("a", 40), strings.Repeat("b", 64)
	for _, tc := range []struct {
		s              *api.SourceBinding
		want, unwanted string
	}{
		{&api.SourceBinding{Head: h, Dirty: true, ManifestDigest: m, Retained: true}, "with uncommitted changes (manifest sha256:bbbbbbbbbbbb, kept in the private spool)", "digest only"},
		{&api.SourceBinding{Head: h, Dirty: true, ManifestDigest: m, Partial: true, Omissions: []string{"bytes_unwantedretained"}},
			"with uncommitted changes (manifest sha256:bbbbbbbbbbbb, digest only: the bytes are not kept)", "kept in the private spool"},
		{&api.SourceBinding{Head: h, Dirty: true, Partial: true, Stopped: "spool_refused"}, "capture stopped: spool_refused", "kept in the private spool"},
	} {
		got := DescribeSource(tc.s)
		if !strings.Contains(got, tc.want) || strings.Contains(got, tc.unwanted) {
			t.Errorf("%+v: %q", tc.s, got)
		}
	}
}
