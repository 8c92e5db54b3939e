package cliflag

import (
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name        string
		args        []string
		intersperse bool
		root        string
		force       bool
		pos         []string
		err         string
	}{
		{"flags first", []string{"--root", "/r", "a", "b"}, true, "/r", false, []string{"a", "b"}, ""},
		{"flags after positional", []string{"a", "--root", "/r", "b", "--force"}, true, "/r", true, []string{"a", "b"}, ""},
		{"equals form", []string{"a", "--root=/r"}, true, "/r", false, []string{"a"}, ""},
		{"double dash ends flags", []string{"a", "--", "--root", "/r"}, true, "", false, []string{"a", "--root", "/r"}, ""},
		{"value that looks like a flag", []string{"--root", "--force"}, true, "--force", false, nil, ""},
		{"dash dash as a value", []string{"--root", "--", "x"}, true, "--", false, []string{"x"}, ""},
		{"no intersperse stops", []string{"a", "--root", "/r"}, false, "", false, []string{"a", "--root", "/r"}, ""},
		{"missing value", []string{"a", "--root"}, true, "", false, nil, "flag needs an argument: -root"},
		{"unknown flag", []string{"a", "--nope", "b"}, true, "", false, nil, "flag provided but not defined: -nope"},
		{"single dash positional", []string{"-", "--force"}, true, "", true, []string{"-"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			var printed strings.Builder
			fs.SetOutput(&printed)
			root := fs.String("root", "", "")
			force := fs.Bool("force", false, "")
			err := Parse(fs, tc.args, tc.intersperse)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				if printed.Len() != 0 {
					t.Fatalf("a parse error printed %q", printed.String())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if *root != tc.root || *force != tc.force || !reflect.DeepEqual(fs.Args(), tc.pos) && len(fs.Args())+len(tc.pos) > 0 {
				t.Fatalf("root %q force %v args %q", *root, *force, fs.Args())
			}
		})
	}
}

func TestParseHelp(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	called := 0
	fs.Usage = func() { called++ }
	if err := Parse(fs, []string{"pos", "--help"}, true); !errors.Is(err, flag.ErrHelp) || called != 1 {
		t.Fatalf("err %v usage called %d times", err, called)
	}
}

func TestAbsAndFindUp(t *testing.T) {
	if got := Abs("a/../b", "/w"); got != "/w/b" {
		t.Fatalf("Abs = %q", got)
	}
	if got := Abs("/x", "/w"); got != "/x" {
		t.Fatalf("Abs = %q", got)
	}
	if got := Abs("", "/w"); got != "" {
		t.Fatalf("Abs = %q", got)
	}
	dir := t.TempDir()
	sub := filepath.Join(dir, "repo", "a", "b")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, ok := GitTop(sub); ok {
		// TempDir may sit inside a checkout; only check relative results.
		t.Log("temp dir is inside a git worktree")
	}
	os.WriteFile(filepath.Join(dir, "repo", ".git"), []byte("gitdir: /elsewhere\n"), 0o644) // a linked worktree
	if top, ok := GitTop(sub); !ok || top != filepath.Join(dir, "repo") {
		t.Fatalf("GitTop = %q %v", top, ok)
	}
	os.Mkdir(filepath.Join(dir, "repo", "a", ".agentdiff"), 0o755)
	if d, ok := FindUp(sub, ".agentdiff"); !ok || d != filepath.Join(dir, "repo", "a") {
		t.Fatalf("FindUp = %q %v", d, ok)
	}
}

func testTree() *Node {
	return &Node{Name: "tool", Flags: []string{"--help", "--version"}, Sub: []*Node{
		{Name: "hub", Sub: []*Node{{Name: "serve", Flags: []string{"--listen", "--data"}}}},
		{Name: "status", Flags: []string{"--root", "--format"}},
	}}
}

// TestBashCompletion loads the generated script into a real bash and
// completes command lines with it.
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	script, err := Completion("bash", testTree())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{[]string{"tool", ""}, "hub status --help --version"},
		{[]string{"tool", "h"}, "hub"},
		{[]string{"tool", "hub", ""}, "serve"},
		{[]string{"tool", "hub", "serve", "--"}, "--data --listen"},
		{[]string{"tool", "hub", "serve", "--data", "/x", "--l"}, "--listen"},
		{[]string{"tool", "status", "--root", "dir", "--f"}, "--format"},
	} {
		var words []string
		for _, w := range tc.words {
			words = append(words, "'"+w+"'")
		}
		prog := script + "\nCOMP_WORDS=(" + strings.Join(words, " ") + "); COMP_CWORD=" +
			strconv.Itoa(len(tc.words)-1) + "; _tool; echo \"${COMPREPLY[*]}\"\n"
		out, err := exec.Command(bash, "--norc", "-c", prog).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v: %s", tc.words, err, out)
		}
		if got := strings.TrimSpace(string(out)); got != tc.want {
			t.Errorf("%q: completes %q, want %q", tc.words, got, tc.want)
		}
	}
}

// TestOtherShells checks the zsh and fish scripts parse where the shells
// are installed, and that every command path is in them.
func TestOtherShells(t *testing.T) {
	for _, sh := range []string{"zsh", "fish"} {
		script, err := Completion(sh, testTree())
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"tool hub serve", "tool status"} {
			if !strings.Contains(script, p) {
				t.Errorf("%s script lacks %q", sh, p)
			}
		}
		bin, err := exec.LookPath(sh)
		if err != nil {
			t.Logf("%s is not installed: syntax not checked", sh)
			continue
		}
		f := filepath.Join(t.TempDir(), "c")
		os.WriteFile(f, []byte(script), 0o644)
		if out, err := exec.Command(bin, "-n", f).CombinedOutput(); err != nil {
			t.Errorf("%s -n: %v: %s", sh, err, out)
		}
	}
	if _, err := Completion("tcsh", testTree()); err == nil {
		t.Fatal("tcsh accepted")
	}
}

// TestDefaultRoot: the deepest bound checkout wins over the git top; without
// one the git top; outside both an error wrapping ErrNoCheckout that says to
// pass --root.
func TestDefaultRoot(t *testing.T) {
	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	sub := filepath.Join(repo, "a", "b")
	if err := os.MkdirAll(filepath.Join(repo, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		wd    string
		bound []string
		want  string
	}{
		{sub, nil, repo},
		{sub, []string{""}, repo},
		{sub, []string{filepath.Join(repo, "a")}, filepath.Join(repo, "a")},
		{sub, []string{repo, filepath.Join(repo, "a")}, filepath.Join(repo, "a")},
		{dir, nil, ""},
		{"", nil, ""},
	} {
		got, err := DefaultRoot(tc.wd, tc.bound...)
		if tc.want == "" {
			if !errors.Is(err, ErrNoCheckout) || !strings.Contains(err.Error(), "pass --root PATH") {
				t.Errorf("DefaultRoot(%q) = %q, %v; want ErrNoCheckout", tc.wd, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("DefaultRoot(%q, %q) = %q, %v; want %q", tc.wd, tc.bound, got, err, tc.want)
		}
	}
}
