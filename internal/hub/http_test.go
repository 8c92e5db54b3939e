package hub_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentscm/agentscm/internal/hub"
	"github.com/agentscm/agentscm/internal/hub/api"
)

type matrixEnv struct {
	svc    *hub.Service
	srv    *httptest.Server
	tokens map[string]string // caller -> secret ("" for none)
	seq    atomic.Int64
}

const (
	callerNone      = "no token"
	callerWrong     = "wrong token"
	callerOtherRepo = "other repository's token"
	callerReadOnly  = "read-only"
	callerReadWrite = "read-write"
	callerAdmin     = "admin"
)

var callers = []string{callerNone, callerWrong, callerOtherRepo, callerReadOnly, callerReadWrite, callerAdmin}

func newMatrixEnv(t *testing.T) *matrixEnv { return newMatrixEnvB(t) }

func newMatrixEnvB(t testing.TB) *matrixEnv {
	ctx := context.Background()
	svc := openTestService(t, hub.Config{RetentionDays: 9})
	op := hub.Operator()
	for _, h := range []api.CreateHumanRequest{{Name: "alice"}, {Name: "carol"}, {Name: "root", Admin: true}} {
		if _, err := svc.CreateHuman(ctx, op, h); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []string{"proj", "other"} {
		if _, err := svc.CreateRepository(ctx, op, api.CreateRepositoryRequest{Name: r}); err != nil {
			t.Fatal(err)
		}
	}
	tok := func(h, r, scope string) string {
		k, err := svc.CreateToken(ctx, op, api.CreateTokenRequest{Human: h, Repository: r, Scope: scope})
		if err != nil {
			t.Fatal(err)
		}
		return k.Secret
	}
	e := &matrixEnv{svc: svc, srv: httptest.NewServer(hub.NewHandler(svc, nil))}
	t.Cleanup(e.srv.Close)
	e.tokens = map[string]string{
		callerNone:      "",
		callerWrong:     hub.NewTokenSecret(),
		callerOtherRepo: tok("carol", "other", api.ScopeReadWrite),
		callerReadOnly:  tok("alice", "proj", api.ScopeReadOnly),
		callerReadWrite: tok("alice", "proj", api.ScopeReadWrite),
		callerAdmin:     tok("root", "other", api.ScopeReadWrite),
	}
	return e
}

func (e *matrixEnv) do(t *testing.T, method, path, token string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" && !(resp.StatusCode == 200 && ct == api.IncrementContentType) && !(resp.StatusCode == 200 && ct == api.BodyContentType) {
		t.Fatalf("%s %s: content type %q", method, path, ct)
	}
	return resp.StatusCode, b
}

// freshWork starts a Work on worktree wt as the operator.
func (e *matrixEnv) freshWork(t *testing.T, wt string) api.Work { return e.freshWorkB(t, wt) }

func (e *matrixEnv) freshWorkB(t testing.TB, wt string) api.Work {
	p, err := e.svc.EnsureLocal(context.Background(), "alice", "proj")
	if err != nil {
		t.Fatal(err)
	}
	w, err := e.svc.StartWork(context.Background(), p, "proj", api.StartWorkRequest{WorktreeID: wt})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// request builds a valid request for a route, fresh on every call, so that a
// caller allowed to use the route gets a 200.
func (e *matrixEnv) request(t *testing.T, rt hub.Route) (string, []byte) {
	n := e.seq.Add(1)
	path := strings.ReplaceAll(rt.Pattern, "{repo}", "proj")
	var body any
	switch rt.Method + " " + rt.Pattern {
	case "POST /v1/repositories/{repo}/resolve":
		wt := fmt.Sprintf("wt-%d", n)
		e.freshWork(t, wt)
		body = api.ResolveRequest{WorktreeID: wt, NativeSessionID: fmt.Sprintf("native-%d", n)}
	case "POST /v1/repositories/{repo}/envelopes":
		w := e.freshWork(t, fmt.Sprintf("wt-%d", n))
		sum := sha256.Sum256([]byte(fmt.Sprint("env", n)))
		body = api.Envelope{Identity: hex.EncodeToString(sum[:]), Type: api.TypeEvents, WorkID: w.ID, Generation: 1, Session: "default",
			Events: []api.Event{{Seq: 1, Kind: "session_start"}}}
	case "POST /v1/repositories/{repo}/works":
		body = api.StartWorkRequest{WorktreeID: fmt.Sprintf("wt-%d", n)}
	case "POST /v1/repositories/{repo}/works/{work}/checkpoints":
		body = api.CheckpointRequest{Action: api.CheckpointPause}
	case "POST /v1/admin/humans":
		body = api.CreateHumanRequest{Name: fmt.Sprintf("h%d", n)}
	case "POST /v1/admin/repositories":
		body = api.CreateRepositoryRequest{Name: fmt.Sprintf("r%d", n)}
	case "POST /v1/admin/tokens":
		body = api.CreateTokenRequest{Human: "alice", Repository: "proj"}
	}
	if strings.Contains(path, "{work}") {
		wt := fmt.Sprintf("wt-w%d", n)
		path = strings.ReplaceAll(path, "{work}", e.freshWork(t, wt).ID)
		if strings.HasSuffix(path, "{position}") {
			// A stored increment to download.
			e.upload(t, wt, 0, "s1", testIncrement(t, 0, "s1"))
		}
	}
	if strings.Contains(path, "/bodies") {
		return e.bodyRequest(t, rt, path, n)
	}
	if strings.Contains(path, "{worktree}") {
		wt := fmt.Sprintf("wt-c%d", n)
		e.freshWork(t, wt)
		path = strings.ReplaceAll(path, "{worktree}", wt)
	}
	if strings.Contains(path, "{position}") {
		path = strings.ReplaceAll(path, "{position}", "0")
	}
	if rt.Method == "PUT" {
		inc := testIncrement(t, 0, "s1")
		sum := sha256.Sum256(inc)
		return path + "?session=s1&digest=" + hex.EncodeToString(sum[:]), inc
	}
	if rt.Pattern == "/v1/repositories/{repo}/works/{work}/grant" {
		body = api.GrantRequest{MaxObjects: 5, MaxBytes: 1 << 20}
	}
	if body == nil {
		return path, nil
	}
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return path, b
}

// expected is the status a caller gets on a route.
func expected(rt hub.Route, caller string) int {
	repoRoute := strings.HasPrefix(rt.Pattern, "/v1/repositories/")
	switch caller {
	case callerNone, callerWrong:
		return 401
	case callerOtherRepo:
		if rt.Admin || repoRoute {
			return 403
		}
	case callerReadOnly:
		if rt.Admin || rt.Write {
			return 403
		}
	case callerReadWrite:
		if rt.Admin {
			return 403
		}
	case callerAdmin:
		if rt.Method == "PUT" && strings.Contains(rt.Pattern, "/bodies/") {
			return 403 // only the author uploads its declaration
		}
	}
	return 200
}

func TestAuthorizationMatrix(t *testing.T) {
	e := newMatrixEnv(t)
	for _, rt := range hub.Routes() {
		for _, caller := range callers {
			t.Run(rt.Method+" "+rt.Pattern+"/"+caller, func(t *testing.T) {
				path, body := e.request(t, rt)
				got, b := e.do(t, rt.Method, path, e.tokens[caller], body)
				want := expected(rt, caller)
				if got != want {
					t.Fatalf("status %d, want %d: %s", got, want, b)
				}
				if got != 200 {
					var eb api.ErrorBody
					if err := json.Unmarshal(b, &eb); err != nil || eb.Error == nil || eb.Error.Code == "" || eb.Error.Message == "" {
						t.Fatalf("error body %s", b)
					}
				}
			})
		}
	}
}

func TestHTTPRefusals(t *testing.T) {
	e := newMatrixEnv(t)
	rw := e.tokens[callerReadWrite]
	w := e.freshWork(t, "wt-x")
	big := append([]byte(`{"identity":"`), bytes.Repeat([]byte("a"), api.MaxEnvelopeBytes)...)
	cases := []struct {
		name, method, path, token string
		body                      []byte
		status                    int
		code                      string
	}{
		{"bad json", "POST", "/v1/repositories/proj/works", rw, []byte(`{"worktree_id":`), 400, api.CodeBadJSON},
		{"not an object", "POST", "/v1/repositories/proj/works", rw, []byte(`[1,2]`), 400, api.CodeBadJSON},
		{"trailing data", "POST", "/v1/repositories/proj/works", rw, []byte(`{"worktree_id":"a"} {}`), 400, api.CodeBadJSON},
		{"unknown field", "POST", "/v1/repositories/proj/works", rw, []byte(`{"worktree_id":"a","colour":"red"}`), 400, api.CodeUnknownField},
		{"unknown envelope field", "POST", "/v1/repositories/proj/envelopes", rw, []byte(`{"identity":"x","sneaky":1}`), 400, api.CodeUnknownField},
		{"unknown event field", "POST", "/v1/repositories/proj/envelopes", rw,
			[]byte(`{"identity":"` + strings.Repeat("a", 64) + `","type":"events","work_id":"` + w.ID + `","generation":1,"session":"default","events":[{"seq":1,"kind":"turn_end","prompt":"secret"}]}`), 400, api.CodeUnknownField},
		{"oversized envelope", "POST", "/v1/repositories/proj/envelopes", rw, big, 413, api.CodeTooLarge},
		{"oversized request", "POST", "/v1/repositories/proj/works", rw, append([]byte(`{"title":"`), bytes.Repeat([]byte("a"), api.MaxRequestBytes)...), 413, api.CodeTooLarge},
		{"missing token", "GET", "/v1/hub/whoami", "", nil, 401, api.CodeUnauthenticated},
		{"garbage token", "GET", "/v1/hub/whoami", "not-a-token", nil, 401, api.CodeUnauthenticated},
		{"unknown repository (admin)", "GET", "/v1/repositories/nope/works", e.tokens[callerAdmin], nil, 404, api.CodeNotFound},
		{"unknown work", "GET", "/v1/repositories/proj/works/wrk_nope", rw, nil, 404, api.CodeNotFound},
		{"unknown route", "GET", "/v1/nothing", rw, nil, 404, api.CodeNotFound},
		{"wrong method", "DELETE", "/v1/repositories/proj/works", rw, nil, 405, api.CodeMethod},
		{"no current work", "GET", "/v1/repositories/proj/worktrees/wt-none", rw, nil, 404, api.CodeNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, b := e.do(t, tc.method, tc.path, tc.token, tc.body)
			var eb api.ErrorBody
			if err := json.Unmarshal(b, &eb); err != nil || eb.Error == nil {
				t.Fatalf("status %d body %s", got, b)
			}
			if got != tc.status || eb.Error.Code != tc.code {
				t.Fatalf("got %d %s (%s), want %d %s", got, eb.Error.Code, eb.Error.Message, tc.status, tc.code)
			}
		})
	}
	// The health route needs no token and says nothing else.
	resp, err := http.Get(e.srv.URL + "/v1/hub/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health: %v %v", resp, err)
	}
	resp.Body.Close()
}

// bodyRequest builds a body route's request on the Work in path: alice
// (the read-write and read-only callers' human) declared a fresh body,
// uploaded unless the route is the upload.
func (e *matrixEnv) bodyRequest(t *testing.T, rt hub.Route, path string, n int64) (string, []byte) {
	ctx := context.Background()
	workID := strings.Split(strings.TrimPrefix(path, "/v1/repositories/proj/works/"), "/")[0]
	p, err := e.svc.EnsureLocal(ctx, "alice", "proj")
	if err != nil {
		t.Fatal(err)
	}
	b := []byte(fmt.Sprintf(`{"prompt":"matrix %d"}`, n))
	sum := sha256.Sum256(b)
	d := hex.EncodeToString(sum[:])
	env := &api.Envelope{Identity: identity(fmt.Sprint("matrix-body", n)), Type: api.TypeEvents, WorkID: workID, Generation: 1, Session: "default",
		Events: []api.Event{{Seq: 1, Kind: "prompt_submit"}},
		Body:   &api.BodyDeclaration{Digest: d, Bytes: int64(len(b)), MediaType: api.BodyMediaType, Retention: api.RetentionSharedApproved, Availability: api.BodyRetained, CaptureMode: "shared-conversation"}}
	if _, err := e.svc.Ingest(ctx, p, "proj", env); err != nil {
		t.Fatal(err)
	}
	path = strings.ReplaceAll(path, "{digest}", d)
	switch {
	case rt.Method == "PUT":
		return path, b
	case rt.Method == "POST":
		q, _ := json.Marshal(api.MissingBodiesRequest{Digests: []string{d}})
		return path, q
	}
	if _, err := e.svc.UploadBody(ctx, p, "proj", workID, d, int64(len(b)), bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	return path, nil
}
