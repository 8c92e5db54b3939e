// Package storetest is the conformance suite of store.Store: what every
// primitive of store.Tx promises (lookups, ErrNotFound and ErrExists, orders,
// upserts, sums), and what Update promises (a failed function writes
// nothing; Updates are serialized, so read-modify-write never loses one).
// Every store runs it, as restic runs one suite over every backend:
//
//	func TestConformance(t *testing.T) { storetest.Run(t, openStore) }
package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sync"
	"testing"

	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/hub/store"
)

// Open returns a fresh, empty store; the suite closes it.
type Open func(t *testing.T) store.Store

// Run runs every conformance test, each on a store of its own.
func Run(t *testing.T, open Open) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, store.Store)
	}{
		{"Principals", testPrincipals},
		{"ExistsDoesNotAbort", testExistsDoesNotAbort},
		{"FailedUpdateWritesNothing", testFailedUpdateWritesNothing},
		{"ViewIsReadOnly", testViewIsReadOnly},
		{"Works", testWorks},
		{"Checkpoints", testCheckpoints},
		{"Currents", testCurrents},
		{"Sessions", testSessions},
		{"SessionAgent", testSessionAgent},
		{"IdempotentEnvelopes", testEnvelopes},
		{"EventSequences", testEventSequences},
		{"Actions", testActions},
		{"Usage", testUsage},
		{"UsageSaturates", testUsageSaturates},
		{"GapsAndSetups", testGapsAndSetups},
		{"ChangelogIncrements", testChangelog},
		{"Bodies", testBodies},
		{"BodyRemovalsAndLeases", testRemovalsAndLeases},
		{"TakeoverFencing", testTakeoverFencing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { s.Close() })
			tc.fn(t, s)
		})
	}
}

func update(t *testing.T, s store.Store, fn func(store.Tx) error) {
	t.Helper()
	if err := s.Update(context.Background(), fn); err != nil {
		t.Fatalf("Update: %v", err)
	}
}

func view(t *testing.T, s store.Store, fn func(store.Tx) error) {
	t.Helper()
	if err := s.View(context.Background(), fn); err != nil {
		t.Fatalf("View: %v", err)
	}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s = %v, want %v", what, err, want)
	}
}

// expect is wantErr inside an Update's function, which may run on another
// goroutine (a store's writer) where t.Fatal must not be called.
func expect(what string, err, want error) error {
	if !errors.Is(err, want) {
		return fmt.Errorf("%s = %v, want %v", what, err, want)
	}
	return nil
}

func equal(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s =\n  %+v\nwant\n  %+v", what, got, want)
	}
}

func n64(v int64) *int64 { return &v }

func nInt(v int) *int { return &v }

// seed inserts a human, a repository and a Work "w1" at generation 1 with
// the session "s" on worktree "wt".
func seed(t *testing.T, s store.Store) {
	t.Helper()
	update(t, s, func(tx store.Tx) error {
		return errors.Join(
			tx.InsertHuman(store.Human{ID: "h1", Name: "alice", Admin: true, CreatedAt: 1}),
			tx.InsertRepository(store.Repository{ID: "r1", Name: "proj", CreatedAt: 1}),
			tx.InsertWork(store.Work{ID: "w1", RepositoryID: "r1", Title: "t", State: "active", Generation: 1, CreatedBy: "h1", CreatedAt: 10, UpdatedAt: 10}),
			tx.InsertSession(store.Session{WorkID: "w1", Generation: 1, Canonical: "s", WorktreeID: "wt", CreatedAt: 10}),
		)
	})
}

func testPrincipals(t *testing.T, s store.Store) {
	alice := store.Human{ID: "h1", Name: "alice", Admin: true, CreatedAt: 1}
	bob := store.Human{ID: "h2", Name: "bob", CreatedAt: 2}
	repo := store.Repository{ID: "r1", Name: "proj", CreatedAt: 3}
	tok := store.Token{ID: "k1", Hash: "hash1", HumanID: "h2", RepositoryID: "r1", Scope: "write", Label: "laptop", CreatedAt: 4}
	update(t, s, func(tx store.Tx) error {
		return errors.Join(tx.InsertHuman(bob), tx.InsertHuman(alice), tx.InsertRepository(repo), tx.InsertToken(tok),
			tx.InsertToken(store.Token{ID: "k0", Hash: "hash0", HumanID: "h1", RepositoryID: "r1", Scope: "admin", CreatedAt: 4}))
	})
	view(t, s, func(tx store.Tx) error {
		h, err := tx.HumanByName("alice")
		equal(t, "HumanByName", []any{h, err}, []any{alice, nil})
		h, err = tx.HumanByID("h2")
		equal(t, "HumanByID", []any{h, err}, []any{bob, nil})
		_, err = tx.HumanByName("carol")
		wantErr(t, "HumanByName(missing)", err, store.ErrNotFound)
		hs, err := tx.ListHumans()
		equal(t, "ListHumans", []any{hs, err}, []any{[]store.Human{alice, bob}, nil})
		r, err := tx.RepositoryByName("proj")
		equal(t, "RepositoryByName", []any{r, err}, []any{repo, nil})
		r, err = tx.RepositoryByID("r1")
		equal(t, "RepositoryByID", []any{r, err}, []any{repo, nil})
		_, err = tx.RepositoryByID("r9")
		wantErr(t, "RepositoryByID(missing)", err, store.ErrNotFound)
		rs, err := tx.ListRepositories()
		equal(t, "ListRepositories", []any{rs, err}, []any{[]store.Repository{repo}, nil})
		k, err := tx.TokenByHash("hash1")
		equal(t, "TokenByHash", []any{k, err}, []any{tok, nil})
		_, err = tx.TokenByHash("nope")
		wantErr(t, "TokenByHash(missing)", err, store.ErrNotFound)
		k, h, r, err = tx.TokenPrincipal("hash1")
		equal(t, "TokenPrincipal", []any{k, h, r, err}, []any{tok, bob, repo, nil})
		_, _, _, err = tx.TokenPrincipal("nope")
		wantErr(t, "TokenPrincipal(missing)", err, store.ErrNotFound)
		ks, err := tx.ListTokens()
		if err != nil || len(ks) != 2 || ks[0].ID != "k0" || ks[1].ID != "k1" {
			t.Fatalf("ListTokens (by creation, then id) = %+v, %v", ks, err)
		}
		return nil
	})
	// Every insert of a taken key, primary or unique, is ErrExists.
	for name, ins := range map[string]func(store.Tx) error{
		"human id":        func(tx store.Tx) error { return tx.InsertHuman(store.Human{ID: "h1", Name: "other"}) },
		"human name":      func(tx store.Tx) error { return tx.InsertHuman(store.Human{ID: "h9", Name: "alice"}) },
		"repository name": func(tx store.Tx) error { return tx.InsertRepository(store.Repository{ID: "r9", Name: "proj"}) },
		"token hash": func(tx store.Tx) error {
			return tx.InsertToken(store.Token{ID: "k9", Hash: "hash1", HumanID: "h1", RepositoryID: "r1"})
		},
	} {
		err := s.Update(context.Background(), ins)
		wantErr(t, "insert of a taken "+name, err, store.ErrExists)
	}
}

// testExistsDoesNotAbort: after ErrExists the transaction goes on, and what
// it wrote before and after commits.
func testExistsDoesNotAbort(t *testing.T, s store.Store) {
	update(t, s, func(tx store.Tx) error { return tx.InsertHuman(store.Human{ID: "h1", Name: "a"}) })
	update(t, s, func(tx store.Tx) error {
		if err := tx.InsertHuman(store.Human{ID: "h2", Name: "b"}); err != nil {
			return err
		}
		if err := tx.InsertHuman(store.Human{ID: "h1", Name: "a"}); !errors.Is(err, store.ErrExists) {
			return fmt.Errorf("duplicate insert = %v, want ErrExists", err)
		}
		return tx.InsertHuman(store.Human{ID: "h3", Name: "c"})
	})
	view(t, s, func(tx store.Tx) error {
		hs, err := tx.ListHumans()
		if err != nil || len(hs) != 3 {
			t.Fatalf("humans after a transaction that met ErrExists: %+v, %v", hs, err)
		}
		return nil
	})
}

func testFailedUpdateWritesNothing(t *testing.T, s store.Store) {
	boom := errors.New("boom")
	err := s.Update(context.Background(), func(tx store.Tx) error {
		if err := tx.InsertHuman(store.Human{ID: "h1", Name: "a"}); err != nil {
			return err
		}
		return boom
	})
	wantErr(t, "failing Update", err, boom)
	view(t, s, func(tx store.Tx) error {
		_, err := tx.HumanByID("h1")
		wantErr(t, "row of a failed Update", err, store.ErrNotFound)
		return nil
	})
}

func testViewIsReadOnly(t *testing.T, s store.Store) {
	err := s.View(context.Background(), func(tx store.Tx) error { return tx.InsertHuman(store.Human{ID: "h1", Name: "a"}) })
	if err == nil {
		t.Fatal("an insert in a View succeeded")
	}
	view(t, s, func(tx store.Tx) error {
		_, err := tx.HumanByID("h1")
		wantErr(t, "row inserted in a View", err, store.ErrNotFound)
		return nil
	})
}

func testWorks(t *testing.T, s store.Store) {
	update(t, s, func(tx store.Tx) error {
		return errors.Join(tx.InsertHuman(store.Human{ID: "h1", Name: "a"}), tx.InsertRepository(store.Repository{ID: "r1", Name: "p"}),
			tx.InsertRepository(store.Repository{ID: "r2", Name: "q"}))
	})
	works := []store.Work{
		{ID: "wa", RepositoryID: "r1", Title: "a", State: "active", Generation: 1, CreatedBy: "h1", CreatedAt: 10, UpdatedAt: 10},
		{ID: "wb", RepositoryID: "r1", Title: "b", State: "paused", Generation: 2, CreatedBy: "h1", CreatedAt: 20, UpdatedAt: 20},
		{ID: "wc", RepositoryID: "r1", Title: "c", State: "active", Generation: 1, CreatedBy: "h1", CreatedAt: 20, UpdatedAt: 20},
		{ID: "wd", RepositoryID: "r2", Title: "d", State: "active", Generation: 1, CreatedBy: "h1", CreatedAt: 30, UpdatedAt: 30},
	}
	update(t, s, func(tx store.Tx) error {
		for _, w := range works {
			if err := tx.InsertWork(w); err != nil {
				return err
			}
		}
		return nil
	})
	update(t, s, func(tx store.Tx) error {
		if err := expect("InsertWork(taken)", tx.InsertWork(works[0]), store.ErrExists); err != nil {
			return err
		}
		w := works[0]
		w.Title, w.State, w.Generation, w.UpdatedAt = "renamed", "done", 5, 99
		works[0] = w
		if err := tx.UpdateWork(w); err != nil {
			return err
		}
		if err := expect("UpdateWork(missing)", tx.UpdateWork(store.Work{ID: "nope"}), store.ErrNotFound); err != nil {
			return err
		}
		return nil
	})
	view(t, s, func(tx store.Tx) error {
		w, err := tx.WorkByID("wa")
		equal(t, "WorkByID after UpdateWork", []any{w, err}, []any{works[0], nil})
		_, err = tx.WorkByID("nope")
		wantErr(t, "WorkByID(missing)", err, store.ErrNotFound)
		// Newest first, then by id descending; limit bounds the list, not
		// the count.
		ws, n, err := tx.ListWorks("r1", 2)
		equal(t, "ListWorks", []any{ws, n, err}, []any{[]store.Work{works[2], works[1]}, 3, nil})
		ws, n, err = tx.ListWorks("r3", 10)
		if err != nil || len(ws) != 0 || n != 0 {
			t.Fatalf("ListWorks(empty) = %+v, %d, %v", ws, n, err)
		}
		return nil
	})
}

func testCheckpoints(t *testing.T, s store.Store) {
	seed(t, s)
	seqs := make([]int64, 3)
	for i := range 3 {
		update(t, s, func(tx store.Tx) error {
			var err error
			seqs[i], err = tx.AppendCheckpoint(store.Checkpoint{WorkID: "w1", Action: "pause", From: "active", To: "paused",
				Generation: 1, HumanID: "h1", WorktreeID: "wt", Note: fmt.Sprint("n", i), At: int64(100 + i)})
			return err
		})
	}
	equal(t, "AppendCheckpoint sequence numbers", seqs, []int64{1, 2, 3})
	view(t, s, func(tx store.Tx) error {
		cs, err := tx.Checkpoints("w1")
		if err != nil || len(cs) != 3 {
			t.Fatalf("Checkpoints = %+v, %v", cs, err)
		}
		equal(t, "Checkpoints[2]", cs[2], store.Checkpoint{WorkID: "w1", Seq: 3, Action: "pause", From: "active", To: "paused",
			Generation: 1, HumanID: "h1", WorktreeID: "wt", Note: "n2", At: 102})
		return nil
	})
}

func testCurrents(t *testing.T, s store.Store) {
	seed(t, s)
	update(t, s, func(tx store.Tx) error {
		return errors.Join(
			tx.InsertWork(store.Work{ID: "w2", RepositoryID: "r1", State: "active", Generation: 1, CreatedBy: "h1"}),
			tx.SetCurrent(store.Current{RepositoryID: "r1", WorktreeID: "wt-b", WorkID: "w1", Generation: 1, UpdatedAt: 5}),
			tx.SetCurrent(store.Current{RepositoryID: "r1", WorktreeID: "wt-a", WorkID: "w1", Generation: 1, UpdatedAt: 5}),
			// An upsert: the worktree moves to w2.
			tx.SetCurrent(store.Current{RepositoryID: "r1", WorktreeID: "wt-b", WorkID: "w2", Generation: 3, UpdatedAt: 6}),
		)
	})
	view(t, s, func(tx store.Tx) error {
		c, err := tx.Current("r1", "wt-b")
		equal(t, "Current after SetCurrent twice", []any{c, err}, []any{store.Current{RepositoryID: "r1", WorktreeID: "wt-b", WorkID: "w2", Generation: 3, UpdatedAt: 6}, nil})
		_, err = tx.Current("r1", "wt-z")
		wantErr(t, "Current(missing)", err, store.ErrNotFound)
		cs, err := tx.CurrentsForWork("w1")
		equal(t, "CurrentsForWork", []any{cs, err}, []any{[]store.Current{{RepositoryID: "r1", WorktreeID: "wt-a", WorkID: "w1", Generation: 1, UpdatedAt: 5}}, nil})
		return nil
	})
}

func testSessions(t *testing.T, s store.Store) {
	seed(t, s)
	def := store.Session{WorkID: "w1", Generation: 1, Canonical: "default", WorktreeID: "wt", Alias: true, CreatedAt: 5}
	update(t, s, func(tx store.Tx) error {
		if err := tx.InsertSession(def); err != nil {
			return err
		}
		if err := expect("InsertSession(taken)", tx.InsertSession(def), store.ErrExists); err != nil {
			return err
		}
		return tx.InsertSession(store.Session{WorkID: "w1", Generation: 2, Canonical: "g2", WorktreeID: "wt", CreatedAt: 1})
	})
	view(t, s, func(tx store.Tx) error {
		got, err := tx.Session("w1", 1, "default")
		equal(t, "Session", []any{got, err}, []any{def, nil})
		_, err = tx.Session("w1", 2, "default")
		wantErr(t, "Session(other generation)", err, store.ErrNotFound)
		ss, err := tx.Sessions("w1")
		if err != nil || len(ss) != 3 || ss[0].Canonical != "default" || ss[1].Canonical != "s" || ss[2].Canonical != "g2" {
			t.Fatalf("Sessions (generation, creation, name) = %+v, %v", ss, err)
		}
		a, err := tx.UnboundAlias("w1", 1, "wt")
		equal(t, "UnboundAlias", []any{a, err}, []any{def, nil})
		_, err = tx.UnboundAlias("w1", 1, "other-wt")
		wantErr(t, "UnboundAlias(other worktree)", err, store.ErrNotFound)
		return nil
	})
	update(t, s, func(tx store.Tx) error {
		if err := tx.BindNative("w1", 1, "default", "native-1", 7); err != nil {
			return err
		}
		if err := expect("BindNative(taken)", tx.BindNative("w1", 1, "s", "native-1", 8), store.ErrExists); err != nil {
			return err
		}
		return errors.Join(tx.BindNative("w1", 1, "default", "native-0", 9), tx.BindNative("w1", 1, "s", "native-2", 8))
	})
	view(t, s, func(tx store.Tx) error {
		got, err := tx.SessionByNative("w1", 1, "native-1")
		equal(t, "SessionByNative", []any{got, err}, []any{def, nil})
		_, err = tx.SessionByNative("w1", 2, "native-1")
		wantErr(t, "SessionByNative(other generation)", err, store.ErrNotFound)
		_, err = tx.UnboundAlias("w1", 1, "wt")
		wantErr(t, "UnboundAlias once joined", err, store.ErrNotFound)
		ns, err := tx.Natives("w1")
		equal(t, "Natives (by first seen)", []any{ns, err}, []any{map[store.SessionKey][]string{
			{Generation: 1, Canonical: "default"}: {"native-1", "native-0"},
			{Generation: 1, Canonical: "s"}:       {"native-2"},
		}, nil})
		return nil
	})
}

// testSessionAgent: a session's agent round-trips through every read;
// ClaimSessionAgent sets it once and never replaces it.
func testSessionAgent(t *testing.T, s store.Store) {
	seed(t, s)
	claude := store.Session{WorkID: "w1", Generation: 1, Canonical: "c", WorktreeID: "wt", CreatedAt: 6, Agent: "claude-code"}
	unknown := store.Session{WorkID: "w1", Generation: 1, Canonical: "u", WorktreeID: "wt", CreatedAt: 7}
	update(t, s, func(tx store.Tx) error {
		return errors.Join(tx.InsertSession(claude), tx.InsertSession(unknown), tx.BindNative("w1", 1, "c", "native-c", 8))
	})
	view(t, s, func(tx store.Tx) error {
		got, err := tx.Session("w1", 1, "c")
		equal(t, "Session with an agent", []any{got, err}, []any{claude, nil})
		got, err = tx.SessionByNative("w1", 1, "native-c")
		equal(t, "SessionByNative with an agent", []any{got, err}, []any{claude, nil})
		got, err = tx.Session("w1", 1, "u")
		equal(t, "Session without an agent", []any{got, err}, []any{unknown, nil})
		return nil
	})
	update(t, s, func(tx store.Tx) error {
		return errors.Join(tx.ClaimSessionAgent("w1", 1, "c", "codex"), tx.ClaimSessionAgent("w1", 1, "u", "gemini"),
			tx.ClaimSessionAgent("w1", 1, "u", "codex"), tx.ClaimSessionAgent("w1", 1, "missing", "codex"))
	})
	view(t, s, func(tx store.Tx) error {
		ss, err := tx.Sessions("w1")
		if err != nil {
			return err
		}
		agents := map[string]string{}
		for _, x := range ss {
			agents[x.Canonical] = x.Agent
		}
		equal(t, "Sessions' agents after claims", agents, map[string]string{"s": "", "c": "claude-code", "u": "gemini"})
		return nil
	})
}

// testEnvelopes: an identity is taken once per repository; the retained
// row answers a replay.
func testEnvelopes(t *testing.T, s store.Store) {
	seed(t, s)
	e := store.Envelope{RepositoryID: "r1", Identity: "id-1", Digest: "sha256:aa", Type: "events", WorkID: "w1", Generation: 1, Session: "s", ReceivedAt: 50}
	update(t, s, func(tx store.Tx) error { return tx.InsertEnvelope(e) })
	err := s.Update(context.Background(), func(tx store.Tx) error {
		return tx.InsertEnvelope(store.Envelope{RepositoryID: "r1", Identity: "id-1", Digest: "sha256:bb", Type: "events", WorkID: "w1"})
	})
	wantErr(t, "InsertEnvelope(taken identity)", err, store.ErrExists)
	update(t, s, func(tx store.Tx) error {
		return tx.InsertEnvelope(store.Envelope{RepositoryID: "r2", Identity: "id-1", Digest: "sha256:cc", Type: "events", WorkID: "w1"})
	})
	view(t, s, func(tx store.Tx) error {
		got, err := tx.EnvelopeByIdentity("r1", "id-1")
		equal(t, "EnvelopeByIdentity", []any{got, err}, []any{e, nil})
		_, err = tx.EnvelopeByIdentity("r1", "id-2")
		wantErr(t, "EnvelopeByIdentity(missing)", err, store.ErrNotFound)
		return nil
	})
}

func events(kind string, seqs ...int64) []api.Event {
	out := make([]api.Event, len(seqs))
	for i, q := range seqs {
		out[i] = api.Event{Seq: q, Kind: kind}
	}
	return out
}

// testEventSequences: a sequence number is taken once per session and
// stream; a batch meeting a taken one fails whole; streams list in the
// order they first arrived.
func testEventSequences(t *testing.T, s store.Store) {
	seed(t, s)
	sc := func(stream, id string, at int64) store.Scope {
		return store.Scope{WorkID: "w1", Generation: 1, Session: "s", Stream: stream, Identity: id, ReceivedAt: at}
	}
	update(t, s, func(tx store.Tx) error { return tx.InsertEvents(sc("zz", "e1", 100), events("prompt_submit", 1, 2, 3)) })
	// The same numbers in another stream are free.
	update(t, s, func(tx store.Tx) error { return tx.InsertEvents(sc("aa", "e2", 101), events("tool_call", 1, 2)) })
	update(t, s, func(tx store.Tx) error { return tx.InsertEvents(sc("zz", "e3", 102), nil) })
	// A batch with one taken number fails, and its Update writes nothing.
	err := s.Update(context.Background(), func(tx store.Tx) error {
		return tx.InsertEvents(sc("zz", "e4", 103), events("stop", 4, 3))
	})
	wantErr(t, "InsertEvents(taken sequence)", err, store.ErrExists)
	// A large batch (several statements where a store chunks).
	big := make([]int64, 250)
	for i := range big {
		big[i] = int64(10 + i)
	}
	update(t, s, func(tx store.Tx) error { return tx.InsertEvents(sc("zz", "e5", 104), events("tool_call", big...)) })
	view(t, s, func(tx store.Tx) error {
		evs, total, err := tx.ListEvents("w1", 4)
		if err != nil || total != 255 || len(evs) != 4 {
			t.Fatalf("ListEvents = %d of %d, %v", len(evs), total, err)
		}
		// Stream zz reached the Hub first.
		var got []string
		for _, r := range evs {
			got = append(got, fmt.Sprintf("%s/%d/%s@%d", r.Stream, r.Event.Seq, r.Event.Kind, r.ReceivedAt))
		}
		equal(t, "ListEvents order", got, []string{"zz/1/prompt_submit@100", "zz/2/prompt_submit@100", "zz/3/prompt_submit@100", "zz/10/tool_call@104"})
		st, err := tx.SessionStats("w1")
		equal(t, "SessionStats", []any{st, err}, []any{[]store.SessionStats{
			{Generation: 1, Session: "s", Stream: "zz", FirstReceived: 100, Events: 253, FirstSeq: 1, LastSeq: 259, LastKind: "tool_call"},
			{Generation: 1, Session: "s", Stream: "aa", FirstReceived: 101, Events: 2, FirstSeq: 1, LastSeq: 2, LastKind: "tool_call"},
		}, nil})
		return nil
	})
}

func testActions(t *testing.T, s store.Store) {
	seed(t, s)
	sc := store.Scope{WorkID: "w1", Generation: 1, Session: "s", Identity: "i1", ReceivedAt: 10}
	start := &api.ActionStart{ActionID: "a1", Tool: "test"}
	update(t, s, func(tx store.Tx) error {
		return errors.Join(
			tx.InsertActionStart(sc, start),
			// A second start of the same action keeps the first.
			tx.InsertActionStart(store.Scope{WorkID: "w1", Generation: 1, Session: "s", Identity: "i2"}, &api.ActionStart{ActionID: "a1", Tool: "other"}),
			// A finish whose start never arrived.
			tx.SetActionFinish(store.Scope{WorkID: "w1", Generation: 1, Session: "s", Identity: "i3"}, &api.ActionFinish{ActionID: "a0", ExitCode: nInt(3)}),
		)
	})
	update(t, s, func(tx store.Tx) error {
		return tx.SetActionFinish(store.Scope{WorkID: "w1", Generation: 1, Session: "s", Identity: "i4"}, &api.ActionFinish{ActionID: "a1", ExitCode: nInt(0)})
	})
	// The start arriving after a finish-only row fills it in.
	update(t, s, func(tx store.Tx) error {
		return tx.InsertActionStart(store.Scope{WorkID: "w1", Generation: 1, Session: "s", Identity: "i5"}, &api.ActionStart{ActionID: "a0", Tool: "late"})
	})
	view(t, s, func(tx store.Tx) error {
		a, err := tx.Action("w1", "a1")
		if err != nil || a.Start == nil || a.Start.Tool != "test" || a.StartIdentity != "i1" || a.Finish == nil || a.FinishIdentity != "i4" || *a.Finish.ExitCode != 0 {
			t.Fatalf("Action(a1) = %+v, %v", a, err)
		}
		_, err = tx.Action("w1", "a9")
		wantErr(t, "Action(missing)", err, store.ErrNotFound)
		as, err := tx.Actions("w1")
		if err != nil || len(as) != 2 || as[0].ActionID != "a0" || as[0].Start == nil || as[0].Start.Tool != "late" || as[0].Finish == nil || *as[0].Finish.ExitCode != 3 {
			t.Fatalf("Actions = %+v, %v", as, err)
		}
		return nil
	})
}

func testUsage(t *testing.T, s store.Store) {
	seed(t, s)
	at := func(id string, when int64) store.Scope {
		return store.Scope{WorkID: "w1", Generation: 1, Session: "s", Identity: id, ReceivedAt: when}
	}
	update(t, s, func(tx store.Tx) error {
		return errors.Join(
			tx.InsertUsage(at("u1", 1), &api.Usage{Scope: api.UsageScopeRequest, Model: "m", MessageID: "m1", InputTokens: n64(10), OutputTokens: n64(5), CacheCreationInputTokens: n64(1), CacheReadInputTokens: n64(2)}),
			tx.InsertUsage(at("u2", 2), &api.Usage{Scope: api.UsageScopeRequest, Model: "m", MessageID: "m2", InputTokens: n64(7)}),
			tx.InsertUsage(at("u3", 3), &api.Usage{Scope: api.UsageScopeSessionCumulative, Model: "m", InputTokens: n64(100)}),
			tx.InsertUsage(at("u4", 4), &api.Usage{Scope: api.UsageScopeSessionCumulative, Model: "m", InputTokens: n64(200)}),
		)
	})
	err := s.Update(context.Background(), func(tx store.Tx) error {
		return tx.InsertUsage(at("u1", 9), &api.Usage{Scope: api.UsageScopeRequest, InputTokens: n64(1)})
	})
	wantErr(t, "InsertUsage(taken identity)", err, store.ErrExists)
	view(t, s, func(tx store.Tx) error {
		u, err := tx.UsageTotals("w1")
		equal(t, "UsageTotals", []any{u, err}, []any{api.UsageTotals{
			Records: 2, InputTokens: 17, OutputTokens: 5, CacheCreationInputTokens: 1, CacheReadInputTokens: 2,
			Unknown:           map[string]int64{"output_tokens": 1, "cache_creation_input_tokens": 1, "cache_read_input_tokens": 1},
			SessionCumulative: []api.CumulativeUsage{{Generation: 1, Session: "s", Usage: api.Usage{Model: "m", Scope: api.UsageScopeSessionCumulative, InputTokens: n64(200)}, ReceivedAt: 4}},
		}, nil})
		u, err = tx.UsageTotals("w-none")
		equal(t, "UsageTotals(no records)", []any{u, err}, []any{api.UsageTotals{}, nil})
		return nil
	})
}

// testUsageSaturates: a sum that would leave int64 is capped and named,
// never an error, by the same threshold on every store.
func testUsageSaturates(t *testing.T, s store.Store) {
	seed(t, s)
	update(t, s, func(tx store.Tx) error {
		for i, v := range []int64{math.MaxInt64, math.MaxInt64, 3} {
			u := &api.Usage{Scope: api.UsageScopeRequest, InputTokens: n64(v), OutputTokens: n64(-v)}
			if err := tx.InsertUsage(store.Scope{WorkID: "w1", Generation: 1, Session: "s", Identity: fmt.Sprint("u", i)}, u); err != nil {
				return err
			}
		}
		return tx.PutChangelogIncrement(store.Increment{WorkID: "w1", Position: 0, Digest: "d", Size: math.MaxInt64, WorktreeID: "wt"})
	})
	update(t, s, func(tx store.Tx) error {
		return tx.PutChangelogIncrement(store.Increment{WorkID: "w1", Position: 1, Digest: "d", Size: math.MaxInt64, WorktreeID: "wt"})
	})
	view(t, s, func(tx store.Tx) error {
		u, err := tx.UsageTotals("w1")
		if err != nil || u.InputTokens != math.MaxInt64 || u.OutputTokens != math.MinInt64 || u.CacheReadInputTokens != 0 ||
			!reflect.DeepEqual(u.Saturated, []string{"input_tokens", "output_tokens"}) {
			t.Fatalf("UsageTotals of overflowing sums = %+v, %v", u, err)
		}
		g, err := tx.ChangelogUsage("w1")
		equal(t, "ChangelogUsage of overflowing sizes", []any{g, err}, []any{api.GrantUsage{Objects: 2, Bytes: math.MaxInt64}, nil})
		return nil
	})
}

func testGapsAndSetups(t *testing.T, s store.Store) {
	seed(t, s)
	sc := func(id, stream string, at int64) store.Scope {
		return store.Scope{WorkID: "w1", Generation: 1, Session: "s", Stream: stream, Identity: id, ReceivedAt: at}
	}
	setup := &api.Setup{Artifact: "claude", Model: "m1", PermissionMode: "default", Effort: "high", Unobserved: []string{"x"}}
	update(t, s, func(tx store.Tx) error {
		return errors.Join(
			tx.InsertGap(sc("g2", "b", 20), &api.Gap{Kind: "lost", Reason: "crash", FromSeq: 4, ToSeq: 6}),
			tx.InsertGap(sc("g1", "a", 10), &api.Gap{Kind: "refused", Reason: "bound", FromSeq: 1, ToSeq: 1}),
			tx.InsertSetup(sc("x1", "", 30), setup),
			// A later copy of the same session's setup is ignored.
			tx.InsertSetup(sc("x2", "", 40), &api.Setup{Artifact: "claude", Model: "m2"}),
		)
	})
	err := s.Update(context.Background(), func(tx store.Tx) error {
		return tx.InsertGap(sc("g1", "a", 11), &api.Gap{Kind: "lost", FromSeq: 1, ToSeq: 1})
	})
	wantErr(t, "InsertGap(taken identity)", err, store.ErrExists)
	view(t, s, func(tx store.Tx) error {
		gs, err := tx.Gaps("w1")
		equal(t, "Gaps", []any{gs, err}, []any{[]api.GapRecord{
			{Generation: 1, Session: "s", Stream: "a", Gap: api.Gap{Kind: "refused", Reason: "bound", FromSeq: 1, ToSeq: 1}, ReceivedAt: 10},
			{Generation: 1, Session: "s", Stream: "b", Gap: api.Gap{Kind: "lost", Reason: "crash", FromSeq: 4, ToSeq: 6}, ReceivedAt: 20},
		}, nil})
		st, err := tx.Setups("w1")
		equal(t, "Setups", []any{st, err}, []any{[]api.SetupRecord{{Generation: 1, Session: "s", Setup: *setup, ReceivedAt: 30}}, nil})
		st, err = tx.Setups("w-none")
		equal(t, "Setups(none)", []any{st, err}, []any{[]api.SetupRecord{}, nil})
		return nil
	})
}

func testChangelog(t *testing.T, s store.Store) {
	seed(t, s)
	inc := func(wt string, pos int, digest string, size int64) store.Increment {
		return store.Increment{WorkID: "w1", Position: pos, Digest: digest, Size: size, Session: "s", Generation: 1, WorktreeID: wt,
			Kind: "tool", Tool: "Edit", Failed: pos%2 == 1, StoredAt: int64(100 + pos)}
	}
	view(t, s, func(tx store.Tx) error {
		_, err := tx.ChangelogGrant("w1")
		wantErr(t, "ChangelogGrant(none)", err, store.ErrNotFound)
		last, err := tx.ChangelogLast("w1", "wt-a")
		equal(t, "ChangelogLast(none)", []any{last, err}, []any{-1, nil})
		u, err := tx.ChangelogUsage("w1")
		equal(t, "ChangelogUsage(none)", []any{u, err}, []any{api.GrantUsage{}, nil})
		return nil
	})
	update(t, s, func(tx store.Tx) error {
		return errors.Join(
			tx.SetChangelogGrant("w1", api.Grant{MaxObjects: 5, MaxBytes: 100}, 1),
			tx.SetChangelogGrant("w1", api.Grant{MaxObjects: 9, MaxBytes: 900}, 2),
			tx.PutChangelogIncrement(inc("wt-b", 0, "d1", 10)),
			tx.PutChangelogIncrement(inc("wt-a", 0, "d1", 10)),
			tx.PutChangelogIncrement(inc("wt-a", 1, "d2", 20)),
			// The increment at a position is replaced.
			tx.PutChangelogIncrement(inc("wt-a", 1, "d3", 30)),
		)
	})
	view(t, s, func(tx store.Tx) error {
		g, err := tx.ChangelogGrant("w1")
		equal(t, "ChangelogGrant", []any{g, err}, []any{api.Grant{MaxObjects: 9, MaxBytes: 900}, nil})
		last, err := tx.ChangelogLast("w1", "wt-a")
		equal(t, "ChangelogLast", []any{last, err}, []any{1, nil})
		i, err := tx.ChangelogIncrement("w1", "wt-a", 1)
		equal(t, "ChangelogIncrement (replaced)", []any{i, err}, []any{inc("wt-a", 1, "d3", 30), nil})
		_, err = tx.ChangelogIncrement("w1", "wt-a", 2)
		wantErr(t, "ChangelogIncrement(missing)", err, store.ErrNotFound)
		is, err := tx.ChangelogIncrements("w1")
		equal(t, "ChangelogIncrements (worktree, position)", []any{is, err},
			[]any{[]store.Increment{inc("wt-a", 0, "d1", 10), inc("wt-a", 1, "d3", 30), inc("wt-b", 0, "d1", 10)}, nil})
		u, err := tx.ChangelogUsage("w1")
		equal(t, "ChangelogUsage", []any{u, err}, []any{api.GrantUsage{Objects: 3, Bytes: 50}, nil})
		for d, want := range map[string]int64{"d1": 2, "d2": 0, "d3": 1} {
			n, err := tx.IncrementDigestRefs(d)
			equal(t, "IncrementDigestRefs("+d+")", []any{n, err}, []any{want, nil})
		}
		return nil
	})
}

func body(human, digest, state string, declared, expires int64) store.Body {
	return store.Body{WorkID: "w1", HumanID: human, Digest: digest, RepositoryID: "r1", Bytes: 42, MediaType: "application/json",
		Retention: "30d", State: state, Generation: 1, Session: "s", Identity: "id-" + digest, DeclaredAt: declared, ExpiresAt: expires}
}

func testBodies(t *testing.T, s store.Store) {
	seed(t, s)
	b1 := body("h1", "d1", "available", 1, 100)
	b2 := body("h2", "d1", "local", 2, 200)
	b3 := body("h1", "d2", "awaiting_upload", 3, 50)
	b4 := body("h1", "d3", "ended", 4, 10)
	update(t, s, func(tx store.Tx) error {
		for _, b := range []store.Body{b1, b2, b3, b4} {
			if err := tx.InsertBody(b); err != nil {
				return err
			}
		}
		if err := expect("InsertBody(taken)", tx.InsertBody(b1), store.ErrExists); err != nil {
			return err
		}
		b3.UploadedAt = 7
		return tx.UpdateBody(b3)
	})
	view(t, s, func(tx store.Tx) error {
		got, err := tx.Body("w1", "h1", "d2")
		equal(t, "Body after UpdateBody", []any{got, err}, []any{b3, nil})
		_, err = tx.Body("w1", "h3", "d1")
		wantErr(t, "Body(missing)", err, store.ErrNotFound)
		bs, err := tx.BodiesOfDigest("w1", "d1")
		equal(t, "BodiesOfDigest", []any{bs, err}, []any{[]store.Body{b1, b2}, nil})
		bs, n, err := tx.ListBodies("w1", "", 2)
		equal(t, "ListBodies(all)", []any{bs, n, err}, []any{[]store.Body{b1, b2}, 4, nil})
		bs, n, err = tx.ListBodies("w1", "h1", 10)
		equal(t, "ListBodies(h1)", []any{bs, n, err}, []any{[]store.Body{b1, b3, b4}, 3, nil})
		bs, err = tx.ReuploadBodies("w1", "h1", 10)
		equal(t, "ReuploadBodies", []any{bs, err}, []any{[]store.Body{b3}, nil})
		// Live declarations whose retention ended, by expiry.
		bs, err = tx.DueBodies(150, 10)
		equal(t, "DueBodies", []any{bs, err}, []any{[]store.Body{b3, b1}, nil})
		c, err := tx.AvailableBodyCopies("d1")
		equal(t, "AvailableBodyCopies", []any{c, err}, []any{int64(1), nil})
		return nil
	})
}

func testRemovalsAndLeases(t *testing.T, s store.Store) {
	r1 := store.BodyRemoval{Digest: "d1", NextAt: 10, Backoff: 3600}
	r2 := store.BodyRemoval{Digest: "d2", NextAt: 5, Backoff: 3600, Attempts: 2, LastError: "boom"}
	update(t, s, func(tx store.Tx) error {
		return errors.Join(tx.PutBodyRemoval(r1), tx.PutBodyRemoval(store.BodyRemoval{Digest: "d2"}), tx.PutBodyRemoval(r2))
	})
	view(t, s, func(tx store.Tx) error {
		got, err := tx.BodyRemoval("d2")
		equal(t, "BodyRemoval (replaced)", []any{got, err}, []any{r2, nil})
		_, err = tx.BodyRemoval("d9")
		wantErr(t, "BodyRemoval(missing)", err, store.ErrNotFound)
		rs, err := tx.DueBodyRemovals(10, 10)
		equal(t, "DueBodyRemovals", []any{rs, err}, []any{[]store.BodyRemoval{r2, r1}, nil})
		rs, err = tx.DueBodyRemovals(7, 10)
		equal(t, "DueBodyRemovals(earlier)", []any{rs, err}, []any{[]store.BodyRemoval{r2}, nil})
		return nil
	})
	update(t, s, func(tx store.Tx) error { return tx.DeleteBodyRemoval("d2") })
	view(t, s, func(tx store.Tx) error {
		_, err := tx.BodyRemoval("d2")
		wantErr(t, "BodyRemoval after delete", err, store.ErrNotFound)
		return nil
	})
	lease := func(holder string, now, until int64) bool {
		t.Helper()
		var ok bool
		update(t, s, func(tx store.Tx) error {
			var err error
			ok, err = tx.AcquireLease("sweep", holder, now, until)
			return err
		})
		return ok
	}
	for i, step := range []struct {
		holder     string
		now, until int64
		want       bool
	}{
		{"a", 0, 10, true},   // free
		{"b", 5, 15, false},  // held by a
		{"a", 6, 20, true},   // renewed by its holder
		{"b", 20, 30, true},  // expired
		{"a", 21, 31, false}, // b holds it now
	} {
		if got := lease(step.holder, step.now, step.until); got != step.want {
			t.Fatalf("step %d: AcquireLease(%s) = %v, want %v", i, step.holder, got, step.want)
		}
	}
	update(t, s, func(tx store.Tx) error { return tx.ReleaseLease("sweep", "a") }) // not a's: no-op
	if lease("a", 22, 32) {
		t.Fatal("a took b's lease after releasing one it did not hold")
	}
	update(t, s, func(tx store.Tx) error { return tx.ReleaseLease("sweep", "b") })
	if !lease("a", 22, 32) {
		t.Fatal("a did not get a released lease")
	}
}

// testTakeoverFencing: concurrent read-modify-write Updates of one Work's
// generation (as a takeover makes) are serialized: none is lost, and the
// checkpoints they append have distinct sequence numbers.
func testTakeoverFencing(t *testing.T, s store.Store) {
	seed(t, s)
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.Update(context.Background(), func(tx store.Tx) error {
				w, err := tx.WorkByID("w1")
				if err != nil {
					return err
				}
				from := w.Generation
				w.Generation++
				if err := tx.UpdateWork(w); err != nil {
					return err
				}
				_, err = tx.AppendCheckpoint(store.Checkpoint{WorkID: "w1", Action: "takeover", Generation: from + 1, HumanID: "h1",
					WorktreeID: fmt.Sprint("wt-", i), At: int64(i)})
				return err
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("takeover: %v", err)
		}
	}
	view(t, s, func(tx store.Tx) error {
		w, err := tx.WorkByID("w1")
		if err != nil || w.Generation != 1+n {
			t.Fatalf("generation after %d takeovers = %d, %v", n, w.Generation, err)
		}
		cs, err := tx.Checkpoints("w1")
		if err != nil || len(cs) != n {
			t.Fatalf("Checkpoints = %d, %v", len(cs), err)
		}
		for i, c := range cs {
			if c.Seq != int64(i+1) || c.Generation != int64(i+2) {
				t.Fatalf("checkpoint %d = seq %d at generation %d: a takeover saw a stale generation", i, c.Seq, c.Generation)
			}
		}
		return nil
	})
}
