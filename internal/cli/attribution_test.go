package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/attribution"
	"github.com/agentscm/agentscm/internal/attribution/schemacheck"
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
	gitRun(t, repo, env, "add", ".")
	gitRun(t, repo, env, "commit", "-qm", "agentscm's hooks")
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

// runWithExe is runMain with env.Executable set to exe.
func runWithExe(t *testing.T, envVars map[string]string, exe string, args ...string) run {
	t.Helper()
	var out, errb bytes.Buffer
	env := &Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb,
		Getenv: func(k string) string { return envVars[k] }, Now: time.Now, Executable: exe}
	code := Main(context.Background(), env, args)
	return run{code, out.String(), errb.String()}
}

// agentscmOnPath is the test binary's agentscm command (testscript.Main
// puts it on PATH), which git hooks can run.
func agentscmOnPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("agentscm")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func schemaBytes(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("../attribution/testdata/agent-trace-0.1.0.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// noteOf reads and validates the agentscm note of rev.
func noteOf(t *testing.T, repo string, env map[string]string, rev string) (*attribution.TraceRecord, string) {
	t.Helper()
	raw := gitRun(t, repo, env, "notes", "--ref", "agentscm", "show", rev)
	errs, err := schemacheck.Check(schemaBytes(t), []byte(raw))
	if err != nil || len(errs) > 0 {
		t.Fatalf("the note of %s is not a valid Agent Trace record: %v %v\n%s", rev, err, errs, raw)
	}
	var rec attribution.TraceRecord
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		t.Fatal(err)
	}
	if sha := strings.TrimSpace(gitRun(t, repo, env, "rev-parse", rev)); rec.VCS == nil || rec.VCS.Type != "git" || rec.VCS.Revision != sha {
		t.Fatalf("the note of %s names %+v", sha, rec.VCS)
	}
	return &rec, raw
}

// noteLines renders a record as "path:line=contributor[/session]" per
// attributed line, in order.
func noteLines(rec *attribution.TraceRecord) []string {
	type l struct {
		path string
		n    int
		who  string
	}
	var all []l
	for _, f := range rec.Files {
		for _, c := range f.Conversations {
			who := c.Contributor.Type
			for _, r := range c.Related {
				who += "/" + strings.TrimPrefix(r.URL, "urn:agentscm:session:")
			}
			for _, r := range c.Ranges {
				for n := r.StartLine; n <= r.EndLine; n++ {
					all = append(all, l{f.Path, n, who})
				}
			}
		}
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].path != all[j].path {
			return all[i].path < all[j].path
		}
		return all[i].n < all[j].n
	})
	var out []string
	for _, x := range all {
		out = append(out, fmt.Sprintf("%s:%d=%s", x.path, x.n, x.who))
	}
	return out
}

// TestAttributionNotesFollowAmendAndRebase: attribution enable installs
// the git hooks (chaining the user's post-commit); a commit gets a note
// that validates against the Agent Trace schema and matches blame; the
// note follows git commit --amend (with and without a change) and a git
// rebase onto a new base that moves the lines; no prompt, tool output or
// command is in any note; disable removes exactly what enable added.
func TestAttributionNotesFollowAmendAndRebase(t *testing.T) {
	repo, env := attributionRepo(t)
	exe := agentscmOnPath(t)
	hooks := filepath.Join(repo, ".git", "hooks")
	userHook := "#!/bin/sh\necho \"$@\" >> \"$(git rev-parse --git-dir)/user-hook-ran\"\n"
	os.MkdirAll(hooks, 0o755)
	writeFile(t, filepath.Join(hooks, "post-commit"), userHook)
	os.Chmod(filepath.Join(hooks, "post-commit"), 0o755)

	r := runWithExe(t, env, exe, "attribution", "enable", "--root", repo)
	if r.code != 0 || !strings.Contains(r.stdout, "post-commit: installed") || !strings.Contains(r.stdout, "your hook runs first") {
		t.Fatalf("enable: %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	f, old := filepath.Join(repo, "f.txt"), filepath.Join(repo, "old.txt")
	s := newFakeSession(t, env, repo, "sess-N")
	s.prompt("PROMPT-TEXT-write")
	s.call("Write", map[string]any{"file_path": f, "content": "a1\na2\n"}, func() { writeFile(t, f, "a1\na2\n") })
	s.call("Bash", map[string]any{"command": "echo COMMAND-TEXT >> old.txt"}, func() { appendFile(t, old, "agent line\n") })
	appendFile(t, f, "user line\n")
	s.call("Edit", map[string]any{"file_path": f, "old_string": "a2", "new_string": "A2"}, func() { replaceIn(t, f, "a2", "A2") })
	s.stop()

	gitRun(t, repo, env, "add", "f.txt", "old.txt")
	out := gitRun(t, repo, env, "commit", "-qm", "agent work")
	if strings.Contains(out, "agentscm") {
		t.Fatalf("the hook warned: %s", out)
	}
	if b, _ := os.ReadFile(filepath.Join(repo, ".git", "user-hook-ran")); len(b) == 0 {
		t.Fatal("the chained user hook did not run")
	}
	rec, raw := noteOf(t, repo, env, "HEAD")
	want := []string{"f.txt:1=ai/sess-N", "f.txt:2=ai/sess-N", "f.txt:3=human", "old.txt:3=ai/sess-N"}
	if got := noteLines(rec); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("note lines %v, want %v\n%s", got, want, raw)
	}
	// The note matches blame.
	for _, l := range blameOf(t, env, "--root", repo, f).Lines {
		who := map[string]string{attribution.KindAgent: "ai/sess-N", attribution.KindOutside: "human"}[l.Owner.Kind]
		if w := fmt.Sprintf("f.txt:%d=%s", l.Number, who); !strings.Contains(strings.Join(want, " "), w) {
			t.Errorf("blame says %s, the note does not", w)
		}
	}
	if rec.Files[0].Conversations[0].Contributor.ModelID != "anthropic/claude-test-1" {
		t.Errorf("model id %+v", rec.Files[0].Conversations[0].Contributor)
	}
	notes := []string{raw}

	// Amend without a change: the note follows the new commit.
	before := strings.TrimSpace(gitRun(t, repo, env, "rev-parse", "HEAD"))
	gitRun(t, repo, env, "commit", "-q", "--amend", "-m", "agent work, reworded")
	if after := strings.TrimSpace(gitRun(t, repo, env, "rev-parse", "HEAD")); after == before {
		t.Fatal("amend kept the commit")
	}
	rec, raw = noteOf(t, repo, env, "HEAD")
	if got := noteLines(rec); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("after amend: %v, want %v", got, want)
	}
	notes = append(notes, raw)

	// Amend with a line the user adds at the top: the lines move down.
	writeFile(t, f, "top by user\n"+readString(t, f))
	gitRun(t, repo, env, "commit", "-q", "-a", "--amend", "--no-edit")
	rec, raw = noteOf(t, repo, env, "HEAD")
	want = []string{"f.txt:1=human", "f.txt:2=ai/sess-N", "f.txt:3=ai/sess-N", "f.txt:4=human", "old.txt:3=ai/sess-N"}
	if got := noteLines(rec); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("after amend with a change: %v, want %v", got, want)
	}
	notes = append(notes, raw)

	// A rebase onto a new base that adds a line above the agent's line in
	// old.txt: the note moves it from line 3 to line 4.
	gitRun(t, repo, env, "branch", "work")
	gitRun(t, repo, env, "checkout", "-q", "-b", "upstream", "HEAD~1")
	writeFile(t, old, "upstream top\nkept 1\nkept 2\n")
	gitRun(t, repo, env, "commit", "-qam", "upstream")
	gitRun(t, repo, env, "checkout", "-q", "work")
	gitRun(t, repo, env, "rebase", "-q", "upstream")
	rec, raw = noteOf(t, repo, env, "HEAD")
	want = []string{"f.txt:1=human", "f.txt:2=ai/sess-N", "f.txt:3=ai/sess-N", "f.txt:4=human", "old.txt:4=ai/sess-N"}
	if got := noteLines(rec); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("after rebase: %v, want %v\n%s", got, want, raw)
	}
	if !strings.Contains(raw, `"rewritten_from":["`) {
		t.Fatalf("the rebased commit's note was not carried over by post-rewrite:\n%s", raw)
	}
	for _, r := range rec.Files {
		if r.Path == "old.txt" && r.Conversations[0].Ranges[0].ContentHash != attribution.ContentHash([]string{"agent line"}) {
			t.Errorf("the moved range's hash %+v", r.Conversations[0].Ranges[0])
		}
	}
	notes = append(notes, raw)

	// No conversation text in any note.
	for _, n := range notes {
		for _, secret := range []string{"PROMPT-TEXT", "COMMAND-TEXT", "TOOL-OUTPUT", "echo"} {
			if strings.Contains(n, secret) {
				t.Fatalf("a note holds %q:\n%s", secret, n)
			}
		}
	}

	// disable removes exactly what enable added.
	r = runWithExe(t, env, exe, "attribution", "disable", "--root", repo)
	if r.code != 0 {
		t.Fatalf("disable: %d %s", r.code, r.stderr)
	}
	if got := readString(t, filepath.Join(hooks, "post-commit")); got != userHook {
		t.Fatalf("disable left post-commit as %q", got)
	}
	if _, err := os.Lstat(filepath.Join(hooks, "post-rewrite")); !os.IsNotExist(err) {
		t.Fatalf("disable left post-rewrite: %v", err)
	}
	if m, _ := filepath.Glob(filepath.Join(hooks, "*"+attribution.ChainedSuffix)); len(m) > 0 {
		t.Fatalf("disable left %v", m)
	}
}

// TestAttributionHooksHonourHooksPath: with core.hooksPath set, enable
// installs there (a relative path, against the worktree's top), git runs
// the hooks from there, and disable removes them from there.
func TestAttributionHooksHonourHooksPath(t *testing.T) {
	repo, env := attributionRepo(t)
	gitRun(t, repo, env, "config", "core.hooksPath", ".githooks")
	exe := agentscmOnPath(t)
	if r := runWithExe(t, env, exe, "attribution", "enable", "--root", repo, "--format", "json"); r.code != 0 || !strings.Contains(r.stdout, filepath.Join(repo, ".githooks", "post-commit")) {
		t.Fatalf("enable: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Lstat(filepath.Join(repo, ".git", "hooks", "post-commit")); err == nil {
		t.Fatal("enable installed into .git/hooks, not core.hooksPath")
	}
	f := filepath.Join(repo, "f.txt")
	s := newFakeSession(t, env, repo, "sess-H")
	s.prompt("p")
	s.call("Write", map[string]any{"file_path": f, "content": "x\n"}, func() { writeFile(t, f, "x\n") })
	s.stop()
	gitRun(t, repo, env, "add", "f.txt")
	gitRun(t, repo, env, "commit", "-qm", "x")
	rec, _ := noteOf(t, repo, env, "HEAD")
	if got := noteLines(rec); strings.Join(got, " ") != "f.txt:1=ai/sess-H" {
		t.Fatalf("note %v", got)
	}
	if r := runWithExe(t, env, exe, "attribution", "disable", "--root", repo); r.code != 0 {
		t.Fatalf("disable: %d %s", r.code, r.stderr)
	}
	if m, _ := filepath.Glob(filepath.Join(repo, ".githooks", "*")); len(m) != 0 {
		t.Fatalf("disable left %v", m)
	}
}

func readString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestAttributionSummary: the lines the working tree adds against a
// revision, per file and in total, by session and outside the agent; a
// file git sees renamed counts only its new lines.
func TestAttributionSummary(t *testing.T) {
	repo, env := attributionRepo(t)
	f, old := filepath.Join(repo, "f.txt"), filepath.Join(repo, "old.txt")
	a := newFakeSession(t, env, repo, "sess-1")
	a.prompt("p")
	a.call("Write", map[string]any{"file_path": f, "content": "1\n2\n3\n"}, func() { writeFile(t, f, "1\n2\n3\n") })
	a.call("Bash", map[string]any{"command": "echo x >> old.txt"}, func() { appendFile(t, old, "x\n") })
	a.stop()
	appendFile(t, f, "mine\n")
	b := newFakeSession(t, env, repo, "sess-2")
	b.prompt("q")
	b.call("Edit", map[string]any{"file_path": f, "old_string": "2", "new_string": "two"}, func() { replaceIn(t, f, "2\n", "two\n") })
	b.stop()

	r := mustRun(t, env, "attribution", "--root", repo, "--since", "HEAD", "--format", "json")
	s := decode[attribution.Summary](t, r.stdout)
	count := func(cs []attribution.Count) string {
		var out []string
		for _, c := range cs {
			out = append(out, fmt.Sprintf("%s%s=%d", c.Kind, strings.TrimPrefix(" "+c.Session, " "), c.Lines))
		}
		sort.Strings(out)
		return strings.Join(out, " ")
	}
	if s.Added != 5 || count(s.Total) != "agentsess-1=3 agentsess-2=1 outside=1" {
		t.Fatalf("total %d %s\n%s", s.Added, count(s.Total), r.stdout)
	}
	var files []string
	for _, fs := range s.Files {
		files = append(files, fs.Path+": "+count(fs.By))
	}
	if got := strings.Join(files, "; "); got != "f.txt: agentsess-1=2 agentsess-2=1 outside=1; old.txt: agentsess-1=1" {
		t.Fatalf("files %s", got)
	}
	text := mustRun(t, env, "attribution", "--root", repo).stdout
	if !regexp.MustCompile(`session sess-1 \(claude-code\) +3 +60%`).MatchString(text) || !strings.Contains(text, "outside the agent") {
		t.Errorf("the text summary:\n%s", text)
	}
	md := mustRun(t, env, "attribution", "--root", repo, "--format", "markdown").stdout
	for _, want := range []string{"| session `sess-1` (claude-code) | 3 | 60% |", "| outside the agent | 1 | 20% |", "| `f.txt` | 4 | session `sess-1` (claude-code) 2, "} {
		if !strings.Contains(md, want) {
			t.Errorf("the markdown summary lacks %q:\n%s", want, md)
		}
	}
	if r := runMain(t, env, "", "attribution", "--root", repo, "--format", "yaml"); r.code != ExitUsage {
		t.Errorf("--format yaml: exit %d", r.code)
	}
}

// TestBlameAfterRewindAndRevert: a revert of a call brings back the lines
// it removed with their owners before it, and a rewind restores lines with
// the owners they had at its target.
func TestBlameAfterRewindAndRevert(t *testing.T) {
	repo, env := attributionRepo(t)
	f := filepath.Join(repo, "f.txt")
	s := newFakeSession(t, env, repo, "sess-R")
	s.prompt("p")
	s.call("Write", map[string]any{"file_path": f, "content": "a\nb\nc\n"}, func() { writeFile(t, f, "a\nb\nc\n") })
	s.call("Bash", map[string]any{"command": "sed -i /b/d f.txt"}, func() { replaceIn(t, f, "b\n", "") })
	s.stop()
	checkBlame(t, blameOf(t, env, "--root", repo, f), []string{"a = Write@0/sess-R/p1", "c = Write@0/sess-R/p1"})
	mustRun(t, env, "revert", "--root", repo, "--call", "1")
	checkBlame(t, blameOf(t, env, "--root", repo, f), []string{"a = Write@0/sess-R/p1", "b = Write@0/sess-R/p1", "c = Write@0/sess-R/p1"})
	mustRun(t, env, "rewind", "--root", repo, "--to", "1")
	checkBlame(t, blameOf(t, env, "--root", repo, f), []string{"a = Write@0/sess-R/p1", "c = Write@0/sess-R/p1"})
	mustRun(t, env, "rewind", "--root", repo, "--to", "0")
	checkBlame(t, blameOf(t, env, "--root", repo, f), []string{"a = Write@0/sess-R/p1", "b = Write@0/sess-R/p1", "c = Write@0/sess-R/p1"})
}

// TestAttributionHooksInLinkedWorktree: linked worktrees share the hooks
// enable installed; a commit in another worktree is attributed from that
// worktree's own changelog, and a worktree without one gets no note and
// no warning.
func TestAttributionHooksInLinkedWorktree(t *testing.T) {
	repo, env := attributionRepo(t)
	if r := runWithExe(t, env, agentscmOnPath(t), "attribution", "enable", "--root", repo); r.code != 0 {
		t.Fatalf("enable: %d %s", r.code, r.stderr)
	}
	wt := filepath.Join(filepath.Dir(repo), "wt2")
	gitRun(t, repo, env, "worktree", "add", "-q", wt)
	wt, _ = filepath.EvalSymlinks(wt)

	// No changelog in wt2: no note, nothing said.
	writeFile(t, filepath.Join(wt, "plain.txt"), "p\n")
	gitRun(t, wt, env, "add", "plain.txt")
	if out := gitRun(t, wt, env, "commit", "-qm", "plain"); strings.Contains(out, "agentscm") {
		t.Fatalf("the hook spoke in a worktree without a changelog: %s", out)
	}
	cmd := exec.Command("git", "notes", "--ref", "agentscm", "show", "HEAD")
	cmd.Dir = wt
	if err := cmd.Run(); err == nil {
		t.Fatal("a worktree without a changelog got a note")
	}

	mustRun(t, env, "changelog", "enable", "--root", wt)
	f := filepath.Join(wt, "w.txt")
	s := newFakeSession(t, env, wt, "sess-W")
	s.prompt("p")
	s.call("Write", map[string]any{"file_path": f, "content": "w1\nw2\n"}, func() { writeFile(t, f, "w1\nw2\n") })
	s.stop()
	gitRun(t, wt, env, "add", "w.txt")
	gitRun(t, wt, env, "commit", "-qm", "in wt2")
	rec, _ := noteOf(t, wt, env, "HEAD")
	if got := strings.Join(noteLines(rec), " "); got != "w.txt:1=ai/sess-W w.txt:2=ai/sess-W" {
		t.Fatalf("the note of the commit in wt2: %s", got)
	}
}

// TestAttributionNotesOfNestedCheckout: a checkout that is a subdirectory
// of its repository: the note names files from the repository's top, and
// a rebase carries it over.
func TestAttributionNotesOfNestedCheckout(t *testing.T) {
	repo := gitRepo(t, "repo")
	base := filepath.Dir(repo)
	env := map[string]string{"HOME": filepath.Join(base, "home"), "XDG_CONFIG_HOME": filepath.Join(base, "cfg")}
	svc := filepath.Join(repo, "svc")
	os.MkdirAll(svc, 0o755)
	writeFile(t, filepath.Join(repo, "README.md"), "top\n")
	writeFile(t, filepath.Join(svc, "keep.txt"), "k\n")
	gitRun(t, repo, env, "add", ".")
	gitRun(t, repo, env, "commit", "-qm", "init")
	mustRun(t, env, "changelog", "enable", "--root", svc)
	if r := runWithExe(t, env, agentscmOnPath(t), "attribution", "enable", "--root", svc); r.code != 0 {
		t.Fatalf("enable: %d %s", r.code, r.stderr)
	}
	x := filepath.Join(svc, "x.txt")
	s := newFakeSession(t, env, svc, "sess-S")
	s.prompt("p")
	s.call("Write", map[string]any{"file_path": x, "content": "x1\nx2\n"}, func() { writeFile(t, x, "x1\nx2\n") })
	s.stop()
	gitRun(t, repo, env, "add", "svc/x.txt")
	if out := gitRun(t, repo, env, "commit", "-qm", "x"); out != "" {
		t.Fatalf("commit said %s", out)
	}
	rec, _ := noteOf(t, repo, env, "HEAD")
	if got := strings.Join(noteLines(rec), " "); got != "svc/x.txt:1=ai/sess-S svc/x.txt:2=ai/sess-S" {
		t.Fatalf("note %s", got)
	}
	gitRun(t, repo, env, "checkout", "-q", "-b", "upstream", "HEAD~1")
	writeFile(t, filepath.Join(repo, "README.md"), "top\nmore\n")
	gitRun(t, repo, env, "commit", "-qam", "upstream")
	gitRun(t, repo, env, "checkout", "-q", "-")
	gitRun(t, repo, env, "rebase", "-q", "upstream")
	rec, raw := noteOf(t, repo, env, "HEAD")
	if got := strings.Join(noteLines(rec), " "); got != "svc/x.txt:1=ai/sess-S svc/x.txt:2=ai/sess-S" || !strings.Contains(raw, "rewritten_from") {
		t.Fatalf("after rebase: %s\n%s", got, raw)
	}
}

// TestExportAgentTrace: export --format agent-trace of a commit, a session
// and a Work (the sessions whose calls the changelog uploaded under it)
// writes records valid against the Agent Trace schema; a Work without
// uploads, a second selector or another format is refused.
func TestExportAgentTrace(t *testing.T) {
	repo, env := attributionRepo(t)
	mustRun(t, env, "client", "setup", "--root", repo, "--local", "--repository", "proj")
	var w struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, env, "work", "start", "--root", repo, "--format", "json").stdout), &w); err != nil || w.ID == "" {
		t.Fatalf("work start: %v %+v", err, w)
	}
	f := filepath.Join(repo, "f.txt")
	s := newFakeSession(t, env, repo, "sess-E")
	s.prompt("p")
	s.call("Write", map[string]any{"file_path": f, "content": "e1\ne2\n"}, func() { writeFile(t, f, "e1\ne2\n") })
	s.stop()
	appendFile(t, f, "mine\n")
	gitRun(t, repo, env, "add", "f.txt")
	gitRun(t, repo, env, "commit", "-qm", "e")

	for _, args := range [][]string{{"--commit", "HEAD"}, {"--session", "sess-E"}, {"--work-id", w.ID}} {
		raw := mustRun(t, env, append([]string{"export", "--root", repo, "--format", "agent-trace"}, args...)...).stdout
		errs, err := schemacheck.Check(schemaBytes(t), []byte(raw))
		if err != nil || len(errs) > 0 {
			t.Fatalf("export %v: %v %v\n%s", args, err, errs, raw)
		}
		var rec attribution.TraceRecord
		json.Unmarshal([]byte(raw), &rec)
		want := "f.txt:1=ai/sess-E f.txt:2=ai/sess-E"
		if args[0] == "--commit" {
			want += " f.txt:3=human"
		}
		if got := strings.Join(noteLines(&rec), " "); got != want {
			t.Errorf("export %v: %s, want %s", args, got, want)
		}
		if (rec.VCS != nil) != (args[0] == "--commit") {
			t.Errorf("export %v: vcs %+v", args, rec.VCS)
		}
	}
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"--work-id", "wrk_none"}, ExitError, "no position of this checkout was uploaded under that Work"},
		{[]string{"--commit", "HEAD", "--session", "sess-E"}, ExitUsage, "give one of"},
		{[]string{"--format", "json", "--commit", "HEAD"}, ExitUsage, "--format must be agent-trace"},
	} {
		args := append([]string{"export", "--root", repo}, tc.args...)
		if tc.args[0] != "--format" {
			args = append(args, "--format", "agent-trace")
		}
		if r := runMain(t, env, "", args...); r.code != tc.code || !strings.Contains(r.stderr, tc.says) {
			t.Errorf("export %v: exit %d %q, want %d %q", tc.args, r.code, r.stderr, tc.code, tc.says)
		}
	}
}

// TestAttributionHookFailsOpen: a commit whose note cannot be written (no
// changelog) still succeeds; the hook says why in one line.
func TestAttributionHookFailsOpen(t *testing.T) {
	repo := gitRepo(t, "repo")
	base := filepath.Dir(repo)
	env := map[string]string{"HOME": filepath.Join(base, "home"), "XDG_CONFIG_HOME": filepath.Join(base, "cfg")}
	if r := runWithExe(t, env, agentscmOnPath(t), "attribution", "enable", "--root", repo); r.code != 0 {
		t.Fatalf("enable: %d %s", r.code, r.stderr)
	}
	writeFile(t, filepath.Join(repo, "a.txt"), "a\n")
	gitRun(t, repo, env, "add", "a.txt")
	out := gitRun(t, repo, env, "commit", "-qm", "a")
	if strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, "agentscm attribution: post-commit: no note written: no changelog for ") {
		t.Fatalf("the commit said %q, want one warning line", out)
	}
	if got := strings.TrimSpace(gitRun(t, repo, env, "log", "--format=%s")); got != "a" {
		t.Fatalf("log %q", got)
	}
}
