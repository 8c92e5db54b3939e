package hub_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/hub"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/hub/objects"
	"github.com/agentscm/agentscm/internal/hub/store"
	"github.com/agentscm/agentscm/internal/hub/store/postgres"
	"github.com/agentscm/agentscm/internal/hub/store/postgres/pgtest"
	"github.com/agentscm/agentscm/internal/hub/store/sqlite"
)

// clock is the Hub's injected Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// flakyObjects is a real object directory whose removals can be made to
// fail (an unreachable object store).
type flakyObjects struct {
	objects.Store
	failDelete atomic.Bool
	deletes    atomic.Int64
}

func (f *flakyObjects) Delete(ctx context.Context, digest string) error {
	if f.failDelete.Load() {
		return errors.New("object store unavailable")
	}
	f.deletes.Add(1)
	return f.Store.Delete(ctx, digest)
}

// bodyEnv is a Hub (on the store t runs against) with a repository, two
// humans and a Work that bob owns, alice helps on.
type bodyEnv struct {
	t     *testing.T
	st    store.Store
	obj   *flakyObjects
	svc   *hub.Service
	clk   *clock
	alice hub.Principal // read-write
	aliceRO,
	bob, admin hub.Principal
	work string
	seq  atomic.Int64
}

// openBodyStore opens a fresh store of the kind t runs against.
func openBodyStore(t *testing.T, dir string) store.Store {
	t.Helper()
	ctx := context.Background()
	if onPostgres(t) {
		st, err := postgres.Open(ctx, pgtest.Database(t))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	st, err := sqlite.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func newBodyEnv(t *testing.T, days int) *bodyEnv {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st := openBodyStore(t, dir)
	od, err := objects.OpenDir(filepath.Join(dir, "objects"))
	if err != nil {
		t.Fatal(err)
	}
	e := &bodyEnv{t: t, st: st, obj: &flakyObjects{Store: od}, clk: &clock{t: time.Unix(1_800_000_000, 0)}}
	if e.svc, err = hub.New(st, e.obj, hub.Config{RetentionDays: days, Now: e.clk.Now}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.svc.Close() })
	op := hub.Operator()
	for _, h := range []api.CreateHumanRequest{{Name: "alice"}, {Name: "bob"}, {Name: "root", Admin: true}} {
		if _, err := e.svc.CreateHuman(ctx, op, h); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.svc.CreateRepository(ctx, op, api.CreateRepositoryRequest{Name: "proj"}); err != nil {
		t.Fatal(err)
	}
	auth := func(h, scope string) hub.Principal {
		k, err := e.svc.CreateToken(ctx, op, api.CreateTokenRequest{Human: h, Repository: "proj", Scope: scope})
		if err != nil {
			t.Fatal(err)
		}
		p, err := e.svc.Authenticate(ctx, k.Secret)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	e.alice, e.aliceRO, e.bob, e.admin = auth("alice", api.ScopeReadWrite), auth("alice", api.ScopeReadOnly), auth("bob", api.ScopeReadWrite), auth("root", api.ScopeReadWrite)
	w, err := e.svc.StartWork(ctx, e.bob, "proj", api.StartWorkRequest{WorktreeID: "wt-bob"})
	if err != nil {
		t.Fatal(err)
	}
	e.work = w.ID
	return e
}

func bodyOf(s string) ([]byte, string) {
	b := []byte(fmt.Sprintf(`{"prompt":%q}`, s))
	sum := sha256.Sum256(b)
	return b, hex.EncodeToString(sum[:])
}

// declare delivers a prompt event of p declaring body b, in mode.
func (e *bodyEnv) declare(p hub.Principal, b []byte, mode string) api.IngestResult {
	e.t.Helper()
	n := e.seq.Add(1)
	sum := sha256.Sum256(b)
	ret := api.RetentionSharedApproved
	if len(b) > api.MaxBodyBytes {
		ret = api.RetentionWorkLocal
	}
	env := &api.Envelope{Identity: identity(fmt.Sprint("body-env", n)), Type: api.TypeEvents, WorkID: e.work, Generation: 1, Session: "default",
		Events: []api.Event{{Seq: n, Kind: "prompt_submit"}},
		Body:   &api.BodyDeclaration{Digest: hex.EncodeToString(sum[:]), Bytes: int64(len(b)), MediaType: api.BodyMediaType, Retention: ret, Availability: api.BodyRetained, CaptureMode: mode}}
	res, err := e.svc.Ingest(context.Background(), p, "proj", env)
	if err != nil {
		e.t.Fatalf("ingest: %v", err)
	}
	return res
}

func (e *bodyEnv) upload(p hub.Principal, b []byte) (api.BodyUploadResult, error) {
	sum := sha256.Sum256(b)
	return e.svc.UploadBody(context.Background(), p, "proj", e.work, hex.EncodeToString(sum[:]), int64(len(b)), bytes.NewReader(b))
}

func (e *bodyEnv) share(p hub.Principal, b []byte) {
	e.t.Helper()
	e.declare(p, b, "shared-conversation")
	if _, err := e.upload(p, b); err != nil {
		e.t.Fatalf("upload: %v", err)
	}
}

func (e *bodyEnv) get(p hub.Principal, digest string) ([]byte, error) {
	_, b, err := e.svc.GetBody(context.Background(), p, "proj", e.work, digest)
	return b, err
}

func status(err error) int {
	if err == nil {
		return 200
	}
	if ae, ok := api.AsError(err); ok {
		return ae.Status
	}
	return -1
}

func (e *bodyEnv) hasObject(digest string) bool {
	e.t.Helper()
	ok, err := e.obj.Has(context.Background(), digest)
	if err != nil {
		e.t.Fatal(err)
	}
	return ok
}

// TestBodyUploadAccess: only the sharer (any of that person's tokens; a
// read-only one reads but cannot delete) and Hub admins read a body; the
// Work owner does not; every other request gets the same 403 whether or
// not the digest exists; listings are scoped; each human's declaration is
// its own row and an admin deletes every author's copy.
func TestBodyUploadAccess(t *testing.T) {
	e := newBodyEnv(t, 30)
	ctx := context.Background()
	b, d := bodyOf("alice's prompt")
	if res := e.declare(e.alice, b, "shared-conversation"); res.Body != "declared" || res.Status != api.StatusAccepted {
		t.Fatalf("declare: %+v", res)
	}
	if !e.hasObject(d) == false {
		t.Fatal("the object exists before any upload")
	}
	// Before the upload: declared, not uploaded.
	if _, err := e.get(e.alice, d); status(err) != 404 || reason(err) != api.ReasonBodyNotUploaded {
		t.Fatalf("read before upload: %v", err)
	}
	miss, err := e.svc.MissingBodies(ctx, e.alice, "proj", e.work, api.MissingBodiesRequest{Digests: []string{d}})
	if err != nil || len(miss.Missing) != 1 || miss.Missing[0].Digest != d || miss.Missing[0].Bytes != int64(len(b)) {
		t.Fatalf("missing: %+v %v", miss, err)
	}
	// bob has no declaration of d: nothing is missing from him, and he
	// cannot upload it.
	if miss, err := e.svc.MissingBodies(ctx, e.bob, "proj", e.work, api.MissingBodiesRequest{Digests: []string{d}}); err != nil || len(miss.Missing) != 0 {
		t.Fatalf("bob's missing: %+v %v", miss, err)
	}
	if _, err := e.upload(e.bob, b); status(err) != 403 {
		t.Fatalf("bob uploads alice's body: %v", err)
	}
	if _, err := e.upload(e.aliceRO, b); status(err) != 403 {
		t.Fatalf("read-only upload: %v", err)
	}
	if _, err := e.svc.UploadBody(ctx, e.alice, "proj", e.work, d, int64(len(b)), bytes.NewReader(append([]byte{}, b[:len(b)-1]...))); status(err) != 400 {
		t.Fatalf("short upload: %v", err)
	}
	up, err := e.upload(e.alice, b)
	if err != nil || up.Status != api.BodyStored || up.ExpiresAt != e.clk.Now().Unix()+30*86400 {
		t.Fatalf("upload: %+v %v", up, err)
	}
	if up, err := e.upload(e.alice, b); err != nil || up.Status != api.BodyAlreadyAvailable {
		t.Fatalf("second upload: %+v %v", up, err)
	}
	if miss, _ := e.svc.MissingBodies(ctx, e.alice, "proj", e.work, api.MissingBodiesRequest{Digests: []string{d}}); len(miss.Missing) != 0 {
		t.Fatalf("missing after upload: %+v", miss)
	}
	for name, p := range map[string]hub.Principal{"alice": e.alice, "alice read-only": e.aliceRO, "admin": e.admin} {
		if got, err := e.get(p, d); err != nil || !bytes.Equal(got, b) {
			t.Fatalf("%s reads: %q %v", name, got, err)
		}
	}
	// The Work owner (bob) gets 403, exactly as for a digest nobody
	// declared.
	_, other := bodyOf("nobody's")
	_, errOwner := e.get(e.bob, d)
	_, errNone := e.get(e.bob, other)
	ae1, _ := api.AsError(errOwner)
	ae2, _ := api.AsError(errNone)
	if ae1 == nil || ae2 == nil || ae1.Status != 403 || ae2.Status != 403 || ae1.Code != ae2.Code ||
		ae1.Message != fmt.Sprintf("no access to body %s in this work", d) || ae2.Message != fmt.Sprintf("no access to body %s in this work", other) {
		t.Fatalf("owner: %v / nonexistent: %v", errOwner, errNone)
	}
	if _, err := e.svc.DeleteBody(ctx, e.bob, "proj", e.work, d); status(err) != 403 {
		t.Fatalf("owner deletes: %v", err)
	}
	if _, err := e.svc.DeleteBody(ctx, e.aliceRO, "proj", e.work, d); status(err) != 403 {
		t.Fatalf("read-only deletes: %v", err)
	}
	// Listings: own entries only; an admin sees all.
	list := func(p hub.Principal) []api.BodyEntry {
		l, err := e.svc.ListBodies(ctx, p, "proj", e.work)
		if err != nil {
			t.Fatal(err)
		}
		return l.Bodies
	}
	if l := list(e.bob); len(l) != 0 {
		t.Fatalf("bob's listing: %+v", l)
	}
	if l := list(e.aliceRO); len(l) != 1 || l[0].Digest != d || l[0].State != api.BodyAvailable || l[0].Author != "alice" {
		t.Fatalf("alice's listing: %+v", l)
	}
	// bob shares identical content: his own row.
	e.share(e.bob, b)
	if l := list(e.bob); len(l) != 1 || l[0].Author != "bob" {
		t.Fatalf("bob's listing: %+v", l)
	}
	if l := list(e.admin); len(l) != 2 {
		t.Fatalf("admin listing: %+v", l)
	}
	// alice deletes her copy: 410 for her, bob still reads his, and the
	// object stays (bob's available copy needs it).
	if del, err := e.svc.DeleteBody(ctx, e.alice, "proj", e.work, d); err != nil || del.Deleted != 1 {
		t.Fatalf("alice deletes: %+v %v", del, err)
	}
	if _, err := e.get(e.alice, d); status(err) != http.StatusGone {
		t.Fatalf("alice reads her deleted body: %v", err)
	}
	if _, err := e.svc.DeleteBody(ctx, e.alice, "proj", e.work, d); status(err) != http.StatusGone {
		t.Fatalf("second delete: %v", err)
	}
	if got, err := e.get(e.bob, d); err != nil || !bytes.Equal(got, b) || !e.hasObject(d) {
		t.Fatalf("bob reads his copy: %q %v", got, err)
	}
	// An admin deletes every author's copy; the object goes.
	if del, err := e.svc.DeleteBody(ctx, e.admin, "proj", e.work, d); err != nil || del.Deleted != 1 {
		t.Fatalf("admin deletes: %+v %v", del, err)
	}
	if _, err := e.get(e.bob, d); status(err) != http.StatusGone {
		t.Fatalf("bob after the admin's delete: %v", err)
	}
	if _, err := e.get(e.admin, d); status(err) != http.StatusGone {
		t.Fatalf("admin after delete: %v", err)
	}
	if e.hasObject(d) {
		t.Fatal("the object survived the deletion of every copy")
	}
	// Identical content uploaded after a deletion stays deleted for that
	// author (the first declaration is shared).
	if res := e.declare(e.alice, b, "shared-conversation"); res.Body != "shares_first_declaration" {
		t.Fatalf("redeclare: %+v", res)
	}
	if _, err := e.upload(e.alice, b); status(err) != http.StatusGone {
		t.Fatalf("upload of a deleted body: %v", err)
	}
	// The record projection never carries a body.
	rec, err := e.svc.Record(ctx, e.admin, "proj", e.work)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains([]byte(fmt.Sprintf("%+v", rec)), []byte("alice's prompt")) {
		t.Fatal("the change record carries a body")
	}
}

// TestBodyRefusals: a shared-approved body declared by a session that was
// not in shared-conversation mode is refused (kept local, never uploaded);
// a work-local body (over 1 MiB) is never uploaded; a body over 1 MiB is
// refused on upload; a declaration that says missing stays local.
func TestBodyRefusals(t *testing.T) {
	e := newBodyEnv(t, 30)
	ctx := context.Background()
	b, d := bodyOf("kept while local")
	if res := e.declare(e.alice, b, "local-conversation"); res.Body != api.ReasonBodyNotShared {
		t.Fatalf("declare: %+v", res)
	}
	if miss, _ := e.svc.MissingBodies(ctx, e.alice, "proj", e.work, api.MissingBodiesRequest{Digests: []string{d}}); len(miss.Missing) != 0 {
		t.Fatalf("missing: %+v", miss)
	}
	if _, err := e.upload(e.alice, b); status(err) != http.StatusConflict || reason(err) != api.ReasonBodyNotShared {
		t.Fatalf("upload: %v", err)
	}
	if e.hasObject(d) {
		t.Fatal("a refused body reached the object store")
	}
	big := bytes.Repeat([]byte("x"), api.MaxBodyBytes+1)
	if res := e.declare(e.alice, big, "shared-conversation"); res.Body != "declared_local" {
		t.Fatalf("declare big: %+v", res)
	}
	if _, err := e.upload(e.alice, big); status(err) != http.StatusRequestEntityTooLarge {
		t.Fatalf("upload big: %v", err)
	}
	// A shared-approved declaration over the cap is malformed.
	sum := sha256.Sum256(big)
	env := &api.Envelope{Identity: identity("big"), Type: api.TypeEvents, WorkID: e.work, Generation: 1, Session: "default",
		Events: []api.Event{{Seq: 900, Kind: "prompt_submit"}},
		Body:   &api.BodyDeclaration{Digest: hex.EncodeToString(sum[:]), Bytes: int64(len(big)), MediaType: api.BodyMediaType, Retention: api.RetentionSharedApproved, Availability: api.BodyRetained, CaptureMode: "shared-conversation"}}
	if _, err := e.svc.Ingest(ctx, e.alice, "proj", env); status(err) != 400 {
		t.Fatalf("oversized shared-approved declaration: %v", err)
	}
	if l, _ := e.svc.ListBodies(ctx, e.alice, "proj", e.work); len(l.Bodies) != 2 || l.Bodies[0].State != api.BodyLocal || l.Bodies[1].State != api.BodyLocal {
		t.Fatalf("listing: %+v", l)
	}
}

// TestBodySweep: retention with the Hub's injected clock. The deadline is
// set at upload; a tombstone first, then 410; an object shared by two
// authors goes only when no available copy needs it; a never-uploaded
// declaration does not keep it and expires on its own; identical bodies of
// one author share the first declaration and its expiry; an available copy
// whose object is missing returns to awaiting upload.
func TestBodySweep(t *testing.T) {
	e := newBodyEnv(t, 1)
	ctx := context.Background()
	a, da := bodyOf("A")
	e.declare(e.alice, a, "shared-conversation")
	never, dn := bodyOf("never uploaded")
	e.declare(e.alice, never, "shared-conversation")
	e.clk.Add(time.Hour)
	e.upload(e.alice, a) // deadline: upload + 1 day
	e.clk.Add(12 * time.Hour)
	e.declare(e.alice, a, "shared-conversation") // shares the first declaration
	e.share(e.bob, a)                            // bob's own copy, 12 h later
	sweep := func() hub.SweepResult {
		t.Helper()
		res, err := e.svc.Sweep(ctx)
		if err != nil || res.Skipped {
			t.Fatalf("sweep: %+v %v", res, err)
		}
		return res
	}
	if res := sweep(); res.Expired != 0 || res.Removed != 0 {
		t.Fatalf("early sweep: %+v", res)
	}
	// 1 day after the never-uploaded declaration: it expires without an
	// object; alice's A (uploaded 1 h later) is still available.
	e.clk.Add(11*time.Hour + time.Second)
	if res := sweep(); res.Expired != 1 || res.Removed != 0 {
		t.Fatalf("sweep at the declaration's end: %+v", res)
	}
	if _, err := e.get(e.alice, dn); status(err) != http.StatusGone {
		t.Fatalf("never uploaded, expired: %v", err)
	}
	if _, err := e.upload(e.alice, never); status(err) != http.StatusGone {
		t.Fatalf("upload after expiry: %v", err)
	}
	// alice's A expires (1 day after its upload); bob's copy keeps the
	// object.
	e.clk.Add(time.Hour)
	if res := sweep(); res.Expired != 1 || res.Kept != 1 || res.Removed != 0 {
		t.Fatalf("sweep at alice's deadline: %+v", res)
	}
	if _, err := e.get(e.alice, da); status(err) != http.StatusGone {
		t.Fatalf("alice after expiry: %v", err)
	}
	if got, err := e.get(e.bob, da); err != nil || !bytes.Equal(got, a) {
		t.Fatalf("bob's copy: %v", err)
	}
	// bob's copy expires 12 h later: the object goes.
	e.clk.Add(12 * time.Hour)
	if res := sweep(); res.Expired != 1 || res.Removed != 1 {
		t.Fatalf("sweep at bob's deadline: %+v", res)
	}
	if e.hasObject(da) {
		t.Fatal("the object outlived every copy")
	}
	if _, err := e.get(e.admin, da); status(err) != http.StatusGone {
		t.Fatalf("admin after expiry: %v", err)
	}

	// A declaration never uploaded does not keep an object; the other
	// author's later upload writes it again.
	f, df := bodyOf("F")
	e.share(e.alice, f)
	e.declare(e.bob, f, "shared-conversation")
	if _, err := e.svc.DeleteBody(ctx, e.alice, "proj", e.work, df); err != nil {
		t.Fatal(err)
	}
	if e.hasObject(df) {
		t.Fatal("bob's never-uploaded declaration kept the object")
	}
	if up, err := e.upload(e.bob, f); err != nil || up.Status != api.BodyStored || !e.hasObject(df) {
		t.Fatalf("bob's upload: %+v %v", up, err)
	}
	// An available copy whose object is missing returns to awaiting upload;
	// the missing-bodies answer names it unasked, and the re-upload keeps
	// the deadline.
	if err := e.obj.Store.Delete(ctx, df); err != nil {
		t.Fatal(err)
	}
	l, _ := e.svc.ListBodies(ctx, e.bob, "proj", e.work)
	deadline := l.Bodies[len(l.Bodies)-1].ExpiresAt
	if _, err := e.get(e.bob, df); status(err) != 404 || reason(err) != api.ReasonBodyNotUploaded {
		t.Fatalf("read of a lost object: %v", err)
	}
	miss, err := e.svc.MissingBodies(ctx, e.bob, "proj", e.work, api.MissingBodiesRequest{})
	if err != nil || len(miss.Missing) != 1 || miss.Missing[0].Digest != df {
		t.Fatalf("missing after loss: %+v %v", miss, err)
	}
	e.clk.Add(time.Minute)
	if up, err := e.upload(e.bob, f); err != nil || up.Status != api.BodyStored || up.ExpiresAt != deadline {
		t.Fatalf("re-upload: %+v %v (deadline %d)", up, err, deadline)
	}
	if got, err := e.get(e.bob, df); err != nil || !bytes.Equal(got, f) {
		t.Fatalf("read after re-upload: %v", err)
	}
	// An upload of an available copy whose object is gone (not yet noticed
	// by a read) stores it again.
	if err := e.obj.Store.Delete(ctx, df); err != nil {
		t.Fatal(err)
	}
	if up, err := e.upload(e.bob, f); err != nil || up.Status != api.BodyStored || !e.hasObject(df) {
		t.Fatalf("upload over a lost object: %+v %v", up, err)
	}
}

// TestBodySweepRetriesFailedRemovals: a failed object removal is retried
// after 1 hour, then 2, doubling to at most a day, without holding up the
// removal of other objects; the tombstone (410) comes first.
func TestBodySweepRetriesFailedRemovals(t *testing.T) {
	e := newBodyEnv(t, 1)
	ctx := context.Background()
	a, da := bodyOf("A")
	e.share(e.alice, a)
	e.clk.Add(25 * time.Hour)
	e.obj.failDelete.Store(true)
	res, err := e.svc.Sweep(ctx)
	if err == nil || res.Expired != 1 || res.Failed != 1 {
		t.Fatalf("sweep with a failing store: %+v %v", res, err)
	}
	if _, err := e.get(e.alice, da); status(err) != http.StatusGone {
		t.Fatalf("tombstone first: %v", err)
	}
	// Another body, due now, is removed while A waits for its retry.
	e.obj.failDelete.Store(false)
	b, db := bodyOf("B")
	e.share(e.alice, b)
	e.clk.Add(25 * time.Hour) // A's retry is due too: 25 h > 1 h
	if res, err := e.svc.Sweep(ctx); err != nil || res.Removed != 2 || e.hasObject(da) || e.hasObject(db) {
		t.Fatalf("sweep after recovery: %+v %v", res, err)
	}
	// Backoff doubling: fail three times and check the waits.
	c, _ := bodyOf("C")
	e.share(e.alice, c)
	e.clk.Add(25 * time.Hour)
	e.obj.failDelete.Store(true)
	waits := []time.Duration{time.Hour, 2 * time.Hour, 4 * time.Hour}
	if res, _ := e.svc.Sweep(ctx); res.Failed != 1 {
		t.Fatalf("first failure: %+v", res)
	}
	for _, w := range waits {
		e.clk.Add(w - time.Second)
		if res, _ := e.svc.Sweep(ctx); res.Failed != 0 {
			t.Fatalf("retried before %v: %+v", w, res)
		}
		e.clk.Add(time.Second)
		if res, _ := e.svc.Sweep(ctx); res.Failed != 1 {
			t.Fatalf("not retried after %v: %+v", w, res)
		}
	}
	// The wait is capped at a day.
	for range 5 {
		e.clk.Add(RetryMax())
		e.svc.Sweep(ctx)
	}
	e.clk.Add(RetryMax() - time.Second)
	if res, _ := e.svc.Sweep(ctx); res.Failed != 0 {
		t.Fatalf("retried before a day: %+v", res)
	}
	e.clk.Add(time.Second)
	if res, _ := e.svc.Sweep(ctx); res.Failed != 1 {
		t.Fatalf("not retried after a day: %+v", res)
	}
}

// RetryMax is the cap of the removal backoff.
func RetryMax() time.Duration { return hub.RemovalRetryMax }

// TestBodySweepBatches: a pass works in batches of 100 until none are due.
func TestBodySweepBatches(t *testing.T) {
	e := newBodyEnv(t, 1)
	const n = 2*hub.SweepBatch + 7
	for i := range n {
		e.share(e.alice, []byte(fmt.Sprintf(`{"prompt":"%d"}`, i)))
	}
	e.clk.Add(25 * time.Hour)
	res, err := e.svc.Sweep(context.Background())
	if err != nil || res.Expired != n || res.Removed != n || res.More {
		t.Fatalf("sweep: %+v %v", res, err)
	}
	if got := e.obj.deletes.Load(); got != n {
		t.Fatalf("%d object deletions, want %d", got, n)
	}
}

// TestBodySweepSeveralInstances: several Hub services on one store sweep
// at once; one holds the lease, each object is removed exactly once, and a
// crashed runner's lease expires.
func TestBodySweepSeveralInstances(t *testing.T) {
	e := newBodyEnv(t, 1)
	ctx := context.Background()
	const n = 150
	for i := range n {
		e.share(e.alice, []byte(fmt.Sprintf(`{"prompt":"x%d"}`, i)))
	}
	e.clk.Add(25 * time.Hour)
	var svcs []*hub.Service
	for range 3 {
		s, err := hub.New(e.st, e.obj, hub.Config{RetentionDays: 1, Now: e.clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		svcs = append(svcs, s) // same store: closed once, by e
	}
	results := make([]hub.SweepResult, len(svcs))
	errs := make([]error, len(svcs))
	var wg sync.WaitGroup
	for i, s := range svcs {
		wg.Add(1)
		go func() { defer wg.Done(); results[i], errs[i] = s.Sweep(ctx) }()
	}
	wg.Wait()
	expired, removed := 0, 0
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("instance %d: %v", i, errs[i])
		}
		expired += r.Expired
		removed += r.Removed
	}
	if expired != n || removed != n || e.obj.deletes.Load() != n {
		t.Fatalf("expired %d, removed %d, deletions %d, want %d each: %+v", expired, removed, e.obj.deletes.Load(), n, results)
	}
	// A runner that crashed holding the lease: the others skip until it
	// expires.
	now := e.clk.Now().Unix()
	if err := e.st.Update(ctx, func(tx store.Tx) error {
		_, err := tx.AcquireLease("body_sweep", "crashed", now, now+120)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if res, err := svcs[0].Sweep(ctx); err != nil || !res.Skipped {
		t.Fatalf("sweep under another's lease: %+v %v", res, err)
	}
	e.clk.Add(121 * time.Second)
	if res, err := svcs[0].Sweep(ctx); err != nil || res.Skipped {
		t.Fatalf("sweep after the lease expired: %+v %v", res, err)
	}
}

// TestBodyHTTP: the body routes over HTTP — the upload's size checks, the
// download's headers (untrusted agent output), 403/404/410 bodies, and the
// 403 for another human whether or not the digest exists.
func TestBodyHTTP(t *testing.T) {
	e := newBodyEnv(t, 30)
	ctx := context.Background()
	srv := httptest.NewServer(hub.NewHandler(e.svc, nil))
	t.Cleanup(srv.Close)
	op := hub.Operator()
	secret := func(h string, ro bool) string {
		scope := api.ScopeReadWrite
		if ro {
			scope = api.ScopeReadOnly
		}
		k, err := e.svc.CreateToken(ctx, op, api.CreateTokenRequest{Human: h, Repository: "proj", Scope: scope})
		if err != nil {
			t.Fatal(err)
		}
		return k.Secret
	}
	alice, aliceRO, bob := secret("alice", false), secret("alice", true), secret("bob", false)
	do := func(method, path, token string, body []byte) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+"/v1/repositories/proj/works/"+e.work+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	errBody := func(b []byte) *api.Error {
		var eb api.ErrorBody
		if json.Unmarshal(b, &eb) != nil || eb.Error == nil {
			t.Fatalf("error body %s", b)
		}
		return eb.Error
	}
	b, d := bodyOf("over http")
	e.declare(e.alice, b, "shared-conversation")
	if resp, _ := do("PUT", "/bodies/"+d, alice, append(b, 'x')); resp.StatusCode != 400 {
		t.Fatalf("a longer upload: %d", resp.StatusCode)
	}
	if resp, _ := do("PUT", "/bodies/"+d, alice, bytes.Repeat([]byte("x"), api.MaxBodyBytes+1)); resp.StatusCode != 413 {
		t.Fatalf("an upload over 1 MiB: %d", resp.StatusCode)
	}
	if resp, _ := do("PUT", "/bodies/not-a-digest", alice, b); resp.StatusCode != 400 {
		t.Fatalf("a bad digest: %d", resp.StatusCode)
	}
	if resp, body := do("GET", "/bodies/"+d, alice, nil); resp.StatusCode != 404 || errBody(body).Reason != api.ReasonBodyNotUploaded {
		t.Fatalf("read before upload: %d %s", resp.StatusCode, body)
	}
	if resp, body := do("PUT", "/bodies/"+d, alice, b); resp.StatusCode != 200 {
		t.Fatalf("upload: %d %s", resp.StatusCode, body)
	}
	resp, got := do("GET", "/bodies/"+d, aliceRO, nil)
	if resp.StatusCode != 200 || !bytes.Equal(got, b) || resp.Header.Get(api.UntrustedHeader) != "agent-output" ||
		resp.Header.Get("Content-Type") != api.BodyContentType || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("download: %d %q %v", resp.StatusCode, got, resp.Header)
	}
	_, other := bodyOf("nobody")
	r1, b1 := do("GET", "/bodies/"+d, bob, nil)
	r2, b2 := do("GET", "/bodies/"+other, bob, nil)
	e1, e2 := errBody(b1), errBody(b2)
	if r1.StatusCode != 403 || r2.StatusCode != 403 || e1.Code != e2.Code || strings.ReplaceAll(e1.Message, d, "D") != strings.ReplaceAll(e2.Message, other, "D") {
		t.Fatalf("403s differ: %d %s / %d %s", r1.StatusCode, b1, r2.StatusCode, b2)
	}
	if resp, _ := do("DELETE", "/bodies/"+d, bob, nil); resp.StatusCode != 403 {
		t.Fatalf("bob deletes: %d", resp.StatusCode)
	}
	if resp, _ := do("DELETE", "/bodies/"+d, aliceRO, nil); resp.StatusCode != 403 {
		t.Fatalf("read-only delete: %d", resp.StatusCode)
	}
	if resp, body := do("DELETE", "/bodies/"+d, alice, nil); resp.StatusCode != 200 {
		t.Fatalf("delete: %d %s", resp.StatusCode, body)
	}
	if resp, body := do("GET", "/bodies/"+d, alice, nil); resp.StatusCode != 410 || errBody(body).Reason != api.ReasonBodyGone {
		t.Fatalf("read after delete: %d %s", resp.StatusCode, body)
	}
	var list api.BodyList
	resp, body := do("GET", "/bodies", alice, nil)
	if resp.StatusCode != 200 || json.Unmarshal(body, &list) != nil || len(list.Bodies) != 1 || list.Bodies[0].State != api.BodyDeleted || list.SharedConversationRetentionDays != 30 {
		t.Fatalf("listing: %d %s", resp.StatusCode, body)
	}
	q, _ := json.Marshal(api.MissingBodiesRequest{Digests: make([]string, api.MaxMissingQuery+1)})
	if resp, _ := do("POST", "/bodies", alice, q); resp.StatusCode != 400 {
		t.Fatalf("an oversized missing question: %d", resp.StatusCode)
	}
	if resp, _ := do("POST", "/bodies", aliceRO, []byte(`{"digests":[]}`)); resp.StatusCode != 403 {
		t.Fatalf("read-only missing question: %d", resp.StatusCode)
	}
}
