package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestChangelogCaptureListApplySnapshot(t *testing.T) {
	base := t.TempDir()
	home := filepath.Join(base, "home")
	repo := filepath.Join(base, "repo")
	os.MkdirAll(repo, 0o755)
	if out, err := exec.Command("git", "-C", repo, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	env := map[string]string{"HOME": home}
	write := func(rel, s string) {
		p := filepath.Join(repo, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	capture := func(args ...string) {
		t.Helper()
		r := runMain(t, env, "", append([]string{"changelog", "capture", "--root", repo}, args...)...)
		if r.code != 0 {
			t.Fatalf("capture: %d %s", r.code, r.stderr)
		}
	}
	write("one.txt", "1")
	capture("--tool", "Write", "--session", "s1")
	write("two.txt", "2")
	capture("--tool", "Write")
	os.Remove(filepath.Join(repo, "one.txt"))
	write("three.txt", "3")
	capture("--tool", "Bash", "--failed")

	r := runMain(t, env, "", "changelog", "list", "--root", repo, "--format", "json")
	if r.code != 0 {
		t.Fatalf("list: %d %s", r.code, r.stderr)
	}
	var list struct {
		Dir        string `json:"dir"`
		Increments []struct {
			Position int    `json:"position"`
			Tool     string `json:"tool"`
			Failed   bool   `json:"failed"`
			Files    int    `json:"files"`
			Deleted  int    `json:"deleted"`
		} `json:"increments"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Increments) != 3 || !list.Increments[2].Failed || list.Increments[2].Deleted != 1 || list.Increments[1].Files != 1 {
		t.Fatalf("list = %+v", list)
	}
	if !strings.HasPrefix(list.Dir, filepath.Join(home, ".config", "agentscm", "changelog")) {
		t.Errorf("changelog directory %s is not under the config directory", list.Dir)
	}

	// A restored capture hook is dropped: settings with a marked hook are
	// captured, then removed; the rewind restores the file without the hook.
	os.MkdirAll(filepath.Join(repo, ".claude"), 0o755)
	write(".claude/settings.json", `{"hooks":{"PostToolUse":[{"matcher":"*","hooks":[{"type":"command","command":"/usr/bin/agentscm change-capture hook-claude"}]}]},"model":"x"}`)
	capture()
	os.RemoveAll(filepath.Join(repo, ".claude"))
	capture()

	r = runMain(t, env, "", "changelog", "apply", "--root", repo, "--to", "3")
	if r.code != 0 {
		t.Fatalf("apply: %d %s", r.code, r.stderr)
	}
	b, err := os.ReadFile(filepath.Join(repo, ".claude", "settings.json"))
	if err != nil || strings.Contains(string(b), "hook-claude") || !strings.Contains(string(b), `"model"`) {
		t.Errorf("restored settings = %s, %v; want the file without the capture hook", b, err)
	}
	r = runMain(t, env, "", "changelog", "apply", "--root", repo, "--to", "1")
	if r.code != 0 || !strings.Contains(r.stdout, "undo with") {
		t.Fatalf("apply: %d %s %s", r.code, r.stdout, r.stderr)
	}
	for name, want := range map[string]bool{"one.txt": true, "two.txt": true, "three.txt": false, ".claude": false} {
		if _, err := os.Stat(filepath.Join(repo, name)); (err == nil) != want {
			t.Errorf("after rewind to 1: %s present = %v, want %v", name, err == nil, want)
		}
	}
	if _, err := os.Stat(filepath.Join(repo, ".git", "HEAD")); err != nil {
		t.Errorf("rewind damaged .git: %v", err)
	}

	// A snapshot round trip, and a garbage snapshot refused with status 4.
	snap := filepath.Join(base, "snap.tgz")
	if r := runMain(t, env, "", "snapshot", "save", "--root", repo, "--out", snap); r.code != 0 {
		t.Fatalf("snapshot save: %d %s", r.code, r.stderr)
	}
	write("extra.txt", "x")
	if r := runMain(t, env, "", "snapshot", "load", "--root", repo, snap); r.code != 0 {
		t.Fatalf("snapshot load: %d %s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(repo, "extra.txt")); err == nil {
		t.Errorf("snapshot load kept a file the snapshot does not hold")
	}
	bad := filepath.Join(base, "bad.tgz")
	os.WriteFile(bad, []byte("not an archive"), 0o600)
	if r := runMain(t, env, "", "snapshot", "load", "--root", repo, bad); r.code != ExitUnreadableArchive || !strings.Contains(r.stderr, "not a readable changelog archive") {
		t.Errorf("garbage snapshot: %d %s", r.code, r.stderr)
	}
	if r := runMain(t, env, "", "changelog", "apply", "--root", repo); r.code != 2 {
		t.Errorf("apply without --to: %d", r.code)
	}
	if r := runMain(t, env, "", "changelog", "list", "--root", filepath.Join(base, "home")); r.code != 1 || !strings.Contains(r.stderr, "no changelog") {
		t.Errorf("list of a checkout without changelog: %d %s", r.code, r.stderr)
	}
}
