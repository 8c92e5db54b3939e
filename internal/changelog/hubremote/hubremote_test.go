package hubremote_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/changelog/hubremote"
	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/hub"
	"github.com/agentscm/agentscm/internal/hub/api"
)

type env struct {
	t     *testing.T
	svc   *hub.Service
	p     hub.Principal
	token string
	root  string
	dir   string
	srv   *httptest.Server
	addr  string
	now   time.Time
}

func newEnv(t *testing.T, grant *api.Grant) *env {
	t.Helper()
	ctx := context.Background()
	base := t.TempDir()
	svc, err := hub.Open(ctx, filepath.Join(base, "hub"), hub.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	p, err := svc.EnsureLocal(ctx, "alice", "proj")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := svc.CreateToken(ctx, hub.Operator(), api.CreateTokenRequest{Human: "alice", Repository: "proj", Scope: api.ScopeReadWrite})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, svc: svc, p: p, token: tok.Secret, root: filepath.Join(base, "repo"), dir: filepath.Join(base, "cl"), now: time.Now()}
	os.MkdirAll(e.root, 0o755)
	if _, err := svc.StartWork(ctx, p, "proj", api.StartWorkRequest{WorktreeID: "wt-1", ChangelogGrant: grant}); err != nil {
		t.Fatal(err)
	}
	e.start()
	return e
}

// start serves the Hub on loopback, on the same address after a stop.
func (e *env) start() {
	addr := e.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		e.t.Fatal(err)
	}
	e.addr = ln.Addr().String()
	e.srv = httptest.NewUnstartedServer(hub.NewHandler(e.svc, nil))
	e.srv.Listener.Close()
	e.srv.Listener = ln
	e.srv.Start()
	e.t.Cleanup(e.srv.Close)
}

func (e *env) httpRemote() changelog.Remote {
	c, err := client.NewHTTP("http://"+e.addr, "proj", e.token, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return hubremote.New(c, "wt-1")
}

func (e *env) write(name, content string) {
	if err := os.WriteFile(filepath.Join(e.root, name), []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) open(r changelog.Remote, out *changelog.RemoteOutcome) *changelog.Changelog {
	opts := changelog.Options{Roots: []changelog.Root{{Name: "checkout", Path: e.root}}}
	if r != nil {
		opts.Store = changelog.RemoteStore(e.dir, r, out, func() time.Time { return e.now })
	}
	c, err := changelog.Open(e.dir, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func (e *env) capture(c *changelog.Changelog) (*changelog.Increment, error) {
	return c.Capture(context.Background(), changelog.CaptureRequest{Position: -1, SessionID: "native-1", Tool: "Bash"})
}

func (e *env) localPositions() []int {
	c := e.open(nil, nil)
	list, err := c.List()
	if err != nil {
		e.t.Fatal(err)
	}
	var out []int
	for _, in := range list {
		out = append(out, in.Position)
	}
	return out
}

// hubReplay downloads the Work's increments and replays them into a fresh
// directory, returning its files.
func (e *env) hubReplay() (map[string]string, []api.IncrementInfo) {
	ctx := context.Background()
	cur, err := e.svc.CurrentWork(ctx, e.p, "proj", "wt-1")
	if err != nil {
		e.t.Fatal(err)
	}
	conn := client.NewLocal(e.svc, e.p, "proj")
	list, err := conn.ListIncrements(ctx, cur.Work.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	tmp := e.t.TempDir()
	var paths []string
	for _, in := range list.Increments {
		b, err := conn.GetIncrement(ctx, cur.Work.ID, in)
		if err != nil {
			e.t.Fatal(err)
		}
		p := filepath.Join(tmp, changelog.IncrementName(in.Position))
		os.WriteFile(p, b, 0o600)
		paths = append(paths, p)
	}
	fresh := filepath.Join(e.t.TempDir(), "fresh")
	if err := changelog.Replay(ctx, paths, []changelog.Root{{Name: "checkout", Path: fresh}}); err != nil {
		e.t.Fatal(err)
	}
	return files(e.t, fresh), list.Increments
}

func files(t *testing.T, dir string) map[string]string {
	out := map[string]string{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range ents {
		b, _ := os.ReadFile(filepath.Join(dir, en.Name()))
		out[en.Name()] = string(b)
	}
	return out
}

func sameFiles(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// A grant refusal leaves the call's writes to the next increment.
func TestRefusedUploadLeavesWritesToNextIncrement(t *testing.T) {
	e := newEnv(t, &api.Grant{MaxObjects: 2, MaxBytes: 1 << 20})
	var out changelog.RemoteOutcome
	c := e.open(e.httpRemote(), &out)
	for i, name := range []string{"a.txt", "b.txt"} {
		e.write(name, name)
		inc, err := e.capture(c)
		if err != nil || inc.Position != i || !out.Uploaded || out.Status != api.IncrementStored {
			t.Fatalf("capture %d: %+v %+v %v", i, inc, out, err)
		}
	}
	e.write("c.txt", "c")
	_, err := e.capture(c)
	var le *changelog.LimitError
	if !errors.As(err, &le) || le.Bound != api.BoundObjects || le.Max != 2 || !strings.Contains(err.Error(), "grant") {
		t.Fatalf("third capture: %v", err)
	}
	// Refused again, now by the grant the reservation file holds, without
	// asking the Hub.
	e.srv.Close()
	if _, err := e.capture(c); !errors.As(err, &le) || !strings.Contains(err.Error(), "as last read") {
		t.Fatalf("refused from the reservation file: %v", err)
	}
	e.start()
	if got := e.localPositions(); len(got) != 2 {
		t.Fatalf("local positions after the refusal: %v", got)
	}
	cur, _ := e.svc.CurrentWork(context.Background(), e.p, "proj", "wt-1")
	if _, err := e.svc.SetGrant(context.Background(), e.p, "proj", cur.Work.ID, api.GrantRequest{MaxObjects: 3, MaxBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	e.now = e.now.Add(2 * changelog.ReservationTTL) // the cached grant is stale
	e.write("d.txt", "d")
	inc, err := e.capture(c)
	if err != nil || inc.Position != 2 || inc.Meta.Files != 2 || !out.Uploaded {
		t.Fatalf("next capture: %+v %+v %v", inc, out, err)
	}
	got, list := e.hubReplay()
	if len(list) != 3 || !sameFiles(got, files(t, e.root)) {
		t.Fatalf("hub replay %v (%d increments), checkout %v", got, len(list), files(t, e.root))
	}
	u, _ := (&changelog.Reservation{Path: filepath.Join(e.dir, changelog.ReservationFile)}).Used()
	if u.Objects != 3 || u.Grant == nil || u.Grant.MaxObjects != 3 || u.WorkID != cur.Work.ID {
		t.Fatalf("reservation file %+v", u)
	}
}

// A stopped Hub: the hook's increment is not stored, the state does not
// advance, and the next call's increment carries both calls' writes.
func TestStoppedHubLeavesWritesToNextIncrement(t *testing.T) {
	e := newEnv(t, nil)
	cfg := filepath.Join(t.TempDir(), "config")
	if _, _, err := client.SetupHub(context.Background(), cfg, e.root, "http://"+e.addr, "proj", e.token, time.Now()); err != nil {
		t.Fatal(err)
	}
	conn, err := client.Lookup(cfg, e.root)
	if err != nil {
		t.Fatal(err)
	}
	// The connection's worktree is the one with the Work.
	if _, err := e.svc.StartWork(context.Background(), e.p, "proj", api.StartWorkRequest{WorktreeID: conn.WorktreeID}); err != nil {
		t.Fatal(err)
	}
	e.dir = changelog.DefaultDir(cfg, e.root)
	os.MkdirAll(filepath.Dir(e.dir), 0o700)
	if err := e.open(nil, nil).SaveRoots(); err != nil {
		t.Fatal(err)
	}
	hook := func() (*changelog.HookResult, error) {
		payload := fmt.Sprintf(`{"session_id":"native-1","cwd":%q,"hook_event_name":"PostToolUse","tool_name":"Bash","tool_use_id":"toolu_1"}`, e.root)
		return changelog.HandleClaudeHookWith(context.Background(), cfg, strings.NewReader(payload), time.Now(), changelog.HookOptions{Remote: hubremote.ForCheckout(cfg)})
	}
	e.write("a.txt", "a")
	if r, err := hook(); err != nil || r.Increment.Position != 0 || !r.Remote.Uploaded {
		t.Fatalf("first call: %+v %v", r, err)
	}
	e.srv.Close()
	e.write("b.txt", "b")
	start := time.Now()
	if _, err := hook(); err == nil || !strings.Contains(err.Error(), "upload to the Hub") {
		t.Fatalf("call with the Hub stopped: %v", err)
	}
	if d := time.Since(start); d > changelog.RemoteDeadline+time.Second {
		t.Fatalf("the failed upload took %v", d)
	}
	if got := e.localPositions(); len(got) != 1 {
		t.Fatalf("local positions with the Hub stopped: %v", got)
	}
	e.start()
	e.write("c.txt", "c")
	r, err := hook()
	if err != nil || r.Increment.Position != 1 || r.Increment.Meta.Files != 2 || !r.Remote.Uploaded {
		t.Fatalf("call after the restart: %+v %v", r, err)
	}
	cur, _ := e.svc.CurrentWork(context.Background(), e.p, "proj", conn.WorktreeID)
	list, err := e.svc.ListIncrements(context.Background(), e.p, "proj", cur.Work.ID, "")
	if err != nil || len(list.Increments) != 2 {
		t.Fatalf("hub list %+v %v", list, err)
	}
}

// Increments stored before the checkout had a Work reach the Hub before the
// first one uploaded (embedded connection).
func TestBackfillAndLocalOnly(t *testing.T) {
	e := newEnv(t, nil)
	local := hubremote.New(client.NewLocal(e.svc, e.p, "proj"), "wt-none")
	var out changelog.RemoteOutcome
	c := e.open(local, &out)
	e.write("a.txt", "a")
	inc, err := e.capture(c)
	if err != nil || inc.Position != 0 || out.Uploaded || !strings.Contains(out.LocalOnly, "no current work") {
		t.Fatalf("without a current Work: %+v %+v %v", inc, out, err)
	}
	e.write("b.txt", "b")
	if _, err := e.capture(e.open(nil, nil)); err != nil {
		t.Fatal(err)
	}
	c = e.open(hubremote.New(client.NewLocal(e.svc, e.p, "proj"), "wt-1"), &out)
	e.write("c.txt", "c")
	inc, err = e.capture(c)
	if err != nil || inc.Position != 2 || !out.Uploaded || out.Backfilled != 2 {
		t.Fatalf("with a Work: %+v %+v %v", inc, out, err)
	}
	got, list := e.hubReplay()
	var pos []int
	for _, in := range list {
		pos = append(pos, in.Position)
	}
	sort.Ints(pos)
	if fmt.Sprint(pos) != "[0 1 2]" || !sameFiles(got, files(t, e.root)) {
		t.Fatalf("hub positions %v, replay %v", pos, got)
	}
}
