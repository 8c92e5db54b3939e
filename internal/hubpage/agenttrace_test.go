package hubpage_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/attribution"
	"github.com/agentscm/agentscm/internal/attribution/schemacheck"
	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/agentscm/agentscm/internal/hub/api"
)

// TestAgentTraceDownload: a Work whose worktree uploaded real changelog
// increments (a Write call, the user's edit as an outside position, an
// Edit call) is downloaded from the page as one Agent Trace record that
// validates against the vendored schema and attributes each line to its
// session or to the user; a Work without increments is refused.
func TestAgentTraceDownload(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	p, err := f.svc.Authenticate(ctx, f.rw)
	if err != nil {
		t.Fatal(err)
	}
	w, err := f.svc.StartWork(ctx, p, "proj", api.StartWorkRequest{WorktreeID: "wt9", Title: "traced"})
	if err != nil {
		t.Fatal(err)
	}

	// A real changelog of a git checkout.
	root := filepath.Join(t.TempDir(), "repo")
	os.MkdirAll(root, 0o755)
	git := func(args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	write := func(rel, content string) {
		if err := os.WriteFile(filepath.Join(root, rel), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git("init", "-q")
	write("README.md", "readme\n")
	git("add", ".")
	git("commit", "-qm", "init")
	c, err := changelog.Open(filepath.Join(filepath.Dir(root), "log"), changelog.Options{Roots: []changelog.Root{{Name: "checkout", Path: root, Git: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.RecordBaseline(ctx); err != nil {
		t.Fatal(err)
	}
	capture := func(req changelog.CaptureRequest) {
		req.Position, req.SessionID = -1, "n9"
		var err error
		if req.Kind == changelog.KindOutside {
			_, err = c.CaptureOutside(ctx, req)
		} else {
			_, err = c.Capture(ctx, req)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	write("f.txt", "one\ntwo\nthree\n")
	capture(changelog.CaptureRequest{Tool: "Write", ToolUseID: "toolu_w"})
	write("f.txt", "one\ntwo by the user\nthree\n")
	capture(changelog.CaptureRequest{Kind: changelog.KindOutside, Outside: &incmeta.Outside{Event: "PreToolUse", SessionID: "n9"}})
	write("f.txt", "one\ntwo by the user\nTHREE\n")
	capture(changelog.CaptureRequest{Tool: "Edit", ToolUseID: "toolu_e"})
	for pos := 0; pos < 3; pos++ {
		up, err := c.UploadForm(pos, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.svc.UploadIncrement(ctx, p, "proj", "wt9", api.IncrementUpload{Position: pos, Session: up.Session, Digest: up.Digest, Size: int64(len(up.Body))}, strings.NewReader(string(up.Body))); err != nil {
			t.Fatal(err)
		}
	}

	cl := client(t)
	signIn(t, f, cl, f.rw)
	if _, page := get(t, cl, f.srv.URL+"/works/"+w.ID); !strings.Contains(page, `href="/works/`+w.ID+`/agent-trace.json"`) {
		t.Fatalf("the Work page does not offer the download:\n%s", page)
	}
	resp, body := get(t, cl, f.srv.URL+"/works/"+w.ID+"/agent-trace.json")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != attribution.TraceMediaType ||
		!strings.Contains(resp.Header.Get("Content-Disposition"), "attachment") {
		t.Fatalf("download: %d %v\n%s", resp.StatusCode, resp.Header, body)
	}
	schema, err := os.ReadFile("../attribution/testdata/agent-trace-0.1.0.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	if errs, err := schemacheck.Check(schema, []byte(body)); err != nil || len(errs) > 0 {
		t.Fatalf("not a valid Agent Trace record: %v %v\n%s", err, errs, body)
	}
	var rec attribution.TraceRecord
	if err := json.Unmarshal([]byte(body), &rec); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tf := range rec.Files {
		for _, conv := range tf.Conversations {
			who := conv.Contributor.Type
			for _, r := range conv.Related {
				who += " " + r.URL
			}
			for _, r := range conv.Ranges {
				for n := r.StartLine; n <= r.EndLine; n++ {
					got = append(got, tf.Path+":"+string(rune('0'+n))+"="+who)
				}
			}
		}
	}
	sort.Strings(got)
	want := "f.txt:1=ai urn:agentscm:session:n9 f.txt:2=human f.txt:3=ai urn:agentscm:session:n9"
	if strings.Join(got, " ") != want {
		t.Fatalf("the record attributes %v, want %s\n%s", got, want, body)
	}

	// A Work that does not exist is refused.
	if resp, _ := get(t, cl, f.srv.URL+"/works/wrk_nope/agent-trace.json"); resp.StatusCode < 400 {
		t.Fatalf("a missing Work: %d", resp.StatusCode)
	}
}
