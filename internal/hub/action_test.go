package hub_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/agentscm/agentscm/internal/hub/api"
)

func identity(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestActionStartFinishRecord: an action start and its finish make one
// complete action in the change record; a start alone is incomplete; a
// finish whose stale flag disagrees with the two setup digests is refused.
func TestActionStartFinishRecord(t *testing.T) {
	e := newMatrixEnv(t)
	ctx := context.Background()
	w := e.freshWork(t, "wt-actions")
	p, err := e.svc.EnsureLocal(ctx, "alice", "proj")
	if err != nil {
		t.Fatal(err)
	}
	tg, err := e.svc.Resolve(ctx, p, "proj", api.ResolveRequest{WorktreeID: "wt-actions", NativeSessionID: "native-1"})
	if err != nil {
		t.Fatal(err)
	}
	setupA, setupB := identity("setup a"), identity("setup b")
	env := func(id string) api.Envelope {
		return api.Envelope{Identity: identity(id), WorkID: w.ID, Generation: tg.Generation, Session: tg.Session, NativeSessionID: "native-1"}
	}
	start := func(action, setup string) api.Envelope {
		x := env("start " + action)
		x.Type = api.TypeActionStart
		x.ActionStart = &api.ActionStart{ActionID: action, Tool: "Bash", Class: "execution", Coverage: "partial", SetupDigest: setup,
			Source: &api.SourceBinding{Head: "abc", Tree: "def"}, ObservationScope: "obs_1", ObservationOrder: 1, StartedAt: 100}
		return x
	}
	finish := func(action, result, setup string, stale bool, drift string) api.Envelope {
		x := env("finish " + action)
		x.Type = api.TypeActionFinish
		x.ActionFinish = &api.ActionFinish{ActionID: action, Result: result, Verification: "unknown", SetupDigest: setup, Stale: stale, Drift: drift, FinishedAt: 101}
		return x
	}
	ingest := func(x api.Envelope) error {
		_, err := e.svc.Ingest(ctx, p, "proj", &x)
		return err
	}
	for _, x := range []api.Envelope{
		start("act_1", setupA), finish("act_1", "failed", setupA, false, "none_observed"),
		start("act_2", setupA), finish("act_2", "unknown", setupB, true, "unknown"),
		start("act_3", setupA),
	} {
		if err := ingest(x); err != nil {
			t.Fatalf("%s %s: %v", x.Type, x.Identity, err)
		}
	}
	// Stale must mean exactly "the setups differ", in either arrival order.
	var ae *api.Error
	if err := ingest(finish("act_3", "unknown", setupA, true, "unknown")); !errors.As(err, &ae) || ae.Reason != "stale_mismatch" {
		t.Fatalf("stale finish with the start's setup: %v", err)
	}
	if err := ingest(finish("act_4", "unknown", setupB, false, "none_observed")); err != nil {
		t.Fatal(err)
	}
	if err := ingest(start("act_4", setupA)); !errors.As(err, &ae) || ae.Reason != "stale_mismatch" {
		t.Fatalf("start after a fresh finish under another setup: %v", err)
	}
	// A stale finish never claims a drift check.
	if err := ingest(finish("act_5", "unknown", setupB, true, "none_observed")); !errors.As(err, &ae) || ae.Status != 400 {
		t.Fatalf("stale finish with drift none_observed: %v", err)
	}
	rec, err := e.svc.Record(ctx, p, "proj", w.ID)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]api.ActionRecord{}
	for _, a := range rec.Actions {
		got[a.ActionID] = a
	}
	if a := got["act_1"]; a.Status != "complete" || a.Finish.Result != "failed" || a.Start.Coverage != "partial" || a.Start.Source.Head != "abc" || a.Finish.Stale {
		t.Fatalf("act_1 %+v", a)
	}
	if a := got["act_2"]; a.Status != "complete" || !a.Finish.Stale || a.Finish.SetupDigest != setupB || a.Start.SetupDigest != setupA {
		t.Fatalf("act_2 %+v", a)
	}
	if a := got["act_3"]; a.Status != "incomplete" || a.Finish != nil {
		t.Fatalf("act_3 %+v", a)
	}
	if a := got["act_4"]; a.Status != "finish_without_start" {
		t.Fatalf("act_4 %+v", a)
	}
	if rec.Coverage.State == "complete" {
		t.Fatalf("coverage %+v with an incomplete action", rec.Coverage)
	}
}
