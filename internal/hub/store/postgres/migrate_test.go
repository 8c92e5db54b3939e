package postgres_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/hub"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/hub/objects"
	"github.com/agentscm/agentscm/internal/hub/objects/s3"
	"github.com/agentscm/agentscm/internal/hub/objects/s3/s3test"
	"github.com/agentscm/agentscm/internal/hub/store/postgres"
	"github.com/agentscm/agentscm/internal/hub/store/postgres/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// increment captures a real changelog increment.
func increment(t *testing.T, pos int, session string) []byte {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "root")
	os.MkdirAll(root, 0o755)
	os.WriteFile(filepath.Join(root, "f.txt"), []byte(strings.Repeat("x", pos+1)), 0o644)
	c, err := changelog.Open(filepath.Join(base, "cl"), changelog.Options{Roots: []changelog.Root{{Name: "checkout", Path: root}}})
	if err != nil {
		t.Fatal(err)
	}
	inc, err := c.Capture(context.Background(), changelog.CaptureRequest{Position: pos, SessionID: session, Tool: "Write"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(inc.Path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// populate fills an embedded Hub with a Work that has every kind of record.
func populate(t *testing.T, svc *hub.Service) (hub.Principal, string) {
	t.Helper()
	ctx := context.Background()
	op := hub.Operator()
	if _, err := svc.CreateHuman(ctx, op, api.CreateHumanRequest{Name: "root", Admin: true}); err != nil {
		t.Fatal(err)
	}
	p, err := svc.EnsureLocal(ctx, "alice", "proj")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreateToken(ctx, op, api.CreateTokenRequest{Human: "alice", Repository: "proj", Scope: api.ScopeReadOnly, Label: "ci"}); err != nil {
		t.Fatal(err)
	}
	w, err := svc.StartWork(ctx, p, "proj", api.StartWorkRequest{WorktreeID: "wt", Title: "copy me"})
	if err != nil {
		t.Fatal(err)
	}
	tg, err := svc.Resolve(ctx, p, "proj", api.ResolveRequest{WorktreeID: "wt", NativeSessionID: "native-1"})
	if err != nil {
		t.Fatal(err)
	}
	n := func(v int64) *int64 { return &v }
	env := func(id, typ string) *api.Envelope {
		return &api.Envelope{Identity: sum(id), Type: typ, WorkID: w.ID, Generation: tg.Generation, Session: tg.Session, NativeSessionID: "native-1"}
	}
	var envs []*api.Envelope
	e := env("events", api.TypeEvents)
	e.Events = []api.Event{{Seq: 1, Kind: "session_start", ObservedAt: 5}, {Seq: 2, Kind: "tool_start", ToolName: "Bash", ObservedAt: 6},
		{Seq: 3, Kind: "turn_end", ObservedAt: 7}}
	envs = append(envs, e)
	e = env("start", api.TypeActionStart)
	e.ActionStart = &api.ActionStart{ActionID: "act_1", Tool: "Bash", Class: "execution", Coverage: "partial", SetupDigest: sum("setup"),
		Source: &api.SourceBinding{Head: "abc", Tree: "def"}, ObservationScope: "obs_1", ObservationOrder: 1, StartedAt: 100}
	envs = append(envs, e)
	e = env("finish", api.TypeActionFinish)
	e.ActionFinish = &api.ActionFinish{ActionID: "act_1", Result: "failed", Verification: "unknown", SetupDigest: sum("setup"), Drift: "none_observed", FinishedAt: 101}
	envs = append(envs, e)
	e = env("usage", api.TypeUsage)
	e.Usage = &api.Usage{Scope: api.UsageScopeRequest, MessageID: "m1", Model: "opus", InputTokens: n(10), OutputTokens: n(20), CacheReadInputTokens: n(3)}
	envs = append(envs, e)
	e = env("usage2", api.TypeUsage)
	e.Usage = &api.Usage{Scope: api.UsageScopeSessionCumulative, Model: "opus", InputTokens: n(100), OutputTokens: n(200)}
	envs = append(envs, e)
	e = env("gap", api.TypeGap)
	e.Gap = &api.Gap{Kind: "capture_interrupted", Reason: "killed", FromSeq: 4, ToSeq: 9}
	envs = append(envs, e)
	for _, e := range envs {
		if res, err := svc.Ingest(ctx, p, "proj", e); err != nil || res.Status != api.StatusAccepted {
			t.Fatalf("ingest %s: %+v %v", e.Type, res, err)
		}
	}
	if _, err := svc.SetGrant(ctx, p, "proj", w.ID, api.GrantRequest{MaxObjects: 10, MaxBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	for pos := range 3 {
		b := increment(t, pos, tg.Session)
		if _, err := svc.UploadIncrement(ctx, p, "proj", "wt", api.IncrementUpload{Position: pos, Session: tg.Session, Digest: sum(string(b)), Size: int64(len(b))}, bytes.NewReader(b)); err != nil {
			t.Fatalf("upload %d: %v", pos, err)
		}
	}
	// A shared conversation body, uploaded, and one declared only.
	for i, text := range []string{`{"prompt":"shared"}`, `{"prompt":"declared only"}`} {
		e := env(fmt.Sprint("body", i), api.TypeEvents)
		e.Events = []api.Event{{Seq: int64(10 + i), Kind: "prompt_submit"}}
		e.Body = &api.BodyDeclaration{Digest: sum(text), Bytes: int64(len(text)), MediaType: api.BodyMediaType, Retention: api.RetentionSharedApproved,
			Availability: api.BodyRetained, CaptureMode: "shared-conversation"}
		if _, err := svc.Ingest(ctx, p, "proj", e); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if _, err := svc.UploadBody(ctx, p, "proj", w.ID, sum(text), int64(len(text)), strings.NewReader(text)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := svc.Checkpoint(ctx, p, "proj", w.ID, api.CheckpointRequest{Action: api.CheckpointTakeover, WorktreeID: "wt-2", Note: "mine now"}); err != nil {
		t.Fatal(err)
	}
	return p, w.ID
}

// view is everything a client can read about the Hub, as JSON.
func view(t *testing.T, svc *hub.Service, p hub.Principal, work string) string {
	t.Helper()
	ctx := context.Background()
	out := map[string]any{}
	var err error
	if out["record"], err = svc.Record(ctx, p, "proj", work); err != nil {
		t.Fatal(err)
	}
	if out["works"], err = svc.ListWorks(ctx, p, "proj"); err != nil {
		t.Fatal(err)
	}
	incs, err := svc.ListIncrements(ctx, p, "proj", work, "wt")
	if err != nil {
		t.Fatal(err)
	}
	out["increments"] = incs
	var bodies []string
	for pos := range 3 {
		_, b, err := svc.GetIncrement(ctx, p, "proj", work, "wt", pos)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, sum(string(b)))
	}
	out["bodies"] = bodies
	if out["conversation"], err = svc.ListBodies(ctx, p, "proj", work); err != nil {
		t.Fatal(err)
	}
	shared, err := svc.MissingBodies(ctx, p, "proj", work, api.MissingBodiesRequest{Digests: []string{sum(`{"prompt":"shared"}`), sum(`{"prompt":"declared only"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	out["missing"] = shared
	if _, b, err := svc.GetBody(ctx, p, "proj", work, sum(`{"prompt":"shared"}`)); err != nil {
		t.Fatal(err)
	} else {
		out["conversation_body"] = string(b)
	}
	for _, what := range []string{"humans", "repositories", "tokens"} {
		if out[what], err = svc.AdminList(ctx, hub.Operator(), what); err != nil {
			t.Fatal(err)
		}
	}
	b, err := json.MarshalIndent(out, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCopyFromSQLite copies a populated embedded Hub into PostgreSQL and
// S3: every table's rows match by count and digest, and the Hub on the copy
// answers every read exactly as the original.
func TestCopyFromSQLite(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	src, err := hub.Open(ctx, dir, hub.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p, work := populate(t, src)
	before := view(t, src, p, work)
	src.Close()

	dst, err := postgres.Open(ctx, pgtest.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	srcObj, err := objects.OpenDir(filepath.Join(dir, "objects"))
	if err != nil {
		t.Fatal(err)
	}
	dstObj, err := s3.Open(ctx, s3test.Server(t, "hub", "copy"))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := postgres.CopyFromSQLite(ctx, dir, dst, srcObj, dstObj)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]int64{}
	for _, tc := range rep.Tables {
		rows[tc.Table] = tc.Rows
	}
	want := map[string]int64{"humans": 2, "repositories": 1, "tokens": 1, "works": 1, "events": 5, "actions": 1, "usage": 2, "gaps": 1,
		"changelog_increments": 3, "changelog_grants": 1, "checkpoints": 2, "sessions": 2, "session_natives": 1, "envelopes": 8, "currents": 2, "setups": 0, "streams": 1,
		"bodies": 2, "body_removals": 0, "leases": 0}
	if !reflect.DeepEqual(rows, want) || rep.Objects != 4 {
		t.Fatalf("copied %v and %d objects, want %v and 4", rows, rep.Objects, want)
	}
	svc, err := hub.New(dst, dstObj, hub.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if after := view(t, svc, p, work); after != before {
		t.Fatalf("the copy reads differently:\nbefore %s\nafter %s", before, after)
	}
	// A second copy into the now non-empty database is refused.
	if _, err := postgres.CopyFromSQLite(ctx, dir, dst, srcObj, dstObj); err == nil || !strings.Contains(err.Error(), "empty database only") {
		t.Fatalf("second copy: %v", err)
	}
	// A source object that no longer matches its digest stops the copy
	// before any row is written.
	dst2, err := postgres.Open(ctx, pgtest.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer dst2.Close()
	incs, _ := svc.ListIncrements(ctx, p, "proj", work, "wt")
	d := incs.Increments[0].Digest
	if err := os.WriteFile(filepath.Join(dir, "objects", d[:2], d), []byte("tampered"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.CopyFromSQLite(ctx, dir, dst2, srcObj, dstObj); err == nil || !strings.Contains(err.Error(), d) {
		t.Fatalf("copy with a tampered object: %v", err)
	}
	var n int64
	if err := dst2.Pool().QueryRow(ctx, "SELECT count(*) FROM works").Scan(&n); err != nil || n != 0 {
		t.Fatalf("works after a failed copy: %d %v", n, err)
	}
}
