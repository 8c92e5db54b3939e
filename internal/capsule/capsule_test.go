package capsule

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// project makes a small tree.
func project(t *testing.T) string {
	root := t.TempDir()
	write(t, filepath.Join(root, "a.txt"), "alpha\n")
	write(t, filepath.Join(root, "sub/b.txt"), "beta\n")
	write(t, filepath.Join(root, ".env"), "X=1\n")
	return root
}

func allowAll() *Policy {
	p := DefaultPolicy()
	p.Paths.Default = Allow
	p.Paths.Rules = []PathRule{}
	return p
}

type runOut struct {
	res    *Result
	dir    string
	stderr string
}

func runIn(t *testing.T, root string, pol *Policy, timeout time.Duration, script string) runOut {
	t.Helper()
	return runArgv(t, root, pol, timeout, "sh", "-c", script)
}

func runArgv(t *testing.T, root string, pol *Policy, timeout time.Duration, argv ...string) runOut {
	t.Helper()
	var stdout, stderr bytes.Buffer
	res, dir, err := Run(context.Background(), RunOptions{Root: root, Policy: pol, Argv: argv, Timeout: timeout,
		Env: os.Environ(), Stdout: &stdout, Stderr: &stderr, PolicySource: "test"})
	if err != nil {
		t.Fatalf("Run: %v (stderr %s)", err, stderr.String())
	}
	return runOut{res, dir, stderr.String()}
}

func verifyOK(t *testing.T, dir string) *VerifyReport {
	t.Helper()
	rep, err := Verify(context.Background(), dir, filepath.Base(dir))
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK {
		t.Fatalf("verify failed: %+v", rep)
	}
	return rep
}

func TestStatuses(t *testing.T) {
	denyTouch := DefaultPolicy()
	denyTouch.Commands.Rules = []CommandRule{{Executable: "touch", Decision: Deny, Reason: "test"}}
	tests := []struct {
		name    string
		pol     *Policy
		timeout time.Duration
		argv    []string
		status  string
		outcome Decision
	}{
		{"passed", allowAll(), 0, []string{"sh", "-c", "echo x > new.txt"}, StatusPassed, Allow},
		{"passed no changes under default", nil, 0, []string{"true"}, StatusPassed, Allow},
		{"review", nil, 0, []string{"sh", "-c", "echo x > new.txt"}, StatusReview, Review},
		{"denied", nil, 0, []string{"sh", "-c", "echo Y=2 >> .env"}, StatusDenied, Deny},
		{"blocked", denyTouch, 0, []string{"touch", "blocked-marker"}, StatusBlocked, Allow},
		{"failed", nil, 0, []string{"sh", "-c", "exit 3"}, StatusFailed, Allow},
		{"timed_out", nil, 200 * time.Millisecond, []string{"sleep", "5"}, StatusTimedOut, Allow},
		{"error", nil, 0, []string{"definitely-not-a-command-xyz"}, StatusError, Allow},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := project(t)
			out := runArgv(t, root, tc.pol, tc.timeout, tc.argv...)
			if out.res.Status != tc.status || out.res.SafetyOutcome != tc.outcome {
				t.Fatalf("status %s outcome %s, want %s %s; result %+v", out.res.Status, out.res.SafetyOutcome, tc.status, tc.outcome, out.res)
			}
			verifyOK(t, out.dir)
			for _, f := range []string{FileMetadata, FilePolicy, FileBefore, FileAfter, FileRuntime, FileResult, FileEvents, FileIntegrity} {
				if _, err := os.Stat(filepath.Join(out.dir, f)); err != nil {
					t.Errorf("capsule lacks %s", f)
				}
			}
			switch tc.status {
			case StatusBlocked:
				if _, err := os.Stat(filepath.Join(root, "blocked-marker")); err == nil {
					t.Fatal("blocked command was launched")
				}
				if out.res.Runtime.Launched || out.res.CommandDecision.Provenance.Index != 0 {
					t.Fatalf("blocked: %+v", out.res)
				}
			case StatusError:
				if out.res.ExecutionError == nil || out.res.Runtime.Launched {
					t.Fatalf("error without execution_error: %+v", out.res)
				}
			case StatusFailed:
				if out.res.Runtime.Exit.ExitCode != 3 {
					t.Fatalf("exit %+v", out.res.Runtime.Exit)
				}
			}
		})
	}
}

func TestResultShapeAndRedaction(t *testing.T) {
	root := project(t)
	out := runArgv(t, root, nil, 0, "sh", "-c", "echo >> a.txt", "x", "--token", "s3cr3t-value")
	b, err := os.ReadFile(filepath.Join(out.dir, FileResult))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	json.Unmarshal(b, &m)
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := []string{"blast_radius", "changes", "command_decision", "execution_error", "limit_violations", "observation_warnings", "run_id", "runtime", "safety_outcome", "schema_version", "status"}
	if !slices.Equal(keys, want) {
		t.Fatalf("result keys %q, want %q", keys, want)
	}
	if string(m["execution_error"]) != "null" {
		t.Fatalf("execution_error = %s", m["execution_error"])
	}
	c := out.res.Changes
	if len(c) != 1 || c[0].Path != "a.txt" || c[0].Change != Modified || c[0].Provenance.Source != "default" || !c[0].Recovery.Available {
		t.Fatalf("changes %+v", c)
	}
	for _, f := range []string{FileMetadata, FileEvents, FileRuntime} {
		s := read(t, filepath.Join(out.dir, f))
		if strings.Contains(s, "s3cr3t-value") {
			t.Fatalf("%s stores the secret: %s", f, s)
		}
		if !strings.Contains(s, "[REDACTED:flag_value]") {
			t.Fatalf("%s lacks the redaction marker", f)
		}
	}
}

func TestTimeoutReapsDescendants(t *testing.T) {
	root := project(t)
	out := runIn(t, root, nil, 300*time.Millisecond, "sleep 30 & echo $! > pid1; sleep 31 & echo $! > pid2; wait")
	if out.res.Status != StatusTimedOut {
		t.Fatalf("status %s", out.res.Status)
	}
	var rt Runtime
	if err := readJSON(out.dir, FileRuntime, &rt); err != nil {
		t.Fatal(err)
	}
	if len(rt.Cleanup.Descendants) < 2 || rt.Cleanup.Remaining != 0 {
		t.Fatalf("cleanup %+v", rt.Cleanup)
	}
	for _, d := range rt.Cleanup.Descendants {
		if !d.Reaped {
			t.Fatalf("descendant not reaped: %+v", d)
		}
	}
	for _, f := range []string{"pid1", "pid2"} {
		var pid int
		if _, err := fmtSscan(read(t, filepath.Join(root, f)), &pid); err != nil {
			t.Fatal(err)
		}
		if alive(pid) {
			t.Fatalf("descendant %d still alive", pid)
		}
	}
}

func TestLeftoverDescendantKilledAfterNormalExit(t *testing.T) {
	root := project(t)
	out := runIn(t, root, allowAll(), 0, "sleep 30 >/dev/null 2>&1 & echo $! > pid; exit 0")
	if out.res.Runtime.Descendants < 1 {
		t.Fatalf("descendant not reported: %+v", out.res.Runtime)
	}
	if !slices.ContainsFunc(out.res.ObservationWarnings, func(w Warning) bool { return w.Code == "descendants_killed" }) {
		t.Fatalf("warnings %+v", out.res.ObservationWarnings)
	}
	if out.res.Status != StatusReview {
		t.Fatalf("status %s (warnings must lead to review)", out.res.Status)
	}
	var pid int
	fmtSscan(read(t, filepath.Join(root, "pid")), &pid)
	if alive(pid) {
		t.Fatalf("descendant %d still alive", pid)
	}
}

func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "stat"))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && !strings.HasPrefix(strings.TrimSpace(s[i+1:]), "Z")
}

func TestPortObservation(t *testing.T) {
	root := project(t)
	var ln net.Listener
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 200 {
			if _, err := os.Stat(filepath.Join(root, "started")); err == nil {
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err == nil {
					ln = l
				}
				os.WriteFile(filepath.Join(root, "go"), nil, 0o644)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	out := runIn(t, root, allowAll(), 10*time.Second, "touch started; while [ ! -f go ]; do sleep 0.02; done; rm started go")
	<-done
	if ln == nil {
		t.Fatal("listener not opened")
	}
	defer ln.Close()
	want := "tcp4 " + ln.Addr().String()
	if !slices.Contains(out.res.Runtime.PortsOpened, want) {
		t.Fatalf("ports opened %q, want %q", out.res.Runtime.PortsOpened, want)
	}
	// The listener is this test process's, outside the command's process
	// group: a machine-wide observation that neither demotes the run nor
	// raises its blast radius (seed 001).
	if out.res.Status != StatusPassed {
		t.Fatalf("status %s, warnings %+v", out.res.Status, out.res.ObservationWarnings)
	}
	if !slices.ContainsFunc(out.res.MachineObservations, func(w Warning) bool {
		return w.Code == "listening_ports_opened_elsewhere" && strings.Contains(w.Message, want)
	}) {
		t.Fatalf("machine observations %+v, want %s", out.res.MachineObservations, want)
	}
	for _, c := range out.res.BlastRadius.Components {
		if c.Name == "listening_ports_opened" && c.Count != 0 {
			t.Fatalf("blast radius counts another process's listener: %+v", c)
		}
	}
}

func TestDecodeProcAddr(t *testing.T) {
	for in, want := range map[string]string{
		"0100007F:1F90":                         "127.0.0.1:8080",
		"00000000:0016":                         "0.0.0.0:22",
		"00000000000000000000000001000000:0050": "[0:0:0:0:0:0:0:1]:80",
	} {
		fam := "tcp4"
		if len(in) > 20 {
			fam = "tcp6"
		}
		got, err := decodeProcAddr(in, fam)
		if err != nil || got != want {
			t.Errorf("decodeProcAddr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := decodeProcAddr("zz:1", "tcp4"); err == nil {
		t.Error("bad address accepted")
	}
}

// A hostile child rewrites before.json and the events while running.
func TestChildTampersCapsuleWhileRunning(t *testing.T) {
	for _, target := range []string{FileBefore, FileEvents, FileMetadata} {
		t.Run(target, func(t *testing.T) {
			root := project(t)
			out := runIn(t, root, allowAll(), 0, `echo >> a.txt; for d in .agentdiff/runs/*/; do echo '{"forged":1}' > "${d}`+target+`"; done`)
			if out.res.Status != StatusDenied {
				t.Fatalf("status %s", out.res.Status)
			}
			if !slices.ContainsFunc(out.res.ObservationWarnings, func(w Warning) bool {
				return w.Code == "capsule_tampered" && strings.Contains(w.Message, target)
			}) {
				t.Fatalf("tampering not reported: %+v", out.res.ObservationWarnings)
			}
			rep, _ := Verify(context.Background(), out.dir, filepath.Base(out.dir))
			if rep.OK || !slices.Contains(rep.Mismatched, target) {
				t.Fatalf("verify %+v", rep)
			}
			before := read(t, filepath.Join(root, "a.txt"))
			if _, _, err := Rollback(context.Background(), root, filepath.Base(out.dir), RollbackOptions{}); !errors.Is(err, ErrUnverified) {
				t.Fatalf("rollback of tampered capsule: %v", err)
			}
			if read(t, filepath.Join(root, "a.txt")) != before {
				t.Fatal("refused rollback changed the workspace")
			}
		})
	}
}

// A hostile child rewrites the stored backup of the file it modifies.
func TestChildRewritesBackup(t *testing.T) {
	root := project(t)
	out := runIn(t, root, allowAll(), 0, `echo changed > a.txt; for f in .agentdiff/objects/*/*; do chmod u+w "$f"; echo evil > "$f"; done`)
	if !slices.ContainsFunc(out.res.ObservationWarnings, func(w Warning) bool { return w.Code == "capsule_tampered" }) {
		t.Fatalf("warnings %+v", out.res.ObservationWarnings)
	}
	if out.res.Status != StatusDenied || out.res.Changes[0].Recovery.Available {
		t.Fatalf("status %s change %+v", out.res.Status, out.res.Changes)
	}
	verifyOK(t, out.dir) // the tampered object never entered the capsule
	att, _, err := Rollback(context.Background(), root, filepath.Base(out.dir), RollbackOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if att.Status != RollbackPartial || att.Items[0].Outcome != OutcomeNotRecov {
		t.Fatalf("rollback %+v", att)
	}
	if read(t, filepath.Join(root, "a.txt")) != "changed\n" {
		t.Fatal("file overwritten with a tampered backup")
	}
}

func TestBackupTamperedAfterSeal(t *testing.T) {
	root := project(t)
	out := runIn(t, root, allowAll(), 0, `echo changed > a.txt`)
	verifyOK(t, out.dir)
	ents, _ := os.ReadDir(filepath.Join(out.dir, DirBackups))
	if len(ents) != 1 {
		t.Fatalf("backups %v", ents)
	}
	p := filepath.Join(out.dir, DirBackups, ents[0].Name())
	os.Chmod(p, 0o600)
	os.WriteFile(p, []byte("evil\n"), 0o600)
	rep, _ := Verify(context.Background(), out.dir, filepath.Base(out.dir))
	if rep.OK || len(rep.Mismatched) != 1 {
		t.Fatalf("verify %+v", rep)
	}
	if _, _, err := Rollback(context.Background(), root, filepath.Base(out.dir), RollbackOptions{}); !errors.Is(err, ErrUnverified) {
		t.Fatalf("err %v", err)
	}
	// An extra file is unexpected too.
	os.WriteFile(p, []byte("alpha\n"), 0o400)
	write(t, filepath.Join(out.dir, "extra"), "x")
	rep, _ = Verify(context.Background(), out.dir, filepath.Base(out.dir))
	if rep.OK || !slices.Equal(rep.Unexpected, []string{"extra"}) || len(rep.Mismatched) != 0 {
		t.Fatalf("verify %+v", rep)
	}
	os.Remove(filepath.Join(out.dir, "extra"))
	os.Remove(filepath.Join(out.dir, FileRuntime))
	rep, _ = Verify(context.Background(), out.dir, filepath.Base(out.dir))
	if rep.OK || !slices.Equal(rep.Missing, []string{FileRuntime}) {
		t.Fatalf("verify %+v", rep)
	}
}

func TestRollbackKeepsLaterWork(t *testing.T) {
	root := project(t)
	out := runIn(t, root, nil, 0, `echo new >> a.txt; rm sub/b.txt; echo c > c.txt; mkdir -p d/e; echo f > d/e/f; chmod 600 .env`)
	if len(out.res.Changes) != 7 {
		t.Fatalf("changes %+v", out.res.Changes)
	}
	id := filepath.Base(out.dir)
	// A human edits a.txt after the run and adds a file inside the created directory.
	write(t, filepath.Join(root, "a.txt"), "human\n")
	write(t, filepath.Join(root, "d/human.txt"), "mine\n")
	att, _, err := Rollback(context.Background(), root, id, RollbackOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, it := range att.Items {
		got[it.Path] = it.Outcome
	}
	want := map[string]string{"a.txt": OutcomeConflict, "sub/b.txt": OutcomeRolledBack, "c.txt": OutcomeRolledBack,
		"d": OutcomeConflict, "d/e": OutcomeRolledBack, "d/e/f": OutcomeRolledBack, ".env": OutcomeRolledBack}
	for p, o := range want {
		if got[p] != o {
			t.Errorf("%s: %s, want %s (%+v)", p, got[p], o, att.Items)
		}
	}
	if read(t, filepath.Join(root, "a.txt")) != "human\n" || read(t, filepath.Join(root, "d/human.txt")) != "mine\n" {
		t.Fatal("later work overwritten")
	}
	if read(t, filepath.Join(root, "sub/b.txt")) != "beta\n" {
		t.Fatal("deleted file not restored")
	}
	if fi, _ := os.Stat(filepath.Join(root, ".env")); fi.Mode().Perm() != 0o644 {
		t.Fatalf(".env mode %v", fi.Mode())
	}
	if _, err := os.Stat(filepath.Join(root, "c.txt")); !os.IsNotExist(err) {
		t.Fatal("created file not removed")
	}
	if att.Status != RollbackPartial {
		t.Fatalf("status %s", att.Status)
	}
	rep := verifyOK(t, out.dir)
	if rep.Rollbacks != 1 {
		t.Fatalf("extensions %d", rep.Rollbacks)
	}
	evs := read(t, filepath.Join(out.dir, FileEvents))
	if !strings.Contains(evs, `"event":"recovery"`) || !strings.Contains(evs, `"event":"rollback_finished"`) {
		t.Fatalf("no recovery events: %s", evs)
	}
	// The human reverts a.txt to the post-run state: now rollback of that path works.
	write(t, filepath.Join(root, "a.txt"), "alpha\nnew\n")
	att, _, err = Rollback(context.Background(), root, id, RollbackOptions{Paths: []string{"a.txt"}})
	if err != nil || att.Status != RollbackComplete || read(t, filepath.Join(root, "a.txt")) != "alpha\n" {
		t.Fatalf("second rollback %+v %v", att, err)
	}
	rep = verifyOK(t, out.dir)
	if rep.Rollbacks != 2 {
		t.Fatalf("extensions %d", rep.Rollbacks)
	}
	if _, _, err := Rollback(context.Background(), root, id, RollbackOptions{Paths: []string{"nope"}}); !errors.Is(err, ErrNoSuchChange) {
		t.Fatalf("unknown path: %v", err)
	}
	// Appending to events.jsonl after the last seal is detected.
	f, _ := os.OpenFile(filepath.Join(out.dir, FileEvents), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("{}\n")
	f.Close()
	if rep, _ := Verify(context.Background(), out.dir, id); rep.OK {
		t.Fatal("unsealed append not detected")
	}
}

func TestRollbackDeletedPathReoccupied(t *testing.T) {
	root := project(t)
	out := runIn(t, root, nil, 0, `rm a.txt`)
	write(t, filepath.Join(root, "a.txt"), "someone else\n")
	att, _, err := Rollback(context.Background(), root, filepath.Base(out.dir), RollbackOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if att.Items[0].Outcome != OutcomeConflict || read(t, filepath.Join(root, "a.txt")) != "someone else\n" {
		t.Fatalf("%+v", att.Items)
	}
}

// Symlink and hardlink surprises: rollback never follows a symlink out of the
// root and never writes through a hard link into another file.
func TestSymlinkAndHardlinkSurprises(t *testing.T) {
	root := project(t)
	outside := t.TempDir()
	write(t, filepath.Join(outside, "b.txt"), "outside\n")
	write(t, filepath.Join(outside, "linked"), "shared\n")
	if err := os.Link(filepath.Join(outside, "linked"), filepath.Join(root, "hl")); err != nil {
		t.Fatal(err)
	}
	out := runIn(t, root, allowAll(), 0, `echo changed > sub/b.txt; echo more >> hl; ln -s `+outside+` link; ln `+filepath.Join(outside, "b.txt")+` hl2`)
	kinds := map[string]Change{}
	for _, c := range out.res.Changes {
		kinds[c.Path] = c
	}
	if c := kinds["link"]; c.Type != "symlink" || c.Recovery.Available {
		t.Fatalf("symlink change %+v", c)
	}
	var after Manifest
	readJSON(out.dir, FileAfter, &after)
	for _, e := range after.Entries {
		if strings.HasPrefix(e.Path, "link/") {
			t.Fatalf("manifest traversed a symlink: %s", e.Path)
		}
		if e.Path == "link" && e.Target != outside {
			t.Fatalf("symlink target %q", e.Target)
		}
	}
	// Now swap sub for a symlink to the outside directory: rollback must not write there.
	os.Rename(filepath.Join(root, "sub"), filepath.Join(root, "sub-moved"))
	os.Symlink(outside, filepath.Join(root, "sub"))
	att, _, err := Rollback(context.Background(), root, filepath.Base(out.dir), RollbackOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res := map[string]RollbackItem{}
	for _, it := range att.Items {
		res[it.Path] = it
	}
	if res["sub/b.txt"].Outcome != OutcomeConflict || !strings.Contains(res["sub/b.txt"].Reason, "symbolic link") {
		t.Fatalf("sub/b.txt %+v", res["sub/b.txt"])
	}
	if read(t, filepath.Join(outside, "b.txt")) != "outside\n" {
		t.Fatal("rollback wrote through a symlinked ancestor")
	}
	if res["link"].Outcome != OutcomeNotRecov {
		t.Fatalf("link %+v", res["link"])
	}
	if res["hl"].Outcome != OutcomeRolledBack || read(t, filepath.Join(root, "hl")) != "shared\n" {
		t.Fatalf("hl %+v", res["hl"])
	}
	// The restore replaced the link; the outside file keeps the child's write.
	if read(t, filepath.Join(outside, "linked")) != "shared\nmore\n" {
		t.Fatal("rollback wrote through a hard link")
	}
	if res["hl2"].Outcome != OutcomeRolledBack || read(t, filepath.Join(outside, "b.txt")) != "outside\n" {
		t.Fatalf("hl2 %+v", res["hl2"])
	}
}

// A result.json rewritten with a path traversal (and a consistent seal) is refused.
func TestTamperedResultTraversal(t *testing.T) {
	root := project(t)
	victim := filepath.Join(filepath.Dir(root), "victim.txt")
	write(t, victim, "keep\n")
	defer os.Remove(victim)
	out := runIn(t, root, allowAll(), 0, `echo x > c.txt`)
	var res Result
	readJSON(out.dir, FileResult, &res)
	res.Changes[0].Path = "../victim.txt"
	b, _ := json.MarshalIndent(res, "", "  ")
	b = append(b, '\n')
	os.WriteFile(filepath.Join(out.dir, FileResult), b, 0o600)
	var in Integrity
	readJSON(out.dir, FileIntegrity, &in)
	for i := range in.Files {
		if in.Files[i].Path == FileResult {
			in.Files[i].Size, in.Files[i].SHA256 = int64(len(b)), sumBytes(b)
		}
	}
	ib, _ := json.MarshalIndent(in, "", "  ")
	os.WriteFile(filepath.Join(out.dir, FileIntegrity), ib, 0o600)
	// Checksums are not signatures, so the rewrite is consistent; verify
	// still refuses it, with the same check rollback runs.
	rep, err := Verify(context.Background(), out.dir, filepath.Base(out.dir))
	if err != nil || rep.OK || !strings.Contains(strings.Join(rep.Problems, ";"), "unsafe path") {
		t.Fatalf("verify of a resealed capsule naming ../victim.txt: %+v %v", rep, err)
	}
	_, rrep, err := Rollback(context.Background(), root, filepath.Base(out.dir), RollbackOptions{})
	if !errors.Is(err, ErrUnverified) || rrep == nil || !strings.Contains(strings.Join(rrep.Problems, ";"), "unsafe path") {
		t.Fatalf("err %v, report %+v", err, rrep)
	}
	if read(t, victim) != "keep\n" {
		t.Fatal("victim touched")
	}
	if _, err := os.Stat(filepath.Join(root, "c.txt")); err != nil {
		t.Fatal("workspace changed by a refused rollback")
	}
	if _, err := CapsuleDir(root, "../../etc"); !errors.Is(err, ErrBadRunID) {
		t.Fatalf("run id traversal: %v", err)
	}
}

func TestUnsealedCapsuleRefused(t *testing.T) {
	root := project(t)
	out := runIn(t, root, allowAll(), 0, `echo x > c.txt`)
	os.Remove(filepath.Join(out.dir, FileIntegrity))
	rep, _ := Verify(context.Background(), out.dir, filepath.Base(out.dir))
	if rep.OK || rep.Sealed {
		t.Fatalf("%+v", rep)
	}
	if _, _, err := Rollback(context.Background(), root, filepath.Base(out.dir), RollbackOptions{}); !errors.Is(err, ErrUnverified) {
		t.Fatalf("err %v", err)
	}
}

func TestLimitsAndBackupBounds(t *testing.T) {
	root := project(t)
	write(t, filepath.Join(root, "big.bin"), strings.Repeat("x", 5000))
	pol := allowAll()
	pol.Limits = Limits{MaxFilesChanged: 2, MaxFilesDeleted: 1, MaxBytesWritten: 10, MaxDuration: Duration(time.Nanosecond)}
	pol.Backups = BackupBounds{MaxFileBytes: 1000, MaxTotalBytes: 1000, MaxFiles: 10}
	out := runIn(t, root, pol, 0, `rm a.txt sub/b.txt big.bin; echo 0123456789abcdef > n`)
	var got []string
	for _, v := range out.res.LimitViolations {
		got = append(got, v.Limit)
	}
	if !slices.Equal(got, []string{"max_files_changed", "max_files_deleted", "max_bytes_written", "max_duration"}) {
		t.Fatalf("violations %+v", out.res.LimitViolations)
	}
	if out.res.Status != StatusDenied {
		t.Fatalf("status %s", out.res.Status)
	}
	for _, c := range out.res.Changes {
		if c.Path == "big.bin" && (c.Recovery.Available || !strings.Contains(c.Recovery.Reason, "bounds")) {
			t.Fatalf("big.bin recovery %+v", c.Recovery)
		}
	}
	if !slices.ContainsFunc(out.res.ObservationWarnings, func(w Warning) bool { return w.Code == "backup_too_large" }) {
		t.Fatalf("warnings %+v", out.res.ObservationWarnings)
	}
}

func TestBlastRadiusDeterministic(t *testing.T) {
	ch := []Change{
		{Change: Created, Decision: Review, Recovery: Recovery{Available: true}},
		{Change: Modified, Decision: Deny, Recovery: Recovery{Available: true}},
		{Change: Deleted, Decision: Allow},
	}
	a := blastRadius(ch, 1<<20, 1, 2, 1, 0)
	b := blastRadius(ch, 1<<20, 1, 2, 1, 0)
	// 1 + 2 + 4 + 2 + 10 + 3 + bits.Len(256)=9 + 10 + 4 + 5 = 50
	if a.Score != 50 || a.Level != "high" {
		t.Fatalf("score %d level %s: %+v", a.Score, a.Level, a.Components)
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if !bytes.Equal(ja, jb) {
		t.Fatal("not deterministic")
	}
	if z := blastRadius(nil, 0, 0, 0, 0, 0); z.Score != 0 || z.Level != "none" {
		t.Fatalf("%+v", z)
	}
}

func TestConcurrentRunRefused(t *testing.T) {
	root := project(t)
	state, _, _ := StateDirs(root)
	l, err := tryLock(state)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, _, err = Run(context.Background(), RunOptions{Root: root, Argv: []string{"true"}, Env: os.Environ()})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("err %v", err)
	}
}

func TestStateDirSymlinkRefused(t *testing.T) {
	root := project(t)
	os.Symlink(t.TempDir(), filepath.Join(root, StateDir))
	_, _, err := Run(context.Background(), RunOptions{Root: root, Argv: []string{"true"}, Env: os.Environ()})
	if err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("err %v", err)
	}
}

func fmtSscan(s string, v *int) (int, error) { return fmt.Sscan(strings.TrimSpace(s), v) }
func itoa(i int) string                      { return strconv.Itoa(i) }

func TestCancelledRunIsSealed(t *testing.T) {
	root := project(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res, dir, err := Run(ctx, RunOptions{Root: root, Policy: allowAll(), Argv: []string{"sh", "-c", "echo x > n; sleep 10"}, Env: os.Environ()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != StatusFailed || !slices.ContainsFunc(res.ObservationWarnings, func(w Warning) bool { return w.Code == "cancelled" }) {
		t.Fatalf("status %s warnings %+v", res.Status, res.ObservationWarnings)
	}
	if len(res.Changes) != 1 {
		t.Fatalf("changes %+v", res.Changes)
	}
	verifyOK(t, dir)
}

func TestStatCache(t *testing.T) {
	root := project(t)
	keyDir := t.TempDir()
	run := func(script string) *Result {
		t.Helper()
		res, _, err := Run(context.Background(), RunOptions{Root: root, Policy: allowAll(), Argv: []string{"sh", "-c", script}, Env: os.Environ(), KeyDir: keyDir})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	run("true")
	state := filepath.Join(root, StateDir)
	key, err := cacheKey(keyDir)
	if err != nil || len(key) != 32 {
		t.Fatalf("key %v", err)
	}
	// Files written just now are racy: their hashes must not be reused.
	c := loadStatCache(state, key)
	if c == nil || len(c.base) != 4 {
		t.Fatalf("cache %+v", c)
	}
	for _, e := range c.base {
		if e.reuse {
			t.Fatalf("racy entry reusable: %+v", e)
		}
	}
	// Past the racy window a run re-hashes them once and the cache records them.
	time.Sleep(racyWindow + 100*time.Millisecond)
	run("true")
	c = loadStatCache(state, key)
	if c == nil || len(c.delta) != 3 {
		t.Fatalf("cache delta %+v", c)
	}
	for p, e := range c.delta {
		if !e.reuse {
			t.Fatalf("%s not reusable", p)
		}
	}
	// An authenticated entry is trusted: plant a correctly authenticated wrong hash and see it used.
	wrong := strings.Repeat("0", 64)
	b, _ := os.ReadFile(filepath.Join(state, statCacheName))
	_, body, _ := bytes.Cut(b, []byte("\n"))
	body = bytes.Replace(body, []byte(c.delta["a.txt"].SHA256), []byte(wrong), 1)
	os.WriteFile(filepath.Join(state, statCacheName), append([]byte(statCacheHeader+" "+mac(key, body)+"\n"), body...), 0o600)
	store, err := openStore(state)
	if err != nil {
		t.Fatal(err)
	}
	defer store.close()
	c = loadStatCache(state, key)
	bs, err := newLister(root, store).takeBefore(context.Background(), c.base, c, DefaultPolicy().Backups, false)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range bs.entries {
		found = found || (e.Path == "a.txt" && e.SHA256 == wrong)
	}
	if !found {
		t.Fatal("authenticated cache entry not used")
	}
	// A cache rewritten without the key is ignored.
	b, _ = os.ReadFile(filepath.Join(state, statCacheName))
	os.WriteFile(filepath.Join(state, statCacheName), bytes.Replace(b, []byte(wrong), []byte(strings.Repeat("1", 64)), 1), 0o600)
	if loadStatCache(state, key) != nil {
		t.Fatal("forged cache accepted")
	}
	res := run("echo x >> a.txt")
	if len(res.Changes) != 1 || !res.Changes[0].Recovery.Available {
		t.Fatalf("changes %+v", res.Changes)
	}
}

// A child that moves the capsule directory (and plants a symlink in its
// place, or moves it out of the root) cannot redirect agentdiff's writes,
// nor lose the evidence: the capsule is sealed where the directory went,
// and its result and events say so.
func TestChildMovesCapsuleDir(t *testing.T) {
	away := t.TempDir()
	for _, tc := range []struct{ name, script, suffix string }{
		{"swapped for a symlink", `for d in .agentdiff/runs/*; do mv "$d" "$d.moved"; ln -s ` + away + ` "$d"; done; echo x > new.txt`, ".moved"},
		{"moved out of the root", `mkdir -p ` + away + `/stolen; mv .agentdiff/runs/* ` + away + `/stolen/; echo x > new.txt`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := project(t)
			res, dir, err := Run(context.Background(), RunOptions{Root: root, Policy: allowAll(), Env: os.Environ(),
				Argv: []string{"sh", "-c", tc.script}})
			if err != nil {
				t.Fatalf("err %v", err)
			}
			if strings.HasPrefix(dir, filepath.Join(root, StateDir)) && tc.suffix == "" || !strings.HasSuffix(dir, tc.suffix) {
				t.Fatalf("sealed at %s", dir)
			}
			if ents, _ := os.ReadDir(away); tc.suffix != "" && len(ents) != 0 {
				t.Fatalf("writes were redirected through the symlink: %v", ents)
			}
			if res.SafetyOutcome != Deny || !slices.ContainsFunc(res.ObservationWarnings, func(w Warning) bool {
				return w.Code == "capsule_moved" && strings.Contains(w.Message, dir)
			}) || len(res.Changes) != 1 {
				t.Fatalf("result %+v", res)
			}
			if rep, err := Verify(context.Background(), dir, res.RunID); err != nil || !rep.OK {
				t.Fatalf("verify %+v %v", rep, err)
			}
			ev, err := os.ReadFile(filepath.Join(dir, FileEvents))
			if err != nil || !strings.Contains(string(ev), `"capsule_moved"`) {
				t.Fatalf("events %s %v", ev, err)
			}
		})
	}
}

func TestStatCacheRoundTripNames(t *testing.T) {
	state := t.TempDir()
	store, err := openStore(state)
	if err != nil {
		t.Fatal(err)
	}
	defer store.close()
	key := bytes.Repeat([]byte{7}, 32)
	names := []string{"a", "a/b", "a-b", "back\\slash", "new\nline", "plain.txt", `quo"te`, "sp ace", "ünïcode", "ünïcode/ファイル"}
	var ents []*ManifestEntry
	for i, n := range names {
		e := &ManifestEntry{Path: n, Type: "file", Mode: "0644", SHA256: strings.Repeat("ab", 32), Size: int64(i),
			MtimeNS: 1, ctimeNS: 2, dev: 3, ino: uint64(10 + i), Nlink: 1, hasStatID: true}
		if n == "a" || n == "ünïcode" {
			e.Type, e.SHA256, e.Mode = "dir", "", "0755"
		}
		if n == "sp ace" {
			e.Type, e.SHA256, e.Target = "symlink", "", "../t \"x\""
		}
		ents = append(ents, e)
	}
	slices.SortFunc(ents, func(a, b *ManifestEntry) int { return walkCompare(a.Path, b.Path) })
	sum, _, err := writeBase(state, ents)
	if err != nil {
		t.Fatal(err)
	}
	var files []*ManifestEntry
	for _, e := range ents {
		if e.Type == "file" {
			files = append(files, e)
		}
	}
	if err := saveStatCache(state, key, sum, time.Now().Add(time.Hour).UnixNano(), time.Now().Add(time.Hour), files, store); err != nil {
		t.Fatal(err)
	}
	c := loadStatCache(state, key)
	if c == nil || len(c.base) != len(names) {
		t.Fatalf("loaded %+v", c)
	}
	for i, e := range ents {
		g := c.base[i]
		if g.Path != e.Path || g.Type != e.Type || g.Size != e.Size || g.ino != e.ino || g.dev != 3 || g.ctimeNS != 2 || g.Target != e.Target || g.SHA256 != e.SHA256 {
			t.Fatalf("%q: %+v", e.Path, g)
		}
	}
	if len(c.delta) != len(files) || c.delta["new\nline"] == nil || !c.delta["new\nline"].reuse {
		t.Fatalf("delta %+v", c.delta)
	}
	if loadStatCache(state, bytes.Repeat([]byte{8}, 32)) != nil {
		t.Fatal("cache accepted under another key")
	}
}
