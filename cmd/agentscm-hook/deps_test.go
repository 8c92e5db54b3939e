package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The point of agentscm-hook is what it does not link: the command tree,
// the changelog (its compressor and tree walker) and agentdiff's capsules
// would be started on every tool call for nothing. (internal/scan is linked:
// an action start binds the checkout's source manifest through it; it needs
// only the standard library and x/sys.)
func TestLinksOnlyTheHook(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, d := range deps {
		if d == "github.com/agentscm/agentscm/internal/changelog/incmeta" {
			continue // the Hub's standard-library reader of an upload's metadata
		}
		for _, banned := range []string{
			"github.com/agentscm/agentscm/internal/cli",
			"github.com/agentscm/agentscm/internal/changelog",
			"github.com/agentscm/agentscm/internal/capsule",
			"github.com/klauspost/compress",
			// The team Hub's engines: chosen in internal/cli only.
			"github.com/jackc/pgx",
			"github.com/minio/minio-go",
			"github.com/agentscm/agentscm/internal/hub/store/postgres",
			"github.com/agentscm/agentscm/internal/hub/objects/s3",
			"flag",
		} {
			if d == banned || strings.HasPrefix(d, banned+"/") {
				t.Errorf("agentscm-hook links %s", d)
			}
		}
	}
}
