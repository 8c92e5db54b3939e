package recipe_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/action"
	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/cli"
	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/connections"
	"github.com/agentscm/agentscm/internal/delivery"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/hookrun"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/recipe"
	"github.com/agentscm/agentscm/internal/spool"
)

// The helper process: the real CLI run-recipe (signal handling, exit
// status) in a child process a test can SIGKILL or SIGTERM.
func TestMain(m *testing.M) {
	if os.Getenv("RECIPE_TEST_HELPER") == "1" {
		if err := os.Chdir(os.Getenv("RECIPE_TEST_CWD")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(99)
		}
		os.Exit(cli.Main(context.Background(), cli.OSEnv(), strings.Fields(os.Getenv("RECIPE_TEST_ARGS"))))
	}
	os.Exit(m.Run())
}

const session = "native-1"

type fixture struct {
	t       testing.TB
	dir     string
	cfg     string
	root    string
	spool   string
	exe     string
	store   capture.StateDir
	conn    connections.Connection
	work    string
	recipes map[string]binding.Recipe
	n       int
}

type recipeDef struct {
	id      string
	argv    []string
	timeout int
	max     int64
}

func newFixture(t testing.TB, defs ...recipeDef) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{t: t, dir: dir, cfg: filepath.Join(dir, "cfg", "agentscm"), root: filepath.Join(dir, "repo"), spool: filepath.Join(dir, "spool"),
		exe: "/opt/agent scm/bin/agentscm", recipes: map[string]binding.Recipe{}}
	os.MkdirAll(f.root, 0o755)
	f.root, _ = filepath.EvalSymlinks(f.root)
	for _, args := range [][]string{{"init", "-q"}, {"-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "--allow-empty", "-m", "init"}} {
		if out, err := exec.Command("git", append([]string{"-C", f.root}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	f.store = capture.StateDir{Dir: f.cfg}
	ctx := context.Background()
	c, _, err := client.SetupLocal(ctx, f.cfg, f.root, "demo", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	f.conn = c
	var files []string
	for _, d := range defs {
		b, _ := json.Marshal(map[string]any{"id": d.id, "argv": d.argv, "coverage": "complete", "timeout_seconds": d.timeout, "max_output_bytes": d.max})
		p := filepath.Join(dir, d.id+".json")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	_, err = binding.Configure(ctx, f.store, delivery.Connections{ConfigDir: f.cfg}, binding.ConfigureOptions{Root: f.root, Spool: f.spool,
		RecipeFiles: files, ActionRules: []string{"Bash=execution:partial:process_exit_code"}, Executable: f.exe, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := f.store.Bindings().Load()
	for _, r := range cfg.Find(f.root).Recipes {
		f.recipes[r.ID] = r
	}
	conn, err := client.Open(ctx, f.conn, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	w, err := conn.StartWork(ctx, api.StartWorkRequest{Title: "t", WorktreeID: f.conn.WorktreeID})
	if err != nil {
		t.Fatal(err)
	}
	f.work = w.ID
	return f
}

func (f *fixture) hook(event, extra string) *capture.HookResult {
	f.t.Helper()
	p := `{"session_id":"` + session + `","cwd":"` + f.root + `","hook_event_name":"` + event + `"` + extra + `}`
	res, err := capture.HandleClaudeHook(context.Background(), f.store, delivery.Opener{ConfigDir: f.cfg}, strings.NewReader(p), time.Now())
	if err != nil {
		f.t.Fatal(err)
	}
	return res
}

func (f *fixture) command(id string) string {
	return capture.RunnerCommand(f.exe, id)
}

func bashInput(cmd string) string {
	b, _ := json.Marshal(map[string]any{"command": cmd, "description": "run the recipe"})
	return string(b)
}

// pre runs the PreToolUse hook of a Bash call of cmd and returns its
// tool_use_id.
func (f *fixture) pre(cmd string) string {
	f.t.Helper()
	f.n++
	tu := fmt.Sprintf("toolu_%d", f.n)
	res := f.hook("PreToolUse", `,"tool_name":"Bash","tool_use_id":"`+tu+`","tool_input":`+bashInput(cmd))
	if res.Deferred {
		f.t.Fatalf("PreToolUse deferred: %+v", res)
	}
	return tu
}

func (f *fixture) post(tu, cmd string) *capture.HookResult {
	f.t.Helper()
	return f.hook("PostToolUse", `,"tool_name":"Bash","tool_use_id":"`+tu+`","tool_input":`+bashInput(cmd)+`,"tool_response":{"stdout":"","stderr":"","interrupted":false}`)
}

func (f *fixture) env(extra map[string]string) func(string) (string, bool) {
	m := map[string]string{"CLAUDECODE": "1", "CLAUDE_CODE_SESSION_ID": session, "PATH": "/usr/bin:/bin", "HOME": f.dir,
		"LANG": "C.UTF-8", "SECRET_TOKEN": "must-not-leak", "CARGO_HOME": "/nonexistent/cargo"}
	for k, v := range extra {
		if v == "" {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func (f *fixture) run(id string, o func(*recipe.Options)) (*recipe.Receipt, error, string, string) {
	f.t.Helper()
	var out, errb bytes.Buffer
	opts := recipe.Options{Store: f.store, Hubs: delivery.Opener{ConfigDir: f.cfg}, ID: id, Cwd: f.root, LookupEnv: f.env(nil),
		Stdout: &out, Stderr: &errb}
	if o != nil {
		o(&opts)
	}
	rc, err := recipe.Run(context.Background(), opts)
	return rc, err, out.String(), errb.String()
}

func (f *fixture) record() api.ChangeRecord {
	f.t.Helper()
	conn, err := client.Open(context.Background(), f.conn, client.Options{})
	if err != nil {
		f.t.Fatal(err)
	}
	defer conn.Close()
	r, err := conn.Record(context.Background(), f.work)
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

// spoolActions returns the action records of the spool.
func (f *fixture) spoolActions() []event.Record {
	f.t.Helper()
	var out []event.Record
	recs, err := readSpool(f.spool)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, r := range recs {
		if r.Action != nil {
			out = append(out, r)
		}
	}
	return out
}

// checkOutputs: the run's stdout and stderr live in the spool (artifacts
// read back verified, named by the finish record in the spool and by the
// run receipt) and nowhere beside the markers; stdout is exactly what was
// visible, stderr ends with what the child wrote (the runner's summary
// line follows it on the visible stream).
func (f *fixture) checkOutputs(rc *recipe.Receipt, stdout, stderr string) {
	f.t.Helper()
	sp, err := spool.Open(f.spool)
	if err != nil {
		f.t.Fatal(err)
	}
	var fin *event.Action
	for _, r := range f.spoolActions() {
		if r.Kind == event.ActionFinish && r.Action.ID == rc.ActionID {
			fin = r.Action
		}
	}
	if fin == nil || fin.Output == nil {
		f.t.Fatalf("the finish in the spool names no output: %+v", fin)
	}
	for i, o := range []recipe.Output{rc.Stdout, rc.Stderr} {
		ref := fin.Output.Stdout
		if i == 1 {
			ref = fin.Output.Stderr
		}
		if o.Artifact == nil || *o.Artifact != ref || ref.Availability != event.AvailabilityRetained || o.Path != "" || o.NotRetained != "" || ref.Bytes != o.Bytes {
			f.t.Fatalf("stream %d: receipt %+v, finish %+v", i, o, ref)
		}
		b, err := sp.ReadBlob(ref)
		if err != nil {
			f.t.Fatalf("stream %d: %v", i, err)
		}
		if i == 0 && string(b) != stdout || i == 1 && !strings.HasPrefix(stderr, string(b)) {
			f.t.Fatalf("stream %d retained %q, visible %q / %q", i, b, stdout, stderr)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(f.managedDir(), rc.ActionID+".std*")); len(left) != 0 {
		f.t.Fatalf("output copies outside the spool: %v", left)
	}
}

// managedDir is the directory of the markers and run receipts.
func (f *fixture) managedDir() string {
	f.t.Helper()
	ms, err := f.store.OpenManaged(f.binding())
	if err != nil {
		f.t.Fatal(err)
	}
	return ms.Dir()
}

func readSpool(dir string) ([]event.Record, error) {
	sp, err := spool.Open(dir)
	if err != nil {
		return nil, err
	}
	return sp.Events()
}

func (f *fixture) binding() *binding.Binding {
	cfg, err := f.store.Bindings().Load()
	if err != nil {
		f.t.Fatal(err)
	}
	return cfg.Find(f.root)
}

func hubAction(t *testing.T, rec api.ChangeRecord, id string) *api.ActionRecord {
	t.Helper()
	for i := range rec.Actions {
		if rec.Actions[i].ActionID == id {
			return &rec.Actions[i]
		}
	}
	b, _ := json.Marshal(rec.Actions)
	t.Fatalf("no Hub action %s: %s", id, b)
	return nil
}

// TestRunRecipeResults: a passing and a failing child give the single
// verification action with passed / failed from the child's real status,
// the Bash hooks keep their lifecycle events but record no generic action,
// the child's environment holds only the allowlist, and the bounded
// output copies are retained.
func TestRunRecipeResults(t *testing.T) {
	f := newFixture(t,
		recipeDef{"env", []string{"/usr/bin/env"}, 30, 1 << 20},
		recipeDef{"fail", []string{"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, 30, 1 << 20})
	cases := []struct {
		id, verification, result string
		exit                     int
	}{
		{"env", "passed", "succeeded", 0},
		{"fail", "failed", "failed", 3},
	}
	for _, tc := range cases {
		t.Run(tc.id, func(t *testing.T) {
			cmd := f.command(tc.id)
			tu := f.pre(cmd)
			rc, err, stdout, stderr := f.run(tc.id, nil)
			if err != nil {
				t.Fatalf("run: %v (stderr %s)", err, stderr)
			}
			if rc.Verification != tc.verification || rc.Result != tc.result || rc.ExitCode == nil || *rc.ExitCode != tc.exit || rc.Stop != "" || rc.ExitStatus() != tc.exit {
				t.Fatalf("receipt %+v", rc)
			}
			if res := f.post(tu, cmd); res.Action != capture.ActionManagedPost {
				t.Fatalf("post action %q, want %q", res.Action, capture.ActionManagedPost)
			}
			want := action.ID("claude-code", session, tu)
			if rc.ActionID != want {
				t.Fatalf("action id %s, want %s", rc.ActionID, want)
			}
			f.checkOutputs(rc, stdout, stderr)
			if tc.id == "env" {
				got := strings.Fields(strings.TrimSpace(stdout))
				want := []string{"PATH=/usr/bin:/bin", "HOME=" + f.dir, "LANG=C.UTF-8", "CARGO_HOME=/nonexistent/cargo"}
				if strings.Join(got, " ") != strings.Join(want, " ") {
					t.Fatalf("child environment %q, want exactly %q", got, want)
				}
			} else if stdout != "out\n" || !strings.Contains(stderr, "err\n") {
				t.Fatalf("visible output %q / %q", stdout, stderr)
			}
			a := hubAction(t, f.record(), want)
			if a.Status != "complete" || a.Start.Class != "verification" || a.Start.Tool != "Bash" || a.Start.RecipeDigest != f.recipes[tc.id].Digest ||
				a.Start.Coverage != "complete" || a.Finish.Verification != tc.verification || a.Finish.Result != tc.result ||
				a.Finish.ExitCode == nil || *a.Finish.ExitCode != tc.exit || a.Start.Source == nil || len(a.Start.Source.Head) != 40 {
				b, _ := json.Marshal(a)
				t.Fatalf("hub action %s", b)
			}
		})
	}
	// Exactly one action per run: the generic Bash rule recorded nothing
	// for the exact runner command.
	if n := len(f.record().Actions); n != 2 {
		t.Fatalf("%d Hub actions, want 2 (no generic Bash action)", n)
	}
	// An ordinary Bash call, and the runner command with a suffix, keep
	// the generic execution action.
	for _, cmd := range []string{"true", f.command("env") + " ; true", " " + f.command("env")} {
		tu := f.pre(cmd)
		f.post(tu, cmd)
		a := hubAction(t, f.record(), action.ID("claude-code", session, tu))
		if a.Start.Class != "execution" || a.Finish.Verification != "unknown" {
			t.Fatalf("%q: %+v", cmd, a)
		}
	}
}

// TestRunRecipeStops: a timeout and an output overflow stop the child's
// process group and report incomplete, never passed; the admitted output
// prefix is exactly the bound; an executable that cannot be spawned is a
// spawn stop, incomplete too, after its durable start.
func TestRunRecipeStops(t *testing.T) {
	f := newFixture(t,
		recipeDef{"slow", []string{"/bin/sh", "-c", "echo started; sleep 37.25 & sleep 37.25; echo never"}, 1, 1 << 20},
		recipeDef{"loud", []string{"/bin/sh", "-c", "head -c 100000 /dev/zero; exit 0"}, 30, 1000},
		recipeDef{"missing", []string{"/nonexistent/bin/check"}, 30, 1000})
	for _, tc := range []struct {
		id, stop string
		exit     int
	}{{"slow", recipe.StopTimeout, 124}, {"loud", recipe.StopOutputLimit, 125}, {"missing", recipe.StopSpawn, 127}} {
		t.Run(tc.id, func(t *testing.T) {
			tu := f.pre(f.command(tc.id))
			t0 := time.Now()
			rc, err, stdout, _ := f.run(tc.id, nil)
			if err != nil {
				t.Fatal(err)
			}
			if rc.Stop != tc.stop || rc.Verification != "incomplete" || rc.Result != "incomplete" || rc.ExitStatus() != tc.exit {
				t.Fatalf("receipt %+v", rc)
			}
			if d := time.Since(t0); d > 10*time.Second {
				t.Fatalf("the stop took %s", d)
			}
			if tc.id == "loud" && (len(stdout) != 1000 || rc.Stdout.Bytes != 1000) {
				t.Fatalf("admitted %d visible / %d retained bytes, want 1000", len(stdout), rc.Stdout.Bytes)
			}
			if tc.id == "slow" && stdout != "started\n" {
				t.Fatalf("stdout %q", stdout)
			}
			f.post(tu, f.command(tc.id))
			a := hubAction(t, f.record(), rc.ActionID)
			if a.Finish == nil || a.Finish.Verification != "incomplete" || a.Finish.Result != "incomplete" {
				t.Fatalf("hub action %+v", a)
			}
		})
	}
	// No process of the stopped groups survives.
	out, _ := exec.Command("pgrep", "-f", "sleep 37.25").Output()
	if len(bytes.TrimSpace(out)) > 0 {
		time.Sleep(500 * time.Millisecond)
		if out, _ := exec.Command("pgrep", "-f", "sleep 37.25").Output(); len(bytes.TrimSpace(out)) > 0 {
			t.Fatalf("processes of the stopped group survive: %s", out)
		}
	}
}

// TestRunRecipeRefusals: every refusal runs nothing and appends nothing.
func TestRunRecipeRefusals(t *testing.T) {
	f := newFixture(t, recipeDef{"ok", []string{"/bin/sh", "-c", "touch " + "ran"}, 30, 1 << 20})
	sub := filepath.Join(f.root, "sub")
	os.Mkdir(sub, 0o755)
	cases := []struct {
		name string
		pre  bool
		id   string
		opt  func(*recipe.Options)
		want string
	}{
		{"unregistered id", true, "nope", nil, `recipe id "nope" is not registered`},
		{"not the root", true, "ok", func(o *recipe.Options) { o.Cwd = sub }, "only from the exact configured repository root"},
		{"no child marker", true, "ok", func(o *recipe.Options) { o.LookupEnv = f.env(map[string]string{"CLAUDECODE": ""}) }, "only as a command of a Claude Code session"},
		{"no session identity", true, "ok", func(o *recipe.Options) { o.LookupEnv = f.env(map[string]string{"CLAUDE_CODE_SESSION_ID": ""}) }, "session identity"},
		{"other session", true, "ok", func(o *recipe.Options) {
			o.LookupEnv = f.env(map[string]string{"CLAUDE_CODE_SESSION_ID": "native-2"})
		}, "no durable managed PreToolUse of the exact command"},
		{"no managed PreToolUse", false, "ok", nil, "no durable managed PreToolUse"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.pre {
				f.pre(f.command("ok"))
			}
			before := len(f.spoolActions())
			rc, err, _, _ := f.run(tc.id, tc.opt)
			if rc != nil {
				t.Logf("ran %+v", rc)
			}
			var ref *recipe.Refusal
			if !errors.As(err, &ref) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want a refusal with %q", err, tc.want)
			}
			if _, err := os.Stat(filepath.Join(f.root, "ran")); err == nil {
				t.Fatal("a refused run spawned the child")
			}
			if n := len(f.spoolActions()); n != before {
				t.Fatalf("a refused run appended %d action records", n-before)
			}
			if tc.pre {
				// Leave no waiting marker behind for the next case.
				f.runOK(t, "ok")
			}
		})
	}
	// Two waiting occurrences are ambiguous.
	f.pre(f.command("ok"))
	f.pre(f.command("ok"))
	if _, err, _, _ := f.run("ok", nil); err == nil || !strings.Contains(err.Error(), "ambiguous") {
		t.Fatalf("two waiting occurrences: %v", err)
	}
	// The host's tool_use_id selects its own occurrence exactly; one that
	// names no waiting occurrence is refused.
	withTU := func(tu string) func(*recipe.Options) {
		return func(o *recipe.Options) { o.LookupEnv = f.env(map[string]string{"CLAUDE_CODE_TOOL_USE_ID": tu}) }
	}
	if _, err, _, _ := f.run("ok", withTU("toolu_unknown")); err == nil || !strings.Contains(err.Error(), "no durable managed PreToolUse") {
		t.Fatalf("an unknown tool_use_id: %v", err)
	}
	rc, err, _, _ := f.run("ok", withTU(fmt.Sprintf("toolu_%d", f.n)))
	if err != nil || rc.ToolUseID != fmt.Sprintf("toolu_%d", f.n) || rc.SelectedBy != "tool_use_id" {
		t.Fatalf("selected by tool_use_id: %+v, %v", rc, err)
	}
}

func (f *fixture) runOK(t *testing.T, id string) *recipe.Receipt {
	t.Helper()
	rc, err, _, stderr := f.run(id, nil)
	if err != nil {
		t.Fatalf("run %s: %v %s", id, err, stderr)
	}
	os.Remove(filepath.Join(f.root, "ran"))
	return rc
}

// TestReplayNeverRelaunches: a retried PreToolUse of an occurrence that
// ran is a duplicate, and run-recipe never launches the child for it again.
func TestReplayNeverRelaunches(t *testing.T) {
	f := newFixture(t, recipeDef{"count", []string{"/bin/sh", "-c", "echo x >> " + filepath.Join(t.TempDir(), "n")}, 30, 1 << 20})
	cmd := f.command("count")
	tu := f.pre(cmd)
	f.runOK(t, "count")
	res := f.hook("PreToolUse", `,"tool_name":"Bash","tool_use_id":"`+tu+`","tool_input":`+bashInput(cmd))
	if !res.Duplicate {
		t.Fatalf("retried PreToolUse: %+v", res)
	}
	if _, err, _, _ := f.run("count", nil); err == nil || !strings.Contains(err.Error(), "never launched again") {
		t.Fatalf("second run of the same occurrence: %v", err)
	}
}

// helper starts the real CLI run-recipe in a child process.
func (f *fixture) helper(t *testing.T, id, failpoint string) *exec.Cmd {
	t.Helper()
	c := exec.Command(os.Args[0], "-test.run=^$")
	c.Env = []string{"RECIPE_TEST_HELPER=1", "RECIPE_TEST_CWD=" + f.root, "RECIPE_TEST_ARGS=change-capture run-recipe --id " + id,
		"XDG_CONFIG_HOME=" + filepath.Dir(f.cfg), "HOME=" + f.dir, "PATH=/usr/bin:/bin",
		"CLAUDECODE=1", "CLAUDE_CODE_SESSION_ID=" + session, recipe.FailpointEnv + "=" + failpoint}
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("runner output: %s", out.String())
		}
	})
	return c
}

func reconcile(t *testing.T, f *fixture, id string, host *recipe.HostIdentity) []recipe.Reconciled {
	t.Helper()
	o := recipe.ReconcileOptions{Store: f.store, Hubs: delivery.Opener{ConfigDir: f.cfg}, ID: id, Root: f.root}
	if host != nil {
		h := *host
		o.Host = func() recipe.HostIdentity { return h }
	}
	out, err := recipe.Reconcile(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCrashThenReconcile kills the runner process with SIGKILL at each
// injected failpoint, then reconciles: a reservation without a durable
// start is cleared (and its occurrence never runs); a durable start on the
// same boot stays unresolved and fences the Work, checkout and recipe, even
// with phase reserved; after a verified reboot the original bindings get
// an incomplete/unknown finish and the fence lifts; a foreign host stays
// unresolved; a retained finish only needs its attempt removed.
func TestCrashThenReconcile(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "spawned")
	f := newFixture(t, recipeDef{"r", []string{"/bin/sh", "-c", "echo x >> " + marker}, 30, 1 << 20})
	cmd := f.command("r")
	here := recipe.CurrentHost()
	reboot := recipe.HostIdentity{BootID: "another-boot", MachineID: here.MachineID}
	foreign := recipe.HostIdentity{BootID: "another-boot", MachineID: "another-machine"}
	if here.BootID == "" || here.MachineID == "" {
		t.Skip("this host has no boot or machine id")
	}
	kill := func(fp string) string {
		t.Helper()
		tu := f.pre(cmd)
		c := f.helper(t, "r", fp)
		err := c.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("failpoint %s: runner ended with %v, want SIGKILL", fp, err)
		}
		return action.ID("claude-code", session, tu)
	}

	// reserved: no start became durable.
	id := kill("reserved")
	got := reconcile(t, f, "r", nil)
	if len(got) != 1 || got[0].Outcome != recipe.Cleared || got[0].ActionID != id || got[0].Start != capture.StartNone {
		t.Fatalf("reconcile after reserved: %+v", got)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the child ran at the reserved failpoint")
	}
	if _, err, _, _ := f.run("r", nil); err == nil || !strings.Contains(err.Error(), "no durable managed PreToolUse") {
		t.Fatalf("a cleared occurrence launched again: %v", err)
	}
	// Either order of the clearing and the occurrence's own Post converges
	// on one original-bound generic terminal receipt.
	generic := func(id, tu string) {
		t.Helper()
		a := hubActionAfterDelivery(t, f, id)
		if a.Status != "complete" || a.Start.Class != "execution" || a.Finish.Verification != "unknown" || a.Start.RecipeDigest != "" {
			t.Fatalf("generic terminal receipt of %s: %+v %+v", tu, a.Start, a.Finish)
		}
		n := 0
		for _, r := range f.spoolActions() {
			if r.Action.ID == id {
				n++
			}
		}
		if n != 2 {
			t.Fatalf("%d action records for %s, want one start and one finish", n, id)
		}
	}
	tu := fmt.Sprintf("toolu_%d", f.n)
	f.post(tu, cmd) // clearing first, then the Post
	f.post(tu, cmd) // an exact retry adds nothing
	generic(id, tu)
	id = kill("reserved")
	tu = fmt.Sprintf("toolu_%d", f.n)
	f.post(tu, cmd) // the Post first, then the clearing
	if got := reconcile(t, f, "r", nil); len(got) != 1 || got[0].Outcome != recipe.Cleared || !strings.Contains(got[0].Reason, "already observed") {
		t.Fatalf("reconcile after the Post: %+v", got)
	}
	generic(id, tu)

	for _, fp := range []string{"started", "spawned"} {
		id := kill(fp)
		if fp == "spawned" {
			// The child was spawned before the phase could be persisted.
			deadline := time.Now().Add(5 * time.Second)
			for time.Now().Before(deadline) {
				if _, err := os.Stat(marker); err == nil {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		got := reconcile(t, f, "r", nil)
		if len(got) != 1 || got[0].Outcome != recipe.Unresolved || got[0].Phase != recipe.PhaseReserved || !strings.Contains(got[0].Reason, "same boot") {
			t.Fatalf("%s: same-boot reconcile %+v", fp, got)
		}
		// The fence: a new occurrence of the same Work, checkout and
		// recipe is refused before spawning.
		f.pre(cmd)
		if _, err, _, _ := f.run("r", nil); err == nil || !strings.Contains(err.Error(), "unresolved attempt") || !strings.Contains(err.Error(), "reconcile-recipe --id r") {
			t.Fatalf("%s: fenced run: %v", fp, err)
		}
		if got := reconcile(t, f, "r", &foreign); len(got) != 1 || got[0].Outcome != recipe.Unresolved || !strings.Contains(got[0].Reason, "another host") {
			t.Fatalf("%s: foreign-host reconcile %+v", fp, got)
		}
		got = reconcile(t, f, "r", &reboot)
		if len(got) != 1 || got[0].Outcome != recipe.Finished || got[0].ActionID != id {
			t.Fatalf("%s: reboot reconcile %+v", fp, got)
		}
		// What the killed run streamed moved into the spool with the
		// finish (the copies exist once the child is spawned).
		for _, r := range f.spoolActions() {
			if r.Kind == event.ActionFinish && r.Action.ID == id && (fp == "spawned") != (r.Action.Output != nil &&
				r.Action.Output.Stdout.Availability == event.AvailabilityRetained && r.Action.Output.Stderr.Availability == event.AvailabilityRetained) {
				t.Fatalf("%s: the incomplete finish's output %+v", fp, r.Action.Output)
			}
		}
		if left, _ := filepath.Glob(filepath.Join(f.managedDir(), id+".std*")); len(left) != 0 {
			t.Fatalf("%s: output copies outside the spool after reconcile: %v", fp, left)
		}
		// The fence lifted: the waiting occurrence runs now.
		f.runOK(t, "r")
		fin := hubActionAfterDelivery(t, f, id)
		if fin.Finish == nil || fin.Finish.Result != "incomplete" || fin.Finish.Verification != "unknown" || fin.Start.RecipeDigest != f.recipes["r"].Digest {
			t.Fatalf("%s: hub action %+v", fp, fin)
		}
	}

	// finished: the finish is durable, only the attempt remains.
	id = kill("finished")
	got = reconcile(t, f, "r", nil)
	if len(got) != 1 || got[0].Outcome != recipe.Resolved || got[0].ActionID != id {
		t.Fatalf("reconcile after finished: %+v", got)
	}
	if got := reconcile(t, f, "r", nil); len(got) != 0 {
		t.Fatalf("a second reconcile found %+v", got)
	}
}

// hubActionAfterDelivery delivers what the spool holds (through a hook, as
// the next Claude Code hook would) and returns the Hub action.
func hubActionAfterDelivery(t *testing.T, f *fixture, id string) *api.ActionRecord {
	t.Helper()
	f.hook("UserPromptSubmit", `,"prompt":"next"`)
	return hubAction(t, f.record(), id)
}

// TestSIGTERMCancelsAndReaps: SIGTERM to the runner process terminates and
// reaps the child's process group and retains an incomplete receipt; the
// runner exits 130 and no fence remains.
func TestSIGTERMCancelsAndReaps(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	f := newFixture(t, recipeDef{"long", []string{"/bin/sh", "-c", "echo $$ > " + pidFile + "; sleep 60"}, 120, 1 << 20})
	tu := f.pre(f.command("long"))
	c := f.helper(t, "long", "")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	var child int
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(pidFile); err == nil && len(bytes.TrimSpace(b)) > 0 {
			fmt.Sscan(string(b), &child)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if child == 0 {
		c.Process.Kill()
		t.Fatal("the child never started")
	}
	c.Process.Signal(syscall.SIGTERM)
	err := c.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("runner exit %v, want status 130", err)
	}
	if err := syscall.Kill(child, 0); err == nil {
		t.Fatalf("child %d survives the runner's cancellation", child)
	}
	if got := reconcile(t, f, "long", nil); len(got) != 0 {
		t.Fatalf("an attempt remains: %+v", got)
	}
	a := hubActionAfterDelivery(t, f, action.ID("claude-code", session, tu))
	if a.Finish == nil || a.Finish.Result != "incomplete" || a.Finish.Verification != "incomplete" {
		t.Fatalf("hub action %+v", a)
	}
}

// TestCheckoutLockSerializes: while one caller holds the checkout lock a
// second run waits, and reconcile refuses without changing anything.
func TestCheckoutLockSerializes(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	f := newFixture(t, recipeDef{"long", []string{"/bin/sh", "-c", "echo $$ > " + pidFile + "; sleep 2"}, 120, 1 << 20})
	f.pre(f.command("long"))
	c := f.helper(t, "long", "")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, _ := os.ReadFile(pidFile); len(b) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, err := recipe.Reconcile(context.Background(), recipe.ReconcileOptions{Store: f.store, Hubs: delivery.Opener{ConfigDir: f.cfg}, ID: "long", Root: f.root})
	if err == nil || !strings.Contains(err.Error(), "checkout lock") {
		t.Fatalf("reconcile during a live run: %v", err)
	}
	// A second caller waits for the lock, then finds no waiting occurrence.
	t0 := time.Now()
	if _, err, _, _ := f.run("long", nil); err == nil || !strings.Contains(err.Error(), "no durable managed PreToolUse") {
		t.Fatalf("second caller: %v", err)
	}
	if time.Since(t0) < 500*time.Millisecond {
		t.Fatalf("the second caller did not wait for the lock (%s)", time.Since(t0))
	}
}

// TestSessionStartGuidance: the SessionStart output is exactly the bounded
// guidance with each recipe's absolute runner command; other events and
// checkouts without recipes print nothing.
func TestSessionStartGuidance(t *testing.T) {
	f := newFixture(t, recipeDef{"unit-test", []string{"/usr/bin/true"}, 30, 1024})
	p := func(ev string) []byte {
		return []byte(`{"session_id":"s","cwd":"` + f.root + `","hook_event_name":"` + ev + `","source":"startup"}`)
	}
	out, err := capture.SessionStartOutput(f.store, p("SessionStart"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		HookSpecificOutput struct {
			HookEventName     string `json:"hookEventName"`
			AdditionalContext string `json:"additionalContext"`
		} `json:"hookSpecificOutput"`
	}
	if err := json.Unmarshal(out, &v); err != nil || v.HookSpecificOutput.HookEventName != "SessionStart" {
		t.Fatalf("output %s: %v", out, err)
	}
	want, _ := capture.RecipeGuidance(f.binding())
	if v.HookSpecificOutput.AdditionalContext != want || !strings.Contains(want, "- recipe unit-test (timeout 30 s): '/opt/agent scm/bin/agentscm' change-capture run-recipe --id unit-test\n") {
		t.Fatalf("guidance %q", v.HookSpecificOutput.AdditionalContext)
	}
	if len(out) > capture.MaxGuidanceBytes+256 {
		t.Fatalf("guidance of %d bytes", len(out))
	}
	for _, ev := range []string{"UserPromptSubmit", "Stop"} {
		if out, err := capture.SessionStartOutput(f.store, p(ev)); len(out) != 0 || err != nil {
			t.Fatalf("%s printed %q (%v)", ev, out, err)
		}
	}
	other := t.TempDir()
	if out, _ := capture.SessionStartOutput(f.store, []byte(`{"session_id":"s","cwd":"`+other+`","hook_event_name":"SessionStart"}`)); len(out) != 0 {
		t.Fatalf("an unbound checkout printed %q", out)
	}
}

// TestHookStdout: through the hook process entry point, only SessionStart
// prints (exactly the guidance output); every other hook keeps an empty
// stdout, including the managed command's own PreToolUse.
func TestHookStdout(t *testing.T) {
	f := newFixture(t, recipeDef{"unit-test", []string{"/usr/bin/true"}, 30, 1024})
	getenv := func(k string) string {
		if k == "XDG_CONFIG_HOME" {
			return filepath.Dir(f.cfg)
		}
		return ""
	}
	want, _ := capture.SessionStartOutput(f.store, []byte(`{"session_id":"`+session+`","cwd":"`+f.root+`","hook_event_name":"SessionStart","source":"startup"}`))
	for _, tc := range []struct{ ev, extra, want string }{
		{"SessionStart", `,"source":"startup"`, string(want)},
		{"UserPromptSubmit", `,"prompt":"hi"`, ""},
		{"PreToolUse", `,"tool_name":"Bash","tool_use_id":"toolu_x","tool_input":` + bashInput(f.command("unit-test")), ""},
		{"Stop", ``, ""},
	} {
		var out, errb bytes.Buffer
		p := `{"session_id":"` + session + `","cwd":"` + f.root + `","hook_event_name":"` + tc.ev + `"` + tc.extra + `}`
		if code := hookrun.ClaudeCaptureOut(context.Background(), strings.NewReader(p), &out, &errb, getenv, time.Now()); code != 0 {
			t.Fatalf("%s: exit %d", tc.ev, code)
		}
		if out.String() != tc.want || errb.Len() != 0 {
			t.Fatalf("%s: stdout %q stderr %q, want stdout %q", tc.ev, out.String(), errb.String(), tc.want)
		}
	}
	if len(want) == 0 {
		t.Fatal("no guidance")
	}
}

// TestReconcileRechecksAuthorization: once the attempt's Work is finished
// its session has no authorized target, so even a verified reboot leaves
// the attempt unresolved: nothing is appended to a Work that no longer
// accepts it.
func TestReconcileRechecksAuthorization(t *testing.T) {
	f := newFixture(t, recipeDef{"r", []string{"/usr/bin/true"}, 30, 1024})
	here := recipe.CurrentHost()
	if here.BootID == "" || here.MachineID == "" {
		t.Skip("this host has no boot or machine id")
	}
	f.pre(f.command("r"))
	c := f.helper(t, "r", "started")
	if err := c.Run(); err == nil {
		t.Fatal("the runner survived its failpoint")
	}
	conn, err := client.Open(context.Background(), f.conn, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Checkpoint(context.Background(), f.work, api.CheckpointRequest{Action: "finish"}); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	reboot := recipe.HostIdentity{BootID: "another-boot", MachineID: here.MachineID}
	got := reconcile(t, f, "r", &reboot)
	if len(got) != 1 || got[0].Outcome != recipe.Unresolved || !strings.Contains(got[0].Reason, "authorization") {
		t.Fatalf("reconcile of a finished Work's attempt: %+v", got)
	}
}

// TestRunAdmitsIntake: a managed PreToolUse that found the spool lock busy
// left its event in the intake; the runner admits the intake first, so the
// occurrence's marker exists and the run proceeds.
func TestRunAdmitsIntake(t *testing.T) {
	f := newFixture(t, recipeDef{"ok", []string{"/usr/bin/true"}, 30, 1024})
	sp, err := spool.OpenAppender(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := sp.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	res := f.hook("PreToolUse", `,"tool_name":"Bash","tool_use_id":"toolu_intake","tool_input":`+bashInput(f.command("ok")))
	ss.Close()
	if res.Intake == "" {
		t.Fatalf("the PreToolUse did not go to the intake: %+v", res)
	}
	rc, err, _, _ := f.run("ok", nil)
	if err != nil || rc.ToolUseID != "toolu_intake" || rc.Verification != "passed" {
		t.Fatalf("run after the intake: %+v, %v", rc, err)
	}
}

// TestRunRecipeOutputInSpool: a run's stdout and stderr are admitted into
// the spool under its limits: a stream above the per-artifact limit is
// refused and named (availability missing, the reason in the run receipt,
// a warning), the other is retained, the finish still records the child's
// result, no copy stays outside the spool, and an export of the spool
// holds the retained output.
func TestRunRecipeOutputInSpool(t *testing.T) {
	f := newFixture(t, recipeDef{"big", []string{"/bin/sh", "-c", "head -c 5000 /dev/zero | tr '\\0' o; echo RETAINED-STDERR >&2"}, 30, 1 << 20})
	sp, err := spool.Open(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sp.SetLimits(context.Background(), spool.Limits{ArtifactBytes: 4096}); err != nil {
		t.Fatal(err)
	}
	tu := f.pre(f.command("big"))
	rc, err, stdout, stderr := f.run("big", nil)
	if err != nil || rc.Verification != "passed" || len(stdout) != 5000 {
		t.Fatalf("run: %+v %v (stderr %s)", rc, err, stderr)
	}
	f.post(tu, f.command("big"))
	if o := rc.Stdout; o.Artifact == nil || o.Artifact.Availability != event.AvailabilityMissing || o.Artifact.Bytes != 5000 ||
		!strings.Contains(o.NotRetained, "per-artifact limit") || o.Path != "" {
		t.Fatalf("refused stdout %+v", o)
	}
	if !strings.Contains(stderr, "agentscm: warning: the recipe's stdout is not retained in the spool") {
		t.Fatalf("no warning for the refused stream: %q", stderr)
	}
	e := rc.Stderr
	if e.Artifact == nil || e.Artifact.Availability != event.AvailabilityRetained || e.NotRetained != "" {
		t.Fatalf("retained stderr %+v", e)
	}
	if b, err := sp.ReadBlob(*e.Artifact); err != nil || string(b) != "RETAINED-STDERR\n" {
		t.Fatalf("%q %v", b, err)
	}
	if left, _ := filepath.Glob(filepath.Join(f.managedDir(), rc.ActionID+".std*")); len(left) != 0 {
		t.Fatalf("output copies outside the spool: %v", left)
	}
	a := hubAction(t, f.record(), rc.ActionID)
	if a.Finish == nil || a.Finish.Verification != "passed" {
		t.Fatalf("hub action %+v", a)
	}
	dest := filepath.Join(t.TempDir(), "export")
	if _, err := spool.Export(context.Background(), spool.ExportOptions{Spool: f.spool, Destination: dest}); err != nil {
		t.Fatal(err)
	}
	arts, _ := filepath.Glob(filepath.Join(dest, "spool", "artifacts", "*.art"))
	found := false
	for _, p := range arts {
		if b, err := os.ReadFile(p); err == nil && strings.HasSuffix(string(b), "\nRETAINED-STDERR\n") {
			found = true
		}
	}
	if !found {
		t.Fatalf("the export holds no artifact with the retained stderr (%d artifacts)", len(arts))
	}
}
