package hookcore

import (
	"context"
	"fmt"

	"github.com/agentscm/agentscm/internal/buildinfo"
)

// SiblingWarning compares the build of the binary sibling, which this hook
// hands events and the deliverer to, with this binary's (buildinfo): ""
// when they match or the sibling cannot say (a missing sibling is the
// hand-over's own warning), else one sentence naming both builds and the
// fix. Run once per session (SessionStart), not on every event; the
// sibling's build is read from its build information, not by running it
// (a process start would double the SessionStart hook's cost).
func SiblingWarning(_ context.Context, sibling string) string {
	have, err := buildinfo.BuildOfFile(sibling)
	if err != nil {
		return ""
	}
	want := buildinfo.BuildOf(buildinfo.Version("hook"))
	if have == want {
		return ""
	}
	return fmt.Sprintf("%s is another build (%s) than this hook (%s): install every binary from one build (scripts/install.sh), then agentscm doctor", sibling, have, want)
}
