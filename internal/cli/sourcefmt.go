package cli

import (
	"strings"

	"github.com/agentscm/agentscm/internal/hub/api"
)

// describeSource is the one-line text form of an action's source binding in
// `change-capture show`: head and merge-base (12 hex), dirty or
// transformed, the manifest identity, and exact, partial (with the
// omissions) or stopped (with the reason).
func describeSource(s *api.SourceBinding) string {
	if s == nil {
		return "source=unbound"
	}
	short := func(v string) string {
		if len(v) > 12 {
			return v[:12]
		}
		return v
	}
	parts := []string{"source=" + short(s.Head)}
	if s.Head == "" {
		parts[0] = "source=unborn"
	}
	if s.MergeBase != "" {
		parts = append(parts, "merge-base="+short(s.MergeBase))
	}
	if s.Dirty {
		parts = append(parts, "dirty")
	}
	if s.Transformed {
		parts = append(parts, "transformed")
	}
	if s.ManifestDigest != "" {
		parts = append(parts, "manifest=sha256:"+short(s.ManifestDigest))
	}
	switch {
	case s.Stopped != "":
		parts = append(parts, "stopped="+s.Stopped)
	case s.Partial && len(s.Omissions) > 0:
		parts = append(parts, "partial("+strings.Join(s.Omissions, ",")+")")
	case s.Partial:
		parts = append(parts, "partial")
	default:
		parts = append(parts, "exact")
	}
	return strings.Join(parts, " ")
}
