//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// npmCLI is an agent CLI the suite installs from npm at a pinned version
// into the e2e cache (once per test binary) and checks by its --version.
type npmCLI struct {
	pkg, version string // the npm package and its pinned version
	dir, bin     string // the cache subdirectory and the executable's name

	once sync.Once
	path string
	err  error
}

// ensure returns the CLI's executable, installing it with npm when it is
// missing; it fails the test when the install or the version check fails.
func (c *npmCLI) ensure(t *testing.T) string {
	t.Helper()
	c.once.Do(func() { c.path, c.err = c.install() })
	if c.err != nil {
		t.Fatal(c.err)
	}
	return c.path
}

func (c *npmCLI) install() (string, error) {
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	prefix := filepath.Join(cache, c.dir)
	bin := filepath.Join(prefix, "node_modules", ".bin", c.bin)
	if _, err := os.Stat(bin); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: installing %s@%s into %s\n", c.pkg, c.version, prefix)
		if err := os.MkdirAll(prefix, 0o755); err != nil {
			return "", err
		}
		cmd := exec.Command("npm", "install", "--no-audit", "--no-fund", "--prefix", prefix, c.pkg+"@"+c.version)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("npm install %s: %w", c.pkg, err)
		}
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), c.version) {
		return "", fmt.Errorf("%s --version: %v: %s", bin, err, out)
	}
	return bin, nil
}
