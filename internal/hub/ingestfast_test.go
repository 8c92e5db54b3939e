package hub_test

import (
	"context"
	"testing"

	"github.com/agentscm/agentscm/internal/hub/api"
)

// TestIngestEventsOutcomes: every outcome of a plain events envelope — the
// one-round-trip transaction on PostgreSQL (store.EventsCommitter), the
// separate calls on SQLite — is the same on both stores, and a refused envelope
// leaves nothing behind: its identity is free afterwards.
func TestIngestEventsOutcomes(t *testing.T) {
	e := newMatrixEnv(t)
	ctx := context.Background()
	w := e.freshWork(t, "wt-fast")
	p, err := e.svc.EnsureLocal(ctx, "alice", "proj")
	if err != nil {
		t.Fatal(err)
	}
	tg, err := e.svc.Resolve(ctx, p, "proj", api.ResolveRequest{WorktreeID: "wt-fast", NativeSessionID: "native-1"})
	if err != nil {
		t.Fatal(err)
	}
	other := e.freshWork(t, "wt-other")
	if _, err := e.svc.Checkpoint(ctx, p, "proj", other.ID, api.CheckpointRequest{Action: api.CheckpointFinish}); err != nil {
		t.Fatal(err)
	}
	env := func(id string, seqs ...int64) *api.Envelope {
		x := &api.Envelope{Identity: identity(id), Type: api.TypeEvents, WorkID: w.ID, Generation: tg.Generation,
			Session: tg.Session, NativeSessionID: "native-1"}
		for _, s := range seqs {
			x.Events = append(x.Events, api.Event{Seq: s, Kind: "prompt_submit"})
		}
		return x
	}
	for _, tc := range []struct {
		name   string
		env    *api.Envelope
		mod    func(*api.Envelope)
		status string // accepted or duplicate; "" with reason: refused
		reason string
	}{
		{"accepted", env("a", 1, 2, 3), nil, api.StatusAccepted, ""},
		{"duplicate", env("a", 1, 2, 3), nil, api.StatusDuplicate, ""},
		{"identity reused", env("a", 4), nil, "", "identity_reused"},
		{"sequence taken", env("b", 3, 4), nil, "", "sequence_taken"},
		{"unknown work", env("c", 5), func(x *api.Envelope) { x.WorkID = "wrk_00000000000000000000000000000000" }, "", api.ReasonUnknownWork},
		{"not accepting", env("d", 5), func(x *api.Envelope) { x.WorkID = other.ID }, "", api.ReasonWorkNotAccepting},
		{"stale generation", env("e", 5), func(x *api.Envelope) { x.Generation = tg.Generation + 1 }, "", api.ReasonStaleGeneration},
		{"unknown session", env("f", 5), func(x *api.Envelope) { x.Session = "no-such-session" }, "", api.ReasonUnknownSession},
		// The refused identities are free: nothing of them was kept.
		{"after refusals", env("b", 4, 5), nil, api.StatusAccepted, ""},
		{"refused identity free", env("c", 6), nil, api.StatusAccepted, ""},
	} {
		if tc.mod != nil {
			tc.mod(tc.env)
		}
		r, err := e.svc.Ingest(ctx, p, "proj", tc.env)
		if tc.status != "" {
			if err != nil || r.Status != tc.status {
				t.Fatalf("%s: %+v, %v", tc.name, r, err)
			}
			continue
		}
		if got := reason(err); got != tc.reason {
			t.Fatalf("%s: %v (reason %q), want %q", tc.name, err, got, tc.reason)
		}
	}
	rec, err := e.svc.Record(ctx, p, "proj", w.ID)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for _, ev := range rec.Events {
		seqs = append(seqs, ev.Seq)
	}
	if len(seqs) != 6 {
		t.Fatalf("events %v, want 1..6", seqs)
	}
}
