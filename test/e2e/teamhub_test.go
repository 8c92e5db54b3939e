//go:build e2e

package e2e

import (
	"fmt"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentscm/agentscm/internal/hub/objects/s3/s3test"
	"github.com/agentscm/agentscm/internal/hub/store/postgres/pgtest"
	"github.com/agentscm/agentscm/test/e2e/scriptedapi"
)

// teamHub is two `agentscm hub serve` processes on one PostgreSQL database
// and one S3 bucket, behind a loopback round-robin proxy.
type teamHub struct {
	url, tokenFile string
	served         [2]atomic.Int64 // requests each instance answered
}

// serveTeamHub starts a throwaway PostgreSQL (Debian's binaries), a
// bucket on a real S3-compatible server (versitygw, s3test), the Hub's human, repository proj and a
// read-write token, two hub serve processes and the proxy.
func (c *checkout) serveTeamHub() *teamHub {
	c.t.Helper()
	pg := pgtest.Own(c.t)
	dsnFile := filepath.Join(c.dir, "hub.dsn")
	if err := os.WriteFile(dsnFile, []byte(pg.Database(c.t)), 0o600); err != nil {
		c.t.Fatal(err)
	}
	s3c := s3test.Server(c.t, "team-hub", "agentscm")
	env := append(c.env(), s3test.Env(s3c)...)
	store := []string{"--store-file", dsnFile, "--objects", s3test.URI(s3c)}
	th := &teamHub{tokenFile: filepath.Join(c.dir, "alice.token")}
	admin := func(args ...string) {
		cmd := exec.Command(h.agentscm, append(append([]string{"hub", "admin"}, args...), store...)...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			c.t.Fatalf("hub admin %v: %v\n%s", args, err, out)
		}
	}
	admin("human", "create", "--name", "alice")
	admin("repository", "create", "--name", "proj")
	admin("token", "create", "--human", "alice", "--repository", "proj", "--output", th.tokenFile)
	var backends [2]*url.URL
	for i := range backends {
		u, err := url.Parse(c.startHubProcess(env, append([]string{"--listen", "127.0.0.1:0"}, store...)...))
		if err != nil {
			c.t.Fatal(err)
		}
		backends[i] = u
	}
	var next atomic.Int64
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		i := next.Add(1) % 2
		th.served[i].Add(1)
		r.SetURL(backends[i])
	}}
	srv := httptest.NewServer(proxy)
	c.t.Cleanup(srv.Close)
	th.url = srv.URL
	return th
}

// startHubProcess runs hub serve with args and returns its URL; it is
// stopped (SIGTERM) at cleanup.
func (c *checkout) startHubProcess(env []string, args ...string) string {
	c.t.Helper()
	cmd := exec.Command(h.agentscm, append([]string{"hub", "serve"}, args...)...)
	cmd.Env = env
	url, _ := serveProc(c.t, cmd)
	return url
}

// TestTeamHubTwoInstances: a checkout captures a real Claude Code session
// into a Hub of two processes on PostgreSQL + S3 behind a round-robin
// proxy. Every captured event reaches the Work's change record exactly
// once, the changelog increments are stored in the bucket, and a fresh
// directory applies them to the checkout's state — with requests answered
// by both instances.
func TestTeamHubTwoInstances(t *testing.T) {
	c := newCheckout(t)
	th := c.serveTeamHub()
	c.agentscm("client", "setup", "--root", c.root, "--hub", th.url, "--repository", "proj", "--token-file", th.tokenFile)
	c.agentscm("change-capture", "configure", "--root", c.root, "--spool", c.spool, "--capture-mode", "metadata-only")
	work := c.startWork("two hub instances")
	c.agentscm("changelog", "enable", "--root", c.root, "--no-transcript-root")
	f := func(n string) string { return filepath.Join(c.root, n) }
	c.runTurn(
		[]scriptedapi.ToolCall{write(f("one.txt"), "1\n")},
		[]scriptedapi.ToolCall{bash("echo 2 > two.txt && rm b.txt")},
		[]scriptedapi.ToolCall{write(f("three.txt"), "3\n")},
	)
	checkPositions(t, c.changelogList(), []string{"Write", "Bash", "Write"}, -1)

	spoolEvents := c.inspect().Sessions[0].Events
	checkSequences(t, spoolEvents)
	evs, gaps := split(spoolEvents)
	rec := c.record(work)
	if len(rec.Events) != len(evs) {
		t.Fatalf("hub has %d events, spool %d", len(rec.Events), len(evs))
	}
	for i, e := range rec.Events {
		if s := evs[i]; e.Seq != int64(s.SharedSeq) || e.Kind != string(s.Kind) {
			t.Fatalf("hub event %d %+v != spool %+v", i, e, s)
		}
	}
	checkOnlyUncertain(t, rec, len(gaps))

	b := filepath.Join(c.dir, "fresh-b")
	if err := os.MkdirAll(b, 0o755); err != nil {
		t.Fatal(err)
	}
	c.agentscm("client", "setup", "--root", b, "--hub", th.url, "--repository", "proj", "--token-file", th.tokenFile)
	// The Claude settings file is a secret file, withheld: exit 8.
	if out := c.applySecretsWithheld("changelog", "apply", "--root", b, "--to", "2", "--from-hub", "--work", work); !strings.Contains(out, "digests verified") {
		t.Fatalf("apply --from-hub: %s", out)
	}
	if want, got := tree(t, c.root), tree(t, b); fmt.Sprint(want) != fmt.Sprint(got) {
		t.Fatalf("B from the two-instance Hub:\n%v\nA:\n%v", got, want)
	}
	if th.served[0].Load() == 0 || th.served[1].Load() == 0 {
		t.Fatalf("requests per instance: %d, %d", th.served[0].Load(), th.served[1].Load())
	}
	t.Logf("requests per instance: %d, %d", th.served[0].Load(), th.served[1].Load())
}
