//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/action"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/source"
	"github.com/agentscm/agentscm/internal/spool"
	"github.com/agentscm/agentscm/test/e2e/scriptedapi"
)

// TestSourceBindingOfDirtyCheckout: configure refuses a base ref that does
// not resolve; with --base-ref base, a real Claude Code session runs two
// Bash commands on a dirty checkout. The Hub record's action starts carry
// head, tree, the merge-base with the base ref and the manifest identity
// (dirty, exact when the bytes were retained), and not one byte or path of
// the checkout; the spool retains the manifest and the working bytes it
// names; the read-only command finishes with drift none_observed, the one
// that appends to a file with drift changed.
func TestSourceBindingOfDirtyCheckout(t *testing.T) {
	c := newCheckout(t)
	c.git("branch", "base")
	c.write("second.txt", "second commit\n")
	c.git("add", "second.txt")
	c.git("-c", "user.email=e2e@example.invalid", "-c", "user.name=e2e", "commit", "-qm", "second")
	c.agentscm("client", "setup", "--root", c.root, "--local")

	// An unresolved base ref is refused, naming it; nothing is configured.
	cmd := exec.Command(h.agentscm, "change-capture", "configure", "--root", c.root, "--spool", c.spool, "--base-ref", "origin/nope",
		"--action-rule", "Bash=execution:partial:process_exit_code")
	cmd.Env = c.env()
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), `base ref "origin/nope" does not resolve to a commit`) {
		t.Fatalf("an unresolved base ref: %v\n%s", err, out)
	}
	if _, err := os.Stat(c.spool); !os.IsNotExist(err) {
		t.Fatal("the refused configure created the spool")
	}
	c.agentscm("change-capture", "configure", "--root", c.root, "--spool", c.spool, "--capture-mode", "metadata-only",
		"--base-ref", "base", "--action-rule", "Bash=execution:partial:process_exit_code")
	work := c.startWork("source binding")

	const secret = "SOURCE-BYTES-7f3a9c-never-shared"
	c.write("README.md", "scratch checkout, edited: "+secret+"\n")
	if err := os.MkdirAll(filepath.Join(c.root, "notes-private"), 0o755); err != nil {
		t.Fatal(err)
	}
	c.write("notes-private/plan.txt", "untracked "+secret+"\n")
	// configure (unlike enable) leaves the hook settings file untracked;
	// exclude it so the manifest is exactly the two edited paths.
	c.write(".git/info/exclude", "*.log\n.claude/settings.local.json\n")
	c.write("noise.log", "ignored "+secret+"\n")

	api1, err := scriptedapi.Start(scriptedapi.Turn{Marker: "SCENARIO-SOURCE", Steps: [][]scriptedapi.ToolCall{
		{bash("cat README.md")},
		{bash("echo appended >> notes-private/plan.txt")},
	}, FinalText: "source done"})
	if err != nil {
		t.Fatal(err)
	}
	defer api1.Close()
	res := c.runClaude(api1, "-p", "Run SCENARIO-SOURCE.")

	rec := c.record(work)
	if len(rec.Actions) != 2 {
		t.Fatalf("hub actions %+v", rec.Actions)
	}
	all, _ := json.Marshal(rec)
	for _, leak := range []string{secret, "notes-private", "plan.txt", "README.md", "noise.log"} {
		if bytes.Contains(all, []byte(leak)) {
			t.Fatalf("the Hub record holds %q: %s", leak, all)
		}
	}
	base := strings.TrimSpace(gitOut(t, c, "rev-parse", "base"))
	head := strings.TrimSpace(gitOut(t, c, "rev-parse", "HEAD"))
	tree := strings.TrimSpace(gitOut(t, c, "rev-parse", "HEAD^{tree}"))
	sp, err := spool.Open(c.spool)
	if err != nil {
		t.Fatal(err)
	}
	drifts := map[string]string{}
	for _, a := range rec.Actions {
		b, _ := json.Marshal(a)
		s := a.Start.Source
		if a.Status != "complete" || s == nil || s.Head != head || s.Tree != tree || s.MergeBase != base || !s.Dirty ||
			len(s.ManifestDigest) != 64 || s.ManifestBytes <= 0 || s.Stopped != "" || s.Transformed {
			t.Fatalf("action source: %s", b)
		}
		// Exact: every start retained the bytes, the intake hook's too
		// (staged without the spool lock, admitted by the deliverer).
		if !s.Retained || len(s.Omissions) != 0 || s.Partial {
			t.Fatalf("action source coverage: %s", b)
		}
		drifts[a.ActionID] = a.Finish.Drift
		t.Logf("action: %s", b)
		m, err := source.ReadManifest(sp, &event.SourceBinding{ManifestDigest: s.ManifestDigest, ManifestBytes: s.ManifestBytes})
		if err != nil {
			t.Fatal(err)
		}
		var paths []string
		for _, e := range m.Entries {
			paths = append(paths, e.Path)
			if e.Kind != "file" {
				t.Fatalf("manifest entry %+v", e)
			}
			body, err := sp.ReadBlob(event.ArtifactRef{Digest: "sha256:" + e.SHA256, Bytes: e.Size})
			if err != nil || !bytes.Contains(body, []byte(secret)) {
				t.Fatalf("%s retained %q, %v", e.Path, body, err)
			}
		}
		if !slices.Equal(paths, []string{"README.md", "notes-private/plan.txt"}) || m.Scope != "delta" || m.Head != head {
			t.Fatalf("manifest %+v", m)
		}
	}
	// The text form of show names the binding in one line per action.
	text := c.agentscm("change-capture", "show", "--root", c.root, "--work-id", work, "--verbose")
	if n := strings.Count(text, ", kept in the private spool)"); n != 2 {
		t.Fatalf("show says %d bindings are kept in the private spool:\n%s", n, text)
	}
	if n := strings.Count(text, "source: commit "+head[:12]+", merge base "+base[:12]+", with uncommitted changes (manifest sha256:"); n != 2 {
		t.Fatalf("show names %d source bindings:\n%s", n, text)
	}
	var got []string
	for _, e := range c.inspect().Sessions[0].Events {
		if e.Kind == event.ActionStart {
			got = append(got, drifts[action.ID("claude-code", res.SessionID, e.ToolUseID)])
		}
	}
	if !slices.Equal(got, []string{"none_observed", "changed"}) {
		t.Fatalf("drifts in start order %v (%v)", got, drifts)
	}
}

func gitOut(t *testing.T, c *checkout, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = c.root
	cmd.Env = c.env()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %v: %v", args, err)
	}
	return string(out)
}

// TestSourceBindingOfTransformedCheckout: a clean checkout whose
// .gitattributes materializes CRLF is bound from the worktree: the Hub
// record's action start says transformed with a manifest identity, and the
// spool holds the CRLF bytes, not the tree's LF blob.
func TestSourceBindingOfTransformedCheckout(t *testing.T) {
	c := newCheckout(t)
	c.write(".gitattributes", "*.txt text eol=crlf\n")
	c.write("notes.txt", "line one\nline two\n")
	c.git("add", ".gitattributes", "notes.txt")
	c.git("-c", "user.email=e2e@example.invalid", "-c", "user.name=e2e", "commit", "-qm", "crlf")
	if err := os.Remove(filepath.Join(c.root, "notes.txt")); err != nil {
		t.Fatal(err)
	}
	c.git("checkout", "--", "notes.txt")
	c.write(".git/info/exclude", ".claude/settings.local.json\n")
	c.agentscm("client", "setup", "--root", c.root, "--local")
	c.agentscm("change-capture", "configure", "--root", c.root, "--spool", c.spool, "--capture-mode", "metadata-only",
		"--base-ref", "main", "--action-rule", "Bash=execution:partial:process_exit_code")
	work := c.startWork("transformed source")
	api1, err := scriptedapi.Start(scriptedapi.Turn{Marker: "SCENARIO-CRLF", Steps: [][]scriptedapi.ToolCall{{bash("true")}}, FinalText: "crlf done"})
	if err != nil {
		t.Fatal(err)
	}
	defer api1.Close()
	c.runClaude(api1, "-p", "Run SCENARIO-CRLF.")

	rec := c.record(work)
	if len(rec.Actions) != 1 {
		t.Fatalf("hub actions %+v", rec.Actions)
	}
	s := rec.Actions[0].Start.Source
	b, _ := json.Marshal(rec.Actions[0])
	if s == nil || s.Dirty || !s.Transformed || len(s.ManifestDigest) != 64 || s.Stopped != "" || len(s.Tree) != 40 {
		t.Fatalf("action source: %s", b)
	}
	if bytes.Contains(b, []byte("notes.txt")) || bytes.Contains(b, []byte("line one")) {
		t.Fatalf("the Hub record names the checkout's content: %s", b)
	}
	t.Logf("action: %s", b)
	if !s.Retained || s.Partial || len(s.Omissions) != 0 {
		t.Fatalf("a retained transformed binding with omissions: %s", b)
	}
	sp, err := spool.Open(c.spool)
	if err != nil {
		t.Fatal(err)
	}
	m, err := source.ReadManifest(sp, &event.SourceBinding{ManifestDigest: s.ManifestDigest, ManifestBytes: s.ManifestBytes})
	if err != nil {
		t.Fatal(err)
	}
	if m.Scope != "worktree" || !slices.Equal(m.Transforms, []string{source.TransformEOL}) {
		t.Fatalf("manifest %+v", m)
	}
	var found bool
	for _, e := range m.Entries {
		if e.Path == "notes.txt" {
			found = true
			body, err := sp.ReadBlob(event.ArtifactRef{Digest: "sha256:" + e.SHA256, Bytes: e.Size})
			if err != nil || string(body) != "line one\r\nline two\r\n" {
				t.Fatalf("retained %q, %v", body, err)
			}
		}
	}
	if !found {
		t.Fatalf("notes.txt not in the manifest %+v", m.Entries)
	}
}
