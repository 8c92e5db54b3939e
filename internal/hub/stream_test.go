package hub_test

import (
	"context"
	"testing"

	"github.com/agentscm/agentscm/internal/hub/api"
)

// TestStreamsShareNoSequence: two client streams (a re-enabled spool, a
// second worktree) feeding one canonical session each start at seq 1; the
// Hub keeps both (the sequence key includes the stream), counts missing
// numbers per stream, and shows one derived stream_boundary gap where the
// second account begins. A legacy envelope (no stream) is its own stream
// and stays idempotent; a taken-over generation keeps accepting gaps as
// history but no events.
func TestStreamsShareNoSequence(t *testing.T) {
	e := newMatrixEnv(t)
	ctx := context.Background()
	w := e.freshWork(t, "wt-streams")
	p, err := e.svc.EnsureLocal(ctx, "alice", "proj")
	if err != nil {
		t.Fatal(err)
	}
	tg, err := e.svc.Resolve(ctx, p, "proj", api.ResolveRequest{WorktreeID: "wt-streams", NativeSessionID: "native-1"})
	if err != nil {
		t.Fatal(err)
	}
	const a, b = "obs_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.0000000000000001", "obs_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb.0000000000000002"
	ev := func(stream string, seq int64, kind string) api.Envelope {
		return api.Envelope{Identity: identity(stream + kind + string(rune('0'+seq))), Type: api.TypeEvents, WorkID: w.ID, Generation: tg.Generation,
			Session: tg.Session, NativeSessionID: "native-1", Stream: stream, Events: []api.Event{{Seq: seq, Kind: kind}}}
	}
	ingest := func(x api.Envelope) (api.IngestResult, error) { return e.svc.Ingest(ctx, p, "proj", &x) }
	for _, x := range []api.Envelope{
		ev("", 1, "session_start"), ev("", 2, "prompt_submit"),
		ev(a, 1, "prompt_submit"), ev(a, 2, "turn_end"),
		ev(b, 1, "prompt_submit"), ev(b, 3, "turn_end"),
	} {
		if r, err := ingest(x); err != nil || r.Status != api.StatusAccepted {
			t.Fatalf("%s seq %d: %+v %v", x.Stream, x.Events[0].Seq, r, err)
		}
	}
	// Within one stream a number is still taken once.
	dup := ev(b, 1, "prompt_submit")
	dup.Identity = identity("another")
	if _, err := ingest(dup); err == nil {
		t.Fatal("a second event at seq 1 of stream b was accepted")
	} else if ae, ok := api.AsError(err); !ok || ae.Reason != "sequence_taken" {
		t.Fatalf("duplicate seq: %v", err)
	}
	// The legacy envelope replays as a duplicate.
	if r, err := ingest(ev("", 1, "session_start")); err != nil || r.Status != api.StatusDuplicate {
		t.Fatalf("legacy replay: %+v %v", r, err)
	}
	bad := ev("obs/x", 9, "turn_end")
	if _, err := ingest(bad); err == nil {
		t.Fatal("a stream with a slash was accepted")
	}
	rec, err := e.svc.Record(ctx, p, "proj", w.ID)
	if err != nil {
		t.Fatal(err)
	}
	var s api.SessionRecord
	for _, x := range rec.Sessions {
		if x.Session == tg.Session {
			s = x
		}
	}
	if s.Events != 6 || s.MissingSeqs != 1 || len(s.Streams) != 3 || s.Streams[0].Stream != "" || s.Streams[1].Stream != a ||
		s.Streams[2].Stream != b || s.Streams[2].MissingSeqs != 1 || s.LastSeq != 3 {
		t.Fatalf("session %+v", s)
	}
	var boundaries []api.GapRecord
	for _, g := range rec.Gaps {
		if g.Derived {
			boundaries = append(boundaries, g)
		}
	}
	if len(boundaries) != 2 || boundaries[0].Reason != api.GapReasonStreamBoundary || boundaries[0].Stream != a || boundaries[0].PreviousStream != "" ||
		boundaries[0].PreviousLastSeq != 2 || boundaries[1].Stream != b || boundaries[1].PreviousStream != a || boundaries[1].Kind != "capture_interrupted" {
		t.Fatalf("boundaries %+v", boundaries)
	}
	if rec.Coverage.State != "partial" {
		t.Fatalf("coverage %+v", rec.Coverage)
	}
	if len(rec.Events) != 6 || rec.Events[0].Stream != "" || rec.Events[2].Stream != a || rec.Events[4].Stream != b {
		t.Fatalf("events %+v", rec.Events)
	}

	// Takeover: generation 1 is history. Its outage gap is kept there; an
	// event for it is refused.
	if _, err := e.svc.Checkpoint(ctx, p, "proj", w.ID, api.CheckpointRequest{Action: api.CheckpointTakeover, WorktreeID: "wt-other"}); err != nil {
		t.Fatal(err)
	}
	gap := api.Envelope{Identity: identity("outage"), Type: api.TypeGap, WorkID: w.ID, Generation: tg.Generation, Session: tg.Session, Stream: b,
		Gap: &api.Gap{Kind: "capture_interrupted", Reason: "target_unavailable", FromSeq: 4, ToSeq: 6}}
	if r, err := ingest(gap); err != nil || r.Status != api.StatusAccepted {
		t.Fatalf("outage gap after the takeover: %+v %v", r, err)
	}
	if _, err := ingest(ev(b, 7, "turn_end")); err == nil {
		t.Fatal("an event for the taken-over generation was accepted")
	} else if reason, ok := api.IsRefusal(err); !ok || reason != api.ReasonStaleGeneration {
		t.Fatalf("stale event: %v", err)
	}
	unknown := gap
	unknown.Identity, unknown.Session = identity("outage 2"), "no-such-session"
	if _, err := ingest(unknown); err == nil {
		t.Fatal("a gap for an unknown session of an older generation was accepted")
	}
	rec, err = e.svc.Record(ctx, p, "proj", w.ID)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, g := range rec.Gaps {
		if !g.Derived && g.Generation == tg.Generation && g.Stream == b && g.FromSeq == 4 && g.ToSeq == 6 {
			found = true
		}
	}
	if !found {
		t.Fatalf("gaps %+v", rec.Gaps)
	}
}
