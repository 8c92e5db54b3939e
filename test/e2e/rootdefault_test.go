//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/test/e2e/scriptedapi"
)

// agentscmRun runs the built binary with dir as its working directory and
// returns its stdout, stderr and exit status.
func (c *checkout) agentscmRun(dir string, args ...string) (string, string, int) {
	c.t.Helper()
	cmd := exec.Command(h.agentscm, args...)
	cmd.Dir, cmd.Env = dir, c.env()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatalf("agentscm %v: %v", args, err)
	}
	return stdout.String(), stderr.String(), code
}

// Every changelog command run from a subdirectory of the checkout without
// --root (issue 28 item 6, issue 32), with the real Claude Code CLI: enable
// with --dir elsewhere (the real hooks store there), list, status,
// snapshot save, rewind, snapshot load; outside any checkout each refuses
// with one line saying to pass --root.
func TestChangelogFromInsideCheckout(t *testing.T) {
	c := newCheckout(t)
	sub := filepath.Join(c.root, "src", "pkg")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(c.dir, "changelogs", "repo")
	c.agentscmIn(sub, "changelog", "enable", "--dir", dir)
	one, two, three := filepath.Join(c.root, "one.txt"), filepath.Join(sub, "two.txt"), filepath.Join(c.root, "three.txt")
	c.runTurn([]scriptedapi.ToolCall{write(one, "1\n")}, []scriptedapi.ToolCall{write(two, "2\n")}, []scriptedapi.ToolCall{write(three, "3\n")})

	var list struct {
		Increments []changelog.Info `json:"increments"`
	}
	if err := json.Unmarshal([]byte(c.agentscmIn(sub, "changelog", "list", "--format", "json")), &list); err != nil {
		t.Fatal(err)
	}
	checkPositions(t, list.Increments, []string{"Write", "Write", "Write"})
	for _, name := range []string{"000000.tgz", "000001.tgz", "000002.tgz"} {
		if _, err := os.Stat(filepath.Join(dir, "increments", name)); err != nil {
			t.Fatalf("the real hooks did not store %s in --dir: %v", name, err)
		}
	}
	if s := c.agentscmIn(sub, "changelog", "status"); !strings.Contains(s, "changelog of "+c.root+" ("+dir+")") {
		t.Fatalf("status:\n%s", s)
	}
	snap := filepath.Join(c.dir, "ws.tgz")
	c.agentscmIn(sub, "snapshot", "save", "--file", snap)
	if s := c.agentscmIn(sub, "rewind", "--to", "1", "--dry-run"); !strings.Contains(s, "three.txt") {
		t.Fatalf("rewind --dry-run:\n%s", s)
	}
	c.agentscmIn(sub, "rewind", "--to", "1")
	if !exists(t, one) || !exists(t, two) || exists(t, three) {
		t.Fatalf("after rewind to 1: one=%v two=%v three=%v", exists(t, one), exists(t, two), exists(t, three))
	}
	c.agentscmIn(sub, "snapshot", "load", "--file", snap)
	if !exists(t, three) {
		t.Fatal("snapshot load did not bring three.txt back")
	}

	outside := t.TempDir()
	for _, args := range [][]string{{"changelog", "list"}, {"rewind", "--to", "0"}, {"snapshot", "save", "--file", filepath.Join(outside, "s.tgz")}} {
		_, errs, code := c.agentscmRun(outside, args...)
		if code != 2 || !strings.Contains(errs, "not inside a checkout") || !strings.Contains(errs, "pass --root PATH") {
			t.Fatalf("%v outside a checkout: exit %d %s", args, code, errs)
		}
	}
}
