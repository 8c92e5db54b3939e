//go:build e2e

package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/test/e2e/scriptedapi"
)

// agentscmExit runs the built binary and returns its exit status and output.
func (c *checkout) agentscmExit(args ...string) (int, string, string) {
	c.t.Helper()
	cmd := exec.Command(h.agentscm, args...)
	cmd.Env = c.env()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), stdout.String(), stderr.String()
	}
	if err != nil {
		c.t.Fatal(err)
	}
	return 0, stdout.String(), stderr.String()
}

// treeOf describes every file and symlink under dir except .git: path ->
// mode, content (or target) and mtime in seconds.
func treeOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			tgt, _ := os.Readlink(p)
			out[rel] = "-> " + tgt
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		// Increments keep mtimes to the second, as GNU tar does.
		out[rel] = fmt.Sprintf("%s %q @%d", fi.Mode(), b, fi.ModTime().Unix())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameTree(t *testing.T, what string, want, got map[string]string) {
	t.Helper()
	var diffs []string
	for k, w := range want {
		if g, ok := got[k]; !ok {
			diffs = append(diffs, "missing "+k)
		} else if g != w {
			diffs = append(diffs, k+": "+w+" != "+g)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, "unexpected "+k)
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 0 {
		t.Fatalf("%s:\n  %s", what, strings.Join(diffs, "\n  "))
	}
}

// storedNames lists the member names of every increment of the checkout.
func (c *checkout) storedNames(root string) []string {
	c.t.Helper()
	var list struct {
		Dir string `json:"dir"`
	}
	if err := json.Unmarshal([]byte(c.agentscm("changelog", "list", "--root", root, "--format", "json")), &list); err != nil {
		c.t.Fatal(err)
	}
	paths, _ := filepath.Glob(filepath.Join(list.Dir, "increments", "*.tgz"))
	if len(paths) == 0 {
		c.t.Fatalf("no increments in %s", list.Dir)
	}
	var names []string
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			c.t.Fatal(err)
		}
		gz, err := gzip.NewReader(f)
		if err != nil {
			c.t.Fatal(err)
		}
		tr := tar.NewReader(gz)
		for {
			hd, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				c.t.Fatal(err)
			}
			names = append(names, hd.Name)
		}
		f.Close()
	}
	return names
}

// TestChangelogRewindRefusesOverUserEdit: after a real session, the user
// edits a file the agent wrote, creates one and deletes one. The rewind
// refuses with status 6 and lists exactly those paths, changing nothing;
// --dry-run lists every change; --force rewinds, and its undo restores the
// user's state byte for byte.
func TestChangelogRewindRefusesOverUserEdit(t *testing.T) {
	c := newCheckout(t)
	c.agentscm("changelog", "enable", "--root", c.root)
	one, two := filepath.Join(c.root, "one.txt"), filepath.Join(c.root, "two.txt")
	c.runTurn([]scriptedapi.ToolCall{write(one, "1\n")}, []scriptedapi.ToolCall{write(two, "2\n")})
	checkPositions(t, c.changelogList(), []string{"Write", "Write"}, -1)

	// The user's work after the session.
	c.write("one.txt", "the user's edit\n")
	c.write("mine.txt", "the user's own file\n")
	os.Remove(filepath.Join(c.root, "b.txt"))
	userState := treeOf(t, c.root)

	code, stdout, stderr := c.agentscmExit("rewind", "--root", c.root, "--to", "0", "--format", "json")
	if code != 6 {
		t.Fatalf("rewind over user edits: exit %d\n%s\n%s", code, stdout, stderr)
	}
	var refusal struct {
		Refused string `json:"refused"`
		Paths   []struct {
			Path   string `json:"path"`
			Since  string `json:"since"`
			Change string `json:"change"`
		} `json:"paths"`
	}
	if err := json.Unmarshal([]byte(stdout), &refusal); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range refusal.Paths {
		got = append(got, p.Since+">"+p.Change+" "+p.Path)
	}
	want := []string{"deleted>created b.txt", "created>deleted mine.txt", "modified>modified one.txt"}
	if strings.Join(got, ",") != strings.Join(want, ",") || refusal.Refused != "changed_since_capture" {
		t.Fatalf("refusal lists %v, want %v\n%s", got, want, stderr)
	}
	for _, p := range []string{"b.txt", "mine.txt", "one.txt"} {
		if !strings.Contains(stderr, filepath.Join(c.root, p)) {
			t.Errorf("the refusal on stderr does not name %s:\n%s", p, stderr)
		}
	}
	sameTree(t, "the refused rewind changed the checkout", userState, treeOf(t, c.root))

	dry := c.agentscm("rewind", "--root", c.root, "--to", "0", "--dry-run")
	for _, s := range []string{"deleted  file    " + two, "modified file    " + one, "created  file    " + filepath.Join(c.root, "b.txt"), "would be refused"} {
		if !strings.Contains(dry, s) {
			t.Errorf("dry run lacks %q:\n%s", s, dry)
		}
	}
	sameTree(t, "the dry run changed the checkout", userState, treeOf(t, c.root))

	out := c.agentscm("rewind", "--root", c.root, "--to", "0", "--force")
	if b, _ := os.ReadFile(one); string(b) != "1\n" || exists(t, two) || exists(t, filepath.Join(c.root, "mine.txt")) || !exists(t, filepath.Join(c.root, "b.txt")) {
		t.Fatalf("after the forced rewind: one=%q two=%v", b, exists(t, two))
	}
	undo := strings.TrimSpace(out[strings.LastIndex(out, "--to")+len("--to"):])
	c.agentscm("changelog", "apply", "--root", c.root, "--to", undo)
	sameTree(t, "the undo of the forced rewind", userState, treeOf(t, c.root))
}

// TestChangelogSubdirectoryCheckoutKeepsIgnored: the checkout is a
// subdirectory of its repository, whose .gitignore at the top ignores
// build/ and *.log. Files an agent's command creates there are never
// stored, and a rewind and its undo leave them as they are.
func TestChangelogSubdirectoryCheckoutKeepsIgnored(t *testing.T) {
	c := newCheckout(t)
	c.write(".gitignore", "build/\n*.log\n")
	sub := filepath.Join(c.root, "sub")
	os.MkdirAll(sub, 0o755)
	c.root = sub // Claude Code runs in the subdirectory; its changelog root
	c.agentscm("changelog", "enable", "--root", sub)
	keep, made := filepath.Join(sub, "keep.txt"), filepath.Join(sub, "made.txt")
	c.runTurn(
		[]scriptedapi.ToolCall{write(keep, "kept\n")},
		[]scriptedapi.ToolCall{bash("mkdir -p build && echo obj > build/out.o && echo log > run.log && echo made > made.txt")},
	)
	checkPositions(t, c.changelogList(), []string{"Write", "Bash"}, -1)
	for _, n := range c.storedNames(sub) {
		if strings.Contains(n, "build/") || strings.HasSuffix(n, ".log") {
			t.Errorf("an increment stores the ignored %s", n)
		}
	}
	ignored := func() string {
		a, _ := os.ReadFile(filepath.Join(sub, "build", "out.o"))
		b, _ := os.ReadFile(filepath.Join(sub, "run.log"))
		return string(a) + "|" + string(b)
	}
	if ignored() != "obj\n|log\n" {
		t.Fatalf("the agent's command did not create the ignored files: %q", ignored())
	}
	before := treeOf(t, sub)
	out := c.agentscm("rewind", "--root", sub, "--to", "0")
	if exists(t, made) || !exists(t, keep) {
		t.Fatalf("after the rewind to 0: made=%v keep=%v", exists(t, made), exists(t, keep))
	}
	if ignored() != "obj\n|log\n" {
		t.Fatalf("the rewind changed the ignored files: %q", ignored())
	}
	undo := strings.TrimSpace(out[strings.LastIndex(out, "--to")+len("--to"):])
	c.agentscm("changelog", "apply", "--root", sub, "--to", undo)
	sameTree(t, "the undo of the rewind", before, treeOf(t, sub))
}

// runScripted runs one turn of the real Claude Code CLI against turn.
func (c *checkout) runScripted(turn scriptedapi.Turn) {
	c.t.Helper()
	api, err := scriptedapi.Start(turn)
	if err != nil {
		c.t.Fatal(err)
	}
	defer api.Close()
	c.runClaude(api, "-p", "Run "+turn.Marker+".")
}

// positionsOf returns the positions of the increments of kind.
func positionsOf(list []changelog.Info, kind string) []int {
	var out []int
	for _, in := range list {
		if in.Kind == kind {
			out = append(out, in.Position)
		}
	}
	return out
}

// TestChangelogOutsideEditBetweenCalls: the user edits a file and creates
// one while the agent is thinking between its two calls. The changelog
// stores that work as its own outside position, never under the next call;
// a rewind to the first call refuses (status 6) and lists it;
// --discard-outside-edits rewinds, and its undo restores the state before
// it byte for byte.
func TestChangelogOutsideEditBetweenCalls(t *testing.T) {
	c := newCheckout(t)
	c.agentscm("changelog", "enable", "--root", c.root)
	one, two := filepath.Join(c.root, "one.txt"), filepath.Join(c.root, "two.txt")
	c.runScripted(scriptedapi.Turn{Marker: "SCENARIO-OUT", FinalText: "ok",
		Steps: [][]scriptedapi.ToolCall{{write(one, "1\n")}, {write(two, "2\n")}},
		OnStep: func(step int) {
			if step == 1 { // call 0 returned; call 1 not started
				os.WriteFile(filepath.Join(c.root, "README.md"), []byte("the user's edit\n"), 0o644)
				os.WriteFile(filepath.Join(c.root, "mine.txt"), []byte("the user's own file\n"), 0o644)
			}
		}})
	list := c.changelogList()
	calls, outside := positionsOf(list, changelog.KindCall), positionsOf(list, changelog.KindOutside)
	if len(calls) != 2 || len(outside) != 1 || !(calls[0] < outside[0] && outside[0] < calls[1]) {
		t.Fatalf("positions %+v: want call, outside, call", list)
	}
	byPos := map[int]changelog.Info{}
	for _, in := range list {
		byPos[in.Position] = in
	}
	out, second := byPos[outside[0]], byPos[calls[1]]
	if out.Outside == nil || out.Outside.BeforeTool != "Write" || out.Changes == nil ||
		strings.Join(out.Changes.Created, ",") != "mine.txt" || strings.Join(out.Changes.Modified, ",") != "README.md" {
		t.Fatalf("the outside position %+v %+v", out, out.Changes)
	}
	if second.Changes == nil || strings.Join(second.Changes.Created, ",") != "two.txt" || len(second.Changes.Modified) != 0 {
		t.Fatalf("the second call's position claims the user's work: %+v", second.Changes)
	}
	text := c.agentscm("changelog", "list", "--root", c.root)
	if !strings.Contains(text, "outside") || !strings.Contains(text, "work done outside the agent") {
		t.Errorf("changelog list does not show the outside position:\n%s", text)
	}
	userState := treeOf(t, c.root)

	to := fmt.Sprint(calls[0])
	code, stdout, stderr := c.agentscmExit("rewind", "--root", c.root, "--to", to, "--format", "json")
	if code != 6 {
		t.Fatalf("rewind over outside work: exit %d\n%s\n%s", code, stdout, stderr)
	}
	var refusal struct {
		Refused string `json:"refused"`
		Outside []struct {
			Path   string `json:"path"`
			Since  string `json:"since"`
			Change string `json:"change"`
			At     *int   `json:"outside_position"`
		} `json:"outside_work"`
	}
	if err := json.Unmarshal([]byte(stdout), &refusal); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range refusal.Outside {
		if p.At == nil || *p.At != outside[0] {
			t.Errorf("%s: outside position %v, want %d", p.Path, p.At, outside[0])
		}
		got = append(got, p.Since+">"+p.Change+" "+p.Path)
	}
	if want := []string{"modified>modified README.md", "created>deleted mine.txt"}; refusal.Refused != "outside_work" || strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("refusal %q lists %v, want %v\n%s", refusal.Refused, got, want, stderr)
	}
	if !strings.Contains(stderr, "--discard-outside-edits") || !strings.Contains(stderr, filepath.Join(c.root, "mine.txt")) {
		t.Errorf("the refusal on stderr:\n%s", stderr)
	}
	sameTree(t, "the refused rewind changed the checkout", userState, treeOf(t, c.root))

	res := c.agentscm("rewind", "--root", c.root, "--to", to, "--discard-outside-edits")
	if b, _ := os.ReadFile(filepath.Join(c.root, "README.md")); string(b) != "scratch checkout\n" || exists(t, two) || exists(t, filepath.Join(c.root, "mine.txt")) || !exists(t, one) {
		t.Fatalf("after the rewind: README %q, two %v", b, exists(t, two))
	}
	undo := strings.TrimSpace(res[strings.LastIndex(res, "--to")+len("--to"):])
	c.agentscm("changelog", "apply", "--root", c.root, "--to", undo)
	sameTree(t, "the undo of the rewind over outside work", userState, treeOf(t, c.root))
}

// TestChangelogIgnoreRuleAddedLater: call 0 writes cfg.txt, call 1 adds it
// to .gitignore, call 2 rewrites it. The rewind to call 0 restores both
// exactly (the captured cfg.txt stays captured), its dry run says so, and
// the undo brings call 2's state back.
func TestChangelogIgnoreRuleAddedLater(t *testing.T) {
	c := newCheckout(t)
	c.agentscm("changelog", "enable", "--root", c.root)
	cfg, gi := filepath.Join(c.root, "cfg.txt"), filepath.Join(c.root, ".gitignore")
	c.runTurn([]scriptedapi.ToolCall{write(cfg, "call 0\n")}, []scriptedapi.ToolCall{bash("echo cfg.txt >> .gitignore")},
		[]scriptedapi.ToolCall{write(cfg, "call 2 rewrote it\n")})
	calls := positionsOf(c.changelogList(), changelog.KindCall)
	if len(calls) != 3 {
		t.Fatalf("calls at %v", calls)
	}
	after := treeOf(t, c.root)
	to := fmt.Sprint(calls[0])
	// The dry run lists each path once (the live transcript too: never
	// created and modified, never deleted).
	var plan map[string]json.RawMessage
	if err := json.Unmarshal([]byte(c.agentscm("rewind", "--root", c.root, "--to", to, "--dry-run", "--format", "json")), &plan); err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, change := range []string{"created", "modified", "deleted"} {
		var list []struct {
			Root string `json:"root"`
			Path string `json:"path"`
		}
		json.Unmarshal(plan[change], &list)
		for _, p := range list {
			k := p.Root + ":" + p.Path
			if prev, ok := seen[k]; ok {
				t.Errorf("the dry run lists %s as %s and %s", k, prev, change)
			}
			seen[k] = change
			if p.Root == changelog.TranscriptRootName && change == "deleted" {
				t.Errorf("the dry run deletes the transcript %s", p.Path)
			}
		}
	}
	dry := c.agentscm("rewind", "--root", c.root, "--to", to, "--dry-run")
	for _, s := range []string{"modified file    " + cfg, "deleted  file    " + gi} {
		if !strings.Contains(dry, s) {
			t.Errorf("dry run lacks %q:\n%s", s, dry)
		}
	}
	out := c.agentscm("rewind", "--root", c.root, "--to", to)
	if b, _ := os.ReadFile(cfg); string(b) != "call 0\n" || exists(t, gi) {
		t.Fatalf("after the rewind: cfg.txt %q, .gitignore %v", b, exists(t, gi))
	}
	undo := strings.TrimSpace(out[strings.LastIndex(out, "--to")+len("--to"):])
	c.agentscm("changelog", "apply", "--root", c.root, "--to", undo)
	sameTree(t, "the undo of the rewind", after, treeOf(t, c.root))
}

// TestRevertOneCall: agentscm revert --call N undoes call N alone, keeping
// the later call's work; after the user edits the file call N wrote, the
// revert leaves it alone, lists it as a conflict and exits 8.
func TestRevertOneCall(t *testing.T) {
	c := newCheckout(t)
	c.agentscm("changelog", "enable", "--root", c.root)
	a, b, d := filepath.Join(c.root, "a.txt"), filepath.Join(c.root, "b.txt"), filepath.Join(c.root, "c.txt")
	c.runTurn([]scriptedapi.ToolCall{write(a, "a0\n")}, []scriptedapi.ToolCall{write(b, "b1\n")}, []scriptedapi.ToolCall{write(d, "c2\n")})
	calls := positionsOf(c.changelogList(), changelog.KindCall)
	if len(calls) != 3 {
		t.Fatalf("calls at %v", calls)
	}
	call := fmt.Sprint(calls[1])
	before := treeOf(t, c.root)
	dry := c.agentscm("revert", "--root", c.root, "--call", call, "--dry-run")
	if !strings.Contains(dry, "modified file    "+b) || !strings.Contains(dry, "0 conflicts") {
		t.Fatalf("dry run:\n%s", dry)
	}
	sameTree(t, "the dry run changed the checkout", before, treeOf(t, c.root))
	out := c.agentscm("revert", "--root", c.root, "--call", call)
	if got, _ := os.ReadFile(b); string(got) != "to be deleted\n" || !exists(t, a) || !exists(t, d) {
		t.Fatalf("after the revert: b.txt %q, a %v, c %v\n%s", got, exists(t, a), exists(t, d), out)
	}
	undo := strings.TrimSpace(out[strings.LastIndex(out, "--to")+len("--to"):])
	c.agentscm("changelog", "apply", "--root", c.root, "--to", undo)
	sameTree(t, "the undo of the revert", before, treeOf(t, c.root))

	c.write("b.txt", "the user's later edit\n")
	edited := treeOf(t, c.root)
	code, stdout, stderr := c.agentscmExit("revert", "--root", c.root, "--call", call, "--format", "json")
	var res struct {
		Reverted  []struct{ Path string } `json:"reverted"`
		Conflicts []struct {
			Path   string `json:"path"`
			Reason string `json:"reason"`
		} `json:"conflicts"`
		Partial bool `json:"partial"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if code != 8 || len(res.Reverted) != 0 || len(res.Conflicts) != 1 || res.Conflicts[0].Path != "b.txt" || !res.Partial {
		t.Fatalf("revert over a later edit: exit %d %+v\n%s", code, res, stderr)
	}
	sameTree(t, "the revert changed the conflicting edit", edited, treeOf(t, c.root))
}
