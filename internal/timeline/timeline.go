// Package timeline turns a Work's change record (the Hub's projection:
// sessions, events, actions, gaps, usage) and the metadata of its changelog
// increments into what a person reads: sessions with their start, end and
// coverage explained in words, each tool call with its result (and why a
// result is unknown), its changelog position and the files it created,
// modified and deleted (names only, never contents), the actions with their
// source binding and drift, the usage totals and a one-line summary.
//
// The terminal view (change-capture show) and the Hub page render the same
// Timeline; Build is a pure function a table test covers.
package timeline

import (
	"fmt"
	"sort"
	"strings"

	"github.com/agentscm/agentscm/internal/action"
	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/agentscm/agentscm/internal/hub/api"
)

// Timeline is a Work's record as a person reads it.
type Timeline struct {
	Work     api.Work  `json:"work"`
	Coverage Coverage  `json:"coverage"`
	Sessions []Session `json:"sessions"`
	Actions  []Action  `json:"actions"`
	// Rewinds lists the changelog positions no tool call made (a rewind's
	// pre-apply and apply increments), and call increments no observed
	// call matched.
	Rewinds       []Position        `json:"other_positions"`
	Usage         api.UsageTotals   `json:"usage"`
	Setups        []api.SetupRecord `json:"setups,omitempty"`
	EventsOmitted int64             `json:"events_omitted"`
	// Changes says where the file names came from: "local changelog",
	// "hub", or "" when no changelog increments were given (ChangesNote
	// then says why).
	Changes     string  `json:"changes_source"`
	ChangesNote string  `json:"changes_note,omitempty"`
	Summary     Summary `json:"summary"`
	// CoverageWords is the coverage as a person reads it ("complete for
	// what Claude Code reports" when the only gaps are the host's normal
	// missing identities); Coverage holds the exact reasons.
	CoverageWords string `json:"coverage_words"`
}

// Coverage is the record's claim with each reason explained.
type Coverage struct {
	// State is none, complete or partial (the Hub's).
	State   string        `json:"state"`
	Reasons []Explanation `json:"reasons,omitempty"`
}

// Explanation is one reason the record is partial, in words.
type Explanation struct {
	// Text is the Hub's reason ("2 identity_uncertain gaps").
	Text string `json:"text"`
	// Kind is the gap kind for a gap reason.
	Kind    string `json:"kind,omitempty"`
	Meaning string `json:"meaning,omitempty"`
	// Why lists the distinct explanations of the reasons of those gaps.
	Why []string `json:"why,omitempty"`
}

// Session is one canonical session of the Work at one generation.
type Session struct {
	Session          string   `json:"session"`
	Generation       int64    `json:"generation"`
	WorktreeID       string   `json:"worktree_id"`
	NativeSessionIDs []string `json:"native_session_ids"`
	// Agent is the host that ran the session, as the record shows it
	// (sessionAgents): claude-code, codex or gemini.
	Agent string `json:"agent,omitempty"`
	// Start and End are the receipt times of its first and last events
	// (unix seconds; 0 when none). Ended is true once its SessionEnd was
	// observed; an open session may still hold unobserved events.
	Start       int64  `json:"start"`
	End         int64  `json:"end"`
	Ended       bool   `json:"ended"`
	Events      int64  `json:"events"`
	MissingSeqs int64  `json:"missing_seqs"`
	Coverage    string `json:"coverage"`
	Gaps        []Gap  `json:"gaps"`
	Calls       []Call `json:"calls"`
	// Summary counts the session's calls and the files they changed.
	Summary Summary `json:"summary"`
}

// Gap is a gap of a session with its meaning and cause in words.
type Gap struct {
	Kind    string `json:"kind"`
	Reason  string `json:"reason,omitempty"`
	FromSeq int64  `json:"from_seq,omitempty"`
	ToSeq   int64  `json:"to_seq,omitempty"`
	Derived bool   `json:"derived,omitempty"`
	Meaning string `json:"meaning"`
	Why     string `json:"why"`
}

// Call is one tool call.
type Call struct {
	Seq        int64  `json:"seq"`
	Tool       string `json:"tool"`
	ToolUseID  string `json:"tool_use_id,omitempty"`
	StartedAt  int64  `json:"started_at,omitempty"`
	FinishedAt int64  `json:"finished_at,omitempty"`
	// Result is succeeded, failed or unknown; ResultWhy says why.
	Result    string `json:"result"`
	ResultWhy string `json:"result_why"`
	// Position is the call's changelog position (nil: none matched;
	// PositionNote says why).
	Position     *int     `json:"position"`
	PositionNote string   `json:"position_note,omitempty"`
	Created      []string `json:"created"`
	Modified     []string `json:"modified"`
	Deleted      []string `json:"deleted"`
	// The Omitted counts are the names past the increment's bound.
	CreatedOmitted  int  `json:"created_omitted,omitempty"`
	ModifiedOmitted int  `json:"modified_omitted,omitempty"`
	DeletedOmitted  int  `json:"deleted_omitted,omitempty"`
	Baseline        bool `json:"baseline,omitempty"`
	// ActionID names the call's action, when a rule made one, and
	// ActionResult is that action's result.
	ActionID     string `json:"action_id,omitempty"`
	ActionResult string `json:"action_result,omitempty"`
}

// Action is an observed action with its source binding and drift.
type Action struct {
	ActionID     string `json:"action_id"`
	Session      string `json:"session"`
	Generation   int64  `json:"generation"`
	Tool         string `json:"tool,omitempty"`
	Class        string `json:"class,omitempty"`
	Status       string `json:"status"`
	Result       string `json:"result"`
	ResultWhy    string `json:"result_why"`
	Verification string `json:"verification,omitempty"`
	ExitCode     *int   `json:"exit_code,omitempty"`
	// Source describes the binding in words; SourceBinding is the fact.
	Source        string             `json:"source"`
	SourceBinding *api.SourceBinding `json:"source_binding,omitempty"`
	Drift         string             `json:"drift,omitempty"`
	DriftWhy      string             `json:"drift_why"`
	Stale         bool               `json:"stale,omitempty"`
	// Recipe is the managed recipe's digest (its result is caller_asserted).
	Recipe     string `json:"recipe_digest,omitempty"`
	StartedAt  int64  `json:"started_at,omitempty"`
	FinishedAt int64  `json:"finished_at,omitempty"`
}

// Position is a changelog position no observed call explains.
type Position struct {
	Position   int    `json:"position"`
	WorktreeID string `json:"worktree_id,omitempty"`
	Kind       string `json:"kind"`
	Tool       string `json:"tool,omitempty"`
	Session    string `json:"session,omitempty"`
	Note       string `json:"note"`
}

// Summary counts the calls and the files they changed.
type Summary struct {
	Calls    int    `json:"calls"`
	Failed   int    `json:"failed"`
	Unknown  int    `json:"unknown"`
	Created  int    `json:"created"`
	Modified int    `json:"modified"`
	Deleted  int    `json:"deleted"`
	Text     string `json:"text"`
}

// Increment is what the timeline needs of one changelog increment's
// metadata: where it sits, which call made it, and the names it changed.
type Increment struct {
	Position   int
	WorktreeID string
	// Session is the native session id of the call ("" for a rewind's).
	Session   string
	ToolUseID string
	Tool      string
	Failed    bool
	Kind      string
	Changes   *incmeta.Changes
	// Unread says why Changes is missing when the metadata was not read.
	Unread string
}

// FromMeta converts an increment's metadata.
func FromMeta(m *incmeta.Meta, worktree string) Increment {
	return Increment{Position: m.Position, WorktreeID: worktree, Session: m.SessionID, ToolUseID: m.ToolUseID,
		Tool: m.Tool, Failed: m.Failed, Kind: m.Kind, Changes: m.Changes}
}

// Source names where a Build's increments came from.
type Source struct {
	// Name is "local changelog" or "hub"; empty means none were given and
	// Note says why.
	Name string
	Note string
	// Agents, when set, is the agent of each native session this
	// machine's spool observed (every spool record names its agent): it
	// names a session the record itself does not mark (one that only
	// clients before the envelope's agent delivered to).
	Agents map[string]string
}

// fillAgentsFromSpool names, from the spool's agents by native session,
// each session of rec that the record itself does not mark, and returns
// agentOf.
func fillAgentsFromSpool(agentOf map[sessKey]string, rec api.ChangeRecord, spool map[string]string) map[sessKey]string {
	for _, s := range rec.Sessions {
		k := sessKey{s.Generation, s.Session}
		for _, n := range s.NativeSessionIDs {
			if a := spool[n]; agentOf[k] == "" && a != "" {
				agentOf[k] = a
			}
		}
	}
	return agentOf
}

// Event kinds of the record that a timeline reads.
const (
	kindToolStart    = "tool_start"
	kindToolFinish   = "tool_finish"
	kindSessionStart = "session_start"
)

// agents are the agent names whose action ids a call may carry.
var agents = []string{"claude-code", "codex", "gemini"}

type sessKey struct {
	gen  int64
	name string
}

// Build makes the timeline of rec with the increments incs (any order;
// those of other Works' sessions are ignored).
func Build(rec api.ChangeRecord, incs []Increment, src Source) *Timeline {
	tl := &Timeline{Work: rec.Work, Usage: rec.Usage, Setups: rec.Setups, EventsOmitted: rec.EventsOmitted,
		Changes: src.Name, ChangesNote: src.Note, Sessions: []Session{}, Actions: []Action{}, Rewinds: []Position{}}
	agentOf := fillAgentsFromSpool(sessionAgents(rec), rec, src.Agents)
	tl.Coverage = explainCoverage(rec, agentOf)

	// Sessions, in the record's order, with their gaps.
	idx := map[sessKey]int{}
	natives := map[string]sessKey{} // native session id -> session
	for _, s := range rec.Sessions {
		k := sessKey{s.Generation, s.Session}
		idx[k] = len(tl.Sessions)
		ns := append([]string{}, s.NativeSessionIDs...)
		for _, n := range ns {
			natives[n] = k
		}
		tl.Sessions = append(tl.Sessions, Session{Session: s.Session, Generation: s.Generation, WorktreeID: s.WorktreeID,
			NativeSessionIDs: ns, Agent: agentOf[k], Events: s.Events, MissingSeqs: s.MissingSeqs, Coverage: "complete", Gaps: []Gap{}, Calls: []Call{}})
	}
	session := func(gen int64, name string) *Session {
		k := sessKey{gen, name}
		i, ok := idx[k]
		if !ok {
			// An event of a session the record does not list: keep it.
			idx[k] = len(tl.Sessions)
			i = idx[k]
			tl.Sessions = append(tl.Sessions, Session{Session: name, Generation: gen, NativeSessionIDs: []string{}, Agent: agentOf[k], Coverage: "complete", Gaps: []Gap{}, Calls: []Call{}})
		}
		return &tl.Sessions[i]
	}
	for _, g := range rec.Gaps {
		s := session(g.Generation, g.Session)
		m, w := ExplainFor(s.Agent, g.Kind, g.Reason)
		s.Gaps = append(s.Gaps, Gap{Kind: g.Kind, Reason: g.Reason, FromSeq: g.FromSeq, ToSeq: g.ToSeq, Derived: g.Derived, Meaning: m, Why: w})
	}

	// Calls from the tool events, in sequence order per session.
	events := append([]api.EventRecord{}, rec.Events...)
	order := map[string]int{} // session|stream -> first appearance
	for _, e := range events {
		k := fmt.Sprintf("%d|%s|%s", e.Generation, e.Session, e.Stream)
		if _, ok := order[k]; !ok {
			order[k] = len(order)
		}
	}
	sort.SliceStable(events, func(i, j int) bool {
		a, b := events[i], events[j]
		oa, ob := order[fmt.Sprintf("%d|%s|%s", a.Generation, a.Session, a.Stream)], order[fmt.Sprintf("%d|%s|%s", b.Generation, b.Session, b.Stream)]
		if oa != ob {
			return oa < ob
		}
		return a.Seq < b.Seq
	})
	byUse := map[string]int{} // sessKey|tool_use_id -> index in its session's calls
	pending := map[string][]int{}
	for _, e := range events {
		s := session(e.Generation, e.Session)
		if e.ObservedAt != 0 {
			if s.Start == 0 || e.ObservedAt < s.Start {
				s.Start = e.ObservedAt
			}
			if e.ObservedAt > s.End {
				s.End = e.ObservedAt
			}
		}
		if e.Kind == api.KindSessionEnd {
			s.Ended = true
		}
		key := fmt.Sprintf("%d|%s|", e.Generation, e.Session)
		switch e.Kind {
		case kindToolStart:
			s.Calls = append(s.Calls, Call{Seq: e.Seq, Tool: e.ToolName, ToolUseID: e.ToolUseID, StartedAt: e.ObservedAt,
				Created: []string{}, Modified: []string{}, Deleted: []string{}})
			i := len(s.Calls) - 1
			if e.ToolUseID != "" {
				byUse[key+e.ToolUseID] = i
			} else {
				pending[key+e.ToolName] = append(pending[key+e.ToolName], i)
			}
		case kindToolFinish:
			i, ok := -1, false
			if e.ToolUseID != "" {
				i, ok = byUse[key+e.ToolUseID]
			} else if q := pending[key+e.ToolName]; len(q) > 0 {
				i, ok = q[0], true
				pending[key+e.ToolName] = q[1:]
			}
			if !ok {
				// A finish whose start was not observed.
				s.Calls = append(s.Calls, Call{Seq: e.Seq, Tool: e.ToolName, ToolUseID: e.ToolUseID,
					Created: []string{}, Modified: []string{}, Deleted: []string{}})
				i = len(s.Calls) - 1
				if e.ToolUseID != "" {
					byUse[key+e.ToolUseID] = i
				}
			}
			c := &s.Calls[i]
			c.FinishedAt = e.ObservedAt
			switch e.Outcome {
			case "returned":
				c.Result, c.ResultWhy = "succeeded", ResultWhy(s.Agent, "succeeded")
			case "failed":
				c.Result, c.ResultWhy = "failed", ResultWhy(s.Agent, "failed")
			default:
				c.Result, c.ResultWhy = "unknown", "the host did not say how the tool ended"
			}
			if c.StartedAt == 0 && c.Seq == e.Seq {
				c.ResultWhy += "; its start was not observed"
			}
		}
	}

	// Actions, each bound to its call.
	for _, a := range rec.Actions {
		ac := actionView(a, agentOf[sessKey{a.Generation, a.Session}])
		tl.Actions = append(tl.Actions, ac)
		s := session(a.Generation, a.Session)
		for i := range s.Calls {
			c := &s.Calls[i]
			if c.ToolUseID == "" || !actionOf(a.ActionID, s.NativeSessionIDs, c.ToolUseID) {
				continue
			}
			c.ActionID, c.ActionResult = a.ActionID, ac.Result
			if a.Finish != nil && a.Finish.ExitCode != nil && (c.Result == "" || c.Result == "succeeded") && a.Finish.Result == "failed" {
				c.Result, c.ResultWhy = "failed", fmt.Sprintf("the command exited with status %d", *a.Finish.ExitCode)
			}
		}
	}

	// Calls without a finish.
	for si := range tl.Sessions {
		s := &tl.Sessions[si]
		for i := range s.Calls {
			c := &s.Calls[i]
			if c.Result != "" {
				continue
			}
			c.Result = "unknown"
			switch {
			case rec.EventsOmitted > 0:
				c.ResultWhy = "no finish among the events shown: the record omits the Work's later events"
			case len(s.Gaps) > 0:
				c.ResultWhy = "no finish was observed: the tool was interrupted or the session stopped before it returned, or its finish fell in a gap of this session"
			default:
				c.ResultWhy = "no finish was observed: the tool was interrupted, or the session stopped before it returned"
			}
		}
	}

	matchIncrements(tl, incs, natives, src)

	for si := range tl.Sessions {
		s := &tl.Sessions[si]
		if len(s.Gaps) > 0 || s.MissingSeqs > 0 || (s.Events > 0 && !s.Ended) {
			s.Coverage = "partial"
		}
		if s.Events == 0 && len(s.Calls) == 0 && len(s.Gaps) == 0 {
			s.Coverage = "none"
		}
	}
	tl.Summary = summarize(tl)
	tl.CoverageWords = coverageWords(rec, tl)
	return tl
}

// geminiHookEvents are Gemini CLI's own hook event names, which its events
// keep in hook_event (the other hosts share Claude Code's names).
var geminiHookEvents = map[string]bool{"BeforeTool": true, "AfterTool": true, "BeforeAgent": true, "AfterAgent": true, "PreCompress": true}

// sessionAgents tells each session's host from what the record holds: the
// agent the Hub stored for it (SessionRecord.Agent) or, for a session
// only clients before that field delivered to, Gemini CLI's own hook
// event names, Codex's apply_patch tool, or an action id that one agent's
// formula gives for a call of the session. A session none of them marks
// is left out (its texts read as Claude Code's, the default host).
func sessionAgents(rec api.ChangeRecord) map[sessKey]string {
	natives := map[sessKey][]string{}
	out := map[sessKey]string{}
	for _, s := range rec.Sessions {
		natives[sessKey{s.Generation, s.Session}] = s.NativeSessionIDs
		if s.Agent != "" {
			out[sessKey{s.Generation, s.Session}] = s.Agent
		}
	}
	actions := map[string]bool{}
	for _, a := range rec.Actions {
		actions[a.ActionID] = true
	}
	for _, e := range rec.Events {
		k := sessKey{e.Generation, e.Session}
		if out[k] != "" {
			continue
		}
		switch {
		case geminiHookEvents[e.HookEvent]:
			out[k] = AgentGemini
		case e.ToolName == "apply_patch":
			out[k] = AgentCodex
		case e.Kind == kindToolStart && e.ToolUseID != "" && len(actions) > 0:
			for _, n := range natives[k] {
				for _, a := range agents {
					if actions[action.ID(a, n, e.ToolUseID)] {
						out[k] = a
					}
				}
			}
		}
	}
	return out
}

// actionOf reports whether id is the action of toolUseID in one of the
// session's native sessions.
func actionOf(id string, natives []string, toolUseID string) bool {
	for _, n := range natives {
		for _, a := range agents {
			if action.ID(a, n, toolUseID) == id {
				return true
			}
		}
	}
	return false
}

// actionView is one of the change's action records as the timeline shows it.
func actionView(a api.ActionRecord, agent string) Action {
	out := Action{ActionID: a.ActionID, Session: a.Session, Generation: a.Generation, Status: a.Status}
	if st := a.Start; st != nil {
		out.Tool, out.Class, out.SourceBinding, out.StartedAt = st.Tool, st.Class, st.Source, st.StartedAt
		out.Source = DescribeSource(st.Source)
		out.Recipe = st.RecipeDigest
	} else {
		out.Source = "no start was observed, so its source binding is unknown"
	}
	f := a.Finish
	if f == nil {
		out.Result = "unknown"
		out.ResultWhy = "no finish arrived: the command is still running, was interrupted, or its finish is in a gap"
		out.DriftWhy = driftWhy("", false)
		return out
	}
	out.Result, out.Verification, out.ExitCode, out.Drift, out.Stale, out.FinishedAt = f.Result, f.Verification, f.ExitCode, f.Drift, f.Stale, f.FinishedAt
	out.DriftWhy = driftWhy(f.Drift, f.Stale)
	switch {
	case f.Result == "succeeded" && f.ExitCode != nil:
		out.ResultWhy = fmt.Sprintf("the command exited with status %d", *f.ExitCode)
	case f.Result == "failed" && f.ExitCode != nil:
		out.ResultWhy = fmt.Sprintf("the command exited with status %d", *f.ExitCode)
	case f.Result == "failed":
		out.ResultWhy = ResultWhy(agent, "failed")
	case f.Result == "incomplete":
		out.ResultWhy = "the run did not complete (a timeout, a signal, the output bound, or a spawn or I/O failure)"
	case f.Result == "unknown" && f.ExitCode == nil && !exitCodeTool(out.Tool):
		// process_exit_code is accepted only for tools that report an exit
		// code, so any other tool's rule is unverified.
		out.ResultWhy = "the action rule's result source is unverified: the host reported that the call returned, and the rule takes no result from that"
	case f.Result == "unknown" && f.ExitCode == nil:
		out.ResultWhy = "no exit code was taken: the host's PostToolUse response carried none, or the action rule's result source is unverified " +
			"(the tool call itself returned; only its result is unknown)"
	case f.Result == "unknown":
		out.ResultWhy = "the action rule does not take a result from this host's report"
	default:
		out.ResultWhy = "as the client reported it"
	}
	if out.Recipe != "" {
		out.ResultWhy += "; a managed recipe's result is caller_asserted"
	}
	if f.Stale {
		out.ResultWhy += "; the setup changed since the start, so the result says nothing about the started setup"
	}
	return out
}

// exitCodeTool reports the tools whose hook payload can carry a process
// exit code (the only ones a process_exit_code rule is accepted for).
func exitCodeTool(tool string) bool { return tool == "Bash" || tool == "PowerShell" }

// DescribeSource says in words which source an action started on.
func DescribeSource(s *api.SourceBinding) string {
	if s == nil {
		return "unbound: the source was not recorded, so drift cannot be checked"
	}
	short := func(v string) string {
		if len(v) > 12 {
			return v[:12]
		}
		return v
	}
	var parts []string
	if s.Head == "" {
		parts = append(parts, "an unborn branch")
	} else {
		parts = append(parts, "commit "+short(s.Head))
	}
	if s.MergeBase != "" {
		parts = append(parts, "merge base "+short(s.MergeBase))
	}
	if s.Dirty {
		m := "with uncommitted changes"
		switch {
		case s.ManifestDigest != "" && s.Retained:
			m += " (manifest sha256:" + short(s.ManifestDigest) + ", kept in the private spool)"
		case s.ManifestDigest != "":
			m += " (manifest sha256:" + short(s.ManifestDigest) + ", digest only: the bytes are not kept)"
		}
		parts = append(parts, m)
	} else {
		parts = append(parts, "clean")
	}
	if s.Transformed {
		parts = append(parts, "working bytes transformed by Git settings")
	}
	if len(s.Omissions) > 0 {
		parts = append(parts, "omitted: "+strings.Join(s.Omissions, ", "))
	}
	if s.Stopped != "" {
		parts = append(parts, "capture stopped: "+s.Stopped)
	}
	if s.Partial {
		parts = append(parts, "partial")
	}
	return strings.Join(parts, ", ")
}

// matchIncrements gives each call its changelog position: the call
// increment with its tool_use_id in one of its session's native sessions,
// else the next unmatched increment of that native session and tool.
func matchIncrements(tl *Timeline, incs []Increment, natives map[string]sessKey, src Source) {
	sorted := append([]Increment{}, incs...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if sorted[i].WorktreeID != sorted[j].WorktreeID {
			return sorted[i].WorktreeID < sorted[j].WorktreeID
		}
		return sorted[i].Position < sorted[j].Position
	})
	used := make([]bool, len(sorted))
	byUse := map[string]int{}
	for i, in := range sorted {
		if in.Kind == "call" && in.ToolUseID != "" {
			byUse[in.Session+"|"+in.ToolUseID] = i
		}
	}
	for si := range tl.Sessions {
		s := &tl.Sessions[si]
		for ci := range s.Calls {
			c := &s.Calls[ci]
			found := -1
			for _, n := range s.NativeSessionIDs {
				if i, ok := byUse[n+"|"+c.ToolUseID]; ok && c.ToolUseID != "" && !used[i] {
					found = i
					break
				}
			}
			if found < 0 {
				for i, in := range sorted {
					if used[i] || in.Kind != "call" || in.ToolUseID != "" || in.Tool != c.Tool {
						continue
					}
					if k, ok := natives[in.Session]; ok && k == (sessKey{s.Generation, s.Session}) {
						found = i
						break
					}
				}
			}
			if found < 0 {
				switch {
				case src.Name == "":
					c.PositionNote = "no changelog was read"
					if src.Note != "" {
						c.PositionNote += ": " + src.Note
					}
				case c.Result == "unknown" && c.FinishedAt == 0:
					c.PositionNote = "no changelog position: a position is taken when the tool finishes"
				default:
					c.PositionNote = "no changelog position: the changelog was not enabled for this call, or its increment is not in the " + src.Name
				}
				continue
			}
			used[found] = true
			in := sorted[found]
			pos := in.Position
			c.Position = &pos
			if ch := in.Changes; ch != nil {
				c.Created, c.Modified, c.Deleted = nonNil(ch.Created), nonNil(ch.Modified), nonNil(ch.Deleted)
				c.CreatedOmitted, c.ModifiedOmitted, c.DeletedOmitted, c.Baseline = ch.CreatedOmitted, ch.ModifiedOmitted, ch.DeletedOmitted, ch.Baseline
			} else if in.Unread != "" {
				c.PositionNote = in.Unread
			} else {
				c.PositionNote = "this increment was written before file names were recorded"
			}
		}
	}
	for i, in := range sorted {
		if used[i] {
			continue
		}
		if _, ok := natives[in.Session]; in.Session != "" && !ok {
			continue // another Work's session
		}
		p := Position{Position: in.Position, WorktreeID: in.WorktreeID, Kind: in.Kind, Tool: in.Tool, Session: in.Session}
		switch in.Kind {
		case "pre_apply":
			p.Note = "the checkout's state saved right before a rewind"
		case "apply":
			p.Note = "the state a rewind produced"
		default:
			p.Note = "a tool call whose events are not in this record"
		}
		tl.Rewinds = append(tl.Rewinds, p)
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func explainCoverage(rec api.ChangeRecord, agentOf map[sessKey]string) Coverage {
	cov := Coverage{State: rec.Coverage.State}
	whys := map[string][]string{}
	seen := map[string]bool{}
	agents := map[string]bool{}
	for _, a := range agentOf {
		agents[a] = true
	}
	for _, g := range rec.Gaps {
		_, w := ExplainFor(agentOf[sessKey{g.Generation, g.Session}], g.Kind, g.Reason)
		if !seen[g.Kind+"\x00"+w] {
			seen[g.Kind+"\x00"+w] = true
			whys[g.Kind] = append(whys[g.Kind], w)
		}
	}
	for _, r := range rec.Coverage.Reasons {
		ex := Explanation{Text: r}
		var n int
		var kind string
		if _, err := fmt.Sscanf(r, "%d %s gaps", &n, &kind); err == nil && strings.HasSuffix(r, " gaps") {
			ex.Kind = kind
			// A kind's meaning names the host only when one agent ran
			// every session.
			agent := ""
			if len(agents) == 1 {
				for a := range agents {
					agent = a
				}
			}
			ex.Meaning, _ = ExplainFor(agent, kind, "")
			ex.Why = whys[kind]
		} else {
			switch {
			case strings.Contains(r, "has not ended"):
				ex.Meaning = "no SessionEnd was observed yet: the session may still be running, or it was stopped without one (a killed process), so later events may be missing"
			case strings.Contains(r, "sequence numbers missing"):
				ex.Meaning = "some events of the session never reached the Hub: they may still be pending delivery on the checkout (change-capture inspect), or were lost in a gap"
			case strings.Contains(r, "started without a finish"):
				ex.Meaning = "an observed command has no finish yet: it may still run, or was interrupted"
			case strings.Contains(r, "finishes without a start"):
				ex.Meaning = "a command's finish arrived without its start, so the source it ran on is unknown"
			case r == "nothing captured yet":
				ex.Meaning = "no hook has delivered anything for this Work yet"
			}
		}
		cov.Reasons = append(cov.Reasons, ex)
	}
	return cov
}

func summarize(tl *Timeline) Summary {
	for i := range tl.Sessions {
		tl.Sessions[i].Summary = summarizeCalls(tl.Sessions[i].Calls, tl.Changes == "")
	}
	var all []Call
	for _, se := range tl.Sessions {
		all = append(all, se.Calls...)
	}
	return summarizeCalls(all, tl.Changes == "")
}

// summarizeCalls counts calls and the files they changed; noChangelog
// marks the text when no changelog was read (the file counts are then 0).
func summarizeCalls(calls []Call, noChangelog bool) Summary {
	var s Summary
	for _, c := range calls {
		s.Calls++
		switch c.Result {
		case "failed":
			s.Failed++
		case "unknown":
			s.Unknown++
		}
		s.Created += len(c.Created) + c.CreatedOmitted
		s.Modified += len(c.Modified) + c.ModifiedOmitted
		s.Deleted += len(c.Deleted) + c.DeletedOmitted
	}
	s.Text = sessionCounts(s)
	if noChangelog {
		s.Text += " (no changelog read)"
	}
	return s
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
