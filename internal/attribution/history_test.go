package attribution

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/changelog"
)

// testRepo is a git checkout with one commit and a changelog whose
// baseline is recorded (as changelog enable records it).
type testRepo struct {
	t    testing.TB
	root string
	log  *changelog.Changelog
}

func newTestRepo(t testing.TB, files map[string]string) *testRepo {
	t.Helper()
	root, _ := filepath.EvalSymlinks(t.TempDir())
	root = filepath.Join(root, "repo")
	os.MkdirAll(root, 0o755)
	r := &testRepo{t: t, root: root}
	r.git("init", "-q")
	for p, c := range files {
		r.write(p, c)
	}
	r.git("add", ".")
	r.git("commit", "-qm", "init")
	dir := filepath.Join(filepath.Dir(root), "changelog")
	c, err := changelog.Open(dir, changelog.Options{Roots: []changelog.Root{{Name: "checkout", Path: root, Git: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.RecordBaseline(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.log = c
	return r
}

func (r *testRepo) git(args ...string) {
	r.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = r.root
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid")
	if out, err := cmd.CombinedOutput(); err != nil {
		r.t.Fatalf("git %v: %v %s", args, err, out)
	}
}

func (r *testRepo) write(rel, content string) {
	r.t.Helper()
	p := filepath.Join(r.root, rel)
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// call captures the tool call tool of session s as the next position.
func (r *testRepo) call(tool string) {
	r.t.Helper()
	if _, err := r.log.Capture(context.Background(), changelog.CaptureRequest{Position: -1, SessionID: "s", Tool: tool}); err != nil {
		r.t.Fatal(err)
	}
}

func (r *testRepo) blame(rel string, at int) string {
	r.t.Helper()
	repo, err := Open(r.log)
	if err != nil {
		r.t.Fatal(err)
	}
	b, err := repo.Blame(context.Background(), rel, at)
	if err != nil {
		r.t.Fatal(err)
	}
	var out []string
	for _, l := range b.Lines {
		who := l.Owner.Kind
		if l.Owner.Kind == KindAgent {
			who = l.Owner.Tool
		}
		if l.Owner.Uncaptured {
			who = "uncaptured"
		}
		out = append(out, l.Text+"="+who)
	}
	return strings.Join(out, " ")
}

// TestFirstIncrement: the first increment stores every path; a file its
// call did not change is before capture, one it created is the call's,
// one it modified is compared with HEAD.
func TestFirstIncrement(t *testing.T) {
	r := newTestRepo(t, map[string]string{"kept.txt": "k1\nk2\n", "mod.txt": "m1\nm2\n"})
	r.write("new.txt", "n1\n")
	r.write("mod.txt", "m1\nM2\nm3\n")
	r.call("Bash")
	for _, tc := range []struct{ rel, want string }{
		{"kept.txt", "k1=before_capture k2=before_capture"},
		{"new.txt", "n1=Bash"},
		{"mod.txt", "m1=before_capture M2=Bash m3=Bash"},
	} {
		if got := r.blame(tc.rel, -1); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.rel, got, tc.want)
		}
	}
	r.write("kept.txt", "k1\nk2\nmine\n")
	if got := r.blame("kept.txt", -1); got != "k1=before_capture k2=before_capture mine=uncaptured" {
		t.Errorf("after an uncaptured edit: %s", got)
	}
	if got := r.blame("kept.txt", 0); got != "k1=before_capture k2=before_capture" {
		t.Errorf("--at 0: %s", got)
	}
}

// TestBeforeAnyIncrement: with no increment yet, the lines HEAD holds are
// before capture and only the lines changed since are not captured yet.
func TestBeforeAnyIncrement(t *testing.T) {
	r := newTestRepo(t, map[string]string{"a.txt": "a1\na2\n"})
	if got := r.blame("a.txt", -1); got != "a1=before_capture a2=before_capture" {
		t.Errorf("unchanged: %s", got)
	}
	r.write("a.txt", "a1\nmine\na2\n")
	if got := r.blame("a.txt", -1); got != "a1=before_capture mine=uncaptured a2=before_capture" {
		t.Errorf("edited: %s", got)
	}
	repo, err := Open(r.log)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Blame(context.Background(), "a.txt", 3); !errors.Is(err, ErrNoPosition) {
		t.Errorf("--at 3 with no increment: %v, want ErrNoPosition", err)
	}
}

// TestPrefetchReadsEachIncrementOnce: with the paths prefetched, blaming
// several files reads each increment once.
func TestPrefetchReadsEachIncrementOnce(t *testing.T) {
	r := newTestRepo(t, map[string]string{"a.txt": "a\n", "b.txt": "b\n", "c.txt": "c\n"})
	r.write("a.txt", "a\nA\n")
	r.write("b.txt", "b\nB\n")
	r.call("Write")
	r.write("a.txt", "a\nA\nAA\n")
	r.write("c.txt", "c\nC\n")
	r.call("Edit")
	repo, err := Open(r.log)
	if err != nil {
		t.Fatal(err)
	}
	repo.Prefetch([]string{"a.txt", "b.txt", "c.txt"})
	for _, rel := range []string{"a.txt", "b.txt", "c.txt"} {
		if _, err := repo.Blame(context.Background(), rel, -1); err != nil {
			t.Fatal(err)
		}
	}
	if repo.reads != 2 {
		t.Fatalf("%d increment reads for 2 increments", repo.reads)
	}
}

// TestReadTranscript: prompts are counted as the user typed them (not
// tool results, meta lines, slash-command echoes, interruptions, compact
// summaries or a subagent's lines), and each tool call keeps its prompt's
// number, its model and a shell call's command.
func TestReadTranscript(t *testing.T) {
	lines := []string{
		`{"type":"user","message":{"role":"user","content":"first prompt"}}`,
		`{"type":"assistant","message":{"model":"m-1","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}]}}`,
		`{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"x"}]}}`,
		`{"type":"user","isMeta":true,"message":{"role":"user","content":"Caveat: meta"}}`,
		`{"type":"user","message":{"role":"user","content":"<command-name>/clear</command-name>"}}`,
		`{"type":"user","message":{"role":"user","content":[{"type":"text","text":"[Request interrupted by user]"}]}}`,
		`{"type":"user","isSidechain":true,"message":{"role":"user","content":"a subagent's task"}}`,
		`{"type":"user","isCompactSummary":true,"message":{"role":"user","content":"This session is being continued"}}`,
		`not json`,
		`{"type":"user","message":{"role":"user","content":[{"type":"text","text":"second prompt"}]}}`,
		`{"type":"assistant","message":{"model":"m-2","content":[{"type":"text","text":"ok"},{"type":"tool_use","id":"t2","name":"Write","input":{"file_path":"/x","content":"c"}}]}}`,
	}
	p := filepath.Join(t.TempDir(), "s.jsonl")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got := readTranscript(p)
	want := map[string]callDetail{
		"t1": {agent: "claude-code", command: "ls", prompt: 1, model: "m-1"},
		"t2": {agent: "claude-code", prompt: 2, model: "m-2"},
	}
	if len(got) != len(want) || got["t1"] != want["t1"] || got["t2"] != want["t2"] {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}
