package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/changelog"
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
	// extra.txt was never captured: the load refuses (status 6), then
	// --force loads (the older positional form) and prints the undo.
	if r := runMain(t, env, "", "snapshot", "load", "--root", repo, "--file", snap); r.code != ExitChangedSinceCapture || !strings.Contains(r.stderr, filepath.Join(repo, "extra.txt")) {
		t.Fatalf("snapshot load over an uncaptured file: %d %s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(repo, "extra.txt")); err != nil {
		t.Fatalf("the refused load removed extra.txt")
	}
	r = runMain(t, env, "", "snapshot", "load", "--root", repo, "--force", snap)
	if r.code != 0 || !strings.Contains(r.stdout, "undo with") {
		t.Fatalf("snapshot load --force: %d %s %s", r.code, r.stdout, r.stderr)
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

// changelog enable makes the checkout's Claude Code transcript directory a
// capture root by default (--no-transcript-root drops it, a later enable
// brings it back and keeps other extra roots); a rewind restores the
// transcript as the hook captured it and the resumed conversation still
// ends with the call's result, read from the transcript before the rewind.
func TestChangelogTranscriptRootDefault(t *testing.T) {
	base := t.TempDir()
	home := filepath.Join(base, "home")
	repo := filepath.Join(base, "repo")
	extra := filepath.Join(base, "state")
	os.MkdirAll(repo, 0o755)
	os.MkdirAll(extra, 0o755)
	if out, err := exec.Command("git", "-C", repo, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	env := map[string]string{"HOME": home}
	project := changelog.ClaudeProjectDir(home, repo)
	enable := func(args ...string) map[string]string {
		t.Helper()
		r := runMain(t, env, "", append([]string{"changelog", "enable", "--root", repo, "--format", "json"}, args...)...)
		if r.code != 0 {
			t.Fatalf("enable %v: %d %s", args, r.code, r.stderr)
		}
		var out struct {
			Roots []changelog.Root `json:"roots"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, root := range out.Roots {
			m[root.Name] = root.Path
		}
		return m
	}
	if roots := enable(); roots[changelog.TranscriptRootName] != project || roots["checkout"] != repo || len(roots) != 2 {
		t.Fatalf("default roots %v, want the checkout and %s", roots, project)
	}
	if roots := enable("--no-transcript-root", "--extra-root", "state="+extra); len(roots) != 2 || roots["state"] != extra {
		t.Fatalf("roots with --no-transcript-root %v", roots)
	}
	if roots := enable(); len(roots) != 3 || roots[changelog.TranscriptRootName] != project || roots["state"] != extra {
		t.Fatalf("roots after enabling again %v, want the stored extra root and the transcript", roots)
	}

	// Two tool calls of session S; the hook runs before the host appends
	// each call's result to the transcript.
	transcript := filepath.Join(project, "S.jsonl")
	appendLine := func(line string) {
		f, err := os.OpenFile(transcript, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(line + "\n")
		f.Close()
	}
	os.MkdirAll(project, 0o700)
	hook := func(event, tool string) {
		t.Helper()
		payload := `{"session_id":"S","cwd":"` + repo + `","hook_event_name":"` + event + `","tool_name":"Bash","tool_use_id":"` + tool + `"}`
		if r := runMain(t, env, payload, "changelog", "hook-claude"); r.code != 0 || r.stderr != "" {
			t.Fatalf("hook %s: %d %s", event, r.code, r.stderr)
		}
	}
	hook("UserPromptSubmit", "")
	appendLine(`{"type":"user","sessionId":"S","message":{"role":"user","content":"go"}}`)
	appendLine(`{"type":"assistant","sessionId":"S","message":{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{}}]}}`)
	os.WriteFile(filepath.Join(repo, "one.txt"), []byte("1"), 0o644)
	hook("PostToolUse", "t1")
	appendLine(`{"type":"user","sessionId":"S","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"RESULT-ONE"}]}}`)
	appendLine(`{"type":"assistant","sessionId":"S","message":{"role":"assistant","content":[{"type":"tool_use","id":"t2","name":"Bash","input":{}}]}}`)
	os.WriteFile(filepath.Join(repo, "two.txt"), []byte("2"), 0o644)
	hook("PostToolUse", "t2")
	appendLine(`{"type":"user","sessionId":"S","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":"RESULT-TWO"}]}}`)
	hook("Stop", "")

	r := runMain(t, env, "", "changelog", "apply", "--root", repo, "--to", "0", "--resume-conversation", "--format", "json")
	if r.code != 0 {
		t.Fatalf("apply: %d %s", r.code, r.stderr)
	}
	var res struct {
		Undo    int                `json:"undo_position"`
		Resumed *changelog.Resumed `json:"resumed"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(repo, "two.txt")); err == nil {
		t.Errorf("the rewind kept the second call's file")
	}
	live, _ := os.ReadFile(transcript)
	if strings.Contains(string(live), "RESULT-ONE") || !strings.Contains(string(live), `"t1"`) {
		t.Errorf("the transcript root was not rewound to the first call:\n%s", live)
	}
	if res.Resumed == nil || !res.Resumed.IncludesResult || filepath.Dir(res.Resumed.Transcript) != project {
		t.Fatalf("resumed %+v", res.Resumed)
	}
	b, _ := os.ReadFile(res.Resumed.Transcript)
	if !strings.Contains(string(b), "RESULT-ONE") || strings.Contains(string(b), "t2") {
		t.Errorf("resumed transcript is not cut right after the first call's result:\n%s", b)
	}
	// Undoing the rewind brings the whole transcript back.
	if r := runMain(t, env, "", "changelog", "apply", "--root", repo, "--to", fmt.Sprint(res.Undo)); r.code != 0 {
		t.Fatalf("undo: %d %s", r.code, r.stderr)
	}
	if live, _ := os.ReadFile(transcript); !strings.Contains(string(live), "RESULT-TWO") {
		t.Errorf("undo did not restore the transcript:\n%s", live)
	}
}

// TestChangelogEnableDir: changelog enable --dir X is honoured by the
// hooks (a real hook run stores its increment in X, found through the
// location file in the checkout's default directory), every command
// without --dir finds X, and a second --dir elsewhere is refused while X
// holds the changelog (issue 28 item 6).
func TestChangelogEnableDir(t *testing.T) {
	repo := gitRepo(t, "repo")
	base := filepath.Dir(repo)
	env := map[string]string{"HOME": filepath.Join(base, "home")}
	x := filepath.Join(base, "elsewhere", "cl")
	out := mustRun(t, env, "changelog", "enable", "--root", repo, "--dir", x, "--no-transcript-root", "--format", "json").stdout
	var en struct {
		Dir string `json:"dir"`
	}
	if err := json.Unmarshal([]byte(out), &en); err != nil || en.Dir != x {
		t.Fatalf("enable: %s %v", out, err)
	}
	sub := filepath.Join(repo, "sub")
	os.MkdirAll(sub, 0o755)
	for i, tool := range []string{"Write", "Bash"} {
		os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%d", i)), []byte("x"), 0o644)
		p := fmt.Sprintf(`{"session_id":"s1","cwd":%q,"hook_event_name":"PostToolUse","tool_name":%q,"tool_use_id":"toolu_%d"}`, sub, tool, i)
		if r := runMain(t, env, p, "changelog", "hook-claude"); r.code != 0 || r.stdout != "" || r.stderr != "" {
			t.Fatalf("hook %d: %d %q %q", i, r.code, r.stdout, r.stderr)
		}
	}
	for _, name := range []string{"000000.tgz", "000001.tgz"} {
		if _, err := os.Stat(filepath.Join(x, "increments", name)); err != nil {
			t.Fatalf("the hook did not store %s in --dir: %v", name, err)
		}
	}
	def := changelog.DefaultDir(filepath.Join(env["HOME"], ".config", "agentscm"), repo)
	if ents, _ := os.ReadDir(def); len(ents) != 1 || ents[0].Name() != changelog.LocationFile {
		t.Fatalf("the default directory holds %v, want only %s", ents, changelog.LocationFile)
	}
	if l := mustRun(t, env, "changelog", "list", "--root", repo).stdout; !strings.Contains(l, "Write") || !strings.Contains(l, "Bash") {
		t.Fatalf("list without --dir:\n%s", l)
	}
	if s := mustRun(t, env, "changelog", "status", "--root", repo).stdout; !strings.Contains(s, "("+x+")") || !strings.Contains(s, "next position: 2") {
		t.Fatalf("status without --dir:\n%s", s)
	}
	mustRun(t, env, "rewind", "--root", repo, "--to", "0")
	if _, err := os.Stat(filepath.Join(sub, "f1")); err == nil {
		t.Fatal("the rewind to 0 left f1")
	}
	r := runMain(t, env, "", "changelog", "enable", "--root", repo, "--dir", filepath.Join(base, "third"))
	if r.code != ExitUsage || !strings.Contains(r.stderr, x+" holds the changelog of "+repo) {
		t.Fatalf("enable --dir elsewhere: %d %s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(base, "third")); err == nil {
		t.Fatal("the refused enable created its --dir")
	}
	// Enabling again without --dir keeps X.
	mustRun(t, env, "changelog", "enable", "--root", repo, "--no-transcript-root")
	if s := mustRun(t, env, "changelog", "status", "--root", repo).stdout; !strings.Contains(s, "("+x+")") {
		t.Fatalf("status after enable without --dir:\n%s", s)
	}
}
