package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The point of agentscm-hook is what it does not link: the command tree,
// the pages and agentdiff's capsules would be started on every tool call
// for nothing. It does link the changelog's capture (internal/changelog,
// its compressor klauspost/compress, its tree walker internal/scan and the
// watcher client internal/watch): the one hook pipeline takes a tool call's
// increment in the same process as its capture (internal/hookrun).
func TestLinksOnlyTheHook(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, want := range []string{
		"github.com/agentscm/agentscm/internal/hookrun",
		"github.com/agentscm/agentscm/internal/capture",
		"github.com/agentscm/agentscm/internal/action",
		"github.com/agentscm/agentscm/internal/changelog",
		"github.com/agentscm/agentscm/internal/changelog/hubremote",
	} {
		if !slices.Contains(deps, want) {
			t.Errorf("agentscm-hook does not link %s: the one hook pipeline needs it", want)
		}
	}
	for _, d := range deps {
		for _, banned := range []string{
			"github.com/agentscm/agentscm/internal/cli",
			"github.com/agentscm/agentscm/internal/capsule",
			// The pages: the Hub's and the local UI's HTML.
			"github.com/agentscm/agentscm/internal/hubpage",
			"github.com/agentscm/agentscm/internal/localui",
			"html/template",
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
