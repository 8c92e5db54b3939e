package transcript

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/event"
)

const sess = "35ea52c9-1fcf-493d-af75-7b4e5570d04b"

var now = time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC)

// assistantLine is one Claude Code 2.1.x assistant record: one content block
// of message id, repeating the message's usage.
func assistantLine(session, id string, block string, in, out int) string {
	return fmt.Sprintf(`{"parentUuid":"p","isSidechain":false,"message":{"content":[%s],"id":%q,"model":"claude-opus-5-5","role":"assistant","stop_reason":"tool_use","type":"message","usage":{"input_tokens":%d,"cache_creation_input_tokens":3,"cache_read_input_tokens":4,"output_tokens":%d}},"type":"assistant","uuid":"u","timestamp":"2026-11-29T21:15:49.785Z","sessionId":%q}`+"\n",
		block, id, in, out, session)
}

func userLine(session, text string) string {
	return fmt.Sprintf(`{"type":"user","message":{"role":"user","content":%q},"timestamp":"2026-11-29T21:15:49.598Z","sessionId":%q}`+"\n", text, session)
}

func toolResultLine(session, id, content string, isErr bool) string {
	return fmt.Sprintf(`{"type":"user","message":{"role":"user","content":[{"tool_use_id":%q,"type":"tool_result","content":%q,"is_error":%v}]},"timestamp":"2026-11-29T21:15:50.098Z","sessionId":%q}`+"\n", id, content, isErr, session)
}

const costState = `{"type":"cost-state","sessionId":"` + sess + `","totalCostUSD":0.00176,"modelUsage":{"claude-opus-5-5":{"inputTokens":240,"outputTokens":40,"cacheReadInputTokens":0,"cacheCreationInputTokens":0}}}` + "\n"

func textBlock(s string) string { return fmt.Sprintf(`{"type":"text","text":%q}`, s) }

type fixture struct {
	root, dir, path string
}

func newFixture(t *testing.T, project bool) *fixture {
	t.Helper()
	root := filepath.Join(t.TempDir(), "projects")
	dir := root
	if project {
		dir = filepath.Join(root, "-tmp-repo")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return &fixture{root: root, dir: dir, path: filepath.Join(dir, sess+".jsonl")}
}

func (f *fixture) append(t *testing.T, s string) {
	t.Helper()
	fh, err := os.OpenFile(f.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.WriteString(s); err != nil {
		t.Fatal(err)
	}
	fh.Close()
}

var work1 = Target{WorkID: "wrk_1", Generation: 1, Session: "default"}

func usages(recs []event.Record) []event.Usage {
	var out []event.Usage
	for _, r := range recs {
		if r.Kind == event.KindUsage {
			out = append(out, *r.Usage)
		}
	}
	return out
}

func gapReasons(recs []event.Record) []string {
	var out []string
	for _, r := range recs {
		if r.Kind == event.KindGap {
			out = append(out, r.Gap.Reason)
		}
	}
	return out
}

func TestReadUsageOncePerMessage(t *testing.T) {
	for _, project := range []bool{false, true} {
		f := newFixture(t, project)
		f.append(t, userLine(sess, "hello"))
		f.append(t, assistantLine(sess, "msg_1", textBlock("Step 1."), 120, 20))
		f.append(t, assistantLine(sess, "msg_1", `{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"echo hi"}}`, 120, 20))
		f.append(t, toolResultLine(sess, "toolu_1", "hi", false))
		f.append(t, assistantLine(sess, "msg_2", textBlock("Done."), 130, 7))
		recs, cur, err := Read(f.root, sess, nil, work1, Options{FromStart: true, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		us := usages(recs)
		if len(us) != 2 || us[0].MessageID != "msg_1" || us[1].MessageID != "msg_2" || *us[0].InputTokens != 120 || *us[1].OutputTokens != 7 || *us[0].CacheReadInputTokens != 4 {
			t.Fatalf("project=%v: usages = %+v", project, us)
		}
		if us[0].Scope != event.UsageScopeRequest || us[0].Model != "claude-opus-5-5" {
			t.Fatalf("usage = %+v", us[0])
		}
		if recs[0].ObservedAt.Format(time.RFC3339Nano) != "2026-11-29T21:15:49.785Z" {
			t.Fatalf("the transcript's own timestamp was not kept: %v", recs[0].ObservedAt)
		}
		for _, r := range recs {
			if r.Body != nil || r.Kind != event.KindUsage {
				t.Fatalf("metadata selection produced %+v", r)
			}
		}
		// The same message id in a later read is not counted again.
		f.append(t, assistantLine(sess, "msg_2", `{"type":"tool_use","id":"toolu_2","name":"Bash","input":{}}`, 130, 7))
		recs, cur, err = Read(f.root, sess, cur, work1, Options{Now: now})
		if err != nil || len(recs) != 0 {
			t.Fatalf("re-read: %v %+v", err, recs)
		}
		if project && cur.Dir != "-tmp-repo" {
			t.Fatalf("cursor dir = %q", cur.Dir)
		}
	}
}

func TestPendingUsageWaitsForCompletion(t *testing.T) {
	f := newFixture(t, false)
	// A message written before it completed (no stop_reason): its usage
	// waits until the message is complete.
	line := strings.Replace(assistantLine(sess, "msg_1", textBlock("x"), 10, 1), `"stop_reason":"tool_use"`, `"stop_reason":null`, 1)
	f.append(t, line)
	recs, cur, err := Read(f.root, sess, nil, work1, Options{FromStart: true, Now: now})
	if err != nil || len(recs) != 0 || cur.State.Pending == nil {
		t.Fatalf("pending: %v %+v %+v", err, recs, cur)
	}
	f.append(t, assistantLine(sess, "msg_1", textBlock("y"), 10, 9))
	recs, _, err = Read(f.root, sess, cur, work1, Options{Now: now})
	if us := usages(recs); err != nil || len(us) != 1 || *us[0].OutputTokens != 9 {
		t.Fatalf("completed: %v %+v", err, recs)
	}
	// Flush on a turn end emits a message still pending at end of file.
	f2 := newFixture(t, false)
	f2.append(t, line)
	recs, _, err = Read(f2.root, sess, nil, work1, Options{FromStart: true, Flush: true, Now: now})
	if us := usages(recs); err != nil || len(us) != 1 || *us[0].OutputTokens != 1 {
		t.Fatalf("flush: %v %+v", err, recs)
	}
}

func TestMissingFieldsStayUnknown(t *testing.T) {
	f := newFixture(t, false)
	f.append(t, `{"type":"assistant","sessionId":"`+sess+`","message":{"id":"msg_1","role":"assistant","stop_reason":"end_turn","usage":{"output_tokens":5}}}`+"\n")
	f.append(t, `{"type":"assistant","sessionId":"`+sess+`","message":{"id":"msg_2","role":"assistant","stop_reason":"end_turn","usage":{"input_tokens":-3}}}`+"\n")
	recs, _, err := Read(f.root, sess, nil, work1, Options{FromStart: true, Now: now})
	us := usages(recs)
	if err != nil || len(us) != 2 {
		t.Fatalf("%v %+v", err, recs)
	}
	if us[0].InputTokens != nil || us[0].CacheReadInputTokens != nil || *us[0].OutputTokens != 5 || us[0].Model != "" {
		t.Fatalf("absent fields must stay unknown: %+v", us[0])
	}
	if us[1].InputTokens != nil {
		t.Fatalf("a negative count is not a count: %+v", us[1])
	}
	if !recs[0].ObservedAt.Equal(now) {
		t.Fatalf("a record without a timestamp takes the receipt time: %v", recs[0].ObservedAt)
	}
}

func TestCumulativeKeptApart(t *testing.T) {
	f := newFixture(t, false)
	f.append(t, assistantLine(sess, "msg_1", textBlock("a"), 120, 20))
	f.append(t, costState)
	recs, _, err := Read(f.root, sess, nil, work1, Options{FromStart: true, Now: now})
	us := usages(recs)
	if err != nil || len(us) != 2 {
		t.Fatalf("%v %+v", err, recs)
	}
	if us[1].Scope != event.UsageScopeSessionCumulative || us[1].MessageID != "" || *us[1].InputTokens != 240 || us[1].Model != "claude-opus-5-5" {
		t.Fatalf("cumulative = %+v", us[1])
	}
}

func TestGaps(t *testing.T) {
	type step struct {
		write   func(t *testing.T, f *fixture)
		target  Target
		opts    Options
		gaps    []string
		usages  int
		stopped string
	}
	base := func(t *testing.T, f *fixture) { f.append(t, assistantLine(sess, "msg_1", textBlock("a"), 1, 1)) }
	cases := []struct {
		name  string
		steps []step
	}{
		{"replacement stops the cursor", []step{
			{write: base, usages: 1},
			{write: func(t *testing.T, f *fixture) {
				// A new file renamed over the old one (the old inode is
				// still alive, so the identity differs).
				tmp := f.path + ".new"
				os.WriteFile(tmp, []byte(assistantLine(sess, "msg_1", textBlock("a"), 1, 1)+assistantLine(sess, "msg_2", textBlock("b"), 1, 1)), 0o600)
				keep, _ := os.Open(f.path)
				t.Cleanup(func() { keep.Close() })
				os.Rename(tmp, f.path)
			}, gaps: []string{ReasonReplaced}, stopped: ReasonReplaced},
			{write: func(t *testing.T, f *fixture) { f.append(t, assistantLine(sess, "msg_3", textBlock("c"), 1, 1)) }, stopped: ReasonReplaced},
		}},
		{"removal stops the cursor", []step{
			{write: base, usages: 1},
			{write: func(t *testing.T, f *fixture) { os.Remove(f.path) }, gaps: []string{ReasonReplaced}, stopped: ReasonReplaced},
		}},
		{"truncation stops the cursor", []step{
			{write: base, usages: 1},
			{write: func(t *testing.T, f *fixture) { os.Truncate(f.path, 10) }, gaps: []string{ReasonTruncated}, stopped: ReasonTruncated},
			{write: func(t *testing.T, f *fixture) { f.append(t, assistantLine(sess, "msg_2", textBlock("b"), 1, 1)) }, stopped: ReasonTruncated},
		}},
		{"malformed complete record", []step{
			{write: func(t *testing.T, f *fixture) {
				f.append(t, "{not json\n[1,2]\n"+assistantLine(sess, "msg_1", textBlock("a"), 1, 1))
			}, gaps: []string{ReasonMalformed}, usages: 1},
		}},
		{"incomplete last line waits", []step{
			{write: func(t *testing.T, f *fixture) {
				l := assistantLine(sess, "msg_1", textBlock("a"), 1, 1)
				f.append(t, l[:len(l)-20])
			}},
			{write: func(t *testing.T, f *fixture) {
				l := assistantLine(sess, "msg_1", textBlock("a"), 1, 1)
				f.append(t, l[len(l)-20:])
			}, usages: 1},
		}},
		{"foreign session record", []step{
			{write: func(t *testing.T, f *fixture) {
				f.append(t, assistantLine("other-session", "msg_9", textBlock("x"), 5, 5)+assistantLine(sess, "msg_1", textBlock("a"), 1, 1))
			}, gaps: []string{ReasonForeign}, usages: 1},
		}},
		{"oversized record", []step{
			{write: func(t *testing.T, f *fixture) {
				f.append(t, assistantLine(sess, "msg_big", textBlock(strings.Repeat("x", 5000)), 1, 1)+assistantLine(sess, "msg_1", textBlock("a"), 1, 1))
			}, opts: Options{MaxLine: 1000}, gaps: []string{ReasonOversized}, usages: 1},
		}},
		{"oversized incomplete record is skipped across reads", []step{
			{write: func(t *testing.T, f *fixture) { f.append(t, strings.Repeat("y", 3000)) }, opts: Options{MaxLine: 1000}, gaps: []string{ReasonOversized}},
			{write: func(t *testing.T, f *fixture) {
				f.append(t, strings.Repeat("y", 10)+"\n"+assistantLine(sess, "msg_1", textBlock("a"), 1, 1))
			}, opts: Options{MaxLine: 1000}, usages: 1},
		}},
		{"read bound continues next time", []step{
			{write: func(t *testing.T, f *fixture) {
				for i := range 20 {
					f.append(t, assistantLine(sess, fmt.Sprintf("msg_%d", i), textBlock("a"), 1, 1))
				}
			}, opts: Options{MaxLine: 600, MaxRead: 1200}, usages: 2},
			{opts: Options{MaxLine: 600, MaxRead: 1200}, usages: 2},
		}},
		{"work change rebinds at end of file", []step{
			{write: base, usages: 1},
			{write: func(t *testing.T, f *fixture) { f.append(t, assistantLine(sess, "msg_2", textBlock("b"), 1, 1)) },
				target: Target{WorkID: "wrk_2", Generation: 1, Session: "default"}, gaps: []string{ReasonRebound}},
			{write: func(t *testing.T, f *fixture) { f.append(t, assistantLine(sess, "msg_3", textBlock("c"), 1, 1)) },
				target: Target{WorkID: "wrk_2", Generation: 1, Session: "default"}, usages: 1},
		}},
		{"generation change rebinds", []step{
			{write: base, usages: 1},
			{target: Target{WorkID: "wrk_1", Generation: 2, Session: "default"}, gaps: []string{ReasonRebound}},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, false)
			var cur *Cursor
			for i, s := range tc.steps {
				if s.write != nil {
					s.write(t, f)
				}
				tg := s.target
				if tg == (Target{}) {
					tg = work1
				}
				o := s.opts
				o.FromStart, o.Now = cur == nil, now
				recs, next, err := Read(f.root, sess, cur, tg, o)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if got := gapReasons(recs); strings.Join(got, ",") != strings.Join(s.gaps, ",") {
					t.Fatalf("step %d: gaps %v, want %v (%+v)", i, got, s.gaps, recs)
				}
				if got := len(usages(recs)); got != s.usages {
					t.Fatalf("step %d: %d usage records, want %d", i, got, s.usages)
				}
				if next.Stopped != s.stopped {
					t.Fatalf("step %d: stopped %q, want %q", i, next.Stopped, s.stopped)
				}
				for _, r := range recs {
					if r.Kind == event.KindGap && r.Gap.Kind != event.GapCaptureInterrupted {
						t.Fatalf("gap kind %q", r.Gap.Kind)
					}
				}
				cur = next
			}
		})
	}
}

func TestRunningSessionStartsAtEOF(t *testing.T) {
	f := newFixture(t, false)
	f.append(t, assistantLine(sess, "msg_old", textBlock("a"), 100, 100))
	recs, cur, err := Read(f.root, sess, nil, work1, Options{FromStart: false, Flush: true, Now: now})
	if err != nil || len(recs) != 0 {
		t.Fatalf("old usage attributed: %v %+v", err, recs)
	}
	st, _ := os.Stat(f.path)
	if cur.Offset != st.Size() || !cur.Bound {
		t.Fatalf("cursor %+v, size %d", cur, st.Size())
	}
	f.append(t, assistantLine(sess, "msg_new", textBlock("b"), 1, 1))
	recs, _, err = Read(f.root, sess, cur, work1, Options{Now: now})
	if us := usages(recs); err != nil || len(us) != 1 || us[0].MessageID != "msg_new" {
		t.Fatalf("%v %+v", err, recs)
	}
}

func TestStartupBeforeFileExists(t *testing.T) {
	f := newFixture(t, true)
	recs, cur, err := Read(f.root, sess, nil, work1, Options{FromStart: true, Now: now})
	if err != nil || len(recs) != 0 || cur == nil || cur.Bound {
		t.Fatalf("%v %+v %+v", err, recs, cur)
	}
	f.append(t, assistantLine(sess, "msg_1", textBlock("a"), 1, 1))
	recs, _, err = Read(f.root, sess, cur, work1, Options{Now: now})
	if len(usages(recs)) != 1 || err != nil {
		t.Fatalf("%v %+v", err, recs)
	}
	// Without an observed start and without a file, nothing is recorded.
	if _, c, err := Read(f.root, "other", nil, work1, Options{Now: now}); !errors.Is(err, ErrNotFound) || c != nil {
		t.Fatalf("%v %+v", err, c)
	}
}

func TestRefusals(t *testing.T) {
	t.Run("symlinked root", func(t *testing.T) {
		f := newFixture(t, false)
		f.append(t, assistantLine(sess, "msg_1", textBlock("a"), 1, 1))
		link := filepath.Join(t.TempDir(), "link")
		os.Symlink(f.root, link)
		if _, _, err := Read(link, sess, nil, work1, Options{FromStart: true, Now: now}); !errors.Is(err, ErrRefused) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("root is a file", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "file")
		os.WriteFile(p, nil, 0o600)
		if _, _, err := Read(p, sess, nil, work1, Options{FromStart: true, Now: now}); !errors.Is(err, ErrRefused) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("symlinked transcript", func(t *testing.T) {
		f := newFixture(t, false)
		other := filepath.Join(t.TempDir(), "secret.jsonl")
		os.WriteFile(other, []byte(assistantLine(sess, "msg_1", textBlock("a"), 1, 1)), 0o600)
		os.Symlink(other, f.path)
		if _, _, err := Read(f.root, sess, nil, work1, Options{FromStart: true, Now: now}); !errors.Is(err, ErrRefused) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("symlinked project dir is not searched", func(t *testing.T) {
		f := newFixture(t, false)
		outside := t.TempDir()
		os.WriteFile(filepath.Join(outside, sess+".jsonl"), []byte(assistantLine(sess, "msg_1", textBlock("a"), 1, 1)), 0o600)
		os.Symlink(outside, filepath.Join(f.root, "proj"))
		if _, _, err := Read(f.root, sess, nil, work1, Options{FromStart: false, Now: now}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("basename mismatch", func(t *testing.T) {
		f := newFixture(t, true)
		// Only the exact basename counts: neither a prefix, another
		// extension nor the session's directory is read.
		for _, n := range []string{sess + ".jsonl.bak", sess + "x.jsonl", sess, strings.ToUpper(sess) + ".jsonl"} {
			os.WriteFile(filepath.Join(f.dir, n), []byte(assistantLine(sess, "msg_1", textBlock("a"), 1, 1)), 0o600)
		}
		if _, _, err := Read(f.root, sess, nil, work1, Options{FromStart: false, Now: now}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("err = %v", err)
		}
		for _, bad := range []string{"../" + sess, "a/b", "..", ""} {
			if _, _, err := Read(f.root, bad, nil, work1, Options{Now: now}); !errors.Is(err, ErrRefused) {
				t.Fatalf("%q: err = %v", bad, err)
			}
		}
	})
	t.Run("not a regular file", func(t *testing.T) {
		f := newFixture(t, false)
		os.Mkdir(f.path, 0o700)
		if _, _, err := Read(f.root, sess, nil, work1, Options{Now: now}); !errors.Is(err, ErrRefused) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("ambiguous project dirs", func(t *testing.T) {
		f := newFixture(t, false)
		for _, d := range []string{"a", "b"} {
			os.Mkdir(filepath.Join(f.root, d), 0o700)
			os.WriteFile(filepath.Join(f.root, d, sess+".jsonl"), nil, 0o600)
		}
		if _, _, err := Read(f.root, sess, nil, work1, Options{Now: now}); !errors.Is(err, ErrRefused) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestSelectionNeverThinking(t *testing.T) {
	const secret = "THINKING-SECRET-7d1f"
	f := newFixture(t, false)
	f.append(t, userLine(sess, "visible prompt"))
	f.append(t, assistantLine(sess, "msg_1", `{"type":"thinking","thinking":"`+secret+`","signature":"sig"}`, 1, 1))
	f.append(t, assistantLine(sess, "msg_1", `{"type":"redacted_thinking","data":"`+secret+`"}`, 1, 1))
	f.append(t, assistantLine(sess, "msg_1", textBlock("visible answer"), 1, 1))
	f.append(t, assistantLine(sess, "msg_1", `{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls"}}`, 1, 1))
	f.append(t, toolResultLine(sess, "toolu_1", "file.txt", true))
	recs, _, err := Read(f.root, sess, nil, work1, Options{FromStart: true, Now: now,
		Select: Selection{Prompts: true, AssistantText: true, Tools: true, Bodies: true}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(recs)
	if strings.Contains(string(b), secret) {
		t.Fatalf("a thinking block was selected: %s", b)
	}
	var kinds []string
	for _, r := range recs {
		kinds = append(kinds, string(r.Kind))
	}
	want := "prompt_submit,usage,message_display,tool_start,tool_finish"
	if strings.Join(kinds, ",") != want {
		t.Fatalf("kinds = %v, want %s", kinds, want)
	}
	if recs[2].Body.Message != "visible answer" || *recs[2].FragmentIndex != 2 || recs[2].MessageID != "msg_1" {
		t.Fatalf("assistant text = %+v", recs[2])
	}
	if recs[4].Outcome != event.OutcomeFailed || string(recs[4].Body.ToolResponse) != `"file.txt"` || recs[4].ToolUseID != "toolu_1" {
		t.Fatalf("tool result = %+v", recs[4])
	}
	if string(recs[3].Body.ToolInput) != `{"command":"ls"}` || recs[3].ToolName != "Bash" {
		t.Fatalf("tool use = %+v", recs[3])
	}
}
