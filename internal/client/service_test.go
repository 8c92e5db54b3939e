package client_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/hub/api"
)

// wantErr asserts that err is an *api.Error with status, code and (when not
// empty) reason.
func wantErr(t *testing.T, err error, status int, code, reason string) {
	t.Helper()
	e, ok := api.AsError(err)
	if !ok {
		t.Fatalf("error = %v, want an *api.Error %d %s %s", err, status, code, reason)
	}
	if e.Status != status || e.Code != code || (reason != "" && e.Reason != reason) {
		t.Fatalf("error = %d %s %s (%s), want %d %s %s", e.Status, e.Code, e.Reason, e.Message, status, code, reason)
	}
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func resolve(t *testing.T, c client.Conn, worktree, native string) api.Target {
	t.Helper()
	tg, err := c.Resolve(context.Background(), api.ResolveRequest{WorktreeID: worktree, NativeSessionID: native})
	if err != nil {
		t.Fatalf("resolve %s/%s: %v", worktree, native, err)
	}
	return tg
}

func deliver(t *testing.T, c client.Conn, env *api.Envelope, status string) api.IngestResult {
	t.Helper()
	r, err := c.Deliver(context.Background(), env)
	if err != nil {
		t.Fatalf("deliver %s: %v", env.Type, err)
	}
	if r.Status != status {
		t.Fatalf("deliver %s: status %s, want %s", env.Type, r.Status, status)
	}
	return r
}

func start(t *testing.T, c client.Conn, worktree string) api.Work {
	t.Helper()
	w, err := c.StartWork(context.Background(), api.StartWorkRequest{Title: "t", WorktreeID: worktree})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// serviceCases run unchanged against every backend.
var serviceCases = []struct {
	name string
	run  func(t *testing.T, f *fixture)
}{
	{"whoami reports caller, repository, scope and retention", func(t *testing.T, f *fixture) {
		ctx := context.Background()
		w := must[api.Whoami](t)(f.alice.Whoami(ctx))
		if w.Human != "alice" || w.Repository != "proj" || w.Scope != api.ScopeReadWrite || w.Admin || w.SharedConversationRetentionDays != 7 {
			t.Fatalf("whoami = %+v", w)
		}
		r := must[api.Whoami](t)(f.reader.Whoami(ctx))
		if r.Scope != api.ScopeReadOnly || r.Human != "bob" {
			t.Fatalf("reader whoami = %+v", r)
		}
	}},
	{"no current work is a typed refusal", func(t *testing.T, f *fixture) {
		_, err := f.alice.Resolve(context.Background(), api.ResolveRequest{WorktreeID: "wt-a", NativeSessionID: "n1"})
		wantErr(t, err, 422, api.CodeTargetRefused, api.ReasonNoCurrentWork)
	}},
	{"start makes the work current and sessions resolve", func(t *testing.T, f *fixture) {
		w := start(t, f.alice, "wt-a")
		if w.State != api.StateActive || w.Generation != 1 || len(w.ID) != 36 || w.ID[:4] != "wrk_" {
			t.Fatalf("work = %+v", w)
		}
		t1 := resolve(t, f.alice, "wt-a", "native-1")
		if t1.WorkID != w.ID || t1.Generation != 1 || t1.Session != "default" {
			t.Fatalf("first native session: %+v", t1)
		}
		if again := resolve(t, f.alice, "wt-a", "native-1"); again != t1 {
			t.Fatalf("resolve is not stable: %+v vs %+v", again, t1)
		}
		t2 := resolve(t, f.alice, "wt-a", "native-2")
		if t2.Session != "native-2" || t2.WorkID != w.ID {
			t.Fatalf("second native session: %+v", t2)
		}
		// Another worktree has its own current work (none yet).
		_, err := f.alice.Resolve(context.Background(), api.ResolveRequest{WorktreeID: "wt-b", NativeSessionID: "native-1"})
		wantErr(t, err, 422, api.CodeTargetRefused, api.ReasonNoCurrentWork)
		// A newer start on the same worktree becomes current.
		w2 := start(t, f.alice, "wt-a")
		if t3 := resolve(t, f.alice, "wt-a", "native-1"); t3.WorkID != w2.ID || t3.Session != "default" {
			t.Fatalf("after a second start: %+v", t3)
		}
		cur := must[api.CurrentWork](t)(f.alice.CurrentWork(context.Background(), "wt-a"))
		if cur.Work.ID != w2.ID || cur.Generation != 1 {
			t.Fatalf("current = %+v", cur)
		}
	}},
	{"ingestion is idempotent: duplicate 200, conflict 409", func(t *testing.T, f *fixture) {
		start(t, f.alice, "wt-a")
		tg := resolve(t, f.alice, "wt-a", "n1")
		env := eventsEnv(tg, "b1", api.Event{Seq: 1, Kind: "session_start", Source: "startup", ObservedAt: 100},
			api.Event{Seq: 2, Kind: "prompt_submit", ObservedAt: 101})
		deliver(t, f.alice, env, api.StatusAccepted)
		deliver(t, f.alice, env, api.StatusDuplicate)
		// A re-run with a new receipt time is still a duplicate.
		retimed := *env
		retimed.Events = []api.Event{env.Events[0], env.Events[1]}
		retimed.Events[0].ObservedAt = 999
		deliver(t, f.alice, &retimed, api.StatusDuplicate)
		// A different body under the same identity is a conflict.
		changed := *env
		changed.Events = []api.Event{{Seq: 1, Kind: "session_start", Source: "resume"}, env.Events[1]}
		_, err := f.alice.Deliver(context.Background(), &changed)
		wantErr(t, err, 409, api.CodeConflict, "identity_reused")
		// Another identity claiming a taken sequence number is a conflict too.
		_, err = f.alice.Deliver(context.Background(), eventsEnv(tg, "b2", api.Event{Seq: 2, Kind: "turn_end"}))
		wantErr(t, err, 409, api.CodeConflict, "sequence_taken")
		rec := must[api.ChangeRecord](t)(f.alice.Record(context.Background(), tg.WorkID))
		// The session has not ended, so the record cannot claim complete.
		if len(rec.Events) != 2 || rec.Events[0].ObservedAt != 100 || rec.Coverage.State != "partial" ||
			len(rec.Coverage.Reasons) != 1 || !strings.Contains(rec.Coverage.Reasons[0], "has not ended") {
			t.Fatalf("record = %+v", rec)
		}
		deliver(t, f.alice, eventsEnv(tg, "b3", api.Event{Seq: 3, Kind: "session_end", Reason: "other"}), api.StatusAccepted)
		if rec := must[api.ChangeRecord](t)(f.alice.Record(context.Background(), tg.WorkID)); rec.Coverage.State != "complete" {
			t.Fatalf("after session_end: coverage %+v", rec.Coverage)
		}
	}},
	{"session end pauses and a resumed session keeps capturing", func(t *testing.T, f *fixture) {
		w := start(t, f.alice, "wt-a")
		tg := resolve(t, f.alice, "wt-a", "n1")
		r := deliver(t, f.alice, eventsEnv(tg, "e1", api.Event{Seq: 1, Kind: "session_start"}, api.Event{Seq: 2, Kind: "session_end", Reason: "prompt_input_exit"}), api.StatusAccepted)
		if !r.Paused {
			t.Fatalf("session_end did not report the pause: %+v", r)
		}
		if got := must[api.Work](t)(f.alice.GetWork(context.Background(), w.ID)); got.State != api.StatePaused || got.Checkpoints[len(got.Checkpoints)-1].Action != api.CheckpointSessionEnd {
			t.Fatalf("work after session end = %+v", got)
		}
		// claude --resume: same native session, still accepted while paused.
		tg2 := resolve(t, f.alice, "wt-a", "n1")
		if tg2.WorkID != tg.WorkID || tg2.Session != tg.Session || tg2.Generation != tg.Generation || tg2.State != api.StatePaused {
			t.Fatalf("resumed target = %+v", tg2)
		}
		deliver(t, f.alice, eventsEnv(tg2, "e2", api.Event{Seq: 3, Kind: "session_start", Source: "resume"}), api.StatusAccepted)
		// Capture never changes state otherwise: the work stays paused.
		if got := must[api.Work](t)(f.alice.GetWork(context.Background(), w.ID)); got.State != api.StatePaused {
			t.Fatalf("state = %s", got.State)
		}
		// A blocked work accepts capture and a session end leaves it blocked.
		must[api.Work](t)(f.alice.Checkpoint(context.Background(), w.ID, api.CheckpointRequest{Action: api.CheckpointBlock}))
		deliver(t, f.alice, eventsEnv(tg2, "e3", api.Event{Seq: 4, Kind: "session_end"}), api.StatusAccepted)
		if got := must[api.Work](t)(f.alice.GetWork(context.Background(), w.ID)); got.State != api.StateBlocked {
			t.Fatalf("state = %s", got.State)
		}
	}},
	{"finished and handed-over work refuse capture; replays stay duplicates", func(t *testing.T, f *fixture) {
		ctx := context.Background()
		w := start(t, f.alice, "wt-a")
		tg := resolve(t, f.alice, "wt-a", "n1")
		env := eventsEnv(tg, "f1", api.Event{Seq: 1, Kind: "session_start"})
		deliver(t, f.alice, env, api.StatusAccepted)
		must[api.Work](t)(f.alice.Checkpoint(ctx, w.ID, api.CheckpointRequest{Action: api.CheckpointHandover, Note: "to bob"}))
		_, err := f.alice.Resolve(ctx, api.ResolveRequest{WorktreeID: "wt-a", NativeSessionID: "n1"})
		wantErr(t, err, 422, api.CodeTargetRefused, api.ReasonWorkNotAccepting)
		_, err = f.alice.Deliver(ctx, eventsEnv(tg, "f2", api.Event{Seq: 2, Kind: "turn_end"}))
		wantErr(t, err, 422, api.CodeTargetRefused, api.ReasonWorkNotAccepting)
		deliver(t, f.alice, env, api.StatusDuplicate)
		// Takeover is the only way on from handover; finish ends it.
		_, err = f.alice.Checkpoint(ctx, w.ID, api.CheckpointRequest{Action: api.CheckpointResume})
		wantErr(t, err, 409, api.CodeInvalidState, "")
		must[api.Work](t)(f.bob.Checkpoint(ctx, w.ID, api.CheckpointRequest{Action: api.CheckpointTakeover, WorktreeID: "wt-b"}))
		must[api.Work](t)(f.bob.Checkpoint(ctx, w.ID, api.CheckpointRequest{Action: api.CheckpointFinish}))
		_, err = f.bob.Resolve(ctx, api.ResolveRequest{WorktreeID: "wt-b", NativeSessionID: "m1"})
		wantErr(t, err, 422, api.CodeTargetRefused, api.ReasonWorkNotAccepting)
		_, err = f.bob.Checkpoint(ctx, w.ID, api.CheckpointRequest{Action: api.CheckpointFinish})
		wantErr(t, err, 409, api.CodeInvalidState, "")
		_, err = f.bob.Checkpoint(ctx, w.ID, api.CheckpointRequest{Action: "explode"})
		wantErr(t, err, 400, api.CodeBadRequest, "")
	}},
	{"takeover fences the older generation", func(t *testing.T, f *fixture) {
		ctx := context.Background()
		w := start(t, f.alice, "wt-a")
		old := resolve(t, f.alice, "wt-a", "n1")
		deliver(t, f.alice, eventsEnv(old, "g1", api.Event{Seq: 1, Kind: "session_start"}), api.StatusAccepted)
		tw := must[api.Work](t)(f.bob.Checkpoint(ctx, w.ID, api.CheckpointRequest{Action: api.CheckpointTakeover, WorktreeID: "wt-b"}))
		if tw.Generation != 2 || tw.State != api.StateActive {
			t.Fatalf("after takeover: %+v", tw)
		}
		_, err := f.alice.Resolve(ctx, api.ResolveRequest{WorktreeID: "wt-a", NativeSessionID: "n1"})
		wantErr(t, err, 422, api.CodeTargetRefused, api.ReasonStaleGeneration)
		_, err = f.alice.Resolve(ctx, api.ResolveRequest{WorktreeID: "wt-a", NativeSessionID: "brand-new"})
		wantErr(t, err, 422, api.CodeTargetRefused, api.ReasonStaleGeneration)
		_, err = f.alice.Deliver(ctx, eventsEnv(old, "g2", api.Event{Seq: 2, Kind: "turn_end"}))
		wantErr(t, err, 422, api.CodeTargetRefused, api.ReasonStaleGeneration)
		deliver(t, f.alice, eventsEnv(old, "g1", api.Event{Seq: 1, Kind: "session_start"}), api.StatusDuplicate)
		nt := resolve(t, f.bob, "wt-b", "m1")
		if nt.Generation != 2 || nt.Session != "default" || nt.WorkID != w.ID {
			t.Fatalf("taker's target = %+v", nt)
		}
		deliver(t, f.bob, eventsEnv(nt, "g3", api.Event{Seq: 1, Kind: "session_start"}), api.StatusAccepted)
		// Envelopes naming a session the Work does not have are refused.
		bogus := nt
		bogus.Session = "nope"
		_, err = f.bob.Deliver(ctx, eventsEnv(bogus, "g4", api.Event{Seq: 1, Kind: "turn_end"}))
		wantErr(t, err, 422, api.CodeTargetRefused, api.ReasonUnknownSession)
		rec := must[api.ChangeRecord](t)(f.bob.Record(ctx, w.ID))
		if len(rec.Sessions) != 2 || rec.Sessions[0].Generation != 1 || rec.Sessions[1].Generation != 2 || len(rec.Events) != 2 {
			t.Fatalf("record sessions = %+v events = %d", rec.Sessions, len(rec.Events))
		}
	}},
	{"actions, usage, gaps and coverage in the change record", func(t *testing.T, f *fixture) {
		ctx := context.Background()
		w := start(t, f.alice, "wt-a")
		tg := resolve(t, f.alice, "wt-a", "n1")
		base := api.Envelope{WorkID: tg.WorkID, Generation: tg.Generation, Session: tg.Session}
		mk := func(seed string, mod func(e *api.Envelope)) *api.Envelope {
			e := base
			e.Identity = digest(seed)
			mod(&e)
			return &e
		}
		startA := mk("a1s", func(e *api.Envelope) {
			e.Type = api.TypeActionStart
			e.ActionStart = &api.ActionStart{ActionID: "toolu_1", Tool: "Bash", Class: "execution", Source: &api.SourceBinding{Head: "abc", Tree: "def"}}
		})
		exit := 0
		finishA := mk("a1f", func(e *api.Envelope) {
			e.Type = api.TypeActionFinish
			e.ActionFinish = &api.ActionFinish{ActionID: "toolu_1", Result: "succeeded", Verification: "unknown", ExitCode: &exit}
		})
		deliver(t, f.alice, startA, api.StatusAccepted)
		deliver(t, f.alice, finishA, api.StatusAccepted)
		deliver(t, f.alice, finishA, api.StatusDuplicate)
		otherFinish := mk("a1f-bis", func(e *api.Envelope) {
			e.Type = api.TypeActionFinish
			e.ActionFinish = &api.ActionFinish{ActionID: "toolu_1", Result: "failed", Verification: "unknown"}
		})
		_, err := f.alice.Deliver(ctx, otherFinish)
		wantErr(t, err, 409, api.CodeConflict, "action_finished")
		deliver(t, f.alice, mk("a2s", func(e *api.Envelope) {
			e.Type = api.TypeActionStart
			e.ActionStart = &api.ActionStart{ActionID: "toolu_2", Tool: "Edit", Class: "edit"}
		}), api.StatusAccepted)
		deliver(t, f.alice, mk("a3f", func(e *api.Envelope) {
			e.Type = api.TypeActionFinish
			e.ActionFinish = &api.ActionFinish{ActionID: "toolu_3", Result: "unknown", Verification: "unknown"}
		}), api.StatusAccepted)
		n := func(v int64) *int64 { return &v }
		for i, u := range []api.Usage{
			{Scope: api.UsageScopeRequest, MessageID: "msg_1", Model: "m", InputTokens: n(10), OutputTokens: n(5), CacheCreationInputTokens: n(0), CacheReadInputTokens: n(0)},
			{Scope: api.UsageScopeRequest, MessageID: "msg_2", Model: "m", InputTokens: n(1), OutputTokens: n(0), CacheReadInputTokens: n(7)},
			// The host's session total: kept apart, never summed.
			{Scope: api.UsageScopeSessionCumulative, Model: "m", InputTokens: n(500), OutputTokens: n(500)},
		} {
			u := u
			deliver(t, f.alice, mk("u"+string(rune('0'+i)), func(e *api.Envelope) { e.Type = api.TypeUsage; e.Usage = &u }), api.StatusAccepted)
		}
		deliver(t, f.alice, mk("gap", func(e *api.Envelope) {
			e.Type = api.TypeGap
			e.Gap = &api.Gap{Kind: "capture_interrupted", Reason: "spool full", FromSeq: 2, ToSeq: 3}
		}), api.StatusAccepted)
		deliver(t, f.alice, eventsEnv(tg, "ev", api.Event{Seq: 1, Kind: "session_start"}, api.Event{Seq: 4, Kind: "tool_start", ToolName: "Bash", ToolUseID: "toolu_1"}), api.StatusAccepted)
		rec := must[api.ChangeRecord](t)(f.reader.Record(ctx, w.ID))
		if rec.Usage.Records != 2 || rec.Usage.InputTokens != 11 || rec.Usage.OutputTokens != 5 || rec.Usage.CacheReadInputTokens != 7 {
			t.Fatalf("usage = %+v", rec.Usage)
		}
		if len(rec.Usage.Unknown) != 1 || rec.Usage.Unknown["cache_creation_input_tokens"] != 1 {
			t.Fatalf("unknown counts = %+v", rec.Usage.Unknown)
		}
		if sc := rec.Usage.SessionCumulative; len(sc) != 1 || *sc[0].InputTokens != 500 || sc[0].CacheReadInputTokens != nil || sc[0].Session != tg.Session {
			t.Fatalf("session cumulative = %+v", sc)
		}
		status := map[string]string{}
		for _, a := range rec.Actions {
			status[a.ActionID] = a.Status
		}
		if status["toolu_1"] != "complete" || status["toolu_2"] != "incomplete" || status["toolu_3"] != "finish_without_start" {
			t.Fatalf("actions = %+v", rec.Actions)
		}
		if len(rec.Gaps) != 1 || rec.Gaps[0].Kind != "capture_interrupted" || rec.Sessions[0].MissingSeqs != 2 {
			t.Fatalf("gaps = %+v sessions = %+v", rec.Gaps, rec.Sessions)
		}
		if rec.Coverage.State != "partial" || len(rec.Coverage.Reasons) != 5 {
			t.Fatalf("coverage = %+v", rec.Coverage)
		}
		// Reading changed nothing.
		again := must[api.ChangeRecord](t)(f.alice.Record(ctx, w.ID))
		if again.Work.UpdatedAt != rec.Work.UpdatedAt || len(again.Events) != len(rec.Events) {
			t.Fatal("record read is not stable")
		}
	}},
	{"read-only token reads and never writes", func(t *testing.T, f *fixture) {
		ctx := context.Background()
		w := start(t, f.alice, "wt-a")
		tg := resolve(t, f.alice, "wt-a", "n1")
		must[api.WorkList](t)(f.reader.ListWorks(ctx))
		must[api.Work](t)(f.reader.GetWork(ctx, w.ID))
		must[api.ChangeRecord](t)(f.reader.Record(ctx, w.ID))
		_, err := f.reader.StartWork(ctx, api.StartWorkRequest{WorktreeID: "wt-r"})
		wantErr(t, err, 403, api.CodeForbidden, "")
		_, err = f.reader.Resolve(ctx, api.ResolveRequest{WorktreeID: "wt-a", NativeSessionID: "n1"})
		wantErr(t, err, 403, api.CodeForbidden, "")
		_, err = f.reader.Deliver(ctx, eventsEnv(tg, "r", api.Event{Seq: 1, Kind: "turn_end"}))
		wantErr(t, err, 403, api.CodeForbidden, "")
		_, err = f.reader.Checkpoint(ctx, w.ID, api.CheckpointRequest{Action: api.CheckpointPause})
		wantErr(t, err, 403, api.CodeForbidden, "")
	}},
	{"another repository's token is refused; an admin reads all", func(t *testing.T, f *fixture) {
		ctx := context.Background()
		w := start(t, f.alice, "wt-a")
		_, err := f.carol.ListWorks(ctx)
		wantErr(t, err, 403, api.CodeForbidden, "")
		_, err = f.carol.Record(ctx, w.ID)
		wantErr(t, err, 403, api.CodeForbidden, "")
		_, err = f.carol.StartWork(ctx, api.StartWorkRequest{WorktreeID: "x"})
		wantErr(t, err, 403, api.CodeForbidden, "")
		l := must[api.WorkList](t)(f.admin.ListWorks(ctx))
		if len(l.Works) != 1 || l.Works[0].ID != w.ID {
			t.Fatalf("admin list = %+v", l)
		}
		// Team members see each other's change records.
		must[api.ChangeRecord](t)(f.bob.Record(ctx, w.ID))
		_, err = f.alice.GetWork(ctx, "wrk_00000000000000000000000000000000")
		wantErr(t, err, 404, api.CodeNotFound, "")
	}},
	{"malformed envelopes are refused with 400", func(t *testing.T, f *fixture) {
		ctx := context.Background()
		start(t, f.alice, "wt-a")
		tg := resolve(t, f.alice, "wt-a", "n1")
		bad := []*api.Envelope{
			eventsEnv(tg, "k", api.Event{Seq: 1, Kind: "telepathy"}),
			eventsEnv(tg, "s", api.Event{Seq: 0, Kind: "turn_end"}),
			eventsEnv(tg, "d", api.Event{Seq: 1, Kind: "turn_end"}, api.Event{Seq: 1, Kind: "turn_end"}),
			{Identity: "NOTHEX", Type: api.TypeEvents, WorkID: tg.WorkID, Generation: 1, Session: tg.Session, Events: []api.Event{{Seq: 1, Kind: "turn_end"}}},
			{Identity: digest("two"), Type: api.TypeUsage, WorkID: tg.WorkID, Generation: 1, Session: tg.Session, Usage: &api.Usage{}, Gap: &api.Gap{Kind: "redacted"}},
		}
		for i, e := range bad {
			_, err := f.alice.Deliver(ctx, e)
			if e2, ok := api.AsError(err); !ok || e2.Status != http.StatusBadRequest {
				t.Fatalf("bad envelope %d: %v", i, err)
			}
		}
		unknown := eventsEnv(tg, "u", api.Event{Seq: 1, Kind: "turn_end"})
		unknown.WorkID = "wrk_nope"
		_, err := f.alice.Deliver(ctx, unknown)
		wantErr(t, err, 422, api.CodeTargetRefused, api.ReasonUnknownWork)
	}},
}

func TestService(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			for _, tc := range serviceCases {
				t.Run(tc.name, func(t *testing.T) {
					tc.run(t, b.open(t))
				})
			}
		})
	}
}
