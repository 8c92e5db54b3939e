package capture

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/action"
	"github.com/agentscm/agentscm/internal/agent"
	"github.com/agentscm/agentscm/internal/agent/claude"
	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/source"
	"github.com/agentscm/agentscm/internal/spool"
)

func TestActionResultMapping(t *testing.T) {
	const none = -1 << 40
	bash := action.DefaultRule
	write := action.Rule{Tool: "Write", Kind: "execution", Coverage: "unknown", ResultSource: "unverified"}
	cases := []struct {
		name   string
		rule   action.Rule
		hook   string
		resp   string
		field  string
		code   int // none: no code
		result string
	}{
		{"exit_code 0", bash, "PostToolUse", `{"stdout":"","exit_code":0}`, "integer", 0, "succeeded"},
		{"exit_code 3", bash, "PostToolUse", `{"exit_code":3}`, "integer", 3, "failed"},
		{"exitCode 0", bash, "PostToolUse", `{"exitCode":0}`, "integer", 0, "succeeded"},
		{"exitCode 127", bash, "PostToolUse", `{"exitCode":127}`, "integer", 127, "failed"},
		{"negative exitCode", bash, "PostToolUse", `{"exitCode":-1}`, "integer", -1, "failed"},
		{"both keys agree", bash, "PostToolUse", `{"exit_code":2,"exitCode":2}`, "integer", 2, "failed"},
		{"both keys disagree", bash, "PostToolUse", `{"exit_code":0,"exitCode":2}`, "malformed", none, "unknown"},
		{"string 3", bash, "PostToolUse", `{"exit_code":"3"}`, "malformed", none, "unknown"},
		{"float 3.0", bash, "PostToolUse", `{"exit_code":3.0}`, "malformed", none, "unknown"},
		{"exponent", bash, "PostToolUse", `{"exit_code":3e0}`, "malformed", none, "unknown"},
		{"float 0.5", bash, "PostToolUse", `{"exitCode":0.5}`, "malformed", none, "unknown"},
		{"null", bash, "PostToolUse", `{"exit_code":null}`, "malformed", none, "unknown"},
		{"bool", bash, "PostToolUse", `{"exit_code":false}`, "malformed", none, "unknown"},
		{"out of int32", bash, "PostToolUse", `{"exit_code":4294967296}`, "malformed", none, "unknown"},
		{"leading zero", bash, "PostToolUse", `{"exit_code":03}`, "absent", none, "unknown"}, // not JSON at all
		{"missing (Claude Code 2.1.x success)", bash, "PostToolUse", `{"stdout":"ok","stderr":"","interrupted":false,"isImage":false}`, "absent", none, "unknown"},
		{"no tool_response", bash, "PostToolUse", ``, "absent", none, "unknown"},
		{"response not an object", bash, "PostToolUse", `"Exit code 0"`, "absent", none, "unknown"},
		{"failure hook", bash, "PostToolUseFailure", ``, "absent", none, "failed"},
		{"failure hook with exit_code 0", bash, "PostToolUseFailure", `{"exit_code":0}`, "integer", 0, "failed"},
		{"unverified returned", write, "PostToolUse", `{"exit_code":0}`, "integer", 0, "unknown"},
		{"unverified failed", write, "PostToolUseFailure", ``, "absent", none, "failed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, field := action.ExplicitExitCode(json.RawMessage(tc.resp))
			if field != tc.field || (code == nil) != (tc.code == none) || (code != nil && *code != tc.code) {
				t.Fatalf("ExplicitExitCode(%s) = %v, %q; want %d, %q", tc.resp, code, field, tc.code, tc.field)
			}
			result, verification := action.Result(tc.rule, tc.hook, code)
			if result != tc.result || verification != "unknown" {
				t.Fatalf("ActionResult = %q, %q; want %q, unknown", result, verification, tc.result)
			}
		})
	}
}

func TestActionIDIgnoresTargetAndCommand(t *testing.T) {
	a := action.ID("claude-code", "native-1", "toolu_1")
	if a != action.ID("claude-code", "native-1", "toolu_1") || a == action.ID("claude-code", "native-2", "toolu_1") || a == action.ID("claude-code", "native-1", "toolu_2") {
		t.Fatal("action id must derive from the native session and tool_use_id exactly")
	}
	if len(a) != 36 {
		t.Fatalf("action id %q", a)
	}
}

func TestCanonicalInputDigest(t *testing.T) {
	if action.CanonicalInputDigest(json.RawMessage(`{"b":1,"a":"x"}`)) != action.CanonicalInputDigest(json.RawMessage(` {"a":"x", "b":1}`)) {
		t.Fatal("key order or whitespace changed the canonical input")
	}
	if action.CanonicalInputDigest(json.RawMessage(`{"a":1}`)) == action.CanonicalInputDigest(json.RawMessage(`{"a":1.0}`)) {
		t.Fatal("a different number literal is a different input")
	}
	if action.CanonicalInputDigest(nil) != action.CanonicalInputDigest(json.RawMessage(`null`)) {
		t.Fatal("absent input must hash as null")
	}
}

func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"}, args...)...)
	cmd.Env = source.GitEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

// actionFixture drives recordAction directly on a real spool, as
// HandleClaudeHook does after appending the lifecycle event.
type actionFixture struct {
	t   *testing.T
	sp  *spool.Spool
	cfg string
	bd  *binding.Binding
}

func newActionFixture(t *testing.T) *actionFixture {
	sp, err := spool.Init(filepath.Join(t.TempDir(), "spool"))
	if err != nil {
		t.Fatal(err)
	}
	return &actionFixture{t: t, sp: sp, cfg: filepath.Join(t.TempDir(), "agentscm"),
		bd: &binding.Binding{Root: t.TempDir(), ActionRules: []action.Rule{action.DefaultRule}, SetupDigest: strings.Repeat("a", 64)}}
}

// hook appends the lifecycle record of payload p and records its action.
func (f *actionFixture) hook(p *agent.Payload, limit int) (string, error) {
	f.t.Helper()
	rec, ok, err := claude.Map(p, event.ModeMetadataOnly, time.Now())
	if err != nil || !ok {
		f.t.Fatal(err)
	}
	rec.WorkID, rec.Generation, rec.CanonicalSession = "wrk_1", 1, "default"
	ss, err := f.sp.Begin(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	defer ss.Close()
	if _, err := ss.Append(rec); err != nil {
		f.t.Fatal(err)
	}
	src := func(context.Context, string) (*event.SourceBinding, error) {
		return &event.SourceBinding{Head: strings.Repeat("1", 40), Tree: strings.Repeat("2", 40)}, nil
	}
	return recordAction(context.Background(), actionEnv{ss: ss, sp: f.sp, configDir: f.cfg, bd: f.bd, p: p, rec: rec, now: time.Now(), source: src, receiptLimit: limit})
}

func (f *actionFixture) actions() []event.Record {
	recs, err := f.sp.Events()
	if err != nil {
		f.t.Fatal(err)
	}
	var out []event.Record
	for _, r := range recs {
		if r.Action != nil || (r.Gap != nil && r.Gap.RefusedKind == event.ActionStart) {
			out = append(out, r)
		}
	}
	return out
}

func pre(id string) *agent.Payload {
	return &agent.Payload{SessionID: "native-1", Cwd: "/x", HookEventName: "PreToolUse", ToolName: "Bash", ToolUseID: id, ToolInput: json.RawMessage(`{"command":"true"}`)}
}

// TestActionReceiptLimit: past the receipt bound a start is refused with a
// capture_interrupted gap in the spool, never dropped silently.
func TestActionReceiptLimit(t *testing.T) {
	f := newActionFixture(t)
	for i, want := range []string{action.Started, action.Started, action.ReceiptLimit} {
		if got, err := f.hook(pre("t"+strconv.Itoa(i)), 2); got != want || err != nil {
			t.Fatalf("start %d: %q, %v; want %q", i, got, err, want)
		}
	}
	recs := f.actions()
	if len(recs) != 3 || recs[2].Kind != event.KindGap || recs[2].Gap.Kind != event.GapCaptureInterrupted || recs[2].Gap.Reason != "action_receipt_limit" || recs[2].WorkID != "wrk_1" {
		t.Fatalf("records %+v", recs)
	}
	// An exact retry of an admitted start is still a duplicate at the bound.
	if got, err := f.hook(pre("t0"), 2); got != action.StartDuplicate || err != nil {
		t.Fatalf("retry at the bound: %q, %v", got, err)
	}
}

// TestActionPendingReceiptReplayed: a crash between the durable pending
// receipt and its append leaves the receipt pending; the retry appends the
// retained record (same order, same bytes) and commits the receipt.
func TestActionPendingReceiptReplayed(t *testing.T) {
	f := newActionFixture(t)
	if got, err := f.hook(pre("t1"), 0); got != action.Started || err != nil {
		t.Fatal(got, err)
	}
	rs := openActionReceipts(f.cfg, f.sp)
	id := action.ID(claude.AgentName, "native-1", "t1")
	// Simulate the crash: the receipt back to pending, the append undone is
	// not needed (a duplicate append is what the Hub absorbs).
	if err := os.Rename(filepath.Join(rs.dir, id+".s"), filepath.Join(rs.dir, id+".s.pending")); err != nil {
		t.Fatal(err)
	}
	if got, err := f.hook(pre("t1"), 0); got != action.Started || err != nil {
		t.Fatal(got, err)
	}
	recs := f.actions()
	if len(recs) != 2 || recs[0].Action.ObservationOrder != recs[1].Action.ObservationOrder || recs[0].Seq == recs[1].Seq {
		t.Fatalf("replayed start %+v", recs)
	}
	a, b := recs[0], recs[1]
	a.Seq, b.Seq = 0, 0
	if ja, jb := mustMarshal(a), mustMarshal(b); string(ja) != string(jb) {
		t.Fatalf("replayed record differs:\n%s\n%s", ja, jb)
	}
	if _, pending, err := rs.read(id + ".s"); err != nil || pending {
		t.Fatalf("receipt pending %v, %v", pending, err)
	}
	if got, _ := f.hook(pre("t1"), 0); got != action.StartDuplicate {
		t.Fatalf("after replay: %q", got)
	}
}

// FuzzExplicitExitCode: any tool_response maps without panicking, and only
// an explicit integer field yields a code, whose result follows its sign.
func FuzzExplicitExitCode(f *testing.F) {
	for _, s := range []string{`{"exit_code":0}`, `{"exitCode":-3}`, `{"exit_code":"3"}`, `{"exit_code":3.0}`, `[]`, `null`, ``, `{"exit_code":0,"exitCode":0}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		code, field := action.ExplicitExitCode(b)
		if (code != nil) != (field == "integer") {
			t.Fatalf("code %v with field %q", code, field)
		}
		res, ver := action.Result(action.DefaultRule, "PostToolUse", code)
		if ver != "unknown" || (code == nil && res != "unknown") || (code != nil && (res == "succeeded") != (*code == 0)) {
			t.Fatalf("result %q %q for %v", res, ver, code)
		}
	})
}

// TestActionFinishAppendsPendingStart: a start whose append never happened
// (its receipt still pending) is appended before its finish.
func TestActionFinishAppendsPendingStart(t *testing.T) {
	f := newActionFixture(t)
	if got, err := f.hook(pre("t1"), 0); got != action.Started || err != nil {
		t.Fatal(got, err)
	}
	rs := openActionReceipts(f.cfg, f.sp)
	id := action.ID(claude.AgentName, "native-1", "t1")
	os.Rename(filepath.Join(rs.dir, id+".s"), filepath.Join(rs.dir, id+".s.pending"))
	post := pre("t1")
	post.HookEventName = "PostToolUse"
	if got, err := f.hook(post, 0); got != action.Finished || err != nil {
		t.Fatal(got, err)
	}
	recs := f.actions()
	if len(recs) != 3 || recs[1].Kind != event.ActionStart || recs[2].Kind != event.ActionFinish || recs[2].Action.Result != "unknown" {
		t.Fatalf("records %+v", recs)
	}
	if _, pending, _ := rs.read(id + ".s"); pending {
		t.Fatal("start receipt still pending")
	}
}
