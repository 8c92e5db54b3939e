package hubremote_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
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

func (e *env) open() *changelog.Changelog {
	opts := changelog.Options{Roots: []changelog.Root{{Name: "checkout", Path: e.root}}, Now: func() time.Time { return e.now }}
	c, err := changelog.Open(e.dir, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func (e *env) capture(c *changelog.Changelog) (*changelog.Increment, error) {
	return c.Capture(context.Background(), changelog.CaptureRequest{Position: -1, SessionID: "native-1", Tool: "Bash"})
}

// captureUpload stores the next increment locally, then runs the upload
// queue through it against r, as the hook does.
func (e *env) captureUpload(c *changelog.Changelog, r changelog.Remote) (*changelog.Increment, *changelog.UploadOutcome) {
	e.t.Helper()
	inc, err := e.capture(c)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), changelog.RemoteDeadline)
	defer cancel()
	out, err := c.Upload(ctx, r, changelog.UploadOptions{Through: inc.Position})
	if err != nil {
		e.t.Fatal(err)
	}
	return inc, out
}

func (e *env) localPositions() []int {
	c := e.open()
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

// TestMain lets the test binary act as a hook process that dies at a
// failpoint (see crashHelper).
func TestMain(m *testing.M) {
	if mode := os.Getenv("HUBREMOTE_CRASH"); mode != "" {
		crashHelper(mode)
		os.Exit(3) // the failpoint was not reached
	}
	os.Exit(m.Run())
}

// crashHelper runs in a child process: "stored" captures an increment and
// is killed before any upload; "uploaded" runs the upload queue and is
// killed once the Hub holds a position, before the queue file says so.
func crashHelper(mode string) {
	root, dir := os.Getenv("HUBREMOTE_ROOT"), os.Getenv("HUBREMOTE_DIR")
	c, err := changelog.Open(dir, changelog.Options{Roots: []changelog.Root{{Name: "checkout", Path: root}}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	die := func() { syscall.Kill(os.Getpid(), syscall.SIGKILL) }
	switch mode {
	case "stored":
		if _, err := c.Capture(context.Background(), changelog.CaptureRequest{Position: -1, SessionID: "native-1", Tool: "Bash"}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		die()
	case "uploaded":
		hc, err := client.NewHTTP(os.Getenv("HUBREMOTE_URL"), "proj", os.Getenv("HUBREMOTE_TOKEN"), nil)
		if err != nil {
			os.Exit(1)
		}
		through, _ := strconv.Atoi(os.Getenv("HUBREMOTE_THROUGH"))
		_, err = c.Upload(context.Background(), hubremote.New(hc, "wt-1"), changelog.UploadOptions{Through: through, Failpoint: func(name string) {
			if name == "uploaded" {
				die()
			}
		}})
		fmt.Fprintln(os.Stderr, err)
	}
}

func (e *env) crash(mode string, through int) {
	e.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "HUBREMOTE_CRASH="+mode, "HUBREMOTE_ROOT="+e.root, "HUBREMOTE_DIR="+e.dir,
		"HUBREMOTE_URL=http://"+e.addr, "HUBREMOTE_TOKEN="+e.token, "HUBREMOTE_THROUGH="+strconv.Itoa(through))
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		e.t.Fatalf("helper %s was not killed at its failpoint: %v\n%s", mode, err, out)
	}
}

func (e *env) hubPositions() []int {
	e.t.Helper()
	_, list := e.hubReplay()
	var pos []int
	for _, in := range list {
		pos = append(pos, in.Position)
	}
	sort.Ints(pos)
	return pos
}

func (e *env) list() []changelog.Info {
	e.t.Helper()
	l, err := e.open().List()
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

// A stopped Hub: every call still gets its own local position, the
// uploads wait, and the first hook after the Hub returns uploads them all,
// in order; the Hub's sequence replays to the checkout.
func TestStoppedHubKeepsPositionsAndCatchesUp(t *testing.T) {
	e := newEnv(t, nil)
	r := e.httpRemote()
	c := e.open()
	e.write("a.txt", "a")
	if inc, out := e.captureUpload(c, r); inc.Position != 0 || fmt.Sprint(out.Uploaded) != "[0]" || out.Pending != 0 {
		t.Fatalf("first call: %+v %+v", inc, out)
	}
	e.srv.Close()
	for i, name := range []string{"b.txt", "c.txt", "d.txt"} {
		e.write(name, name)
		start := time.Now()
		inc, out := e.captureUpload(c, r)
		if inc.Position != i+1 || len(out.Uploaded) != 0 || out.Pending != i+1 || out.Err == "" {
			t.Fatalf("call %d with the Hub stopped: %+v %+v", i+1, inc, out)
		}
		if d := time.Since(start); d > changelog.RemoteDeadline+time.Second {
			t.Fatalf("the failed upload took %v", d)
		}
		if inc.Meta.Files != 1 || inc.Meta.Changes == nil || fmt.Sprint(inc.Meta.Changes.Created) != "["+name+"]" {
			t.Fatalf("call %d does not hold only its own write: %+v %+v", i+1, inc.Meta, inc.Meta.Changes)
		}
	}
	for _, in := range e.list()[1:] {
		if in.Hub == nil || in.Hub.State != "pending" || !strings.Contains(in.Hub.Reason, "upload of position 1") {
			t.Fatalf("list while the Hub is stopped: %+v", in.Hub)
		}
	}
	if got := e.hubPositions(); fmt.Sprint(got) != "[0]" {
		t.Fatalf("hub positions while stopped: %v", got)
	}
	e.start()
	e.write("e.txt", "e")
	inc, out := e.captureUpload(c, r)
	if inc.Position != 4 || fmt.Sprint(out.Uploaded) != "[1 2 3 4]" || out.Pending != 0 || out.Err != "" {
		t.Fatalf("call after the restart: %+v %+v", inc, out)
	}
	got, _ := e.hubReplay()
	if pos := e.hubPositions(); fmt.Sprint(pos) != "[0 1 2 3 4]" || !sameFiles(got, files(t, e.root)) {
		t.Fatalf("hub positions %v, replay %v, checkout %v", pos, got, files(t, e.root))
	}
	for _, in := range e.list() {
		if in.Hub == nil || in.Hub.State != "uploaded" {
			t.Fatalf("list after catching up: %+v", in.Hub)
		}
	}
}

// A grant refusal: the refused positions stay local with their own
// increments and are merged into the next uploaded increment, whose
// metadata says which and why; the Hub's sequence with the hole still
// replays, and list says where each position went.
func TestRefusedPositionsMergeIntoNextUpload(t *testing.T) {
	e := newEnv(t, &api.Grant{MaxObjects: 2, MaxBytes: 1 << 20})
	r := e.httpRemote()
	c := e.open()
	for i, name := range []string{"a.txt", "b.txt"} {
		e.write(name, name)
		if inc, out := e.captureUpload(c, r); inc.Position != i || out.Status != api.IncrementStored {
			t.Fatalf("capture %d: %+v %+v", i, inc, out)
		}
	}
	e.write("c.txt", "c")
	os.Remove(filepath.Join(e.root, "a.txt"))
	if inc, out := e.captureUpload(c, r); inc.Position != 2 || fmt.Sprint(out.Refused) != "[2]" || len(out.Uploaded) != 0 {
		t.Fatalf("third capture: %+v %+v", inc, out)
	}
	// Refused again, by the grant the reservation file holds, without
	// asking the (stopped) Hub.
	e.srv.Close()
	e.write("c.txt", "c again")
	if inc, out := e.captureUpload(c, r); inc.Position != 3 || fmt.Sprint(out.Refused) != "[3]" || out.Err != "" {
		t.Fatalf("refused from the reservation file: %+v %+v", inc, out)
	}
	e.start()
	if got := e.localPositions(); fmt.Sprint(got) != "[0 1 2 3]" {
		t.Fatalf("local positions after the refusals: %v", got)
	}
	cur, _ := e.svc.CurrentWork(context.Background(), e.p, "proj", "wt-1")
	if _, err := e.svc.SetGrant(context.Background(), e.p, "proj", cur.Work.ID, api.GrantRequest{MaxObjects: 10, MaxBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	e.now = e.now.Add(2 * changelog.ReservationTTL) // the cached grant is stale
	e.write("d.txt", "d")
	inc, out := e.captureUpload(c, r)
	if inc.Position != 4 || fmt.Sprint(out.Uploaded) != "[4]" || len(out.Merged) != 1 || out.Merged[0].From != 2 || out.Merged[0].To != 3 || out.Merged[0].Into != 4 {
		t.Fatalf("next capture: %+v %+v", inc, out)
	}
	if !strings.Contains(out.Merged[0].Reason, "objects") {
		t.Fatalf("merge reason %q does not name the bound", out.Merged[0].Reason)
	}
	got, list := e.hubReplay()
	if pos := e.hubPositions(); fmt.Sprint(pos) != "[0 1 4]" || !sameFiles(got, files(t, e.root)) {
		t.Fatalf("hub positions %v, replay %v, checkout %v", pos, got, files(t, e.root))
	}
	// The Hub's increment 4 carries 2..3, as its metadata says.
	conn := client.NewLocal(e.svc, e.p, "proj")
	b, err := conn.GetIncrement(context.Background(), cur.Work.ID, list[2])
	if err != nil {
		t.Fatal(err)
	}
	m, err := changelog.ReadMetaFrom(bytes.NewReader(b))
	if err != nil || len(m.Merged) != 1 || m.Merged[0].From != 2 || m.Merged[0].To != 3 || m.MergedFrom() != 2 {
		t.Fatalf("merged increment's metadata: %+v %v", m, err)
	}
	if ch := m.Changes; ch == nil || fmt.Sprint(ch.Created) != "[c.txt d.txt]" || fmt.Sprint(ch.Deleted) != "[a.txt]" {
		t.Fatalf("merged increment's changes: %+v", ch)
	}
	l := e.list()
	for i, want := range []string{"uploaded", "uploaded", "merged", "merged", "uploaded"} {
		if l[i].Hub == nil || l[i].Hub.State != want || (want == "merged" && (l[i].Hub.Into != 4 || !strings.Contains(l[i].Hub.Reason, "grant"))) {
			t.Fatalf("list position %d: %+v, want %s", i, l[i].Hub, want)
		}
	}
	// A lost queue file: the run starts over from 0, the Hub answers
	// duplicates and says which positions it merged, and its sequence
	// stays one that replays.
	if err := os.Remove(filepath.Join(e.dir, "uploads.json")); err != nil {
		t.Fatal(err)
	}
	out, err = c.Upload(context.Background(), r, changelog.UploadOptions{Through: 4})
	if err != nil || fmt.Sprint(out.Uploaded) != "[0 1 4]" || len(out.Merged) != 1 || out.Merged[0].From != 2 || out.Pending != 0 {
		t.Fatalf("upload after losing the queue file: %+v %v", out, err)
	}
	got, _ = e.hubReplay()
	if pos := e.hubPositions(); fmt.Sprint(pos) != "[0 1 4]" || !sameFiles(got, files(t, e.root)) {
		t.Fatalf("after the recovery: hub positions %v, replay %v", pos, got)
	}
	// A merged position cannot be uploaded on its own any more.
	b2, _ := os.ReadFile(filepath.Join(e.dir, "increments", changelog.IncrementName(2)))
	if _, err := r.Upload(context.Background(), changelog.RemoteIncrement{Position: 2, Session: "native-1", Digest: digest(b2), Body: b2}); !errors.Is(err, changelog.ErrMergedOnRemote) {
		t.Fatalf("upload of a merged position: %v", err)
	}
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Increments stored while the checkout had no Work reach the Hub, in
// order, once it has one.
func TestLocalOnlyThenWork(t *testing.T) {
	e := newEnv(t, nil)
	none := hubremote.New(client.NewLocal(e.svc, e.p, "proj"), "wt-none")
	c := e.open()
	e.write("a.txt", "a")
	if inc, out := e.captureUpload(c, none); inc.Position != 0 || len(out.Uploaded) != 0 || !strings.Contains(out.LocalOnly, "no current work") {
		t.Fatalf("without a current Work: %+v %+v", inc, out)
	}
	if l := e.list(); l[0].Hub == nil || l[0].Hub.State != "local-only" {
		t.Fatalf("list without a Work: %+v", l[0].Hub)
	}
	e.write("b.txt", "b")
	if _, err := e.capture(c); err != nil {
		t.Fatal(err)
	}
	e.write("c.txt", "c")
	inc, out := e.captureUpload(c, hubremote.New(client.NewLocal(e.svc, e.p, "proj"), "wt-1"))
	if inc.Position != 2 || fmt.Sprint(out.Uploaded) != "[0 1 2]" {
		t.Fatalf("with a Work: %+v %+v", inc, out)
	}
	got, _ := e.hubReplay()
	if pos := e.hubPositions(); fmt.Sprint(pos) != "[0 1 2]" || !sameFiles(got, files(t, e.root)) {
		t.Fatalf("hub positions %v, replay %v", pos, got)
	}
}

// A hook killed between storing its increment and uploading it, and one
// killed after the Hub stored a position but before the queue file said
// so: the next run uploads each position exactly once, in order.
func TestUploadCrashes(t *testing.T) {
	e := newEnv(t, nil)
	r := e.httpRemote()
	c := e.open()
	e.write("a.txt", "a")
	e.captureUpload(c, r)
	e.write("b.txt", "b")
	e.crash("stored", 0)
	if got := e.localPositions(); fmt.Sprint(got) != "[0 1]" {
		t.Fatalf("local positions after the crash: %v", got)
	}
	if pos := e.hubPositions(); fmt.Sprint(pos) != "[0]" {
		t.Fatalf("hub positions after the crash: %v", pos)
	}
	e.write("c.txt", "c")
	if _, err := e.capture(c); err != nil {
		t.Fatal(err)
	}
	e.crash("uploaded", 2) // killed once the Hub holds 1
	if pos := e.hubPositions(); fmt.Sprint(pos) != "[0 1]" {
		t.Fatalf("hub positions after the second crash: %v", pos)
	}
	ctx := context.Background()
	out, err := c.Upload(ctx, r, changelog.UploadOptions{Through: 2})
	if err != nil || fmt.Sprint(out.Uploaded) != "[1 2]" || out.Pending != 0 {
		t.Fatalf("upload after the crashes: %+v %v", out, err)
	}
	got, list := e.hubReplay()
	if len(list) != 3 || !sameFiles(got, files(t, e.root)) {
		t.Fatalf("hub %d increments, replay %v", len(list), got)
	}
	for i, in := range list {
		if in.Position != i {
			t.Fatalf("hub order: %+v", list)
		}
	}
}

// Two processes running the queue at once upload each position once.
func TestConcurrentUploads(t *testing.T) {
	e := newEnv(t, nil)
	c := e.open()
	for _, n := range []string{"a", "b", "c", "d", "e", "f"} {
		e.write(n, n)
		if _, err := e.capture(c); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			out, err := e.open().Upload(context.Background(), e.httpRemote(), changelog.UploadOptions{Through: 5})
			if err == nil && out.Err != "" {
				err = errors.New(out.Err)
			}
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if pos := e.hubPositions(); fmt.Sprint(pos) != "[0 1 2 3 4 5]" {
		t.Fatalf("hub positions: %v", pos)
	}
}

// A position whose session id the Hub refuses (a/b: api.ValidSessionID) is
// not left waiting for ever, holding back every later position: it is
// merged into the next upload, at once, with the refusal as the reason.
func TestRefusedSessionIDMergesIntoNextUpload(t *testing.T) {
	e := newEnv(t, nil)
	r := e.httpRemote()
	c := e.open()
	capture := func(session, name string) (*changelog.Increment, *changelog.UploadOutcome) {
		t.Helper()
		e.write(name, name)
		inc, err := c.Capture(context.Background(), changelog.CaptureRequest{Position: -1, SessionID: session, Tool: "Bash"})
		if err != nil {
			t.Fatal(err)
		}
		out, err := c.Upload(context.Background(), r, changelog.UploadOptions{Through: inc.Position})
		if err != nil {
			t.Fatal(err)
		}
		return inc, out
	}
	if _, out := capture("native-1", "a.txt"); fmt.Sprint(out.Uploaded) != "[0]" {
		t.Fatalf("first capture: %+v", out)
	}
	if _, out := capture("a/b", "b.txt"); fmt.Sprint(out.Refused) != "[1]" || out.Err != "" || out.Pending != 0 {
		t.Fatalf("capture of session a/b: %+v", out)
	}
	_, out := capture("native-1", "c.txt")
	if fmt.Sprint(out.Uploaded) != "[2]" || len(out.Merged) != 1 || out.Merged[0].From != 1 || out.Merged[0].To != 1 ||
		!strings.Contains(out.Merged[0].Reason, "not a session id the Hub accepts") {
		t.Fatalf("the next capture: %+v", out)
	}
	got, _ := e.hubReplay()
	if pos := e.hubPositions(); fmt.Sprint(pos) != "[0 2]" || !sameFiles(got, files(t, e.root)) {
		t.Fatalf("hub positions %v, replay %v, checkout %v", pos, got, files(t, e.root))
	}
}
