//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/test/e2e/scriptedapi"
)

// serveHub starts `agentscm hub serve` on loopback with a human, the
// repository proj and a read-write token, and returns its URL and the token
// file. The server is stopped (SIGTERM) at the end of the test.
func (c *checkout) serveHub() (url, tokenFile string) {
	c.t.Helper()
	data := filepath.Join(c.dir, "hubdata")
	tokenFile = filepath.Join(c.dir, "alice.token")
	c.agentscm("hub", "admin", "human", "create", "--data", data, "--name", "alice")
	c.agentscm("hub", "admin", "repository", "create", "--data", data, "--name", "proj")
	c.agentscm("hub", "admin", "token", "create", "--data", data, "--human", "alice", "--repository", "proj", "--output", tokenFile)
	cmd := exec.Command(h.agentscm, "hub", "serve", "--listen", "127.0.0.1:0", "--data", data)
	cmd.Env = c.env()
	out, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		for sc.Scan() {
		}
	}()
	select {
	case line := <-lines:
		if !strings.HasPrefix(line, "listening on ") {
			c.t.Fatalf("hub serve: %q", line)
		}
		return strings.TrimPrefix(line, "listening on "), tokenFile
	case <-time.After(30 * time.Second):
		c.t.Fatal("hub serve did not start")
	}
	return "", ""
}

// tree lists a directory's regular files and symlinks with mode and
// content, without .git and the Claude settings.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case rel == ".git" || rel == ".claude":
			return filepath.SkipDir
		case fi.Mode()&os.ModeSymlink != 0:
			tg, _ := os.Readlink(p)
			out[rel] = "-> " + tg
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			out[rel] = fmt.Sprintf("%o %q", fi.Mode().Perm(), b)
		case fi.IsDir() && rel != ".":
			out[rel+"/"] = fmt.Sprintf("%o", fi.Mode().Perm())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestChangelogApplyFromServedHub: three tool calls in checkout A, connected
// to a served Hub, reach the Hub under A's current Work; apply --from-hub
// --to 1 into a fresh empty directory B reproduces exactly what a local
// rewind of A to 1 leaves.
func TestChangelogApplyFromServedHub(t *testing.T) {
	c := newCheckout(t)
	url, tok := c.serveHub()
	c.agentscm("client", "setup", "--root", c.root, "--hub", url, "--repository", "proj", "--token-file", tok)
	work := c.startWork("changelog to the Hub")
	c.agentscm("changelog", "enable", "--root", c.root)
	os.MkdirAll(filepath.Join(c.root, "src"), 0o755)
	one := filepath.Join(c.root, "src", "one.txt")
	c.runTurn(
		[]scriptedapi.ToolCall{write(one, "1\n")},
		[]scriptedapi.ToolCall{bash("echo 2 > two.txt && chmod 755 two.txt && rm b.txt && ln -s src/one.txt link")},
		[]scriptedapi.ToolCall{bash("rm -r src && echo 3 > three.txt")},
	)
	checkPositions(t, c.changelogList(), []string{"Write", "Bash", "Bash"}, -1)
	var list api.IncrementList
	if err := json.Unmarshal([]byte(c.agentscm("changelog", "list", "--root", c.root, "--from-hub", "--format", "json")), &list); err != nil {
		t.Fatal(err)
	}
	if list.WorkID != work || len(list.Increments) != 3 || list.Used.Objects != 3 {
		t.Fatalf("hub increments %+v", list)
	}
	for i, in := range list.Increments {
		if in.Position != i || in.Session == "" || len(in.Digest) != 64 {
			t.Fatalf("hub increment %d: %+v", i, in)
		}
	}

	// B: a fresh empty directory with its own connection to the same Hub
	// and repository.
	b := filepath.Join(c.dir, "fresh-b")
	if err := os.MkdirAll(b, 0o755); err != nil {
		t.Fatal(err)
	}
	c.agentscm("client", "setup", "--root", b, "--hub", url, "--repository", "proj", "--token-file", tok)
	out := c.agentscm("changelog", "apply", "--root", b, "--to", "1", "--from-hub", "--work", work)
	if !strings.Contains(out, "digests verified") {
		t.Fatalf("apply --from-hub: %s", out)
	}
	c.agentscm("rewind", "--root", c.root, "--to", "1")
	want, got := tree(t, c.root), tree(t, b)
	if fmt.Sprint(want) != fmt.Sprint(got) {
		t.Fatalf("B after apply --from-hub --to 1:\n%v\nA after a local rewind to 1:\n%v", got, want)
	}
	if got["two.txt"] != `755 "2\n"` || got["link"] != "-> src/one.txt" || got["src/one.txt"] != `644 "1\n"` {
		t.Fatalf("B does not hold call 1's state: %v", got)
	}
	if _, ok := got["b.txt"]; ok {
		t.Fatal("call 1's deletion of b.txt was not replayed in B")
	}
	// No capture hook was restored into B's settings.
	if s, err := os.ReadFile(filepath.Join(b, ".claude", "settings.local.json")); err == nil && strings.Contains(string(s), "hook-claude") {
		t.Fatalf("B's restored settings keep agentscm hooks: %s", s)
	}
}
