package delivery

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/spool"
)

// legacyGolden is the v1 identity of the record in TestIdentityStreams as
// main computed it before streams.
const legacyGolden = "54c6f63a570012d48960724ff2627d0e999de46bb353d61af4d289b0e2152a4e"

// usageLegacyGolden is the v1 identity of the usage record in
// TestIdentityStreams as main computed it.
const usageLegacyGolden = "971c8a4d18d4566a1934f938e9dd79db5ec3f3029fd0a7733f845589a31c910c"

// TestIdentityStreams: a legacy record keeps its v1 identity (so already
// delivered envelopes stay duplicates); the same record in two streams has
// two identities; a usage record is one provider request whatever the
// stream; the envelope carries the stream except for usage.
func TestIdentityStreams(t *testing.T) {
	base := event.Record{Agent: "claude-code", SessionID: "s1", Kind: event.PromptSubmit, HookEvent: "UserPromptSubmit", Seq: 7,
		WorkID: "wrk_1", Generation: 1, CanonicalSession: "default", Sequenced: true, SharedSeq: 3}
	legacy := Identity(base)
	// The v1 form is fixed: an envelope delivered before streams must hash
	// the same forever.
	if legacy != legacyGolden {
		t.Fatalf("legacy identity changed: %s", legacy)
	}
	a, b := base, base
	a.Stream, b.Stream = "obs_a.1", "obs_b.2"
	if Identity(a) == legacy || Identity(b) == legacy || Identity(a) == Identity(b) {
		t.Fatalf("identities %s %s %s", legacy, Identity(a), Identity(b))
	}
	tool := base
	tool.Kind, tool.HookEvent, tool.ToolUseID = event.ToolStart, "PreToolUse", "toolu_1"
	ta, tb := tool, tool
	ta.Stream, tb.Stream = "obs_a.1", "obs_b.2"
	if Identity(ta) == Identity(tb) || Identity(ta) == Identity(tool) {
		t.Fatal("a tool event's identity ignores the stream")
	}
	in := int64(5)
	u := event.Record{Agent: "claude-code", SessionID: "s1", Kind: event.KindUsage, HookEvent: "transcript", WorkID: "wrk_1", Generation: 1, CanonicalSession: "default",
		Usage: &event.Usage{Scope: event.UsageScopeRequest, MessageID: "msg_1", InputTokens: &in}}
	ua, ub := u, u
	ua.Stream, ub.Stream = "obs_a.1", "obs_b.2"
	if Identity(ua) != Identity(ub) {
		t.Fatal("a usage record's identity depends on the stream")
	}
	// One provider request read into two targets (the same native session
	// in two worktrees' Works) is one record per target; the legacy
	// stream-free form stays as it was.
	uc := ua
	uc.WorkID = "wrk_2"
	if Identity(uc) == Identity(ua) || Identity(u) == Identity(ua) {
		t.Fatal("a usage record's identity ignores its target")
	}
	if Identity(u) != usageLegacyGolden {
		t.Fatalf("legacy usage identity changed: %s", Identity(u))
	}
	env, err := Envelope(a)
	if err != nil || env.Stream != "obs_a.1" || env.Events[0].Seq != 3 {
		t.Fatalf("envelope %+v %v", env, err)
	}
	if env, err := Envelope(base); err != nil || env.Stream != "" {
		t.Fatalf("legacy envelope %+v %v", env, err)
	}
	if env, err := Envelope(ua); err != nil || env.Stream != "" {
		t.Fatalf("usage envelope %+v %v", env, err)
	}
}

// TestReEnableMidSession: unconfigure, forget and enable while a native
// session goes on (a new spool, a new stream): every later event is
// accepted (no sequence_taken, no identity_reused), nothing stays pending,
// and the Hub shows where the first spool's account ends and the second's
// begins (a stream_boundary gap, and the new spool's adapter_started_late).
func TestReEnableMidSession(t *testing.T) {
	f := newFixture(t)
	work := f.startWork(t)
	ctx := context.Background()
	first := []string{
		f.payload("SessionStart", `,"source":"startup"`),
		f.payload("UserPromptSubmit", `,"prompt":"hello"`),
		f.payload("PreToolUse", `,"tool_name":"Read","tool_use_id":"t1","tool_input":{"file_path":"/x"}`),
		f.payload("PostToolUse", `,"tool_name":"Read","tool_use_id":"t1","tool_input":{"file_path":"/x"},"tool_response":{"ok":true}}`),
		f.payload("Stop", ""),
	}
	for _, p := range first {
		if r := f.hook(t, p); r.Failed != 0 {
			t.Fatalf("first spool: %+v", r)
		}
	}
	if _, err := binding.Unconfigure(ctx, f.store, f.root); err != nil {
		t.Fatal(err)
	}
	if _, err := binding.Forget(ctx, f.store, f.root); err != nil {
		t.Fatal(err)
	}
	res, err := binding.EnableCapture(ctx, f.store, Connections{f.cfg}, binding.EnableOptions{Root: f.root, ConfigDir: f.cfg, Executable: "/usr/local/bin/agentscm", Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Spool == f.spool {
		t.Fatalf("enable reused spool %s", res.Spool)
	}
	old := f.spool
	f.spool = res.Spool
	second := []string{
		f.payload("UserPromptSubmit", `,"prompt":"again"`),
		f.payload("PreToolUse", `,"tool_name":"Read","tool_use_id":"t2","tool_input":{"file_path":"/y"}`),
		f.payload("PostToolUse", `,"tool_name":"Read","tool_use_id":"t2","tool_input":{"file_path":"/y"},"tool_response":{"ok":true}}`),
		f.payload("Stop", ""),
		f.payload("SessionEnd", `,"reason":"other"`),
	}
	for _, p := range second {
		if r := f.hook(t, p); r.Failed != 0 || r.Refused != 0 {
			t.Fatalf("second spool: %+v (%v)", r, r.DeliveryErr)
		}
	}
	for _, dir := range []string{old, f.spool} {
		rep, err := spool.Inspect(dir, 100)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Pending.Total+rep.Deferred.Total != 0 {
			t.Fatalf("%s: %d pending, %d attempted and unacknowledged", dir, rep.Pending.Total, rep.Deferred.Total)
		}
	}
	rec := f.record(t, work)
	if len(rec.Sessions) != 1 {
		t.Fatalf("sessions %+v", rec.Sessions)
	}
	s := rec.Sessions[0]
	if len(s.Streams) != 2 || s.MissingSeqs != 0 || s.Streams[0].FirstSeq != 1 || s.Streams[1].FirstSeq != 1 {
		t.Fatalf("session %+v", s)
	}
	var boundary, late int
	for _, g := range rec.Gaps {
		switch {
		case g.Derived && g.Reason == api.GapReasonStreamBoundary && g.PreviousStream == s.Streams[0].Stream && g.Stream == s.Streams[1].Stream:
			boundary++
		case g.Kind == "adapter_started_late" && g.Stream == s.Streams[1].Stream:
			late++
		}
	}
	if boundary != 1 || late != 1 {
		t.Fatalf("boundary %d, late %d: %+v", boundary, late, rec.Gaps)
	}
}

// TestImportDoesNotRaiseFloor: records imported into a spool before its
// first live hook stay local and never raise the live floor: the first
// live events start at sequence 1 and the Hub reports no missing number.
func TestImportDoesNotRaiseFloor(t *testing.T) {
	f := newFixture(t)
	work := f.startWork(t)
	sp, err := spool.Open(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 16; i++ {
		r := &event.Record{Agent: "claude-code", SessionID: "native-1", Kind: event.KindGap, HookEvent: "import", ObservedAt: time.Now(),
			CaptureMode: event.ModeMetadataOnly, Gap: &event.GapInfo{Kind: event.GapAdapterStartedLate, Reason: "imported"}}
		if _, err := sp.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{f.payload("SessionStart", `,"source":"startup"`), f.payload("Stop", "")} {
		if r := f.hook(t, p); r.Failed != 0 {
			t.Fatalf("%+v", r)
		}
	}
	s := f.record(t, work).Sessions[0]
	if s.FirstSeq != 1 || s.LastSeq != 2 || s.MissingSeqs != 0 {
		t.Fatalf("session %+v", s)
	}
}

// TestRefusedEnvelopeIsReported: an envelope the Hub permanently refuses
// (here sequence_taken: another envelope took its number first) is not
// left pending silently: the hook reports it, the ledger lists it once
// (change-capture status), and one hub_refused gap marks its place on the
// Hub however often it is retried. The two hooks after the refusal pass it
// over (its retry is due only after RefusedRetryBase: one attempt).
func TestRefusedEnvelopeIsReported(t *testing.T) {
	f := newFixture(t)
	work := f.startWork(t)
	if r := f.hook(t, f.payload("SessionStart", `,"source":"startup"`)); r.Failed != 0 {
		t.Fatalf("%+v", r)
	}
	sp, err := spool.Open(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := sp.Events()
	if err != nil {
		t.Fatal(err)
	}
	first := recs[0]
	conn, err := f.open()
	if err != nil {
		t.Fatal(err)
	}
	// Take the next number of the stream with a foreign envelope.
	if _, err := conn.Deliver(context.Background(), &api.Envelope{Identity: strings.Repeat("ab", 32), Type: api.TypeEvents, WorkID: work,
		Generation: first.Generation, Session: first.CanonicalSession, Stream: first.Stream, Events: []api.Event{{Seq: int64(first.SharedSeq) + 1, Kind: "turn_end"}}}); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	r := f.hook(t, f.payload("Stop", ""))
	if r.Refused != 1 || r.DeliveryErr == nil || !strings.Contains(r.DeliveryErr.Error(), "sequence_taken") {
		t.Fatalf("%+v (%v)", r, r.DeliveryErr)
	}
	for i := 0; i < 2; i++ {
		f.hook(t, f.payload("Stop", ""))
	}
	rep, err := f.store.Refusals(f.spool)
	if err != nil || rep.Total != 1 || !rep.Refusals[0].Gap || rep.Refusals[0].Reason != "sequence_taken" {
		t.Fatalf("refusals %+v %v", rep, err)
	}
	st, err := binding.CaptureSetting(f.store, Connections{f.cfg}, f.root)
	if err != nil || st.Refused == nil || st.Refused.Total != 1 {
		t.Fatalf("status %+v %v", st, err)
	}
	// change-capture inspect: the refusal (reason, seq, kind) and, for the
	// refused envelope still pending, its last attempt's outcome.
	ir, err := spool.Inspect(f.spool, 100)
	if err != nil {
		t.Fatal(err)
	}
	view := f.store.Inspect(f.spool, ir)
	if view.LedgerError != "" || view.Refused.Total != 1 || view.Refused.Refusals[0].Reason != "sequence_taken" {
		t.Fatalf("inspect view %+v", view)
	}
	refusedSeq := view.Refused.Refusals[0].SpoolSeq
	var outcome *capture.PendingOutcome
	for i, o := range view.PendingOutcomes {
		if o.Seq == refusedSeq {
			outcome = &view.PendingOutcomes[i]
		} else if o.Refused != "" {
			t.Fatalf("outcome %+v names a refusal", o)
		}
	}
	if outcome == nil || outcome.Refused != "sequence_taken" || outcome.LastOutcome != "refused" || outcome.State != "attempted" ||
		outcome.Attempts != 1 || !strings.Contains(outcome.LastDetail, "sequence_taken") {
		t.Fatalf("outcome of the refused envelope %+v in %+v", outcome, view.PendingOutcomes)
	}
	var refusedGaps int
	for _, g := range f.record(t, work).Gaps {
		if g.Reason == "hub_refused:sequence_taken" && g.FromSeq == int64(first.SharedSeq)+1 {
			refusedGaps++
		}
	}
	if refusedGaps != 1 {
		t.Fatalf("hub_refused gaps: %d", refusedGaps)
	}
}
