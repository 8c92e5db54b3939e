package layout

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/agentscm/agentscm/"

// deps lists the packages pkg links (go list -deps), run at the
// repository root.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs go list")
	}
	cmd := exec.Command("go", "list", "-deps", pkg)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// within reports whether pkg is banned or a package under it.
func within(pkg, banned string) bool {
	return pkg == banned || strings.HasPrefix(pkg, banned+"/")
}

// The capture layer turns hook events into spool records: delivering them
// (internal/delivery), talking to a Hub (internal/client) and the Hub
// itself are other layers (issue 29). The Hub's wire types (hub/api) are
// shared.
func TestCaptureLinksNoDeliveryClientOrHub(t *testing.T) {
	for _, d := range deps(t, "./internal/capture") {
		for _, banned := range []string{"internal/delivery", "internal/client", "internal/hub"} {
			if within(d, module+banned) && d != module+"internal/hub/api" {
				t.Errorf("internal/capture links %s", d)
			}
		}
	}
}

// hookLinksHubStore lists the hook binaries that link a Hub store today
// (agentscm-hook: internal/client opens the embedded Hub, which links
// internal/hub/store). The list may only shrink: a binary listed here that
// no longer links one fails until its entry is removed.
var hookLinksHubStore = map[string]bool{
	"./cmd/agentscm-hook": true,
}

// A hook runs on every tool call: it must not link a Hub store (issue 29).
func TestHookBinariesLinkNoHubStore(t *testing.T) {
	for _, bin := range []string{"./cmd/agentscm-hook", "./cmd/agentscm-hook-intake"} {
		d := deps(t, bin)
		links := slices.ContainsFunc(d, func(p string) bool { return within(p, module+"internal/hub/store") })
		switch {
		case links && !hookLinksHubStore[bin]:
			t.Errorf("%s links internal/hub/store", bin)
		case !links && hookLinksHubStore[bin]:
			t.Errorf("%s no longer links internal/hub/store: remove it from hookLinksHubStore", bin)
		}
	}
}
