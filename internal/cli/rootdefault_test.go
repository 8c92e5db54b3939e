package cli

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// rootLeaf is a leaf command of the real command tree that takes --root.
type rootLeaf struct {
	path []string
	cmd  *Command
	help string // the usage of its --root
}

// rootLeaves walks Root() and returns every leaf that registers --root,
// read as completion reads flags: by running the leaf with --help.
func rootLeaves(t *testing.T) []rootLeaf {
	t.Helper()
	var out []rootLeaf
	var walk func(c *Command, path []string)
	walk = func(c *Command, path []string) {
		path = append(append([]string(nil), path...), c.Name)
		if c.Run == nil {
			for _, s := range c.Sub {
				walk(s, path)
			}
			return
		}
		if strings.HasPrefix(c.Name, "hook-") || c.Name == "completion" {
			return // the hooks take no flags (they read a payload on stdin)
		}
		var sets []*flag.FlagSet
		env := &Env{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard,
			Getenv: func(string) string { return "" }, Now: time.Now,
			onFlags: func(fs *flag.FlagSet) { sets = append(sets, fs) }}
		_ = c.Run(context.Background(), env, []string{"--help"})
		for _, fs := range sets {
			if f := fs.Lookup("root"); f != nil {
				out = append(out, rootLeaf{path: path[1:], cmd: c, help: f.Usage})
				return
			}
		}
	}
	walk(Root(), nil)
	return out
}

// TestRootDefaultsForEveryCommand: every command of the real command tree
// that takes --root (but the two for which no --root means every checkout)
// defaults it, from a subdirectory, to the checkout enclosing the working
// directory: the git worktree's top, or a changelog-enabled checkout that is
// a subdirectory of its repository; outside any checkout it refuses with one
// clear usage line (exit 2); and its --help says so. The table is the
// command tree itself, so a new command cannot skip the rule.
func TestRootDefaultsForEveryCommand(t *testing.T) {
	repo := gitRepo(t, "repo")
	deep := filepath.Join(repo, "src", "pkg")
	nested := filepath.Join(repo, "services", "api") // a checkout below its repository's top
	nestedSub := filepath.Join(nested, "internal")
	outside := t.TempDir()
	for _, d := range []string{deep, nestedSub} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	home := filepath.Join(filepath.Dir(repo), "home")
	vars := map[string]string{"HOME": home}
	mustRun(t, vars, "changelog", "enable", "--root", nested, "--no-transcript-root")

	leaves := rootLeaves(t)
	if len(leaves) < 25 {
		t.Fatalf("only %d commands take --root: the walk of the command tree is broken", len(leaves))
	}
	for _, l := range leaves {
		name := strings.Join(l.path, " ")
		t.Run(name, func(t *testing.T) {
			all := rootMeansAll("agentscm " + name)
			if !all && !strings.Contains(l.help, "default: the checkout enclosing the working directory") {
				t.Errorf("--help of --root does not name the default: %q", l.help)
			}
			for _, tc := range []struct{ wd, want string }{
				{deep, repo}, {repo, repo}, {nestedSub, nested}, {nested, nested}, {outside, ""},
			} {
				t.Chdir(tc.wd)
				got, code, stderr := parsedRoot(t, l.cmd, vars, "agentscm "+name)
				switch {
				case all:
					if code != ExitOK || got != "" {
						t.Fatalf("from %s: --root = %q (exit %d %s), want unset: no --root means every checkout", tc.wd, got, code, stderr)
					}
				case tc.want == "":
					if code != ExitUsage || !strings.Contains(stderr, "not inside a checkout") || !strings.Contains(stderr, "pass --root PATH") || strings.Count(stderr, "\n") != 2 {
						t.Fatalf("outside a checkout: exit %d stderr %q, want one usage line naming --root", code, stderr)
					}
				default:
					if code != ExitOK || got != tc.want {
						t.Fatalf("from %s: --root = %q (exit %d %s), want %s", tc.wd, got, code, stderr, tc.want)
					}
				}
			}
		})
	}
}

// parsedRoot runs the command with no arguments and stops it right after
// parseFlags, returning the --root it then holds.
func parsedRoot(t *testing.T, c *Command, vars map[string]string, cmdline string) (string, int, string) {
	t.Helper()
	var stderr strings.Builder
	root, seen := "", false
	stop := errors.New("stop after parsing")
	env := &Env{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &stderr,
		Getenv: func(k string) string { return vars[k] }, Now: time.Now, Executable: "/usr/local/bin/agentscm",
		onParsed: func(fs *flag.FlagSet) error {
			if f := fs.Lookup("root"); f != nil {
				root, seen = f.Value.String(), true
			}
			return stop
		}}
	err := c.Run(context.Background(), env, nil)
	if errors.Is(err, stop) {
		err = nil
	}
	code := report(env, cmdline, err)
	if code == ExitOK && !seen {
		t.Fatalf("%s: never reached parseFlags with its --root (err %v)", cmdline, err)
	}
	return root, code, stderr.String()
}
