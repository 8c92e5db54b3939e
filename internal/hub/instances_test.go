package hub_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/agentscm/agentscm/internal/hub"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/hub/objects/s3"
	"github.com/agentscm/agentscm/internal/hub/objects/s3/s3test"
	"github.com/agentscm/agentscm/internal/hub/store/postgres"
	"github.com/agentscm/agentscm/internal/hub/store/postgres/pgtest"
)

// openInstances opens n Hub services on one fresh PostgreSQL database and
// one S3 bucket, concurrently (their migrations queue on the advisory lock).
func openInstances(t *testing.T, n int) []*hub.Service {
	t.Helper()
	ctx := context.Background()
	dsn := pgtest.Database(t)
	cfg := s3test.Server(t, "hub", "team")
	svcs := make([]*hub.Service, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := postgres.Open(ctx, dsn)
			if err != nil {
				errs[i] = err
				return
			}
			obj, err := s3.Open(ctx, cfg)
			if err != nil {
				st.Close()
				errs[i] = err
				return
			}
			svcs[i], errs[i] = hub.New(st, obj, hub.Config{})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("instance %d: %v", i, err)
		}
		t.Cleanup(func() { svcs[i].Close() })
	}
	return svcs
}

func reason(err error) string {
	if ae, ok := api.AsError(err); ok && ae.Reason != "" {
		return ae.Reason
	}
	return fmt.Sprint(err)
}

// TestTwoInstances: two Hub processes' worth of services on one PostgreSQL
// and one bucket, driven concurrently, keep the single Hub's guarantees:
// an envelope replayed to both is accepted once, a sequence number is taken
// once, concurrent takeovers get distinct generations and fence the old
// one, a grant counts what either instance stored, and either serves what
// the other stored.
func TestTwoInstances(t *testing.T) {
	ctx := context.Background()
	svcs := openInstances(t, 2)
	a, b := svcs[0], svcs[1]
	if _, err := a.CreateRepository(ctx, hub.Operator(), api.CreateRepositoryRequest{Name: "proj"}); err != nil {
		t.Fatal(err)
	}
	p, err := b.EnsureLocal(ctx, "alice", "proj")
	if err != nil {
		t.Fatal(err)
	}
	w, err := a.StartWork(ctx, p, "proj", api.StartWorkRequest{WorktreeID: "wt-1"})
	if err != nil {
		t.Fatal(err)
	}

	envelope := func(id string, seq int64, gen int64) *api.Envelope {
		return &api.Envelope{Identity: identity(id), Type: api.TypeEvents, WorkID: w.ID, Generation: gen, Session: "default",
			Events: []api.Event{{Seq: seq, Kind: "turn_end"}}}
	}
	type outcome struct {
		key    int
		status string
		reason string
	}
	race := func(n int, mk func(i, side int) *api.Envelope) map[int][]outcome {
		out := make(chan outcome, 2*n)
		var wg sync.WaitGroup
		for i := range n {
			for side, svc := range svcs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res, err := svc.Ingest(ctx, p, "proj", mk(i, side))
					out <- outcome{i, res.Status, func() string {
						if err != nil {
							return reason(err)
						}
						return ""
					}()}
				}()
			}
		}
		wg.Wait()
		close(out)
		by := map[int][]outcome{}
		for o := range out {
			by[o.key] = append(by[o.key], o)
		}
		return by
	}

	// The same envelope to both instances at once: accepted once.
	const n = 20
	for i, os := range race(n, func(i, _ int) *api.Envelope { return envelope(fmt.Sprint("replay-", i), int64(i+1), 1) }) {
		accepted, dup := 0, 0
		for _, o := range os {
			switch {
			case o.status == api.StatusAccepted:
				accepted++
			case o.status == api.StatusDuplicate:
				dup++
			default:
				t.Errorf("replay %d: %+v", i, o)
			}
		}
		if accepted != 1 || dup != 1 {
			t.Errorf("replay %d: %d accepted, %d duplicate", i, accepted, dup)
		}
	}
	// Different envelopes claiming one sequence number: one wins.
	for i, os := range race(n, func(i, side int) *api.Envelope {
		return envelope(fmt.Sprintf("claim-%d-%d", i, side), int64(100+i), 1)
	}) {
		accepted, taken := 0, 0
		for _, o := range os {
			switch {
			case o.status == api.StatusAccepted:
				accepted++
			case o.reason == "sequence_taken":
				taken++
			default:
				t.Errorf("claim %d: %+v", i, o)
			}
		}
		if accepted != 1 || taken != 1 {
			t.Errorf("claim %d: %d accepted, %d sequence_taken", i, accepted, taken)
		}
	}
	rec, err := b.Record(ctx, p, "proj", w.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Events) != 2*n {
		t.Fatalf("record has %d events, want %d", len(rec.Events), 2*n)
	}

	// Concurrent takeovers from two worktrees: both happen, one after the
	// other, each with its own generation.
	var wg sync.WaitGroup
	gens := make([]int64, 2)
	terrs := make([]error, 2)
	for i, svc := range svcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := svc.Checkpoint(ctx, p, "proj", w.ID, api.CheckpointRequest{Action: api.CheckpointTakeover, WorktreeID: fmt.Sprintf("wt-take-%d", i)})
			gens[i], terrs[i] = got.Generation, err
		}()
	}
	wg.Wait()
	if terrs[0] != nil || terrs[1] != nil {
		t.Fatalf("takeovers: %v, %v", terrs[0], terrs[1])
	}
	if !(gens[0] == 2 && gens[1] == 3) && !(gens[0] == 3 && gens[1] == 2) {
		t.Fatalf("takeover generations %v, want 2 and 3", gens)
	}
	// The superseded generations are fenced on both instances.
	for _, svc := range svcs {
		if _, err := svc.Ingest(ctx, p, "proj", envelope("late-"+fmt.Sprint(svc == b), 500, 1)); reason(err) != api.ReasonStaleGeneration {
			t.Fatalf("ingest at generation 1 after takeovers: %v", err)
		}
	}
	cur, err := a.GetWork(ctx, p, "proj", w.ID)
	if err != nil || cur.Generation != 3 {
		t.Fatalf("work after takeovers: %+v, %v", cur, err)
	}

	// A grant counts the increments either instance stored; each serves
	// the other's objects.
	g, err := a.StartWork(ctx, p, "proj", api.StartWorkRequest{WorktreeID: "wt-g", ChangelogGrant: &api.Grant{MaxObjects: 3, MaxBytes: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	for pos := range 4 {
		inc := testIncrement(t, pos, "s")
		up := api.IncrementUpload{Position: pos, Session: "s", Digest: digestOf(inc), Size: int64(len(inc))}
		var res [2]api.IncrementStoreResult
		var errs [2]error
		for i, svc := range svcs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res[i], errs[i] = svc.UploadIncrement(ctx, p, "proj", "wt-g", up, bytesReader(inc))
			}()
		}
		wg.Wait()
		if pos == 3 {
			for i := range 2 {
				if ae, ok := api.AsError(errs[i]); !ok || ae.Code != api.CodeGrantExceeded {
					t.Fatalf("upload beyond the grant on instance %d: %+v %v", i, res[i], errs[i])
				}
			}
			continue
		}
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("upload %d: %v, %v", pos, errs[0], errs[1])
		}
		statuses := map[string]int{res[0].Status: 1}
		statuses[res[1].Status]++
		if statuses[api.IncrementStored] != 1 || statuses[api.IncrementDuplicate] != 1 {
			t.Fatalf("upload %d to both: %s and %s", pos, res[0].Status, res[1].Status)
		}
		for _, svc := range svcs {
			_, body, err := svc.GetIncrement(ctx, p, "proj", g.ID, "wt-g", pos)
			if err != nil || digestOf(body) != up.Digest {
				t.Fatalf("download %d: %v", pos, err)
			}
		}
	}
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
