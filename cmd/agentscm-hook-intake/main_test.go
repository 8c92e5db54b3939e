package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/source"
	"github.com/agentscm/agentscm/internal/spool"
)

// TestLinksOnlyTheIntake keeps the intake binary small: it links the
// capture and the spool, and neither the Hub's store or client, nor the
// changelog, nor the pages or the CLI.
func TestLinksOnlyTheIntake(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, want := range []string{"github.com/agentscm/agentscm/internal/capture", "github.com/agentscm/agentscm/internal/hookcore", "github.com/agentscm/agentscm/internal/connections"} {
		if !slices.Contains(deps, want) {
			t.Errorf("agentscm-hook-intake does not link %s", want)
		}
	}
	for _, d := range deps {
		for _, banned := range []string{
			"github.com/agentscm/agentscm/internal/client",
			"github.com/agentscm/agentscm/internal/delivery",
			"github.com/agentscm/agentscm/internal/hookrun",
			"github.com/agentscm/agentscm/internal/changelog",
			"github.com/agentscm/agentscm/internal/hub/store",
			"github.com/agentscm/agentscm/internal/cli",
			"github.com/agentscm/agentscm/internal/localui",
			"modernc.org/sqlite",
			"modernc.org/libc",
			"github.com/jackc/pgx",
			"github.com/minio/minio-go",
			"github.com/fsnotify/fsnotify",
			"github.com/klauspost/compress",
			"html/template",
			"flag",
		} {
			if d == banned || strings.HasPrefix(d, banned+"/") {
				t.Errorf("agentscm-hook-intake links %s", d)
			}
		}
	}
}

// TestArgs: usage on bad arguments (exit 2), help on stdout (exit 0); a
// route that runs the changelog is handed to the full hook binary (here
// missing: one warning line, exit 0, as every hook fails open).
func TestArgs(t *testing.T) {
	for _, c := range []struct {
		args     []string
		code     int
		out, err string
	}{
		{[]string{"--help"}, 0, "agentscm-hook-intake change-capture hook-claude", ""},
		{nil, 2, "", "Usage:"},
		{[]string{"change-capture", "hook-claude", "--verbose"}, 2, "", "Usage:"},
		{[]string{"change-capture", "hook-claude", "--changelog"}, 0, "", "agentscm: warning: change-capture hook-claude --changelog: run it with /nonexistent/agentscm-hook: "},
		{[]string{"changelog", "hook-codex"}, 0, "", "agentscm: warning: changelog hook-codex: run it with /nonexistent/agentscm-hook: "},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), c.args, strings.NewReader(""), &out, &errb, func(string) string { return "" }, time.Now, "/nonexistent/agentscm-hook")
		if code != c.code || !strings.Contains(out.String(), c.out) || !strings.Contains(errb.String(), c.err) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", c.args, code, out.String(), errb.String())
		}
	}
}

type fixture struct {
	bin, root, config, spool string
}

// build builds agentscm, agentscm-hook and agentscm-hook-intake into one
// directory, as the README's install does.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bin")
	cmd := exec.Command("go", "build", "-o", bin+string(filepath.Separator),
		"github.com/agentscm/agentscm/cmd/agentscm", "github.com/agentscm/agentscm/cmd/agentscm-hook", "github.com/agentscm/agentscm/cmd/agentscm-hook-intake")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// newFixture sets a checkout up the one-step way (enable --local, a
// current Work) with the binaries of bin.
func newFixture(t *testing.T, bin string) *fixture {
	dir := t.TempDir()
	f := &fixture{bin: bin, root: filepath.Join(dir, "repo"), config: filepath.Join(dir, "config")}
	if err := os.MkdirAll(f.root, 0o755); err != nil {
		t.Fatal(err)
	}
	out := f.agentscm(t, "change-capture", "enable", "--root", f.root, "--local", "--format", "json")
	var res struct {
		Spool string `json:"spool"`
	}
	if i := strings.IndexByte(out, '{'); i < 0 || json.Unmarshal([]byte(out[i:]), &res) != nil || res.Spool == "" {
		t.Fatalf("enable output: %s", out)
	}
	f.spool = res.Spool
	f.agentscm(t, "work", "start", "--root", f.root, "--title", "intake")
	t.Cleanup(func() { f.waitDeliverer(t) })
	return f
}

func (f *fixture) env() []string {
	return append(os.Environ(), "XDG_CONFIG_HOME="+f.config, "HOME="+filepath.Dir(f.config))
}

func (f *fixture) agentscm(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(f.bin, "agentscm"), args...)
	cmd.Env = f.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("agentscm %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// hook runs the hook binary exe on a new PreToolUse of id and returns its
// stderr; it fails the test unless the hook exited 0 with nothing on
// stdout.
func (f *fixture) hook(t *testing.T, exe, id string, extraEnv ...string) string {
	t.Helper()
	cmd := exec.Command(exe, "change-capture", "hook-claude")
	cmd.Env = append(f.env(), extraEnv...)
	cmd.Stdin = strings.NewReader(`{"session_id":"intake-test","cwd":"` + f.root + `","hook_event_name":"PreToolUse","tool_name":"Read","tool_use_id":"` + id + `","tool_input":{"file_path":"/etc/hostname"}}`)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil || out.Len() > 0 {
		t.Errorf("hook %s: %v, stdout %q, stderr %q", id, err, out.String(), errb.String())
	}
	return errb.String()
}

func (f *fixture) waitDeliverer(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := (capture.StateDir{Dir: filepath.Join(f.config, "agentscm")}).WaitDeliverer(ctx, f.spool); err != nil {
		t.Fatal(err)
	}
}

// delivered returns how often each tool_use_id's start is in the spool, the
// intake files left and the envelopes the Hub has not acknowledged.
func (f *fixture) delivered(t *testing.T) (map[string]int, int, int) {
	t.Helper()
	f.waitDeliverer(t)
	sp, err := spool.OpenReadOnly(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := sp.Events()
	if err != nil {
		t.Fatal(err)
	}
	starts := map[string]int{}
	for _, e := range evs {
		if e.Kind == event.ToolStart {
			starts[e.ToolUseID]++
		}
	}
	rep, err := spool.Inspect(f.spool, 1)
	if err != nil {
		t.Fatal(err)
	}
	return starts, rep.Intake, rep.Pending.Total + rep.Deferred.Total
}

// The installed intake hook, as Claude Code runs it: enable installs it on
// the capture-only events when it sits next to agentscm-hook; concurrent
// intake hooks each exit 0 silently and every event reaches the Hub
// exactly once through the deliverer started from agentscm-hook; an event
// whose intake write fails is run by agentscm-hook (exec, same payload),
// which appends it under the lock and delivers it; with no agentscm-hook
// next to it, the event stays durable in the intake, the hook says why on
// stderr, and the next hook of the full binary delivers it.
func TestIntakeHook(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	bin := build(t)
	f := newFixture(t, bin)
	intake := filepath.Join(bin, "agentscm-hook-intake")

	settings, err := os.ReadFile(filepath.Join(f.root, ".claude", "settings.local.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(settings), intake+" change-capture hook-claude") {
		t.Fatalf("enable did not install the intake binary:\n%s", settings)
	}

	var wg sync.WaitGroup
	var mu sync.Mutex
	var warned []string
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if w := f.hook(t, intake, fmt.Sprintf("toolu_c%02d", i)); w != "" {
				mu.Lock()
				warned = append(warned, w)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(warned) > 0 {
		t.Errorf("concurrent intake hooks warned: %q", warned)
	}
	// A failed intake write: the full hook binary takes the event over.
	if w := f.hook(t, intake, "toolu_eio", spool.FailpointEnv+"=intake=eio"); w != "" {
		t.Errorf("the hook whose intake write failed warned: %q", w)
	}
	starts, left, pending := f.delivered(t)
	for i := range 16 {
		if id := fmt.Sprintf("toolu_c%02d", i); starts[id] != 1 {
			t.Errorf("%s retained %d times, want once", id, starts[id])
		}
	}
	if starts["toolu_eio"] != 1 {
		t.Errorf("the event whose intake write failed is retained %d times, want once", starts["toolu_eio"])
	}
	if left != 0 || pending != 0 {
		t.Errorf("%d intake files and %d undelivered envelopes left", left, pending)
	}

	// Without agentscm-hook next to it: durable in the intake, said on
	// stderr, delivered by the next full hook.
	alone := filepath.Join(t.TempDir(), "agentscm-hook-intake")
	b, err := os.ReadFile(intake)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alone, b, 0o755); err != nil {
		t.Fatal(err)
	}
	w := f.hook(t, alone, "toolu_alone")
	if !strings.Contains(w, "agentscm: warning: event retained locally, delivery pending: start the background deliverer") {
		t.Errorf("the intake hook without agentscm-hook said %q", w)
	}
	if strings.Count(w, "\n") != 1 {
		t.Errorf("want one warning line, got %q", w)
	}
	if _, left, _ := f.delivered(t); left != 1 {
		t.Errorf("%d intake files wait, want the one event", left)
	}
	f.hook(t, filepath.Join(bin, "agentscm-hook"), "toolu_full")
	starts, left, pending = f.delivered(t)
	if starts["toolu_alone"] != 1 || starts["toolu_full"] != 1 || left != 0 || pending != 0 {
		t.Errorf("after a full hook: alone %d, full %d, %d intake files, %d undelivered", starts["toolu_alone"], starts["toolu_full"], left, pending)
	}
}

// A burst of 120 concurrent real intake hooks (on 8 sessions), about one
// in five killed with SIGKILL at a random moment, and one deliverer at a
// time started from agentscm-hook: every hook that exited 0 has its event
// in the spool exactly once, and once the deliverers are done nothing waits
// in the intake and the Hub acknowledged every envelope.
func TestIntakeBurstWithKills(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	bin := build(t)
	f := newFixture(t, bin)
	intake := filepath.Join(bin, "agentscm-hook-intake")
	const n = 120
	var mu sync.Mutex
	exited0 := map[string]bool{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		id := fmt.Sprintf("toolu_k%04d", i)
		kill := rand.IntN(5) == 0
		delay := time.Duration(rand.IntN(30)) * time.Millisecond
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(intake, "change-capture", "hook-claude")
			cmd.Env = f.env()
			cmd.Stdin = strings.NewReader(`{"session_id":"burst-` + fmt.Sprint(i%8) + `","cwd":"` + f.root + `","hook_event_name":"PreToolUse","tool_name":"Read","tool_use_id":"` + id + `","tool_input":{"file_path":"/etc/hostname"}}`)
			<-start
			if err := cmd.Start(); err != nil {
				t.Error(err)
				return
			}
			if kill {
				time.AfterFunc(delay, func() { cmd.Process.Signal(syscall.SIGKILL) })
			}
			if cmd.Wait() == nil {
				mu.Lock()
				exited0[id] = true
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	// A killed writer's temporary waits until it is old enough to be known
	// dead; later hooks and deliverers admit the rest.
	var starts map[string]int
	var left, pending int
	for i := range 20 {
		starts, left, pending = f.delivered(t)
		if left == 0 && pending == 0 {
			break
		}
		time.Sleep(time.Second)
		f.hook(t, intake, fmt.Sprintf("toolu_after%02d", i))
	}
	for id := range exited0 {
		if starts[id] != 1 {
			t.Errorf("hook %s exited 0 but its event is retained %d times", id, starts[id])
		}
	}
	for id, c := range starts {
		if c > 1 {
			t.Errorf("event %s retained %d times", id, c)
		}
	}
	if left != 0 || pending != 0 {
		t.Errorf("%d intake files and %d undelivered envelopes left", left, pending)
	}
	t.Logf("%d hooks, %d exited 0", n, len(exited0))
	if len(exited0) < n/2 {
		t.Fatalf("only %d of %d hooks exited 0", len(exited0), n)
	}
}

// newDirtyFixture is newFixture on a Git checkout with one commit and its
// Work's id, for the source binding of Bash actions (the rule enable
// installs).
func newDirtyFixture(t *testing.T, bin string) (*fixture, string) {
	dir := t.TempDir()
	f := &fixture{bin: bin, root: filepath.Join(dir, "repo"), config: filepath.Join(dir, "config")}
	if err := os.MkdirAll(f.root, 0o755); err != nil {
		t.Fatal(err)
	}
	f.git(t, "init", "-q", "-b", "main")
	f.write(t, "tracked.txt", "committed\n")
	f.git(t, "add", "tracked.txt")
	f.git(t, "-c", "user.email=t@example.invalid", "-c", "user.name=t", "commit", "-qm", "one")
	out := f.agentscm(t, "change-capture", "enable", "--root", f.root, "--local", "--format", "json")
	var res struct {
		Spool string `json:"spool"`
	}
	if i := strings.IndexByte(out, '{'); i < 0 || json.Unmarshal([]byte(out[i:]), &res) != nil || res.Spool == "" {
		t.Fatalf("enable output: %s", out)
	}
	f.spool = res.Spool
	out = f.agentscm(t, "work", "start", "--root", f.root, "--title", "dirty", "--format", "json")
	var w struct {
		WorkID string `json:"id"`
	}
	if i := strings.IndexByte(out, '{'); i < 0 || json.Unmarshal([]byte(out[i:]), &w) != nil || w.WorkID == "" {
		t.Fatalf("work start output: %s", out)
	}
	t.Cleanup(func() { f.waitDeliverer(t) })
	return f, w.WorkID
}

func (f *fixture) git(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = f.root
	cmd.Env = f.env()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

func (f *fixture) write(t *testing.T, rel, content string) {
	t.Helper()
	p := filepath.Join(f.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// bash runs exe on the PreToolUse (post false) or PostToolUse of a Bash
// call id and returns its stderr, failing the test unless the hook exited 0
// with nothing on stdout (or, when killed, it was killed by SIGKILL).
func (f *fixture) bash(t *testing.T, exe, id string, post bool, extraEnv ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command(exe, "change-capture", "hook-claude")
	cmd.Env = append(f.env(), extraEnv...)
	p := `{"session_id":"dirty-test","cwd":"` + f.root + `","hook_event_name":"PreToolUse","tool_name":"Bash","tool_use_id":"` + id + `","tool_input":{"command":"true"}}`
	if post {
		p = `{"session_id":"dirty-test","cwd":"` + f.root + `","hook_event_name":"PostToolUse","tool_name":"Bash","tool_use_id":"` + id + `","tool_input":{"command":"true"},"tool_response":{"stdout":"","stderr":"","interrupted":false}}`
	}
	cmd.Stdin = strings.NewReader(p)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
		return errb.String(), true
	}
	if err != nil || out.Len() > 0 {
		t.Errorf("hook %s: %v, stdout %q, stderr %q", id, err, out.String(), errb.String())
	}
	return errb.String(), false
}

// starts returns the source binding of each action start in the spool, by
// tool_use_id.
func (f *fixture) starts(t *testing.T) map[string]*event.SourceBinding {
	t.Helper()
	f.waitDeliverer(t)
	sp, err := spool.OpenReadOnly(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := sp.Events()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*event.SourceBinding{}
	for _, e := range evs {
		if e.Kind == event.ActionStart && e.Action != nil {
			out[e.ToolUseID] = e.Action.Source
		}
	}
	return out
}

// checkRetained fails unless sb retained the dirty bytes and every working
// file of its manifest reads back from the spool, one of them holding want.
func checkRetained(t *testing.T, spoolDir string, sb *event.SourceBinding, want string) {
	t.Helper()
	b, _ := json.Marshal(sb)
	if sb == nil || !sb.Dirty || !sb.Retained || sb.ManifestDigest == "" || sb.Stopped != "" || slices.Contains(sb.Omissions, source.OmissionNotRetained) {
		t.Fatalf("the action start did not retain the dirty bytes: %s", b)
	}
	sp, err := spool.OpenReadOnly(spoolDir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := source.ReadManifest(sp, sb)
	if err != nil {
		t.Fatalf("manifest of %s: %v", b, err)
	}
	found := false
	for _, e := range m.Entries {
		if e.Kind != "file" {
			continue
		}
		body, err := sp.ReadBlob(event.ArtifactRef{Digest: "sha256:" + e.SHA256, Bytes: e.Size})
		if err != nil {
			t.Fatalf("%s: %v", e.Path, err)
		}
		found = found || strings.Contains(string(body), want)
	}
	if !found {
		t.Fatalf("no retained working file holds %q (manifest %+v)", want, m.Entries)
	}
}

// The installed intake hook on a dirty checkout retains the working bytes
// it binds: the action start says retained (no bytes_not_retained), the
// manifest and the bytes read back from the spool, show says they are kept
// in the private spool, and an export of the spool holds them. Concurrent
// intake hooks binding the same bytes all retain them (the same staged
// blob); nothing stays staged once they are admitted.
func TestIntakeHookRetainsDirtySource(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	bin := build(t)
	f, work := newDirtyFixture(t, bin)
	intake := filepath.Join(bin, "agentscm-hook-intake")
	const secret = "DIRTY-BYTES-5c1e-retained"
	f.write(t, "tracked.txt", "edited "+secret+"\n")
	f.write(t, "notes/untracked.txt", "untracked "+secret+"\n")
	// Too large for the intake record: staged as a file of its own, by
	// every concurrent hook at once.
	f.write(t, "notes/large.txt", strings.Repeat("large "+secret+"\n", 4000))

	f.bash(t, intake, "toolu_d0", false)
	f.bash(t, intake, "toolu_d0", true)
	var wg sync.WaitGroup
	for i := 1; i <= 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.bash(t, intake, fmt.Sprintf("toolu_d%d", i), false)
		}()
	}
	wg.Wait()
	starts := f.starts(t)
	for i := 0; i <= 8; i++ {
		checkRetained(t, f.spool, starts[fmt.Sprintf("toolu_d%d", i)], secret)
	}
	if sb := starts["toolu_d0"]; sb.ManifestDigest != starts["toolu_d8"].ManifestDigest {
		t.Errorf("the same worktree bound to two manifests: %s, %s", sb.ManifestDigest, starts["toolu_d8"].ManifestDigest)
	}
	if names, _ := os.ReadDir(filepath.Join(f.spool, "intake-blobs")); len(names) != 0 {
		t.Errorf("%d staged files left after admission", len(names))
	}

	text := f.agentscm(t, "change-capture", "show", "--root", f.root, "--work-id", work, "--verbose")
	if !strings.Contains(text, "kept in the private spool") || strings.Contains(text, source.OmissionNotRetained) {
		t.Errorf("show does not say the bytes are kept:\n%s", text)
	}
	dest := filepath.Join(t.TempDir(), "export")
	f.agentscm(t, "change-capture", "export", "--spool", f.spool, "--destination", dest)
	arts, err := filepath.Glob(filepath.Join(dest, "spool", "artifacts", "*.art"))
	if err != nil {
		t.Fatal(err)
	}
	exported := 0
	for _, a := range arts {
		if b, err := os.ReadFile(a); err == nil && bytes.Contains(b, []byte(secret)) {
			exported++
		}
	}
	if exported != 3 {
		t.Errorf("the export holds %d artifacts with the dirty bytes, want 3 (of %d)", exported, len(arts))
	}
}

// A hook killed at each point of its blob write (temporary file written,
// synced, renamed, the directory synced) leaves no corrupt blob and no
// record naming a missing one: the next hook's start retains the same
// bytes, every retained artifact verifies, and a start of the killed hook,
// if its intake write had completed, retained its bytes too.
func TestIntakeHookKilledDuringBlobWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	bin := build(t)
	intake := filepath.Join(bin, "agentscm-hook-intake")
	for _, fp := range []string{"stage.blob.temp-written", "stage.blob.temp-synced", "stage.blob.renamed", "stage.synced"} {
		t.Run(fp, func(t *testing.T) {
			f, _ := newDirtyFixture(t, bin)
			secret := "KILLED-" + fp
			// Large enough to be staged, not kept in the intake record.
			f.write(t, "tracked.txt", strings.Repeat("edited "+secret+"\n", 4000))
			if _, killed := f.bash(t, intake, "toolu_killed", false, spool.FailpointEnv+"="+fp); !killed {
				t.Fatalf("the hook was not killed at %s", fp)
			}
			f.bash(t, intake, "toolu_next", false)
			starts := f.starts(t)
			// A killed writer's fully written intake temporary may be
			// completed once it is old enough; its start then retained
			// the bytes too, never a reference to a missing blob.
			if sb, ok := starts["toolu_killed"]; ok {
				checkRetained(t, f.spool, sb, secret)
			}
			checkRetained(t, f.spool, starts["toolu_next"], secret)
			rep, err := spool.Inspect(f.spool, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Problems) > 0 {
				t.Errorf("inspect problems %v", rep.Problems)
			}
			arts, _ := filepath.Glob(filepath.Join(f.spool, "artifacts", "*"))
			for _, a := range arts {
				n := filepath.Base(a)
				b, err := os.ReadFile(a)
				if err != nil {
					t.Fatal(err)
				}
				i := bytes.IndexByte(b, '\n')
				sum := sha256.Sum256(b[i+1:])
				if i < 0 || !strings.HasPrefix(n, hex.EncodeToString(sum[:])+"-") {
					t.Errorf("artifact %s does not hold its digest's bytes", n)
				}
			}
		})
	}
}

// A dirty file above the spool's per-artifact limit: the intake hook's
// start names the refusal (stopped spool_refused, no manifest identity,
// partial), nothing is staged, and show says capture stopped, never that
// bytes are kept.
func TestIntakeHookBlobRefusedByLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	bin := build(t)
	f, work := newDirtyFixture(t, bin)
	sp, err := spool.Open(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sp.SetLimits(context.Background(), spool.Limits{ArtifactBytes: 4096}); err != nil {
		t.Fatal(err)
	}
	f.write(t, "tracked.txt", strings.Repeat("too large for the per-artifact limit\n", 200))
	f.bash(t, filepath.Join(bin, "agentscm-hook-intake"), "toolu_big", false)
	sb := f.starts(t)["toolu_big"]
	b, _ := json.Marshal(sb)
	if sb == nil || sb.Stopped != source.StopSpoolRefused || sb.ManifestDigest != "" || sb.Retained || !sb.Partial {
		t.Fatalf("the refused start: %s", b)
	}
	if names, _ := os.ReadDir(filepath.Join(f.spool, "intake-blobs")); len(names) != 0 {
		t.Errorf("%d staged files after a refusal", len(names))
	}
	text := f.agentscm(t, "change-capture", "show", "--root", f.root, "--work-id", work, "--verbose")
	if !strings.Contains(text, "capture stopped: spool_refused") || strings.Contains(text, "kept in the private spool") {
		t.Errorf("show does not name the refusal:\n%s", text)
	}
}

// TestSiblingOfAnotherBuild: an intake hook whose agentscm-hook is of
// another build says so in its one warning line on SessionStart, still
// exits 0 with nothing on stdout, and still captures the event; with
// binaries of one build it says nothing.
func TestSiblingOfAnotherBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	bin := build(t)
	f := newFixture(t, bin)
	intake := filepath.Join(bin, "agentscm-hook-intake")
	start := func(session string) string {
		t.Helper()
		cmd := exec.Command(intake, "change-capture", "hook-claude")
		cmd.Env = f.env()
		cmd.Stdin = strings.NewReader(`{"session_id":"` + session + `","cwd":"` + f.root + `","hook_event_name":"SessionStart","source":"startup"}`)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil || out.Len() > 0 {
			t.Fatalf("hook: %v, stdout %q, stderr %q", err, out.String(), errb.String())
		}
		return errb.String()
	}
	if w := start("same-build"); w != "" {
		t.Fatalf("binaries of one build: the hook warned %q", w)
	}
	f.waitDeliverer(t)
	other := exec.Command("go", "build", "-ldflags", "-X github.com/agentscm/agentscm/internal/buildinfo.Stamp=other-build",
		"-o", filepath.Join(bin, "agentscm-hook"), "github.com/agentscm/agentscm/cmd/agentscm-hook")
	other.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := other.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	w := start("other-build")
	if strings.Count(w, "\n") != 1 || !strings.HasPrefix(w, "agentscm: warning: ") ||
		!strings.Contains(w, filepath.Join(bin, "agentscm-hook")+" is another build (") || !strings.Contains(w, "build other-build") {
		t.Fatalf("stderr = %q, want one warning line naming the other build", w)
	}
	f.waitDeliverer(t)
	sp, err := spool.OpenReadOnly(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := sp.Events()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs {
		if e.SessionID == "other-build" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d events of the session retained, want its SessionStart", n)
	}
}
