package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.3.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.time", Value: "2026-12-01T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	for _, tc := range []struct {
		prog, stamp string
		bi          *debug.BuildInfo
		want        string
		prefix      bool
	}{
		{"agentscm", "", bi, "agentscm v0.3.0 commit abc123 (modified) (committed 2026-12-01T10:00:00Z) go1.26.8", false},
		{"agentscm-hook", "20261202T080000Z-abc123", bi, "agentscm-hook v0.3.0 build 20261202T080000Z-abc123 commit abc123 (modified) (committed 2026-12-01T10:00:00Z) go1.26.8", false},
		{"agentdiff", "", &debug.BuildInfo{GoVersion: "go1.26.8"}, "agentdiff (devel) go1.26.8 (no VCS stamp", true},
		{"agentscm-hook-intake", "s1", &debug.BuildInfo{GoVersion: "go1.26.8"}, "agentscm-hook-intake (devel) build s1 go1.26.8", false},
	} {
		got := versionOf(tc.prog, tc.stamp, tc.bi)
		if (tc.prefix && !strings.HasPrefix(got, tc.want)) || (!tc.prefix && got != tc.want) {
			t.Errorf("versionOf(%s) = %q, want %q", tc.prog, got, tc.want)
		}
	}
}

func TestBuildOf(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{"agentscm v0.3.0 build s1 go1.26.8", "agentscm-hook v0.3.0 build s1 go1.26.8\n", true},
		{"agentscm v0.3.0 build s1 go1.26.8", "agentscm-hook v0.3.0 build s2 go1.26.8", false},
		{"agentscm (devel) commit abc go1.26.8", "agentscm-hook-intake (devel) commit abd go1.26.8", false},
	} {
		if got := BuildOf(tc.a) == BuildOf(tc.b); got != tc.same {
			t.Errorf("BuildOf(%q) == BuildOf(%q): %v, want %v", tc.a, tc.b, got, tc.same)
		}
	}
}
