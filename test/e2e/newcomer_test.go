//go:build e2e

package e2e

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/test/e2e/scriptedapi"
)

// TestNewcomerEnableThenClaudeSession (issue 32): `agentscm enable` run
// inside a fresh checkout with no flags sets everything up in one command;
// one real Claude Code session then writes a file, edits one and deletes
// another in a Bash call, and runs a Bash call that fails; `agentscm show`,
// again with no flags, leads with one line for the session and names the
// files each call changed, with no internal identifiers; `agentscm doctor`
// finds nothing wrong; `agentscm rewind --to 0` puts the files back.
func TestNewcomerEnableThenClaudeSession(t *testing.T) {
	c := newCheckout(t)
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(h.agentscm, args...)
		cmd.Dir, cmd.Env = c.root, c.env()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("agentscm %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	out := run("enable")
	for _, want := range []string{"agentscm is on for " + c.root, "connected to the local Hub", "capture turned on", "changelog on", "started a Work", "agentscm show"} {
		if !strings.Contains(out, want) {
			t.Fatalf("enable says nothing of %q:\n%s", want, out)
		}
	}
	c.runTurn(
		[]scriptedapi.ToolCall{write(filepath.Join(c.root, "new.txt"), "new\n")},
		[]scriptedapi.ToolCall{bash("echo more >> README.md && rm b.txt")},
		[]scriptedapi.ToolCall{bash("echo failing && exit 3")},
	)

	text := run("show")
	for _, re := range []string{
		`(?m)^record: complete for what Claude Code reports$`,
		`(?m)^session 1 \(Claude Code\) \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ, \d+s: 3 calls, 1 failed; 1 created, 1 modified, 1 deleted$`,
		`(?m)^  \d\d:\d\d:\d\d  Write +succeeded \[0\]  \+new.txt$`,
		`(?m)^  \d\d:\d\d:\d\d  Bash +succeeded \[1\]  ~README.md -b.txt$`,
		`(?m)^  \d\d:\d\d:\d\d  Bash +failed +\[2\]  no files changed$`,
		`(?m)^3 calls, 1 failed; 1 created, 1 modified, 1 deleted$`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("show lacks %s:\n%s", re, text)
		}
	}
	if m := regexp.MustCompile(`wrk_|checkout_|toolu_|identity_uncertain|#\d`).FindString(text); m != "" {
		t.Errorf("show names the internal identifier %q:\n%s", m, text)
	}
	if out := run("doctor"); !strings.Contains(out, "no problems found") {
		t.Errorf("doctor after the session:\n%s", out)
	}
	run("rewind", "--to", "0")
	if !exists(t, filepath.Join(c.root, "b.txt")) || !exists(t, filepath.Join(c.root, "new.txt")) {
		t.Errorf("rewind --to 0 did not bring b.txt back or kept new.txt away")
	}
}
