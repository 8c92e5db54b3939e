// Package readme runs the command blocks of the README and of
// docs/reference.md (where the README's reference material lives) against
// binaries installed as the README says, a temporary HOME and a real
// `agentscm hub serve` on 127.0.0.1, so neither can drift from the CLI
// (issues 19 and 32).
package readme

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// block is one ```sh block of the README: its lines, continuation lines
// joined.
type block struct {
	start int // README line of the opening fence
	lines []string
}

func readBlocks(t *testing.T, path string) []block {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []block
	var cur *block
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case cur == nil && l == "```sh":
			cur = &block{start: n}
		case cur != nil && l == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			if k := len(cur.lines); k > 0 && strings.HasSuffix(cur.lines[k-1], "\\") {
				cur.lines[k-1] = strings.TrimSuffix(cur.lines[k-1], "\\") + " " + strings.TrimSpace(l)
			} else if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
				cur.lines = append(cur.lines, l)
			}
		}
	}
	return out
}

type runner struct {
	t        *testing.T
	module   string
	bin      string
	tmp      string
	checkout string
	env      []string
	rewrites []string // old, new pairs applied to every line
}

func (r *runner) sh(dir, line string) (string, error) {
	for i := 0; i < len(r.rewrites); i += 2 {
		line = strings.ReplaceAll(line, r.rewrites[i], r.rewrites[i+1])
	}
	cmd := exec.Command("bash", "-e", "-o", "pipefail", "-c", line)
	cmd.Dir = dir
	cmd.Env = r.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	r.t.Logf("$ %s\n%s", line, out.String())
	return out.String(), err
}

func (r *runner) must(dir, line string) string {
	r.t.Helper()
	out, err := r.sh(dir, line)
	if err != nil {
		r.t.Fatalf("README command failed: %s: %v\n%s", line, err, out)
	}
	return out
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestREADMECommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	module, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	home := filepath.Join(tmp, "home")
	// scripts/install.sh installs into ~/.local/bin by default.
	r := &runner{t: t, module: module, bin: filepath.Join(home, ".local", "bin"), tmp: tmp}
	os.MkdirAll(home, 0o755)
	r.env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"PATH="+r.bin+":"+os.Getenv("PATH"), "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid", "GOFLAGS=-buildvcs=false")
	// The build keeps the real module and build caches (HOME moved).
	for _, k := range []string{"GOMODCACHE", "GOCACHE", "GOPATH"} {
		v, err := exec.Command("go", "env", k).Output()
		if err != nil {
			t.Fatal(err)
		}
		r.env = append(r.env, k+"="+strings.TrimSpace(string(v)))
	}
	r.checkout = filepath.Join(tmp, "checkout")
	os.MkdirAll(r.checkout, 0o755)
	r.must(r.checkout, "git init -q && echo hello > README && git add README && git commit -qm init")
	// Absolute paths outside the temporary directory are moved into it.
	r.rewrites = []string{"/srv/agentscm", filepath.Join(tmp, "srv", "agentscm"), "/tmp/ws.tgz", filepath.Join(tmp, "ws.tgz"),
		"~/code/myproject", r.checkout}

	readme := readBlocks(t, filepath.Join(module, "README.md"))
	if len(readme) < 5 {
		t.Fatalf("found %d sh blocks in README.md", len(readme))
	}
	if first := readme[0].lines[0]; !strings.HasPrefix(first, "scripts/install.sh") {
		t.Fatalf("the README's first command block is %q, not the install and enable of the main job", first)
	}
	if first := readme[1].lines[0]; first != "scripts/test.sh" || !strings.Contains(mustRead(t, filepath.Join(module, ".ci", "run")), "scripts/test.sh") {
		t.Fatalf("the README's second command block is %q, not the test command .ci/run runs", first)
	}
	reference := readBlocks(t, filepath.Join(module, "docs", "reference.md"))
	if len(reference) < 4 {
		t.Fatalf("found %d sh blocks in docs/reference.md", len(reference))
	}
	blocks := append(readme, reference...)
	handled := 0
	for _, b := range blocks {
		first := b.lines[0]
		switch {
		case strings.HasPrefix(first, "scripts/install.sh"):
			handled++
			// Install (into the temporary HOME's ~/.local/bin, on PATH) and
			// enable the checkout named in the line, from the clone.
			r.must(module, first)
			for _, l := range b.lines[1:] {
				r.must(r.checkout, l)
			}
		case strings.HasPrefix(first, "agentscm enable"):
			handled++
			r.quickstart(b)
		case strings.HasPrefix(first, "CGO_ENABLED=0 go build -o bin/"):
			handled++
			// The build runs in the module, into a directory of its own (the
			// installed binaries the hooks run stay as they are).
			built := filepath.Join(r.tmp, "handbuilt")
			r.must(module, strings.Replace(first, "-o bin/", "-o "+built+"/", 1))
			dir := filepath.Join(r.tmp, "handbuilt-checkout")
			os.MkdirAll(dir, 0o755)
			r.must(dir, "git init -q")
			os.Symlink(built, filepath.Join(dir, "bin"))
			for _, l := range b.lines[1:] {
				r.must(dir, l)
			}
		case first == "scripts/test.sh":
			handled++
			t.Logf("README line %d: skipped %q: it is the test suite running this test", b.start, first)
		case strings.Contains(first, "--agent codex"):
			handled++
			// The lines are alternatives for a Codex and a Gemini checkout,
			// each connected first (Capturing a checkout, step 1).
			codex, gemini := filepath.Join(r.tmp, "codex"), filepath.Join(r.tmp, "gemini")
			for _, d := range []string{codex, gemini} {
				os.MkdirAll(d, 0o755)
				r.must(d, "git init -q && agentscm client setup --root \"$PWD\" --local")
			}
			for _, l := range b.lines {
				if strings.Contains(l, "rewind") && strings.Contains(l, "--resume-conversation") {
					t.Logf("README line %d: skipped %q: it needs a Codex CLI session (test/e2e covers rewind --resume-conversation for Codex)", b.start, l)
					continue
				}
				dir := codex
				if strings.Contains(l, "--agent gemini") && !strings.Contains(l, "capabilities") {
					dir = gemini
				}
				r.must(dir, l)
			}
		case strings.HasPrefix(first, "agentscm hub admin human create"):
			handled++
			r.teamHub(b)
		case strings.Contains(first, "--store-file /etc/agentscm/hub.dsn"):
			handled++
			t.Logf("README line %d: skipped the PostgreSQL + S3 block: it needs a PostgreSQL server and an S3 bucket (internal/cli TestHubOnPostgresAndS3 runs the same commands against real ones)", b.start)
		case strings.HasPrefix(first, "agentscm changelog enable"):
			handled++
			r.rewind(b)
		case strings.HasPrefix(first, "agentdiff run"):
			handled++
			r.agentdiff(b)
		default:
			t.Errorf("line %d of README.md or docs/reference.md: a command block this test does not know: %q (teach TestREADMECommands to run it)", b.start, first)
		}
	}
	if handled != len(blocks) {
		t.Errorf("ran %d of %d blocks", handled, len(blocks))
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// quickstart runs the quickstart block in the checkout the main job
// enabled: enable, then three tool calls' changelog captures (the hook's
// own step: positions 0..2 each create a file), then the rest as written;
// doctor must find nothing wrong with binaries installed as the README says.
func (r *runner) quickstart(b block) {
	r.must(r.checkout, b.lines[0])
	for i := 0; i < 3; i++ {
		r.must(r.checkout, fmt.Sprintf("echo %d > q%d.txt && agentscm changelog capture >/dev/null", i, i))
	}
	for _, l := range b.lines[1:] {
		out := r.must(r.checkout, l)
		if strings.HasPrefix(l, "agentscm doctor") && !strings.Contains(out, "no problems found") {
			r.t.Fatalf("doctor after the quickstart:\n%s", out)
		}
	}
	for name, want := range map[string]bool{"q0.txt": true, "q1.txt": false, "q2.txt": false} {
		if _, err := os.Stat(filepath.Join(r.checkout, name)); (err == nil) != want {
			r.t.Errorf("after the quickstart's rewind and revert, %s exists: %v, want %v", name, err == nil, want)
		}
	}
}

// teamHub runs the team Hub block: the admin commands as written, hub serve
// in the background on a free port, then connects a checkout with the
// token the block wrote (the README's next step).
func (r *runner) teamHub(b block) {
	addr := freePort(r.t)
	r.rewrites = append(r.rewrites, "127.0.0.1:8420", addr)
	dir := filepath.Join(r.tmp, "admin")
	os.MkdirAll(dir, 0o755)
	for _, l := range b.lines {
		if !strings.Contains(l, "hub serve") {
			r.must(dir, l)
			continue
		}
		line := l
		for i := 0; i < len(r.rewrites); i += 2 {
			line = strings.ReplaceAll(line, r.rewrites[i], r.rewrites[i+1])
		}
		cmd := exec.Command("bash", "-c", "exec "+line)
		cmd.Dir, cmd.Env = dir, r.env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			r.t.Fatal(err)
		}
		r.t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		deadline := time.Now().Add(20 * time.Second)
		for {
			resp, err := http.Get("http://" + addr + "/v1/hub/whoami")
			if err == nil {
				resp.Body.Close()
				break
			}
			if time.Now().After(deadline) {
				r.t.Fatalf("hub serve did not answer on %s: %v\n%s", addr, err, out.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
		r.t.Logf("$ %s (in the background, answering on %s)", line, addr)
	}
	team := filepath.Join(r.tmp, "team-checkout")
	os.MkdirAll(team, 0o755)
	r.must(team, "git init -q")
	r.must(team, fmt.Sprintf("agentscm client setup --root . --hub http://%s --repository myrepo --token-file %s", addr, filepath.Join(dir, "alice.token")))
	r.must(team, "agentscm client status --check")
	r.must(team, "agentscm work start --title team")
	r.must(team, "agentscm status")
}

// rewind runs the rewinding block after giving the checkout twelve
// increments (positions 0..11) with changelog capture, the hook's own step.
func (r *runner) rewind(b block) {
	// The block runs inside the checkout, from a subdirectory, as its
	// comment says: --root defaults to the enclosing checkout.
	sub := filepath.Join(r.checkout, "sub")
	os.MkdirAll(sub, 0o755)
	r.must(sub, b.lines[0])
	for i := 0; i < 12; i++ {
		r.must(r.checkout, fmt.Sprintf("echo %d > f%d.txt && agentscm changelog capture --root \"$PWD\" >/dev/null", i, i))
	}
	for _, l := range b.lines[1:] {
		if strings.Contains(l, "--resume-conversation") {
			r.t.Logf("README line %d: skipped %q: it needs a Claude Code session transcript (test/e2e runs it with the real Claude Code)", b.start, l)
			continue
		}
		r.must(sub, l)
	}
}

var runIDRe = regexp.MustCompile(`agentdiff: run (\S+) status=`)

// agentdiff runs the agentdiff block in a project with scripts/regen.sh,
// with RUN_ID the id the run printed.
func (r *runner) agentdiff(b block) {
	dir := filepath.Join(r.tmp, "project")
	os.MkdirAll(filepath.Join(dir, "scripts"), 0o755)
	os.WriteFile(filepath.Join(dir, "scripts", "regen.sh"), []byte("#!/bin/sh\necho regenerated > fixture.txt\n"), 0o755)
	out := r.must(dir, b.lines[0])
	m := runIDRe.FindStringSubmatch(out)
	if m == nil {
		r.t.Fatalf("agentdiff run printed no run id:\n%s", out)
	}
	for _, l := range b.lines[1:] {
		r.must(dir, strings.ReplaceAll(l, "RUN_ID", m[1]))
	}
	if _, err := os.Stat(filepath.Join(dir, "fixture.txt")); err == nil {
		r.t.Fatal("agentdiff rollback left fixture.txt")
	}
}
