package readme

// A lint of our own words (issue 31, item 6): every command block of the
// README and docs/ marked runnable is run against freshly built binaries,
// and every sentence of the README (and docs/reference.md, where reference
// material moves) about exit statuses or stdout is checked against them.
//
// Marking a block runnable: give its fence the info string "sh runnable",
// or put the line "<!-- runnable -->" right above a ```sh fence. Each
// runnable block runs in a fresh sandbox: a temporary HOME, a git checkout
// with one commit as the working directory, the binaries on PATH. A line
// "<!-- runnable setup: COMMAND -->" above the fence runs COMMAND there
// first (to give a block the positions it rewinds to, say). Every command
// must exit 0 unless its line ends with an expectation after "#=>":
//
//	agentscm --no-such-flag      #=> exit 2
//	agentscm-hook ... < p.json   #=> exit 0, stdout empty
//	agentscm --help              #=> stdout ~ Exit status
//
// A claim is a sentence that says what a command exits with or prints on
// stdout. Each one must match an entry of claims below, whose check runs
// the binaries; a new claim fails this test until it gets a check, and a
// check whose sentence is gone fails it too.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/hookrun"
)

// runnableBlock is one runnable block of a markdown file.
type runnableBlock struct {
	file  string
	start int
	setup []string
	lines []string
}

var setupRe = regexp.MustCompile(`^<!-- runnable setup: (.+) -->$`)

// readRunnable returns the runnable blocks of the markdown file at path and
// how many ```sh blocks it has in all.
func readRunnable(t *testing.T, path string) (out []runnableBlock, all int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cur *runnableBlock
	var setup []string
	marked := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case cur == nil && (l == "```sh runnable" || l == "```sh" && marked):
			all++
			cur = &runnableBlock{file: path, start: n, setup: setup}
		case cur == nil && strings.HasPrefix(l, "```sh"):
			all++
			cur = &runnableBlock{file: path, start: -1} // read past, not run
		case cur != nil && l == "```":
			if cur.start > 0 {
				out = append(out, *cur)
			}
			cur = nil
		case cur != nil:
			if k := len(cur.lines); k > 0 && strings.HasSuffix(cur.lines[k-1], "\\") {
				cur.lines[k-1] = strings.TrimSuffix(cur.lines[k-1], "\\") + " " + strings.TrimSpace(l)
			} else if s := strings.TrimSpace(l); s != "" && !strings.HasPrefix(s, "#") {
				cur.lines = append(cur.lines, l)
			}
		}
		if cur == nil {
			switch m := setupRe.FindStringSubmatch(l); {
			case l == "<!-- runnable -->":
				marked = true
			case m != nil:
				marked, setup = true, append(setup, m[1])
			case !strings.HasPrefix(l, "```"):
				marked, setup = false, nil
			}
		}
	}
	return out, all
}

// expectation is what a runnable line's "#=>" comment asks of it.
type expectation struct {
	code        int
	stdoutEmpty bool
	stdout      *regexp.Regexp
}

func parseExpectation(line string) (string, expectation, error) {
	cmd, spec, ok := strings.Cut(line, "#=>")
	e := expectation{}
	if !ok {
		return line, e, nil
	}
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		switch {
		case strings.HasPrefix(part, "exit "):
			n, err := strconv.Atoi(strings.TrimPrefix(part, "exit "))
			if err != nil {
				return "", e, fmt.Errorf("bad expectation %q", part)
			}
			e.code = n
		case part == "stdout empty":
			e.stdoutEmpty = true
		case strings.HasPrefix(part, "stdout ~ "):
			re, err := regexp.Compile(strings.TrimPrefix(part, "stdout ~ "))
			if err != nil {
				return "", e, err
			}
			e.stdout = re
		default:
			return "", e, fmt.Errorf("unknown expectation %q (exit N, stdout empty, stdout ~ REGEX)", part)
		}
	}
	return strings.TrimSpace(cmd), e, nil
}

// sandbox is a temporary HOME and checkout with the built binaries on PATH.
type sandbox struct {
	t        *testing.T
	dir      string
	checkout string
	env      []string
}

// result is one command's outcome.
type result struct {
	stdout, stderr string
	code           int
}

func newSandbox(t *testing.T, bin string) *sandbox {
	t.Helper()
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	os.MkdirAll(home, 0o755)
	s := &sandbox{t: t, dir: dir, checkout: filepath.Join(dir, "checkout")}
	s.env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"PATH="+bin+":"+os.Getenv("PATH"), "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid")
	s.env = slicesDeleteEnv(s.env, "AGENTSCM_SPOOL_FAILPOINT", "AGENTSCM_CHANGELOG_FAILPOINT", "AGENTSCM_RECIPE_FAILPOINT", "CLAUDECODE", "CLAUDE_CODE_SESSION_ID", "AGENTSCM_CHANGELOG_WATCH")
	os.MkdirAll(s.checkout, 0o755)
	// A hook's background deliverer lingers a second after its last
	// envelope: wait for it before t.TempDir removes the spool under it
	// (registered after TempDir, so it runs first).
	t.Cleanup(s.waitDeliverers)
	s.must(s.checkout, "git init -q && echo hello > README && git add README && git commit -qm init")
	return s
}

// waitDeliverers waits (a minute at most) until no background deliverer
// of the sandbox's config directory runs.
func (s *sandbox) waitDeliverers() {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := hookrun.WaitBackground(ctx, filepath.Join(s.dir, "home", ".config", "agentscm")); err != nil {
		s.t.Error(err)
	}
}

func slicesDeleteEnv(env []string, keys ...string) []string {
	out := env[:0:0]
	for _, kv := range env {
		keep := true
		for _, k := range keys {
			if strings.HasPrefix(kv, k+"=") {
				keep = false
			}
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}

// run runs one shell line in dir with stdin.
func (s *sandbox) run(dir, line, stdin string) result {
	s.t.Helper()
	cmd := exec.Command("bash", "-o", "pipefail", "-c", line)
	cmd.Dir, cmd.Env = dir, s.env
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		s.t.Fatalf("%s: %v", line, err)
	}
	s.t.Logf("$ %s\n[exit %d]\n%s%s", line, r.code, r.stdout, r.stderr)
	return r
}

func (s *sandbox) must(dir, line string) string {
	s.t.Helper()
	r := s.run(dir, line, "")
	if r.code != 0 {
		s.t.Fatalf("%s: exit %d\n%s%s", line, r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// expect runs line and checks its exit status (and, when stdout is not
// nil, that its stdout matches).
func (s *sandbox) expect(dir, line, stdin string, code int, stdout *regexp.Regexp) result {
	s.t.Helper()
	r := s.run(dir, line, stdin)
	if r.code != code {
		s.t.Errorf("%s: exit %d, want %d\n%s%s", line, r.code, code, r.stdout, r.stderr)
	}
	if stdout != nil && !stdout.MatchString(r.stdout) {
		s.t.Errorf("%s: stdout %q does not match %s", line, r.stdout, stdout)
	}
	return r
}

func buildBinaries(t *testing.T) (module, bin string) {
	t.Helper()
	module, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(t.TempDir(), "bin")
	cmd := exec.Command("go", "build", "-o", bin+"/", "./cmd/agentscm", "./cmd/agentscm-hook", "./cmd/agentscm-hook-intake", "./cmd/agentdiff")
	cmd.Dir = module
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return module, bin
}

// wordFiles are the files the lint reads: the README and docs/*.md.
func wordFiles(t *testing.T, module string) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(module, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join(module, "README.md")}, docs...)
}

func TestOurWords(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	module, bin := buildBinaries(t)
	t.Run("runnable blocks", func(t *testing.T) { testRunnableBlocks(t, module, bin) })
	t.Run("claims", func(t *testing.T) { testClaims(t, module, bin) })
}

func testRunnableBlocks(t *testing.T, module, bin string) {
	ran := 0
	for _, f := range wordFiles(t, module) {
		blocks, _ := readRunnable(t, f)
		rel, _ := filepath.Rel(module, f)
		for _, b := range blocks {
			ran++
			t.Run(fmt.Sprintf("%s:%d", rel, b.start), func(t *testing.T) {
				s := newSandbox(t, bin)
				for _, l := range b.setup {
					s.must(s.checkout, l)
				}
				for _, l := range b.lines {
					cmd, e, err := parseExpectation(l)
					if err != nil {
						t.Fatalf("%s:%d: %v", rel, b.start, err)
					}
					r := s.run(s.checkout, cmd, "")
					if r.code != e.code {
						t.Errorf("%s:%d: %s: exit %d, want %d\n%s%s", rel, b.start, cmd, r.code, e.code, r.stdout, r.stderr)
					}
					if e.stdoutEmpty && r.stdout != "" {
						t.Errorf("%s:%d: %s: stdout %q, want it empty", rel, b.start, cmd, r.stdout)
					}
					if e.stdout != nil && !e.stdout.MatchString(r.stdout) {
						t.Errorf("%s:%d: %s: stdout %q does not match %s", rel, b.start, cmd, r.stdout, e.stdout)
					}
				}
			})
		}
	}
	if ran < 2 {
		t.Errorf("only %d runnable blocks in README.md and docs/: the lint needs blocks to run", ran)
	}
}

// claimRe finds a sentence about an exit status or stdout.
var claimRe = regexp.MustCompile(`(?i)\bexit(s|ed)?\b( status| code)?\s*\(?[0-9]|\bexit status\b|\bexits? with\b|\bstdout\b`)

// claimSentences splits the prose of a markdown file (code blocks left out,
// lines joined into paragraphs, table rows kept apart) into sentences and
// returns those that make a claim, each with its line.
func claimSentences(t *testing.T, path string) (out []sentence) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		t.Fatal(err)
	}
	var para strings.Builder
	paraLine := 0
	flush := func() {
		for _, s := range splitSentences(para.String()) {
			if claimRe.MatchString(s) {
				out = append(out, sentence{line: paraLine, text: s})
			}
		}
		para.Reset()
	}
	fence := false
	for i, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, "```"):
			flush()
			fence = !fence
		case fence:
		case strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#"):
			flush()
		case strings.HasPrefix(l, "|"):
			flush()
			if claimRe.MatchString(l) {
				out = append(out, sentence{line: i + 1, text: l})
			}
		default:
			if para.Len() == 0 {
				paraLine = i + 1
			}
			para.WriteString(l + " ")
		}
	}
	flush()
	return out
}

type sentence struct {
	line int
	text string
}

var sentenceEnd = regexp.MustCompile(`[.;:] (\x60|[A-Z(])`)

func splitSentences(p string) []string {
	var out []string
	for p = strings.TrimSpace(p); p != ""; {
		loc := sentenceEnd.FindStringIndex(p)
		if loc == nil {
			out = append(out, p)
			break
		}
		out = append(out, strings.TrimSpace(p[:loc[0]+1]))
		p = strings.TrimSpace(p[loc[0]+2:])
	}
	return out
}

// claim ties the sentences containing match to a check that runs the
// binaries.
type claim struct {
	match string
	check func(t *testing.T, bin string)
}

func testClaims(t *testing.T, module, bin string) {
	files := []string{filepath.Join(module, "README.md"), filepath.Join(module, "docs", "reference.md")}
	used := map[int]bool{}
	for _, f := range files {
		rel, _ := filepath.Rel(module, f)
		for _, s := range claimSentences(t, f) {
			found := -1
			for i, c := range claims {
				if strings.Contains(s.text, c.match) {
					found = i
					break
				}
			}
			if found < 0 {
				t.Errorf("%s:%d makes a claim about exit statuses or stdout that no check covers (add one to claims in test/readme/words_test.go): %q", rel, s.line, s.text)
				continue
			}
			used[found] = true
		}
	}
	for i, c := range claims {
		if !used[i] {
			t.Errorf("the check of %q matches no sentence of README.md or docs/reference.md: the words changed; update the check", c.match)
			continue
		}
		t.Run(c.match, func(t *testing.T) { c.check(t, bin) })
	}
}
