package binding_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The bindings are read by the lean intake hook and by the views: they
// must not pull in the capture pipeline, the deliverer, the client or the
// Hub.
func TestImportsNoCaptureDeliveryClientOrHub(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, d := range strings.Fields(string(out)) {
		for _, banned := range []string{
			"github.com/agentscm/agentscm/internal/capture",
			"github.com/agentscm/agentscm/internal/delivery",
			"github.com/agentscm/agentscm/internal/client",
			"github.com/agentscm/agentscm/internal/hub",
		} {
			if d == banned || (strings.HasPrefix(d, banned+"/") && d != "github.com/agentscm/agentscm/internal/hub/api") {
				t.Errorf("internal/binding links %s", d)
			}
		}
	}
}
