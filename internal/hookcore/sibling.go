package hookcore

import (
	"context"
	"fmt"
	"os/exec"
	"time"

	"github.com/agentscm/agentscm/internal/buildinfo"
)

// siblingTimeout bounds the sibling's --version run.
const siblingTimeout = 2 * time.Second

// SiblingWarning compares the build of the binary sibling, which this hook
// hands events and the deliverer to, with this binary's (buildinfo): ""
// when they match or the sibling cannot say (a missing sibling is the
// hand-over's own warning), else one sentence naming both builds and the
// fix. Run once per session (SessionStart), not on every event.
func SiblingWarning(ctx context.Context, sibling string) string {
	ctx, cancel := context.WithTimeout(ctx, siblingTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, sibling, "--version").Output()
	if err != nil {
		return ""
	}
	have, want := buildinfo.BuildOf(string(out)), buildinfo.BuildOf(buildinfo.Version("hook"))
	if have == want {
		return ""
	}
	return fmt.Sprintf("%s is another build (%s) than this hook (%s): install every binary from one build (scripts/install.sh), then agentscm doctor", sibling, have, want)
}
