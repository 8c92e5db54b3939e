package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/attribution"
	"github.com/agentscm/agentscm/internal/changelog"
)

// fakeSession drives the real changelog hook (agentscm changelog
// hook-claude) as Claude Code does, writing the session's transcript the
// way Claude Code writes it: a prompt, each tool call's tool_use (with the
// model), the hooks around the call, its tool_result.
type fakeSession struct {
	t          *testing.T
	env        map[string]string
	repo, id   string
	transcript string
	calls      int
}

func newFakeSession(t *testing.T, env map[string]string, repo, id string) *fakeSession {
	project := changelog.ClaudeProjectDir(env["HOME"], repo)
	if err := os.MkdirAll(project, 0o700); err != nil {
		t.Fatal(err)
	}
	return &fakeSession{t: t, env: env, repo: repo, id: id, transcript: filepath.Join(project, id+".jsonl")}
}

func (s *fakeSession) line(v any) {
	s.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		s.t.Fatal(err)
	}
	f, err := os.OpenFile(s.transcript, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		s.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(append(b, '\n')); err != nil {
		s.t.Fatal(err)
	}
}

func (s *fakeSession) hook(event string, extra map[string]any) {
	s.t.Helper()
	p := map[string]any{"session_id": s.id, "cwd": s.repo, "hook_event_name": event, "transcript_path": s.transcript}
	for k, v := range extra {
		p[k] = v
	}
	b, _ := json.Marshal(p)
	if r := runMain(s.t, s.env, string(b), "changelog", "hook-claude"); r.code != 0 || r.stderr != "" {
		s.t.Fatalf("hook %s: %d %s", event, r.code, r.stderr)
	}
}

func (s *fakeSession) prompt(text string) {
	s.t.Helper()
	s.hook("UserPromptSubmit", map[string]any{"prompt": text})
	s.line(map[string]any{"type": "user", "sessionId": s.id, "message": map[string]any{"role": "user", "content": text}})
}

// call runs one tool call whose effect is do.
func (s *fakeSession) call(tool string, input map[string]any, do func()) string {
	s.t.Helper()
	id := fmt.Sprintf("toolu_%s_%d", s.id, s.calls)
	s.calls++
	s.line(map[string]any{"type": "assistant", "sessionId": s.id, "message": map[string]any{"role": "assistant", "model": "claude-test-1",
		"content": []any{map[string]any{"type": "tool_use", "id": id, "name": tool, "input": input}}}})
	s.hook("PreToolUse", map[string]any{"tool_name": tool, "tool_use_id": id, "tool_input": input})
	do()
	s.hook("PostToolUse", map[string]any{"tool_name": tool, "tool_use_id": id, "tool_input": input})
	s.line(map[string]any{"type": "user", "sessionId": s.id, "message": map[string]any{"role": "user",
		"content": []any{map[string]any{"type": "tool_result", "tool_use_id": id, "content": "TOOL-OUTPUT-" + id}}}})
	return id
}

func (s *fakeSession) stop() { s.hook("Stop", nil) }

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func appendFile(t *testing.T, path, content string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString(content)
}

func replaceIn(t *testing.T, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		t.Fatalf("%s does not hold %q", path, old)
	}
	writeFile(t, path, strings.Replace(string(b), old, new, 1))
}

func gitRun(t *testing.T, dir string, env map[string]string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// attributionRepo is a git checkout with one commit and the changelog on.
func attributionRepo(t *testing.T) (repo string, env map[string]string) {
	repo = gitRepo(t, "repo")
	base := filepath.Dir(repo)
	env = map[string]string{"HOME": filepath.Join(base, "home"), "XDG_CONFIG_HOME": filepath.Join(base, "cfg")}
	writeFile(t, filepath.Join(repo, "README.md"), "readme\n")
	writeFile(t, filepath.Join(repo, "old.txt"), "kept 1\nkept 2\n")
	gitRun(t, repo, env, "add", ".")
	gitRun(t, repo, env, "commit", "-qm", "init")
	mustRun(t, env, "changelog", "enable", "--root", repo)
	return repo, env
}

// ownerString is a line's owner as the tests spell it.
func ownerString(o *attribution.Owner) string {
	switch o.Kind {
	case attribution.KindAgent:
		s := fmt.Sprintf("%s@%d/%s/p%d", o.Tool, *o.Position, o.Session, o.Prompt)
		if o.Command != "" {
			s += " $ " + o.Command
		}
		return s
	case attribution.KindOutside:
		if o.Uncaptured {
			return "outside/uncaptured"
		}
		return fmt.Sprintf("outside@%d", *o.Position)
	}
	return o.Kind
}

func blameOf(t *testing.T, env map[string]string, args ...string) *attribution.FileBlame {
	t.Helper()
	r := mustRun(t, env, append([]string{"blame", "--format", "json"}, args...)...)
	var b attribution.FileBlame
	if err := json.Unmarshal([]byte(r.stdout), &b); err != nil {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	return &b
}

func checkBlame(t *testing.T, b *attribution.FileBlame, want []string) {
	t.Helper()
	var got []string
	for _, l := range b.Lines {
		got = append(got, l.Text+" = "+ownerString(l.Owner))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("blame of %s:\n%s\nwant:\n%s", b.Path, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestBlameAttributesEachLine: a session writes a file, appends to it
// with a shell call, the user edits a line between two calls, the agent
// edits another, a second prompt appends again, and the user edits after
// the last call. blame names each line's call (tool, position, session,
// prompt, the shell command), the outside position, or the uncaptured
// edit; --at shows the file at a position, --session filters, a file
// untouched since capture is before capture, and a rename is followed.
func TestBlameAttributesEachLine(t *testing.T) {
	repo, env := attributionRepo(t)
	f := filepath.Join(repo, "f.txt")
	s := newFakeSession(t, env, repo, "sess-A")
	s.prompt("write the file")
	s.call("Write", map[string]any{"file_path": f, "content": "one\ntwo\nthree\n"}, func() { writeFile(t, f, "one\ntwo\nthree\n") })
	s.call("Bash", map[string]any{"command": "echo four >> f.txt"}, func() { appendFile(t, f, "four\n") })
	replaceIn(t, f, "two", "TWO by the user") // between two calls
	s.call("Edit", map[string]any{"file_path": f, "old_string": "three", "new_string": "THREE"}, func() { replaceIn(t, f, "three", "THREE") })
	s.stop()
	s.prompt("append five")
	s.call("Bash", map[string]any{"command": "echo five >> f.txt"}, func() { appendFile(t, f, "five\n") })
	s.stop()
	appendFile(t, f, "six by the user\n") // after the last call: not captured yet

	list := decode[struct {
		Increments []changelog.Info `json:"increments"`
	}](t, mustRun(t, env, "changelog", "list", "--root", repo, "--format", "json").stdout).Increments
	var kinds []string
	for _, in := range list {
		kinds = append(kinds, fmt.Sprintf("%d:%s:%s", in.Position, in.Kind, in.Tool))
	}
	if got := strings.Join(kinds, " "); got != "0:call:Write 1:call:Bash 2:outside: 3:call:Edit 4:call:Bash" {
		t.Fatalf("positions %s", got)
	}

	checkBlame(t, blameOf(t, env, "--root", repo, f), []string{
		"one = Write@0/sess-A/p1",
		"TWO by the user = outside@2",
		"THREE = Edit@3/sess-A/p1",
		"four = Bash@1/sess-A/p1 $ echo four >> f.txt",
		"five = Bash@4/sess-A/p2 $ echo five >> f.txt",
		"six by the user = outside/uncaptured",
	})
	checkBlame(t, blameOf(t, env, "--root", repo, "--at", "1", f), []string{
		"one = Write@0/sess-A/p1",
		"two = Write@0/sess-A/p1",
		"three = Write@0/sess-A/p1",
		"four = Bash@1/sess-A/p1 $ echo four >> f.txt",
	})
	checkBlame(t, blameOf(t, env, "--root", repo, "--session", "sess-A", f), []string{
		"one = Write@0/sess-A/p1",
		"THREE = Edit@3/sess-A/p1",
		"four = Bash@1/sess-A/p1 $ echo four >> f.txt",
		"five = Bash@4/sess-A/p2 $ echo five >> f.txt",
	})
	checkBlame(t, blameOf(t, env, "--root", repo, "--session", "other", f), nil)
	checkBlame(t, blameOf(t, env, "--root", repo, filepath.Join(repo, "old.txt")), []string{
		"kept 1 = before_capture", "kept 2 = before_capture",
	})
	text := mustRun(t, env, "blame", "--root", repo, f).stdout
	for _, want := range []string{`(?m)^ +1  Write call 0 session sess-A prompt 1 +\| one$`, `(?m)^ +2  outside the agent \(position 2\) +\| TWO by the user$`,
		`(?m)^ +\$ echo four >> f.txt\n +4  Bash call 1`} {
		if !regexp.MustCompile(want).MatchString(text) {
			t.Errorf("blame's text lacks %q:\n%s", want, text)
		}
	}
	if r := runMain(t, env, "", "blame", "--root", repo, filepath.Join(repo, "nothing.txt")); r.code != ExitUsage {
		t.Errorf("blame of a missing file: exit %d %s", r.code, r.stderr)
	}

	// A rename by a shell call: the new path keeps the lines' owners.
	g := filepath.Join(repo, "g.txt")
	s.prompt("rename it")
	s.call("Bash", map[string]any{"command": "mv f.txt g.txt"}, func() {
		if err := os.Rename(f, g); err != nil {
			t.Fatal(err)
		}
	})
	s.stop()
	b := blameOf(t, env, "--root", repo, g)
	if strings.Join(b.RenamedFrom, ",") != "f.txt" {
		t.Fatalf("renamed from %v, want f.txt", b.RenamedFrom)
	}
	checkBlame(t, b, []string{
		"one = Write@0/sess-A/p1",
		"TWO by the user = outside@2",
		"THREE = Edit@3/sess-A/p1",
		"four = Bash@1/sess-A/p1 $ echo four >> f.txt",
		"five = Bash@4/sess-A/p2 $ echo five >> f.txt",
		"six by the user = outside@5",
	})
}
