//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/attribution"
	"github.com/agentscm/agentscm/internal/attribution/schemacheck"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/test/e2e/scriptedapi"
	"github.com/agentscm/agentscm/test/e2e/scriptedresponses"
)

// The session's conversation, each part findable on its own: the prompt,
// a shell command's input that never reaches the file, and its output.
const (
	blamePrompt = "BLAMEPROMPT-5d1e"
	blameInput  = "BLAMEINPUT-a9c3"
	blameOutput = "BLAMEOUTPUT-70f2" // printed by `printf 'BLAME%s' OUTPUT-70f2`
)

// TestBlameNotesAndExportOfARealSession: the real Claude Code CLI, in a
// metadata-only checkout with the changelog and the attribution hooks on,
// writes a file with Write, appends a line with Bash (echo >>), and edits
// one line with Edit, while the user edits another line between two
// calls. blame names each line's call or "outside"; a commit gets a note
// that validates against the vendored Agent Trace schema and whose ranges
// match blame; the exports of the commit and of the session validate too;
// no prompt, tool input or tool output is in any note or export.
func TestBlameNotesAndExportOfARealSession(t *testing.T) {
	c := newCheckout(t)
	c.configure(event.ModeMetadataOnly)
	c.agentscm("changelog", "enable", "--root", c.root)
	c.agentscm("attribution", "enable", "--root", c.root)
	f := filepath.Join(c.root, "f.txt")
	api, err := scriptedapi.Start(scriptedapi.Turn{Marker: "SCENARIO-BLAME", FinalText: "ok",
		Steps: [][]scriptedapi.ToolCall{
			{write(f, "alpha\nbeta\ngamma\n")},
			{bash("echo delta >> f.txt; printf 'BLAME%s\\n' OUTPUT-70f2 # " + blameInput)},
			{{Name: "Read", Input: map[string]any{"file_path": f}}},
			{{Name: "Edit", Input: map[string]any{"file_path": f, "old_string": "gamma", "new_string": "GAMMA"}}},
			{bash("echo done > done.txt")}, // flushes the Edit's result to the transcript
		},
		OnStep: func(step int) {
			if step == 2 { // the Bash call returned; the Read not started
				b, _ := os.ReadFile(f)
				os.WriteFile(f, []byte(strings.Replace(string(b), "beta", "beta by the user", 1)), 0o644)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	res := c.runClaude(api, "-p", "Please run SCENARIO-BLAME now. "+blamePrompt)

	var b attribution.FileBlame
	if err := json.Unmarshal([]byte(c.agentscm("blame", "--root", c.root, "--format", "json", f)), &b); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range b.Lines {
		o := l.Owner
		s := l.Text + " = " + o.Kind
		if o.Kind == attribution.KindAgent {
			if o.Session != res.SessionID || o.Prompt != 1 || o.Model == "" || o.Agent != "claude-code" {
				t.Errorf("line %d: owner %+v, want session %s, prompt 1, a model", l.Number, o, res.SessionID)
			}
			s += " " + o.Tool
			if o.Tool == "Bash" && !strings.HasPrefix(o.Command, "echo delta >> f.txt") {
				t.Errorf("line %d: command %q", l.Number, o.Command)
			}
		}
		got = append(got, s)
	}
	want := []string{"alpha = agent Write", "beta by the user = outside", "GAMMA = agent Edit", "delta = agent Bash"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("blame:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// The commit's note: a valid record whose ranges are blame's.
	c.git("add", "f.txt")
	c.git("-c", "user.email=e2e@example.invalid", "-c", "user.name=e2e", "commit", "-qm", "agent work")
	note := c.gitOutput("notes", "--ref", "agentscm", "show", "HEAD")
	rec := checkRecord(t, "the note", note)
	if rec.VCS == nil || rec.VCS.Revision != strings.TrimSpace(c.gitOutput("rev-parse", "HEAD")) {
		t.Fatalf("the note names %+v", rec.VCS)
	}
	lines := map[int]string{}
	for _, tf := range rec.Files {
		if tf.Path != "f.txt" {
			t.Fatalf("the note attributes %s", tf.Path)
		}
		for _, conv := range tf.Conversations {
			who := conv.Contributor.Type
			if who == "ai" && (len(conv.Related) != 1 || conv.Related[0].URL != attribution.SessionURI(res.SessionID) || !strings.HasPrefix(conv.Contributor.ModelID, "anthropic/")) {
				t.Errorf("the ai conversation %+v", conv)
			}
			for _, r := range conv.Ranges {
				for n := r.StartLine; n <= r.EndLine; n++ {
					lines[n] = who
				}
			}
		}
	}
	for _, l := range b.Lines {
		wantWho := map[string]string{attribution.KindAgent: "ai", attribution.KindOutside: "human"}[l.Owner.Kind]
		if lines[l.Number] != wantWho {
			t.Errorf("line %d: the note says %q, blame %q", l.Number, lines[l.Number], l.Owner.Kind)
		}
	}
	if len(lines) != len(b.Lines) {
		t.Errorf("the note attributes %d lines, blame %d", len(lines), len(b.Lines))
	}

	exports := map[string]string{
		"export --commit":  c.agentscm("export", "--root", c.root, "--format", "agent-trace", "--commit", "HEAD"),
		"export --session": c.agentscm("export", "--root", c.root, "--format", "agent-trace", "--session", res.SessionID),
	}
	for name, raw := range exports {
		checkRecord(t, name, raw)
	}
	sess := checkRecord(t, "export --session", exports["export --session"])
	var ranges []string
	for _, tf := range sess.Files {
		for _, conv := range tf.Conversations {
			for _, r := range conv.Ranges {
				ranges = append(ranges, fmt.Sprintf("%s:%d-%d", tf.Path, r.StartLine, r.EndLine))
			}
		}
	}
	if got := strings.Join(ranges, " "); got != "done.txt:1-1 f.txt:1-1 f.txt:3-4" {
		t.Errorf("the session's export holds %s, want its lines: done.txt:1-1 f.txt:1-1 f.txt:3-4", got)
	}

	// The session's transcript, which blame reads, holds the conversation
	// (the search can see a leak); no note or export does.
	local := hubBytes(t, filepath.Join(c.home, ".claude", "projects"), nil)
	for _, s := range []string{blamePrompt, blameInput, blameOutput} {
		if !anyHolds(local, s) {
			t.Fatalf("the session's transcript does not hold %q: the test would not see a leak", s)
		}
	}
	exports["note"] = note
	for name, raw := range exports {
		for _, s := range []string{blamePrompt, blameInput, blameOutput, "echo delta", "Please run"} {
			if strings.Contains(raw, s) {
				t.Errorf("%s holds %q", name, s)
			}
		}
	}
}

// checkRecord validates raw against the vendored Agent Trace schema and
// decodes it.
func checkRecord(t *testing.T, name, raw string) *attribution.TraceRecord {
	t.Helper()
	schema, err := os.ReadFile(filepath.Join("..", "..", "internal", "attribution", "testdata", "agent-trace-0.1.0.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	errs, err := schemacheck.Check(schema, []byte(raw))
	if err != nil || len(errs) > 0 {
		t.Fatalf("%s is not a valid Agent Trace record: %v %v\n%s", name, err, errs, raw)
	}
	var rec attribution.TraceRecord
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Version != attribution.TraceVersion || len(rec.Files) == 0 {
		t.Fatalf("%s: %s", name, raw)
	}
	return &rec
}

// gitOutput runs git in the checkout and returns its stdout.
func (c *checkout) gitOutput(args ...string) string {
	c.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = c.root
	cmd.Env = c.env()
	out, err := cmd.Output()
	if err != nil {
		c.t.Fatalf("git %v: %v", args, err)
	}
	return string(out)
}

// TestBlameOfACodexSession: with the real Codex CLI, two shell calls and a
// user edit between them: blame names each line's call (session,
// position, tool) or outside, and the commit's note agrees and validates.
func TestBlameOfACodexSession(t *testing.T) {
	ensureCodex(t)
	c := newCheckout(t)
	c.agentscm("changelog", "enable", "--root", c.root, "--agent", "codex")
	c.agentscm("attribution", "enable", "--root", c.root)
	f := filepath.Join(c.root, "c.txt")
	api, err := scriptedresponses.Start(scriptedresponses.Turn{Marker: "CODEX-BLAME", FinalText: "done",
		Steps: [][]scriptedresponses.Call{{{Shell: "printf 'c1\\nc2\\n' > c.txt"}}, {{Shell: "echo c3 >> c.txt"}}},
		OnStep: func(step int) {
			if step == 1 {
				b, _ := os.ReadFile(f)
				os.WriteFile(f, append(b, "by the user\n"...), 0o644)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	c.configureCodex(api)
	thread := c.runCodex("Run CODEX-BLAME please.")

	var b attribution.FileBlame
	if err := json.Unmarshal([]byte(c.agentscm("blame", "--root", c.root, "--format", "json", f)), &b); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range b.Lines {
		s := l.Text + " = " + l.Owner.Kind
		if l.Owner.Kind == attribution.KindAgent {
			s += fmt.Sprintf(" %s@%d", l.Owner.Tool, *l.Owner.Position)
			if l.Owner.Session != thread {
				t.Errorf("line %d: session %q, want the thread %q", l.Number, l.Owner.Session, thread)
			}
		}
		got = append(got, s)
	}
	want := []string{"c1 = agent Bash@0", "c2 = agent Bash@0", "by the user = outside", "c3 = agent Bash@2"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("blame:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	c.git("add", "c.txt")
	c.git("-c", "user.email=e2e@example.invalid", "-c", "user.name=e2e", "commit", "-qm", "codex work")
	rec := checkRecord(t, "the note", c.gitOutput("notes", "--ref", "agentscm", "show", "HEAD"))
	var ranges []string
	for _, tf := range rec.Files {
		for _, conv := range tf.Conversations {
			for _, r := range conv.Ranges {
				ranges = append(ranges, fmt.Sprintf("%s:%d-%d=%s", tf.Path, r.StartLine, r.EndLine, conv.Contributor.Type))
			}
		}
	}
	if g := strings.Join(ranges, " "); g != "c.txt:1-2=ai c.txt:4-4=ai c.txt:3-3=human" {
		t.Fatalf("the note's ranges %s", g)
	}
}
