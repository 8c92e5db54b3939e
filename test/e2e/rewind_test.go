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
