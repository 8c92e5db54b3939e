package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// changelog status and watch: bad usage is exit 2; without a server the
// status says why the watch does not vouch; the setting turns it off and
// on; a test binary standing in for agentscm never starts a server.
func TestChangelogStatusAndWatchSetting(t *testing.T) {
	repo := gitRepo(t, "repo")
	env := map[string]string{"HOME": filepath.Join(filepath.Dir(repo), "home")}
	for _, args := range [][]string{
		{"changelog", "status", "--root", repo, "--format", "xml"},
		{"changelog", "watch", "--root", repo},
		{"changelog", "watch", "--root", repo, "sideways"},
	} {
		if r := runMain(t, env, "", args...); r.code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, r.code, r.stderr)
		}
	}
	if r := runMain(t, env, "", "changelog", "capture", "--root", repo); r.code != 0 {
		t.Fatalf("capture: %d %s", r.code, r.stderr)
	}
	os.WriteFile(filepath.Join(repo, "a"), []byte("a"), 0o644)
	p := `{"session_id":"s","cwd":"` + repo + `","hook_event_name":"PostToolUse","tool_name":"Write","tool_use_id":"t"}`
	if r := runMain(t, env, p, "changelog", "hook-claude"); r.code != 0 || r.stderr != "" {
		t.Fatalf("hook: %d %s", r.code, r.stderr)
	}
	status := func() map[string]any {
		t.Helper()
		r := runMain(t, env, "", "changelog", "status", "--root", repo, "--format", "json")
		if r.code != 0 {
			t.Fatalf("status: %d %s", r.code, r.stderr)
		}
		var out struct {
			Next  int            `json:"next_position"`
			Watch map[string]any `json:"watch"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatal(err)
		}
		if out.Next != 2 {
			t.Errorf("next position %d, want 2", out.Next)
		}
		return out.Watch
	}
	// The hook ran in this test binary (not agentscm): no server started.
	if w := status(); w["running"] != false || w["vouches"] != false || !strings.Contains(w["reason"].(string), "no watch server") {
		t.Fatalf("status = %v", w)
	}
	if r := runMain(t, env, "", "changelog", "watch", "--root", repo, "off"); r.code != 0 {
		t.Fatalf("watch off: %d %s", r.code, r.stderr)
	}
	if w := status(); w["enabled"] != false || !strings.Contains(w["reason"].(string), "off") {
		t.Fatalf("status with the watcher off = %v", w)
	}
	if r := runMain(t, env, "", "changelog", "watch", "--root", repo, "on"); r.code != 0 {
		t.Fatalf("watch on: %d %s", r.code, r.stderr)
	}
	if w := status(); w["enabled"] != true {
		t.Fatalf("status with the watcher on = %v", w)
	}
	if r := runMain(t, env, "", "changelog", "watch", "--root", repo, "stop"); r.code != 0 || !strings.Contains(r.stdout, "no watch server ran") {
		t.Fatalf("watch stop: %d %s %s", r.code, r.stdout, r.stderr)
	}
	text := runMain(t, env, "", "changelog", "status", "--root", repo)
	if text.code != 0 || !strings.Contains(text.stdout, "does not vouch") {
		t.Fatalf("status text: %d %s", text.code, text.stdout)
	}
}
