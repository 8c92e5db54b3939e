// Package install checks scripts/install.sh as a newcomer runs it: every
// binary lands side by side under the prefix with one build stamp, and the
// hooks that enable installs name the installed hook binaries.
package install

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestInstallScript(t *testing.T) {
	if testing.Short() {
		t.Skip("builds four binaries")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("needs git")
	}
	prefix := t.TempDir()
	cmd := exec.Command("bash", "../../scripts/install.sh", "--prefix", prefix)
	cmd.Env = append(os.Environ(), "PATH="+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("install.sh: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "is not on your PATH") {
		t.Errorf("no PATH advice for a prefix outside PATH:\n%s", out)
	}
	bin := filepath.Join(prefix, "bin")
	stamp := regexp.MustCompile(` build (\S+) `)
	var stamps []string
	for _, b := range []string{"agentscm", "agentscm-hook", "agentscm-hook-intake", "agentdiff"} {
		v, err := exec.Command(filepath.Join(bin, b), "--version").Output()
		if err != nil {
			t.Fatalf("%s --version: %v", b, err)
		}
		m := stamp.FindStringSubmatch(string(v))
		if m == nil || !strings.HasPrefix(string(v), b+" ") {
			t.Fatalf("%s --version = %q: no build stamp", b, v)
		}
		stamps = append(stamps, m[1])
	}
	for _, s := range stamps[1:] {
		if s != stamps[0] {
			t.Fatalf("binaries of one install carry different stamps: %v", stamps)
		}
	}
	// enable, run from the installed agentscm, installs the installed hook binaries.
	home := t.TempDir()
	repo := filepath.Join(t.TempDir(), "repo")
	env := append(os.Environ(), "HOME="+home, "AGENTSCM_CONFIG_DIR="+filepath.Join(home, "cfg"), "PATH="+bin+":"+os.Getenv("PATH"))
	run := func(dir string, args ...string) string {
		c := exec.Command(args[0], args[1:]...)
		c.Dir, c.Env = dir, env
		o, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, o)
		}
		return string(o)
	}
	run(filepath.Dir(repo), "git", "init", "-q", repo)
	run(repo, filepath.Join(bin, "agentscm"), "change-capture", "enable", "--root", repo, "--local")
	settings, err := os.ReadFile(filepath.Join(repo, ".claude", "settings.local.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{filepath.Join(bin, "agentscm-hook-intake"), filepath.Join(bin, "agentscm-hook")} {
		if !strings.Contains(string(settings), want) {
			t.Errorf("settings do not run %s:\n%s", want, settings)
		}
	}
}
