package objects_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agentscm/agentscm/internal/hub/objects"
	"github.com/agentscm/agentscm/internal/hub/objects/objectstest"
)

// TestDirSuite runs the object-store suite on the directory store.
func TestDirSuite(t *testing.T) {
	objectstest.Run(t, func(t *testing.T) objectstest.Harness {
		root := filepath.Join(t.TempDir(), "objects")
		d, err := objects.OpenDir(root)
		if err != nil {
			t.Fatal(err)
		}
		return objectstest.Harness{Store: d, Tamper: func(t *testing.T, dg string, b []byte) {
			if err := os.WriteFile(filepath.Join(root, dg[:2], dg), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}}
	})
}
