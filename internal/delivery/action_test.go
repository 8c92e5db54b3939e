package delivery

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/action"
	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/spool"
)

// gitRepo makes the fixture's root a Git repository with one commit.
func (f *fixture) gitRepo(t testing.TB) {
	t.Helper()
	os.WriteFile(filepath.Join(f.root, "README"), []byte("hi\n"), 0o644)
	for _, args := range [][]string{{"init", "-q"}, {"add", "README"}, {"commit", "-q", "-m", "init"}} {
		cmd := exec.Command("git", append([]string{"-C", f.root, "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	// One-step setup excludes the hook settings it writes when the checkout
	// is a repository already; this one became one afterwards.
	os.WriteFile(filepath.Join(f.root, ".git", "info", "exclude"), []byte(".claude/\n"), 0o644)
}

// setBinding changes the binding's setup digest and rules, as a later
// configure would.
func (f *fixture) setBinding(t testing.TB, setup string, rules ...action.Rule) {
	t.Helper()
	err := f.store.Bindings().Update(func(c *binding.Config) (bool, error) {
		for i := range c.Bindings {
			if c.Bindings[i].Root == f.root {
				c.Bindings[i].SetupDigest = setup
				if rules != nil {
					c.Bindings[i].ActionRules = rules
				}
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) hookErr(payload string) (*capture.HookResult, error) {
	return capture.HandleClaudeHook(context.Background(), f.store, Opener{f.cfg}, strings.NewReader(payload), time.Now())
}

func (f *fixture) actionRecords(t *testing.T) []event.Record {
	t.Helper()
	sp, err := spool.Open(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := sp.Events()
	if err != nil {
		t.Fatal(err)
	}
	var out []event.Record
	for _, r := range recs {
		if r.Kind == event.ActionStart || r.Kind == event.ActionFinish {
			out = append(out, r)
		}
	}
	return out
}

func tool(name, id, input, extra string) string {
	s := `,"tool_name":"` + name + `"`
	if id != "" {
		s += `,"tool_use_id":"` + id + `"`
	}
	if input != "" {
		s += `,"tool_input":` + input
	}
	return s + extra
}

var (
	setupA = strings.Repeat("a", 64)
	setupB = strings.Repeat("b", 64)
	setupC = strings.Repeat("c", 64)
)

// TestActionsFromRules drives the real hook, spool and embedded Hub through
// the rule outcomes: Bash without an exit code is unknown, an explicit
// exit_code maps, a failure hook is failed, Write under unverified is unknown
// with the source drift it caused, each start bound to its setup and source.
func TestActionsFromRules(t *testing.T) {
	f := newFixture(t)
	f.gitRepo(t)
	f.setBinding(t, setupA, action.DefaultRule, action.Rule{Tool: "Write", Kind: "execution", Coverage: "unknown", ResultSource: "unverified"})
	work := f.startWork(t)
	f.hook(t, f.payload("SessionStart", `,"source":"startup"`))
	steps := []struct {
		hook, tool, id, input, extra, want string
		write                              bool
	}{
		{"PreToolUse", "Bash", "t1", `{"command":"true"}`, "", action.Started, false},
		{"PostToolUse", "Bash", "t1", `{"command":"true"}`, `,"tool_response":{"stdout":"","stderr":"","interrupted":false,"isImage":false}`, action.Finished, false},
		{"PreToolUse", "Bash", "t2", `{"command":"exit 3"}`, "", action.Started, false},
		{"PostToolUseFailure", "Bash", "t2", `{"command":"exit 3"}`, `,"error":"Exit code 3"`, action.Finished, false},
		{"PreToolUse", "Bash", "t3", `{"command":"make"}`, "", action.Started, false},
		{"PostToolUse", "Bash", "t3", `{"command":"make"}`, `,"tool_response":{"exit_code":0}`, action.Finished, false},
		{"PreToolUse", "Write", "t4", `{"file_path":"x"}`, "", action.Started, false},
		{"PostToolUse", "Write", "t4", `{"file_path":"x"}`, `,"tool_response":{"type":"create"}`, action.Finished, true},
		// A tool without a rule is no action; nor is a call without a
		// tool_use_id.
		{"PreToolUse", "Edit", "t5", `{}`, "", "", false},
		{"PostToolUse", "Edit", "t5", `{}`, "", "", false},
		{"PreToolUse", "Bash", "", `{"command":"ls"}`, "", action.NoToolUseID, false},
		{"PostToolUse", "Bash", "", `{"command":"ls"}`, "", action.NoToolUseID, false},
	}
	for i, s := range steps {
		if s.write {
			// The Write's effect lands before its PostToolUse.
			os.WriteFile(filepath.Join(f.root, "x"), []byte("new"), 0o644)
		}
		r := f.hook(t, f.payload(s.hook, tool(s.tool, s.id, s.input, s.extra)))
		if r.Action != s.want || r.Failed != 0 || r.DeliveryErr != nil {
			t.Fatalf("step %d %s %s: %+v, want action %q", i, s.hook, s.tool, r, s.want)
		}
	}
	rec := f.record(t, work)
	want := map[string]struct{ result, drift string }{
		"t1": {"unknown", "none_observed"}, "t2": {"failed", "none_observed"}, "t3": {"succeeded", "none_observed"}, "t4": {"unknown", "changed"},
	}
	if len(rec.Actions) != len(want) {
		t.Fatalf("actions %+v", rec.Actions)
	}
	sp, _ := spool.Open(f.spool)
	orders := map[int64]bool{}
	for id, w := range want {
		var a *api.ActionRecord
		for i := range rec.Actions {
			if rec.Actions[i].ActionID == action.ID("claude-code", "native-1", id) {
				a = &rec.Actions[i]
			}
		}
		if a == nil || a.Status != "complete" || a.Finish.Result != w.result || a.Finish.Verification != "unknown" || a.Finish.Drift != w.drift || a.Finish.Stale {
			t.Fatalf("%s: %+v %+v, want %+v", id, a, a.Finish, w)
		}
		st := a.Start
		if st.Class != "execution" || st.SetupDigest != setupA || a.Finish.SetupDigest != setupA || st.Source == nil || len(st.Source.Head) != 40 || st.Source.Dirty ||
			st.ObservationScope != sp.ObservationScope() || orders[st.ObservationOrder] || st.StartedAt == 0 {
			t.Fatalf("%s start %+v source %+v", id, st, st.Source)
		}
		orders[st.ObservationOrder] = true
	}
	if code := rec.Actions; code == nil {
		t.Fatal("no actions")
	}
	for _, a := range rec.Actions {
		if a.ActionID == action.ID("claude-code", "native-1", "t3") && (a.Finish.ExitCode == nil || *a.Finish.ExitCode != 0) {
			t.Fatalf("t3 exit code %+v", a.Finish)
		}
	}
}

// TestActionRetries: an exact retry of a start or finish is a duplicate
// (nothing appended, the source not captured again); a changed input or
// typed result under the same tool-use identity is a conflict; a changed
// setup makes the finish stale, and later retries reuse that finish even
// after setup and rules changed again.
func TestActionRetries(t *testing.T) {
	f := newFixture(t)
	f.gitRepo(t)
	f.setBinding(t, setupA)
	work := f.startWork(t)
	pre := f.payload("PreToolUse", tool("Bash", "t1", `{"command":"true"}`, ""))
	if r := f.hook(t, pre); r.Action != action.Started {
		t.Fatalf("start: %+v", r)
	}
	// The source changes, then the host retries the exact start: nothing
	// new, and the retained start keeps the clean source.
	os.WriteFile(filepath.Join(f.root, "README"), []byte("changed\n"), 0o644)
	if r, _ := f.hookErr(pre); r.Action != action.StartDuplicate {
		t.Fatalf("exact retry: %+v", r)
	}
	// Same tool_use_id, another command: a conflict, nothing appended.
	r, err := f.hookErr(f.payload("PreToolUse", tool("Bash", "t1", `{"command":"rm -rf /"}`, "")))
	// The occurrence claim refuses it before the action path runs.
	if !errors.Is(err, capture.ErrOccurrenceConflict) || r.Claim != "conflict" || r.Action != "" {
		t.Fatalf("changed input: %+v, %v", r, err)
	}
	if n := len(f.actionRecords(t)); n != 1 {
		t.Fatalf("%d action records after retries, want 1", n)
	}
	os.WriteFile(filepath.Join(f.root, "README"), []byte("hi\n"), 0o644)
	// The setup changes before the completion: the finish is stale and
	// does not check source drift.
	f.setBinding(t, setupB)
	post := f.payload("PostToolUse", tool("Bash", "t1", `{"command":"true"}`, `,"tool_response":{"exit_code":0}`))
	if r := f.hook(t, post); r.Action != action.Finished {
		t.Fatalf("finish: %+v", r)
	}
	// Setup, rules and source change again; the exact finish retry reuses
	// the original finish.
	f.setBinding(t, setupC, action.Rule{Tool: "Bash", Kind: "execution", Coverage: "complete", ResultSource: "unverified"})
	os.WriteFile(filepath.Join(f.root, "README"), []byte("again\n"), 0o644)
	if r, _ := f.hookErr(post); r.Action != action.FinishDuplicate {
		t.Fatalf("finish retry: %+v", r)
	}
	// A changed typed result under the same identity is a conflict.
	r, err = f.hookErr(f.payload("PostToolUse", tool("Bash", "t1", `{"command":"true"}`, `,"tool_response":{"exit_code":1}`)))
	if !errors.Is(err, capture.ErrOccurrenceConflict) || r.Claim != "conflict" {
		t.Fatalf("changed result: %+v, %v", r, err)
	}
	r, err = f.hookErr(f.payload("PostToolUseFailure", tool("Bash", "t1", `{"command":"true"}`, `,"error":"boom"`)))
	if !errors.Is(err, capture.ErrOccurrenceConflict) {
		t.Fatalf("failure after a returned finish: %+v, %v", r, err)
	}
	// A finish whose input differs from the start's is a conflict too.
	if _, err := f.hookErr(f.payload("PostToolUse", tool("Bash", "t1", `{"command":"false"}`, `,"tool_response":{"exit_code":0}`))); !errors.Is(err, capture.ErrOccurrenceConflict) {
		t.Fatalf("finish with another input: %v", err)
	}
	recs := f.actionRecords(t)
	if len(recs) != 2 || recs[1].Action.Result != "succeeded" || !recs[1].Action.Stale || recs[1].Action.Drift != "unknown" ||
		recs[1].Action.SetupDigest != setupA || recs[1].Action.CompletionSetupDigest != setupB || recs[0].Action.Source.Dirty {
		t.Fatalf("spool action records %+v", recs)
	}
	rec := f.record(t, work)
	if len(rec.Actions) != 1 || rec.Actions[0].Status != "complete" || !rec.Actions[0].Finish.Stale || rec.Actions[0].Finish.Result != "succeeded" ||
		rec.Actions[0].Start.SetupDigest != setupA || rec.Actions[0].Finish.SetupDigest != setupB {
		t.Fatalf("hub actions %+v", rec.Actions)
	}
	// The receipts are private.
	dir := filepath.Join(f.cfg, "capture-actions")
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := d.Info()
		if (d.IsDir() && fi.Mode().Perm() != 0o700) || (!d.IsDir() && fi.Mode().Perm() != 0o600) {
			t.Errorf("%s has mode %v", p, fi.Mode())
		}
		return nil
	})
}

// TestDeferredStartMakesNoAction: a PreToolUse without an exact target
// keeps only the sanitized lifecycle fact; no action start is appended. Its
// completion after a Work exists is recorded alone: the Hub lists the
// action as finish_without_start, so the missing start is visible (on
// main the action vanished without a trace).
func TestDeferredStartMakesNoAction(t *testing.T) {
	f := newFixture(t)
	f.gitRepo(t)
	r := f.hook(t, f.payload("PreToolUse", tool("Bash", "t1", `{"command":"true"}`, "")))
	if !r.Deferred || r.Action != action.Deferred {
		t.Fatalf("deferred start: %+v", r)
	}
	// The sanitized fact keeps the source the start observed (seed: "An
	// unresolved PreToolUse also captures the source ... when possible").
	rep, err := capture.ListDeferred(f.spool, 100)
	if err != nil {
		t.Fatal(err)
	}
	var src *event.SourceBinding
	for _, fact := range rep.Facts {
		if fact.Kind == event.ToolStart && fact.ToolUseID == "t1" {
			src = fact.Source
		}
	}
	if src == nil || len(src.Head) != 40 {
		t.Fatalf("deferred start's source: %+v in %+v", src, rep.Facts)
	}
	work := f.startWork(t)
	r = f.hook(t, f.payload("PostToolUse", tool("Bash", "t1", `{"command":"true"}`, "")))
	if r.Deferred || r.Action != action.FinishWithoutStart {
		t.Fatalf("finish without a retained start: %+v", r)
	}
	if recs := f.actionRecords(t); len(recs) != 1 || recs[0].Kind != event.ActionFinish || recs[0].Action.Drift != "unknown" {
		t.Fatalf("action records %+v", recs)
	}
	// A retry is a duplicate.
	if r = f.hook(t, f.payload("PostToolUse", tool("Bash", "t1", `{"command":"true"}`, ""))); r.Action != action.FinishDuplicate {
		t.Fatalf("retried finish without a start: %+v", r)
	}
	if rec := f.record(t, work); len(rec.Actions) != 1 || rec.Actions[0].Status != "finish_without_start" || rec.Coverage.State != "partial" {
		t.Fatalf("hub actions %+v, coverage %+v", rec.Actions, rec.Coverage)
	}
}

// TestActionFinishKeepsStartTarget: the finish goes to the Work its start
// was bound to, even when another Work is current by then; the finished
// Work refuses it, so it stays retained and the action stays incomplete
// there, rather than being reattributed to the new Work.
func TestActionFinishKeepsStartTarget(t *testing.T) {
	f := newFixture(t)
	f.gitRepo(t)
	first := f.startWork(t)
	if r := f.hook(t, f.payload("PreToolUse", tool("Bash", "t1", `{"command":"true"}`, ""))); r.Action != action.Started {
		t.Fatalf("start: %+v", r)
	}
	conn, err := f.open()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Checkpoint(context.Background(), first, api.CheckpointRequest{Action: api.CheckpointFinish}); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	second := f.startWork(t)
	r := f.hook(t, f.payload("PostToolUse", tool("Bash", "t1", `{"command":"true"}`, "")))
	if r.Action != action.Finished || r.Failed != 1 {
		t.Fatalf("finish: %+v", r)
	}
	recs := f.actionRecords(t)
	if len(recs) != 2 || recs[1].WorkID != first {
		t.Fatalf("finish record bound to %q, want %q", recs[1].WorkID, first)
	}
	if a := f.record(t, first).Actions; len(a) != 1 || a[0].Status != "incomplete" {
		t.Fatalf("first work actions %+v", a)
	}
	if a := f.record(t, second).Actions; len(a) != 0 {
		t.Fatalf("second work actions %+v", a)
	}
}

func (f *fixture) open() (client.Conn, error) {
	return client.Open(context.Background(), f.conn, client.Options{})
}
