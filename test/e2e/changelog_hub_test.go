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
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/test/e2e/scriptedapi"
)

// serveHub starts `agentscm hub serve` on loopback with a human, the
// repository proj and a read-write token, and returns its URL, the token
// file and a function that stops the server (also run at cleanup).
func (c *checkout) serveHub() (url, tokenFile string, stop func()) {
	c.t.Helper()
	data := filepath.Join(c.dir, "hubdata")
	tokenFile = filepath.Join(c.dir, "alice.token")
	c.agentscm("hub", "admin", "human", "create", "--data", data, "--name", "alice")
	c.agentscm("hub", "admin", "repository", "create", "--data", data, "--name", "proj")
	c.agentscm("hub", "admin", "token", "create", "--data", data, "--human", "alice", "--repository", "proj", "--output", tokenFile)
	url, stop = c.startHub(data, "127.0.0.1:0")
	return url, tokenFile, stop
}

// startHub serves the Hub data directory on listen and returns its URL and
// a function that stops it (SIGTERM, idempotent; also run at cleanup).
func (c *checkout) startHub(data, listen string) (string, func()) {
	c.t.Helper()
	cmd := exec.Command(h.agentscm, "hub", "serve", "--listen", listen, "--data", data)
	cmd.Env = c.env()
	out, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
		})
	}
	c.t.Cleanup(stop)
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
		return strings.TrimPrefix(line, "listening on "), stop
	case <-time.After(30 * time.Second):
		c.t.Fatal("hub serve did not start")
	}
	return "", nil
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
	url, tok, _ := c.serveHub()
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

// TestChangelogHubRefusalsCarryWrites: with the real CLI, a tool call whose
// upload the grant refuses, and one made while the Hub is stopped, store no
// increment; the next stored increment carries their writes, and the Hub's
// increments still replay to the checkout's state.
func TestChangelogHubRefusalsCarryWrites(t *testing.T) {
	c := newCheckout(t)
	data := filepath.Join(c.dir, "hubdata")
	url, tok, stop := c.serveHub()
	c.agentscm("client", "setup", "--root", c.root, "--hub", url, "--repository", "proj", "--token-file", tok)
	var w api.Work
	if err := json.Unmarshal([]byte(c.agentscm("work", "start", "--root", c.root, "--changelog-max-objects", "1", "--format", "json")), &w); err != nil {
		t.Fatal(err)
	}
	// Only the checkout is captured: the counts below are the tool calls'
	// files (the transcript root would add the session transcripts).
	c.agentscm("changelog", "enable", "--root", c.root, "--no-transcript-root")
	f := func(n string) string { return filepath.Join(c.root, n) }
	c.runTurn([]scriptedapi.ToolCall{write(f("one.txt"), "1\n")}, []scriptedapi.ToolCall{write(f("two.txt"), "2\n")}, []scriptedapi.ToolCall{write(f("three.txt"), "3\n")})
	if list := c.changelogList(); len(list) != 1 {
		t.Fatalf("with a grant of one object: %d local increments %+v, want 1", len(list), list)
	}
	if out := c.agentscm("work", "grant", "--root", c.root, "--max-objects", "10"); !strings.Contains(out, "1 of 10 objects") {
		t.Fatalf("work grant: %s", out)
	}
	c.runTurn([]scriptedapi.ToolCall{write(f("four.txt"), "4\n")})
	list := c.changelogList()
	if len(list) != 2 || list[1].Files != 3 {
		t.Fatalf("after raising the grant: %+v, want increment 1 holding the three pending files", list)
	}

	// The Hub stops: the call stores nothing; once it is back (same
	// address), the next call's increment carries both calls' writes.
	addr := strings.TrimPrefix(url, "http://")
	stop()
	c.runTurn([]scriptedapi.ToolCall{write(f("five.txt"), "5\n")})
	if list := c.changelogList(); len(list) != 2 {
		t.Fatalf("with the Hub stopped: %+v", list)
	}
	c.startHub(data, addr)
	c.runTurn([]scriptedapi.ToolCall{write(f("six.txt"), "6\n")})
	list = c.changelogList()
	if len(list) != 3 || list[2].Files != 2 {
		t.Fatalf("after the Hub came back: %+v", list)
	}
	b := filepath.Join(c.dir, "fresh-b")
	os.MkdirAll(b, 0o755)
	c.agentscm("client", "setup", "--root", b, "--hub", url, "--repository", "proj", "--token-file", tok)
	c.agentscm("changelog", "apply", "--root", b, "--to", "2", "--from-hub", "--work", w.ID)
	if want, got := tree(t, c.root), tree(t, b); fmt.Sprint(want) != fmt.Sprint(got) {
		t.Fatalf("B from the Hub:\n%v\nA:\n%v", got, want)
	}
}
