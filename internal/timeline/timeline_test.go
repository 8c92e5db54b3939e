package timeline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/action"
	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/hub/api"
)

// The fixtures were made by the real hooks (agentscm change-capture
// hook-claude and changelog hook-claude, fed Claude Code payloads) against
// the embedded Hub: `change-capture show --record` and `changelog list
// --format json` of a session that wrote new.txt, ran a Bash call that
// deleted b.txt and edited README.md, and a Bash call that failed.
func fixture(t *testing.T) (api.ChangeRecord, []Increment) {
	return load(t, "hooks")
}

// load reads testdata/NAME_record.json and NAME_changelog.json.
func load(t *testing.T, name string) (api.ChangeRecord, []Increment) {
	t.Helper()
	var rec api.ChangeRecord
	b, err := os.ReadFile("testdata/" + name + "_record.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	var list struct {
		Increments []changelog.Info `json:"increments"`
	}
	b, err = os.ReadFile("testdata/" + name + "_changelog.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	var incs []Increment
	for _, in := range list.Increments {
		incs = append(incs, Increment{Position: in.Position, Session: in.Session, ToolUseID: in.ToolUseID, Tool: in.Tool, Kind: in.Kind, Failed: in.Failed, Changes: in.Changes})
	}
	return rec, incs
}

func calls(tl *Timeline) []string {
	var out []string
	for _, s := range tl.Sessions {
		for _, c := range s.Calls {
			pos := "-"
			if c.Position != nil {
				pos = fmt.Sprint(*c.Position)
			}
			out = append(out, c.Tool+" "+c.Result+" "+pos+" "+c.Files())
		}
	}
	return out
}

func TestBuild(t *testing.T) {
	rec, incs := fixture(t)
	tests := []struct {
		name    string
		mutate  func(*api.ChangeRecord, *[]Increment)
		src     Source
		calls   []string
		summary string
		check   func(t *testing.T, tl *Timeline)
	}{
		{
			name:    "real hooks with the local changelog",
			src:     Source{Name: "local changelog"},
			calls:   []string{"Write succeeded 0 +new.txt", "Bash succeeded 1 ~README.md -b.txt", "Bash failed 2 no files changed"},
			summary: "3 calls, 1 failed; 1 created, 1 modified, 1 deleted",
			check: func(t *testing.T, tl *Timeline) {
				s := tl.Sessions[0]
				if !s.Ended || s.Start == 0 || s.End < s.Start || s.Coverage != "partial" {
					t.Fatalf("session %+v", s)
				}
				if len(tl.Coverage.Reasons) != 1 || tl.Coverage.Reasons[0].Kind != "identity_uncertain" || len(tl.Coverage.Reasons[0].Why) != 1 ||
					!strings.Contains(tl.Coverage.Reasons[0].Why[0], "carries no id") {
					t.Fatalf("coverage %+v", tl.Coverage)
				}
				var unknown *Action
				for i := range tl.Actions {
					if tl.Actions[i].Result == "unknown" {
						unknown = &tl.Actions[i]
					}
				}
				if unknown == nil || !strings.Contains(unknown.ResultWhy, "carried none") || unknown.Drift != "changed" || !strings.Contains(unknown.Source, "with uncommitted changes") {
					t.Fatalf("the unknown action %+v", unknown)
				}
				if c := tl.Sessions[0].Calls[1]; c.ActionID != unknown.ActionID {
					t.Fatalf("the rm call is bound to action %q, not %q", c.ActionID, unknown.ActionID)
				}
			},
		},
		{
			name:    "no changelog read",
			mutate:  func(r *api.ChangeRecord, i *[]Increment) { *i = nil },
			src:     Source{Note: "this checkout has no local changelog"},
			calls:   []string{"Write succeeded - ", "Bash succeeded - ", "Bash failed - "},
			summary: "3 calls, 1 failed; 0 created, 0 modified, 0 deleted (no changelog read)",
			check: func(t *testing.T, tl *Timeline) {
				if c := tl.Sessions[0].Calls[0]; c.PositionNote != "no changelog was read: this checkout has no local changelog" {
					t.Fatalf("note %q", c.PositionNote)
				}
			},
		},
		{
			name: "a finish lost, a stream boundary, increments of another Work",
			mutate: func(r *api.ChangeRecord, i *[]Increment) {
				var evs []api.EventRecord
				for _, e := range r.Events {
					if e.Kind == "tool_finish" && e.ToolUseID == "toolu_3" {
						continue
					}
					evs = append(evs, e)
				}
				r.Events = evs
				r.Gaps = append(r.Gaps, api.GapRecord{Session: "default", Generation: 1, Derived: true, Gap: api.Gap{Kind: "capture_interrupted", Reason: api.GapReasonStreamBoundary}})
				r.Coverage.Reasons = append(r.Coverage.Reasons, "1 capture_interrupted gaps")
				*i = append(*i, Increment{Position: 3, Session: "other-session", Tool: "Write", Kind: "call", ToolUseID: "toolu_x"},
					Increment{Position: 4, Kind: "apply"})
				(*i)[2].ToolUseID = "" // matched by session and tool
			},
			src:     Source{Name: "hub"},
			calls:   []string{"Write succeeded 0 +new.txt", "Bash succeeded 1 ~README.md -b.txt", "Bash unknown 2 no files changed"},
			summary: "3 calls, 0 failed, 1 unknown; 1 created, 1 modified, 1 deleted",
			check: func(t *testing.T, tl *Timeline) {
				c := tl.Sessions[0].Calls[2]
				if !strings.Contains(c.ResultWhy, "fell in a gap") {
					t.Fatalf("why %q", c.ResultWhy)
				}
				if len(tl.Rewinds) != 1 || tl.Rewinds[0].Position != 4 || tl.Rewinds[0].Note != "the state a rewind produced" {
					t.Fatalf("other positions %+v", tl.Rewinds)
				}
				last := tl.Coverage.Reasons[len(tl.Coverage.Reasons)-1]
				if last.Kind != "capture_interrupted" || len(last.Why) != 1 || !strings.Contains(last.Why[0], "another client account continued") {
					t.Fatalf("stream boundary %+v", last)
				}
			},
		},
		{
			name: "hostile names stay names",
			mutate: func(r *api.ChangeRecord, i *[]Increment) {
				for k := range r.Events {
					if r.Events[k].ToolUseID == "toolu_1" {
						r.Events[k].ToolName = "<script>alert(1)</script>"
					}
				}
				(*i)[0].Changes.Created = []string{"\"><img src=x onerror=alert(1)>\x1b[31m.txt"}
			},
			src:     Source{Name: "local changelog"},
			calls:   []string{"<script>alert(1)</script> succeeded 0 +\"><img src=x onerror=alert(1)>\uFFFD[31m.txt", "Bash succeeded 1 ~README.md -b.txt", "Bash failed 2 no files changed"},
			summary: "3 calls, 1 failed; 1 created, 1 modified, 1 deleted",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, in := rec, incs
			// Deep enough copies for the mutations.
			b, _ := json.Marshal(rec)
			r = api.ChangeRecord{}
			json.Unmarshal(b, &r)
			in = nil
			for _, x := range incs {
				if x.Changes != nil {
					ch := *x.Changes
					ch.Created = append([]string{}, ch.Created...)
					x.Changes = &ch
				}
				in = append(in, x)
			}
			if tc.mutate != nil {
				tc.mutate(&r, &in)
			}
			tl := Build(r, in, tc.src)
			if got := calls(tl); strings.Join(got, "\n") != strings.Join(tc.calls, "\n") {
				t.Fatalf("calls\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.calls, "\n"))
			}
			if tl.Summary.Text != tc.summary {
				t.Fatalf("summary %q, want %q", tl.Summary.Text, tc.summary)
			}
			if tc.check != nil {
				tc.check(t, tl)
			}
			var out bytes.Buffer
			WriteText(&out, tl)
			if !strings.HasSuffix(out.String(), "\n"+tc.summary+"\n") {
				t.Fatalf("the text view does not end with the summary:\n%s", out.String())
			}
			if strings.Contains(out.String(), "\x1b") {
				t.Fatal("the text view passes an escape sequence through")
			}
		})
	}
}

// TestClaudeSession: the record and changelog of a real Claude Code
// session (TestHubPageTimelineOfClaudeSession in test/e2e writes them with
// AGENTSCM_E2E_FIXTURES set): Write new.txt, a Bash call that edits
// README.md and deletes b.txt, a Bash call that exits 3.
func TestClaudeSession(t *testing.T) {
	rec, incs := load(t, "claude")
	tl := Build(rec, incs, Source{Name: "local changelog"})
	want := []string{"Write succeeded 0 +new.txt", "Bash succeeded 1 ~README.md -b.txt", "Bash failed 2 no files changed"}
	if got := calls(tl); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("calls %q", got)
	}
	if tl.Summary.Text != "3 calls, 1 failed; 1 created, 1 modified, 1 deleted" {
		t.Fatalf("summary %q", tl.Summary.Text)
	}
	s := tl.Sessions[0]
	if !s.Ended || len(s.NativeSessionIDs) != 1 || len(s.Gaps) == 0 {
		t.Fatalf("session %+v", s)
	}
	for _, g := range s.Gaps {
		if g.Kind != "identity_uncertain" || g.Reason != "no_provider_identity" || !strings.Contains(g.Why, "carries no id") {
			t.Fatalf("gap %+v", g)
		}
	}
	// Both Bash calls are bound to their actions; the one that returned
	// has an unknown action result with its reason, the failed one failed.
	for _, c := range s.Calls[1:] {
		if c.ActionID == "" {
			t.Fatalf("call %+v has no action", c)
		}
	}
	byID := map[string]Action{}
	for _, a := range tl.Actions {
		byID[a.ActionID] = a
	}
	if a := byID[s.Calls[1].ActionID]; a.Result != "unknown" || !strings.Contains(a.ResultWhy, "carried none") {
		t.Fatalf("rm's action %+v", a)
	}
	if a := byID[s.Calls[2].ActionID]; a.Result != "failed" {
		t.Fatalf("the failing call's action %+v", a)
	}
	var out bytes.Buffer
	WriteText(&out, tl)
	if !strings.Contains(out.String(), "model unobserved, permission mode default, effort medium; unobserved: model, system_prompt") {
		t.Fatalf("the text view lacks the observed setup:\n%s", out.String())
	}
}

// TestExplainEveryReason: every gap kind and reason the client and the Hub
// emit has its own sentence, not the fallback.
func TestExplainEveryReason(t *testing.T) {
	kinds := []string{"identity_uncertain", "capture_interrupted", "adapter_started_late", "redacted", "provider_history", "outage", "content_not_retained"}
	for _, k := range kinds {
		if m, _ := Explain(k, ""); strings.Contains(m, "does not describe") {
			t.Errorf("kind %s has no meaning", k)
		}
	}
	reasons := []string{"no_provider_identity", "claim_limit", "unassociated_before_target", "transcript_import",
		"record_limit", "byte_limit", "artifact_limit", "order_ledger_limit", "no_space", "write_failed", "io_error", "lock_timeout",
		"target_unavailable", "action_receipt_limit", "stream_boundary", "body_redacted",
		"transcript_replaced", "transcript_truncated", "transcript_malformed_record", "transcript_oversized_record", "transcript_foreign_session", "transcript_work_changed",
		"hub_refused:out_of_bounds", "first_event_PreToolUse", "session_start_resume"}
	for _, r := range reasons {
		if _, why := Explain("capture_interrupted", r); strings.HasPrefix(why, "the client named") {
			t.Errorf("reason %s has no explanation", r)
		}
	}
	if _, why := Explain("capture_interrupted", "brand_new"); why != "the client named the reason brand_new" {
		t.Errorf("an unknown reason reads %q", why)
	}
}

// TestResultWhyNamesTheRule checks that an unknown result is explained by
// what the rule can take for its tool: a Write rule is unverified (only
// Bash and PowerShell accept process_exit_code), so its explanation must
// not claim the rule reads an exit code.
func TestResultWhyNamesTheRule(t *testing.T) {
	code := 3
	for _, tc := range []struct {
		tool   string
		result string
		exit   *int
		want   string
		reject string
	}{
		{"Write", "unknown", nil, "result source is unverified", "exit code"},
		{"Edit", "unknown", nil, "result source is unverified", "exit code"},
		{"Bash", "unknown", nil, "no exit code was taken", ""},
		{"Bash", "unknown", &code, "does not take a result", ""},
		{"Bash", "failed", &code, "exited with status 3", ""},
	} {
		a := actionView(api.ActionRecord{ActionID: "a", Start: &api.ActionStart{ActionID: "a", Tool: tc.tool, Class: "execution"},
			Finish: &api.ActionFinish{ActionID: "a", Result: tc.result, Verification: "unknown", ExitCode: tc.exit}}, "")
		if !strings.Contains(a.ResultWhy, tc.want) || (tc.reject != "" && strings.Contains(a.ResultWhy, tc.reject)) {
			t.Errorf("%s %s: why %q, want %q without %q", tc.tool, tc.result, a.ResultWhy, tc.want, tc.reject)
		}
	}
}

// TestAgentTexts: a session's host is read from the record (Gemini CLI's
// own hook event names; an action id of Codex's formula), else from the
// local spool's records (Source.Agents: a Codex session the record does
// not mark, issue 29), and its gap and result texts name that agent, not
// Claude Code (issue 28 item 6).
func TestAgentTexts(t *testing.T) {
	gemini := map[string]string{"PreToolUse": "BeforeTool", "PostToolUse": "AfterTool", "PostToolUseFailure": "AfterTool", "UserPromptSubmit": "BeforeAgent", "Stop": "AfterAgent"}
	for _, tc := range []struct {
		agent, name string
		mutate      func(r *api.ChangeRecord)
		fromSpool   bool
	}{
		{AgentCodex, "Codex CLI", func(r *api.ChangeRecord) { r.Actions = nil }, true},
		{AgentClaude, "Claude Code", func(r *api.ChangeRecord) {}, false},
		{AgentGemini, "Gemini CLI", func(r *api.ChangeRecord) {
			for i, e := range r.Events {
				if g, ok := gemini[e.HookEvent]; ok {
					r.Events[i].HookEvent = g
				}
			}
			r.Actions = nil
		}, false},
		{AgentCodex, "Codex CLI", func(r *api.ChangeRecord) {
			for i, a := range r.Actions {
				for _, e := range r.Events {
					for _, n := range r.Sessions[0].NativeSessionIDs {
						if e.ToolUseID != "" && action.ID(AgentClaude, n, e.ToolUseID) == a.ActionID {
							r.Actions[i].ActionID = action.ID(AgentCodex, n, e.ToolUseID)
						}
					}
				}
			}
		}, false},
	} {
		t.Run(fmt.Sprintf("%s/spool=%v", tc.agent, tc.fromSpool), func(t *testing.T) {
			rec, incs := fixture(t)
			tc.mutate(&rec)
			src := Source{Name: "local changelog"}
			if tc.fromSpool {
				src.Agents = map[string]string{}
				for _, n := range rec.Sessions[0].NativeSessionIDs {
					src.Agents[n] = tc.agent
				}
			}
			tl := Build(rec, incs, src)
			s := tl.Sessions[0]
			if tc.agent != AgentClaude && s.Agent != tc.agent {
				t.Fatalf("session agent %q, want %q", s.Agent, tc.agent)
			}
			var texts []string
			for _, g := range s.Gaps {
				texts = append(texts, g.Meaning, g.Why)
			}
			for _, c := range s.Calls {
				texts = append(texts, c.ResultWhy)
			}
			for _, r := range tl.Coverage.Reasons {
				texts = append(texts, r.Meaning)
				texts = append(texts, r.Why...)
			}
			all := strings.Join(texts, "\n")
			if !strings.Contains(all, tc.name+"'s hook payload for this event carries no id") || !strings.Contains(all, tc.name+" gave it no identity") {
				t.Fatalf("gap texts do not name %s:\n%s", tc.name, all)
			}
			if tc.agent != AgentClaude && strings.Contains(all, "Claude Code") {
				t.Fatalf("a %s session's texts name Claude Code:\n%s", tc.name, all)
			}
			failed := s.Calls[2]
			if failed.Result != "failed" {
				t.Fatalf("call 2: %+v", failed)
			}
			if tc.agent == AgentGemini && failed.ResultWhy != ResultWhy(AgentGemini, "failed") {
				t.Fatalf("the failed call's text: %q", failed.ResultWhy)
			}
		})
	}
}
