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

	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/test/e2e/scriptedapi"
)

// applyWithheld runs `changelog apply --from-hub` (args) of increments a
// checkout not in shared-conversation mode uploaded: their transcript root
// is withheld from the Hub, so the apply must list it and exit 8
// (partial). It returns stdout.
func (c *checkout) applyWithheld(args ...string) string {
	c.t.Helper()
	code, stdout, stderr := c.agentscmExit(args...)
	if code != 8 || !strings.Contains(stderr, "the rewind is partial") || !strings.Contains(stderr, changelog.TranscriptRootName+": withheld from the Hub") {
		c.t.Fatalf("agentscm %v: exit %d, want 8 listing the withheld %s\nstdout: %s\nstderr: %s", args, code, changelog.TranscriptRootName, stdout, stderr)
	}
	return stdout
}

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
	url, stop, _ := c.startHubProc(data, listen)
	return url, stop
}

// startHubProc is startHub that also returns the server's process id.
func (c *checkout) startHubProc(data, listen string) (string, func(), int) {
	c.t.Helper()
	cmd := exec.Command(h.agentscm, "hub", "serve", "--listen", listen, "--data", data)
	cmd.Env = c.env()
	url, stop := serveProc(c.t, cmd)
	return url, stop, cmd.Process.Pid
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
	// Made before the changelog is on: made after it, it would be work
	// done outside the agent (an outside position before the turn).
	os.MkdirAll(filepath.Join(c.root, "src"), 0o755)
	c.agentscm("changelog", "enable", "--root", c.root)
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
	out := c.applyWithheld("changelog", "apply", "--root", b, "--to", "1", "--from-hub", "--work", work)
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

// checkoutChanges returns an increment's created, modified and deleted
// paths of the checkout root (the transcript root's are left out).
func checkoutChanges(in changelog.Info) string {
	if in.Changes == nil {
		return "no changes recorded"
	}
	pick := func(paths []string) []string {
		var out []string
		for _, p := range paths {
			if !strings.Contains(p, ":") {
				out = append(out, p)
			}
		}
		return out
	}
	return fmt.Sprintf("+%v ~%v -%v", pick(in.Changes.Created), pick(in.Changes.Modified), pick(in.Changes.Deleted))
}

func hubStates(list []changelog.Info) string {
	var s []string
	for _, in := range list {
		st := "none"
		if in.Hub != nil {
			st = in.Hub.State
			if st == "merged" {
				st = fmt.Sprintf("merged>%d", in.Hub.Into)
			}
		}
		s = append(s, st)
	}
	return strings.Join(s, " ")
}

func (c *checkout) hubList() api.IncrementList {
	c.t.Helper()
	var list api.IncrementList
	if err := json.Unmarshal([]byte(c.agentscm("changelog", "list", "--root", c.root, "--from-hub", "--format", "json")), &list); err != nil {
		c.t.Fatal(err)
	}
	return list
}

func hubPositions(list api.IncrementList) string {
	var s []string
	for _, in := range list.Increments {
		s = append(s, fmt.Sprint(in.Position))
	}
	return strings.Join(s, " ")
}

// TestChangelogHubOutageKeepsPositions: a tool call kills the Hub process
// mid-session; that call and the ones after it still get their own local
// positions, each holding only its own writes; when the Hub is back, the
// next session's first hook uploads every pending position, in order, and
// apply --from-hub of the Work reproduces the checkout.
func TestChangelogHubOutageKeepsPositions(t *testing.T) {
	c := newCheckout(t)
	data := filepath.Join(c.dir, "hubdata")
	tok := filepath.Join(c.dir, "alice.token")
	c.agentscm("hub", "admin", "human", "create", "--data", data, "--name", "alice")
	c.agentscm("hub", "admin", "repository", "create", "--data", data, "--name", "proj")
	c.agentscm("hub", "admin", "token", "create", "--data", data, "--human", "alice", "--repository", "proj", "--output", tok)
	url, _, pid := c.startHubProc(data, "127.0.0.1:0")
	port := url[strings.LastIndex(url, ":")+1:]
	c.agentscm("client", "setup", "--root", c.root, "--hub", url, "--repository", "proj", "--token-file", tok)
	work := c.startWork("outage mid-session")
	c.agentscm("changelog", "enable", "--root", c.root)
	f := func(n string) string { return filepath.Join(c.root, n) }
	c.runTurn(
		[]scriptedapi.ToolCall{write(f("one.txt"), "1\n")},
		// SIGKILL, then wait (bounded) until the port refuses connections.
		[]scriptedapi.ToolCall{bash(fmt.Sprintf("kill -9 %d; for i in $(seq 100); do (echo > /dev/tcp/127.0.0.1/%s) 2>/dev/null || break; sleep 0.05; done; echo 2 > two.txt", pid, port))},
		[]scriptedapi.ToolCall{write(f("three.txt"), "3\n")},
		[]scriptedapi.ToolCall{bash("rm one.txt")},
	)
	list := c.changelogList()
	checkPositions(t, list, []string{"Write", "Bash", "Write", "Bash"}, -1)
	for i, want := range []string{"+[one.txt] ~[] -[]", "+[two.txt] ~[] -[]", "+[three.txt] ~[] -[]", "+[] ~[] -[one.txt]"} {
		if got := checkoutChanges(list[i]); got != want {
			t.Fatalf("position %d changed %s, want %s", i, got, want)
		}
	}
	// The bytes each call changed: its own write, not the baseline or the
	// transcript (which grows apart).
	if ch := list[0].Changes; ch.Bytes != 2 || ch.Baseline {
		t.Fatalf("position 0 changed %d bytes (conversation %d, baseline %v), want 2", ch.Bytes, ch.TranscriptBytes, ch.Baseline)
	}
	// The conversation grows apart; Claude Code may flush a transcript
	// line only after the next hook ran, so no one position must show it.
	var grew int64
	for _, e := range list {
		grew += e.Changes.TranscriptBytes
	}
	if grew == 0 {
		t.Fatalf("no position counts the conversation's growth: %+v", list)
	}
	if got := hubStates(list); got != "uploaded pending pending pending" {
		t.Fatalf("hub states with the Hub killed: %s", got)
	}
	if list[1].Hub.Reason == "" {
		t.Fatalf("a pending position does not say why: %+v", list[1].Hub)
	}
	out := c.agentscm("changelog", "list", "--root", c.root)
	if !strings.Contains(out, "+ two.txt") || !strings.Contains(out, "- one.txt") || !strings.Contains(out, "pending") {
		t.Fatalf("list text:\n%s", out)
	}

	// The Hub comes back on the same address; the next session's first
	// call uploads the pending positions before its own.
	c.startHub(data, strings.TrimPrefix(url, "http://"))
	c.runTurn([]scriptedapi.ToolCall{write(f("four.txt"), "4\n")})
	list = c.changelogList()
	if got := hubStates(list); got != "uploaded uploaded uploaded uploaded uploaded" {
		t.Fatalf("hub states after the Hub came back: %s", got)
	}
	hl := c.hubList()
	if hl.WorkID != work || hubPositions(hl) != "0 1 2 3 4" {
		t.Fatalf("hub holds %s of work %s", hubPositions(hl), hl.WorkID)
	}
	b := filepath.Join(c.dir, "fresh-b")
	os.MkdirAll(b, 0o755)
	c.agentscm("client", "setup", "--root", b, "--hub", url, "--repository", "proj", "--token-file", tok)
	c.applyWithheld("changelog", "apply", "--root", b, "--to", "4", "--from-hub", "--work", work)
	if want, got := tree(t, c.root), tree(t, b); fmt.Sprint(want) != fmt.Sprint(got) {
		t.Fatalf("B from the Hub:\n%v\nA:\n%v", got, want)
	}
	// So does the position of a call made while the Hub was down.
	cdir := filepath.Join(c.dir, "fresh-c")
	os.MkdirAll(cdir, 0o755)
	c.agentscm("client", "setup", "--root", cdir, "--hub", url, "--repository", "proj", "--token-file", tok)
	c.applyWithheld("changelog", "apply", "--root", cdir, "--to", "2", "--from-hub", "--work", work)
	if got := tree(t, cdir); got["one.txt"] != `644 "1\n"` || got["two.txt"] != `644 "2\n"` || got["three.txt"] != `644 "3\n"` || got["four.txt"] != "" {
		t.Fatalf("C at position 2: %v", got)
	}
}

// TestChangelogHubRefusalsMergePositions: with the real CLI and a served
// Hub, calls the grant refuses keep their own local positions; once the
// grant is raised they are merged into the next uploaded increment, and
// list says which positions and why (text and JSON, locally and from the
// Hub). A stopped Hub delays an upload without merging it. The Hub's
// sequence, holes included, applies to the checkout's state, and a merged
// position refuses to apply from the Hub on its own.
func TestChangelogHubRefusalsMergePositions(t *testing.T) {
	c := newCheckout(t)
	data := filepath.Join(c.dir, "hubdata")
	url, tok, stop := c.serveHub()
	c.agentscm("client", "setup", "--root", c.root, "--hub", url, "--repository", "proj", "--token-file", tok)
	var w api.Work
	if err := json.Unmarshal([]byte(c.agentscm("work", "start", "--root", c.root, "--changelog-max-objects", "1", "--format", "json")), &w); err != nil {
		t.Fatal(err)
	}
	c.agentscm("changelog", "enable", "--root", c.root, "--no-transcript-root")
	f := func(n string) string { return filepath.Join(c.root, n) }
	c.runTurn([]scriptedapi.ToolCall{write(f("one.txt"), "1\n")}, []scriptedapi.ToolCall{write(f("two.txt"), "2\n")}, []scriptedapi.ToolCall{write(f("three.txt"), "3\n")})
	list := c.changelogList()
	if got := hubStates(list); len(list) != 3 || got != "uploaded refused refused" {
		t.Fatalf("with a grant of one object: %d local increments, hub states %s", len(list), got)
	}
	if r := list[1].Hub.Reason; !strings.Contains(r, "objects") {
		t.Fatalf("refusal reason %q", r)
	}
	if out := c.agentscm("work", "grant", "--root", c.root, "--max-objects", "10"); !strings.Contains(out, "1 of 10 objects") {
		t.Fatalf("work grant: %s", out)
	}
	c.runTurn([]scriptedapi.ToolCall{write(f("four.txt"), "4\n")})
	list = c.changelogList()
	if got := hubStates(list); got != "uploaded merged>3 merged>3 uploaded" {
		t.Fatalf("after raising the grant: %s", got)
	}
	if got := checkoutChanges(list[3]); got != "+[four.txt] ~[] -[]" {
		t.Fatalf("position 3 locally holds %s, want only its own write", got)
	}
	out := c.agentscm("changelog", "list", "--root", c.root)
	if !strings.Contains(out, "merged into 3") || !strings.Contains(out, "refused: ") || !strings.Contains(out, "objects") {
		t.Fatalf("list text does not say what was merged and why:\n%s", out)
	}
	if hl := c.hubList(); hubPositions(hl) != "0 3" {
		t.Fatalf("hub positions %s", hubPositions(hl))
	}
	if out := c.agentscm("changelog", "list", "--root", c.root, "--from-hub"); !strings.Contains(out, "carries positions 1..2") {
		t.Fatalf("list --from-hub:\n%s", out)
	}

	// A stopped Hub delays, never merges.
	addr := strings.TrimPrefix(url, "http://")
	stop()
	c.runTurn([]scriptedapi.ToolCall{write(f("five.txt"), "5\n")})
	if got := hubStates(c.changelogList()); got != "uploaded merged>3 merged>3 uploaded pending" {
		t.Fatalf("with the Hub stopped: %s", got)
	}
	c.startHub(data, addr)
	c.runTurn([]scriptedapi.ToolCall{write(f("six.txt"), "6\n")})
	if got := hubStates(c.changelogList()); got != "uploaded merged>3 merged>3 uploaded uploaded uploaded" {
		t.Fatalf("after the Hub came back: %s", got)
	}
	if hl := c.hubList(); hubPositions(hl) != "0 3 4 5" {
		t.Fatalf("hub positions %s", hubPositions(hl))
	}
	b := filepath.Join(c.dir, "fresh-b")
	os.MkdirAll(b, 0o755)
	c.agentscm("client", "setup", "--root", b, "--hub", url, "--repository", "proj", "--token-file", tok)
	cmd := exec.Command(h.agentscm, "changelog", "apply", "--root", b, "--to", "2", "--from-hub", "--work", w.ID)
	cmd.Env = c.env()
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "position 2 has no increment of its own on the Hub") {
		t.Fatalf("apply --from-hub of a merged position: %v %s", err, out)
	}
	// The Claude settings file the changelog's hooks live in is a secret
	// file: withheld from the Hub, so the apply is partial (exit 8).
	if out := c.applySecretsWithheld("changelog", "apply", "--root", b, "--to", "5", "--from-hub", "--work", w.ID); !strings.Contains(out, "positions 1..2 came merged") {
		t.Fatalf("apply --from-hub: %s", out)
	}
	if want, got := tree(t, c.root), tree(t, b); fmt.Sprint(want) != fmt.Sprint(got) {
		t.Fatalf("B from the Hub:\n%v\nA:\n%v", got, want)
	}
}
