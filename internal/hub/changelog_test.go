package hub_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/agentscm/agentscm/internal/hub"
	"github.com/agentscm/agentscm/internal/hub/api"
)

// testIncrement captures a real changelog increment at position pos of
// session (a fresh one-file checkout) and returns its bytes.
func testIncrement(t testing.TB, pos int, session string) []byte {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "f.txt"), []byte(fmt.Sprintf("position %d of %s\n", pos, session)), 0o644); err != nil {
		t.Fatal(err)
	}
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

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// upload stores an increment through the service as alice.
func (e *matrixEnv) upload(t testing.TB, wt string, pos int, session string, b []byte) (api.IncrementStoreResult, error) {
	t.Helper()
	p, err := e.svc.EnsureLocal(context.Background(), "alice", "proj")
	if err != nil {
		t.Fatal(err)
	}
	return e.svc.UploadIncrement(context.Background(), p, "proj", wt, api.IncrementUpload{Position: pos, Session: session, Digest: digestOf(b), Size: int64(len(b))}, bytes.NewReader(b))
}

// put uploads over HTTP with token.
func (e *matrixEnv) put(t *testing.T, token, wt string, pos int, session, digest string, b []byte) (int, api.ErrorBody, api.IncrementStoreResult) {
	t.Helper()
	path := fmt.Sprintf("/v1/repositories/proj/worktrees/%s/changelog/%d?digest=%s&session=%s", wt, pos, digest, session)
	status, body := e.do(t, "PUT", path, token, b)
	var eb api.ErrorBody
	var res api.IncrementStoreResult
	if status == 200 {
		if err := json.Unmarshal(body, &res); err != nil {
			t.Fatal(err)
		}
	} else if err := json.Unmarshal(body, &eb); err != nil || eb.Error == nil {
		t.Fatalf("status %d body %s", status, body)
	}
	return status, eb, res
}

func TestIncrementUploadListDownload(t *testing.T) {
	e := newMatrixEnv(t)
	rw := e.tokens[callerReadWrite]
	w := e.freshWork(t, "wt-a")
	incs := [][]byte{testIncrement(t, 0, "s1"), testIncrement(t, 1, "s1"), testIncrement(t, 2, "s2")}
	for i, b := range incs {
		status, eb, res := e.put(t, rw, "wt-a", i, map[bool]string{true: "s2", false: "s1"}[i == 2], digestOf(b), b)
		if status != 200 || res.Status != api.IncrementStored || res.WorkID != w.ID || res.Used.Objects != int64(i+1) {
			t.Fatalf("upload %d: %d %+v %+v", i, status, eb.Error, res)
		}
	}
	// An exact replay is a duplicate and takes nothing more from the grant.
	if status, _, res := e.put(t, rw, "wt-a", 1, "s1", digestOf(incs[1]), incs[1]); status != 200 || res.Status != api.IncrementDuplicate || res.Used.Objects != 3 {
		t.Fatalf("replay: %d %+v", status, res)
	}
	status, body := e.do(t, "GET", "/v1/repositories/proj/works/"+w.ID+"/changelog", e.tokens[callerReadOnly], nil)
	var list api.IncrementList
	if status != 200 || json.Unmarshal(body, &list) != nil {
		t.Fatalf("list: %d %s", status, body)
	}
	var total int64
	for i, in := range list.Increments {
		total += in.Size
		if in.Position != i || in.Digest != digestOf(incs[i]) || in.Kind != changelog.KindCall || in.Tool != "Write" || in.WorktreeID != "wt-a" {
			t.Fatalf("listed %+v", in)
		}
	}
	if len(list.Increments) != 3 || list.Grant != api.DefaultGrant() || list.Used != (api.GrantUsage{Objects: 3, Bytes: total}) {
		t.Fatalf("list %+v", list)
	}
	for i, b := range incs {
		req, _ := http.NewRequest("GET", fmt.Sprintf("%s/v1/repositories/proj/works/%s/changelog/%d", e.srv.URL, w.ID, i), nil)
		req.Header.Set("Authorization", "Bearer "+e.tokens[callerReadOnly])
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Equal(got, b) || resp.Header.Get(api.IncrementDigestHeader) != digestOf(b) || resp.Header.Get("Content-Type") != api.IncrementContentType {
			t.Fatalf("download %d: %d, %d bytes, headers %v", i, resp.StatusCode, len(got), resp.Header)
		}
	}
	if status, body := e.do(t, "GET", "/v1/repositories/proj/works/"+w.ID+"/changelog/7", rw, nil); status != 404 || !strings.Contains(string(body), "no increment at position 7") {
		t.Fatalf("missing position: %d %s", status, body)
	}
}

func TestIncrementUploadRefusals(t *testing.T) {
	e := newMatrixEnv(t)
	rw := e.tokens[callerReadWrite]
	e.freshWork(t, "wt-r")
	inc0, inc1 := testIncrement(t, 0, "s1"), testIncrement(t, 1, "s1")
	if status, eb, _ := e.put(t, rw, "wt-r", 0, "s1", digestOf(inc0), inc0); status != 200 {
		t.Fatalf("first upload: %d %+v", status, eb.Error)
	}
	other0 := testIncrement(t, 0, "s1")
	cases := []struct {
		name          string
		token, wt     string
		pos           int
		session, dig  string
		body          []byte
		status        int
		code, reason  string
		msg           string
		wantNextInErr int
	}{
		{"digest mismatch", rw, "wt-r", 1, "s1", digestOf(inc0), inc1, 400, api.CodeDigestMismatch, "", "hashes to", -1},
		{"bad digest", rw, "wt-r", 1, "s1", "xyz", inc1, 400, api.CodeBadRequest, "", "digest", -1},
		{"position not in metadata", rw, "wt-r", 1, "s1", digestOf(inc0), inc0, 422, api.CodeBadIncrement, "", "names position 0", -1},
		{"session not in metadata", rw, "wt-r", 1, "s9", digestOf(inc1), inc1, 422, api.CodeBadIncrement, "", `session "s1"`, -1},
		{"not an increment", rw, "wt-r", 1, "s1", digestOf([]byte("hello")), []byte("hello"), 422, api.CodeBadIncrement, "", "not a changelog increment", -1},
		{"gap before", rw, "wt-r", 3, "s1", digestOf(inc1), inc1, 409, api.CodeConflict, api.ReasonIncrementsMissing, "upload position 1 first", 1},
		{"bad position", rw, "wt-r", -1, "s1", digestOf(inc1), inc1, 400, api.CodeBadRequest, "", "position", -1},
		{"no current work", rw, "wt-none", 0, "s1", digestOf(inc0), inc0, 422, api.CodeTargetRefused, api.ReasonNoCurrentWork, "no current work", -1},
		{"read-only token", e.tokens[callerReadOnly], "wt-r", 1, "s1", digestOf(inc1), inc1, 403, api.CodeForbidden, "", "read-only", -1},
		{"other repository's token", e.tokens[callerOtherRepo], "wt-r", 1, "s1", digestOf(inc1), inc1, 403, api.CodeForbidden, "", "not for repository", -1},
		{"no token", "", "wt-r", 1, "s1", digestOf(inc1), inc1, 401, api.CodeUnauthenticated, "", "bearer token", -1},
		{"unknown token", hub.NewTokenSecret(), "wt-r", 1, "s1", digestOf(inc1), inc1, 401, api.CodeUnauthenticated, "", "bearer token", -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, eb, _ := e.put(t, tc.token, tc.wt, tc.pos, tc.session, tc.dig, tc.body)
			if status != tc.status || eb.Error.Code != tc.code || eb.Error.Reason != tc.reason || !strings.Contains(eb.Error.Message, tc.msg) {
				t.Fatalf("got %d %+v, want %d %s %s %q", status, eb.Error, tc.status, tc.code, tc.reason, tc.msg)
			}
			if tc.wantNextInErr >= 0 && (eb.Error.Detail == nil || eb.Error.Detail.NextPosition == nil || *eb.Error.Detail.NextPosition != tc.wantNextInErr) {
				t.Fatalf("detail %+v", eb.Error.Detail)
			}
		})
	}
	// The latest position may be replaced (a capture redone after its state
	// never advanced); an earlier one may not.
	if status, eb, res := e.put(t, rw, "wt-r", 0, "s1", digestOf(other0), other0); status != 200 || res.Status != api.IncrementReplaced || res.Used.Objects != 1 {
		t.Fatalf("replace latest: %d %+v %+v", status, eb.Error, res)
	}
	if status, eb, _ := e.put(t, rw, "wt-r", 1, "s1", digestOf(inc1), inc1); status != 200 {
		t.Fatalf("upload 1: %d %+v", status, eb.Error)
	}
	if status, eb, _ := e.put(t, rw, "wt-r", 0, "s1", digestOf(inc0), inc0); status != 409 || eb.Error.Reason != api.ReasonPositionTaken {
		t.Fatalf("replace earlier: %d %+v", status, eb.Error)
	}
	// The replaced object is gone from storage; the current one downloads.
	p, _ := e.svc.EnsureLocal(context.Background(), "alice", "proj")
	cur, _ := e.svc.CurrentWork(context.Background(), p, "proj", "wt-r")
	list, err := e.svc.ListIncrements(context.Background(), p, "proj", cur.Work.ID, "")
	if err != nil || len(list.Increments) != 2 || list.Increments[0].Digest != digestOf(other0) {
		t.Fatalf("list %+v %v", list, err)
	}
}

func TestIncrementGrantRefusal(t *testing.T) {
	e := newMatrixEnv(t)
	rw := e.tokens[callerReadWrite]
	incs := [][]byte{testIncrement(t, 0, "s"), testIncrement(t, 1, "s"), testIncrement(t, 2, "s")}
	p, _ := e.svc.EnsureLocal(context.Background(), "alice", "proj")

	t.Run("objects", func(t *testing.T) {
		if _, err := e.svc.StartWork(context.Background(), p, "proj", api.StartWorkRequest{WorktreeID: "wt-o", ChangelogGrant: &api.Grant{MaxObjects: 2, MaxBytes: 1 << 20}}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			if status, eb, _ := e.put(t, rw, "wt-o", i, "s", digestOf(incs[i]), incs[i]); status != 200 {
				t.Fatalf("upload %d: %d %+v", i, status, eb.Error)
			}
		}
		status, eb, _ := e.put(t, rw, "wt-o", 2, "s", digestOf(incs[2]), incs[2])
		if status != 422 || eb.Error.Code != api.CodeGrantExceeded || eb.Error.Reason != api.BoundObjects ||
			!strings.Contains(eb.Error.Message, "grant allows 2 objects; 2 are stored") || eb.Error.Detail == nil || eb.Error.Detail.Max != 2 {
			t.Fatalf("third upload: %d %+v", status, eb.Error)
		}
		// Raising the grant lets it in.
		cur, _ := e.svc.CurrentWork(context.Background(), p, "proj", "wt-o")
		b, _ := json.Marshal(api.GrantRequest{MaxObjects: 3, MaxBytes: 1 << 20})
		if status, body := e.do(t, "POST", "/v1/repositories/proj/works/"+cur.Work.ID+"/grant", rw, b); status != 200 {
			t.Fatalf("grant: %d %s", status, body)
		}
		if status, eb, _ := e.put(t, rw, "wt-o", 2, "s", digestOf(incs[2]), incs[2]); status != 200 {
			t.Fatalf("after raising: %d %+v", status, eb.Error)
		}
	})
	t.Run("bytes", func(t *testing.T) {
		limit := int64(len(incs[0]) + len(incs[1]) - 1)
		if _, err := e.svc.StartWork(context.Background(), p, "proj", api.StartWorkRequest{WorktreeID: "wt-b", ChangelogGrant: &api.Grant{MaxObjects: 100, MaxBytes: limit}}); err != nil {
			t.Fatal(err)
		}
		if status, eb, _ := e.put(t, rw, "wt-b", 0, "s", digestOf(incs[0]), incs[0]); status != 200 {
			t.Fatalf("upload 0: %d %+v", status, eb.Error)
		}
		status, eb, _ := e.put(t, rw, "wt-b", 1, "s", digestOf(incs[1]), incs[1])
		if status != 422 || eb.Error.Code != api.CodeGrantExceeded || eb.Error.Reason != api.BoundBytes ||
			!strings.Contains(eb.Error.Message, fmt.Sprintf("grant allows %d bytes", limit)) {
			t.Fatalf("second upload: %d %+v", status, eb.Error)
		}
	})
	t.Run("invalid grants", func(t *testing.T) {
		for _, g := range []api.Grant{{MaxObjects: 0, MaxBytes: 1}, {MaxObjects: 1, MaxBytes: 0}, {MaxObjects: api.MaxGrantObjects + 1, MaxBytes: 1}} {
			if _, err := e.svc.StartWork(context.Background(), p, "proj", api.StartWorkRequest{WorktreeID: "wt-x", ChangelogGrant: &g}); err == nil {
				t.Fatalf("grant %+v accepted", g)
			}
		}
	})
}

// zeros is an endless body.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestIncrementOversizeBodyRefused(t *testing.T) {
	e := newMatrixEnv(t)
	e.freshWork(t, "wt-big")
	// Over HTTP: refused from the Content-Length before the body is read
	// (the client waits for 100 Continue and never sends it).
	req, _ := http.NewRequest("PUT", e.srv.URL+"/v1/repositories/proj/worktrees/wt-big/changelog/0?digest="+strings.Repeat("a", 64), io.LimitReader(zeros{}, api.MaxIncrementBytes+1))
	req.ContentLength = api.MaxIncrementBytes + 1
	req.Header.Set("Authorization", "Bearer "+e.tokens[callerReadWrite])
	req.Header.Set("Expect", "100-continue")
	tr := &http.Transport{ExpectContinueTimeout: 5 * time.Second}
	defer tr.CloseIdleConnections()
	start := time.Now()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 413 || !strings.Contains(string(b), "exceeds the 268435456-byte bound") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("refusal took %v: the body was read", d)
	}
	// In-process: a body longer than its declared size is refused too.
	inc := testIncrement(t, 0, "s")
	p, _ := e.svc.EnsureLocal(context.Background(), "alice", "proj")
	_, err = e.svc.UploadIncrement(context.Background(), p, "proj", "wt-big", api.IncrementUpload{Position: 0, Session: "s", Digest: digestOf(inc), Size: int64(len(inc) - 1)}, bytes.NewReader(inc))
	if ae, ok := api.AsError(err); !ok || ae.Status != 413 {
		t.Fatalf("longer body: %v", err)
	}
	_, err = e.svc.UploadIncrement(context.Background(), p, "proj", "wt-big", api.IncrementUpload{Position: 0, Session: "s", Digest: digestOf(inc), Size: int64(len(inc) + 1)}, bytes.NewReader(inc))
	if ae, ok := api.AsError(err); !ok || ae.Status != 400 {
		t.Fatalf("shorter body: %v", err)
	}
}

// After a takeover, the taker's checkout uploads its own sequence into the
// same Work; the grant counts both, and a download names the sequence when
// there are several.
func TestIncrementSequencesPerWorktree(t *testing.T) {
	e := newMatrixEnv(t)
	rw := e.tokens[callerReadWrite]
	w := e.freshWork(t, "wt-a")
	a0, a1, b0 := testIncrement(t, 0, "s1"), testIncrement(t, 1, "s1"), testIncrement(t, 0, "s2")
	for i, b := range [][]byte{a0, a1} {
		if status, eb, _ := e.put(t, rw, "wt-a", i, "s1", digestOf(b), b); status != 200 {
			t.Fatalf("a%d: %d %+v", i, status, eb.Error)
		}
	}
	p, _ := e.svc.EnsureLocal(context.Background(), "alice", "proj")
	if _, err := e.svc.Checkpoint(context.Background(), p, "proj", w.ID, api.CheckpointRequest{Action: api.CheckpointTakeover, WorktreeID: "wt-b"}); err != nil {
		t.Fatal(err)
	}
	// The old holder is fenced; the taker starts its own sequence at 0.
	if status, eb, _ := e.put(t, rw, "wt-a", 2, "s1", digestOf(b0), b0); status != 422 || eb.Error.Reason != api.ReasonStaleGeneration {
		t.Fatalf("old holder: %d %+v", status, eb.Error)
	}
	status, eb, res := e.put(t, rw, "wt-b", 0, "s2", digestOf(b0), b0)
	if status != 200 || res.Status != api.IncrementStored || res.Used.Objects != 3 || res.Generation != 2 {
		t.Fatalf("taker: %d %+v %+v", status, eb.Error, res)
	}
	status, body := e.do(t, "GET", "/v1/repositories/proj/works/"+w.ID+"/changelog/0", rw, nil)
	if status != 409 || !strings.Contains(string(body), "several_sequences") {
		t.Fatalf("download without a worktree: %d %s", status, body)
	}
	for wt, want := range map[string][]byte{"wt-a": a0, "wt-b": b0} {
		_, got, err := e.svc.GetIncrement(context.Background(), p, "proj", w.ID, wt, 0)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("download %s: %v", wt, err)
		}
	}
	list, err := e.svc.ListIncrements(context.Background(), p, "proj", w.ID, "wt-b")
	if err != nil || len(list.Increments) != 1 || list.Used.Objects != 3 {
		t.Fatalf("list of wt-b: %+v %v", list, err)
	}
}

// withMerged rewrites an increment's metadata to carry the merged range
// from..to (as the client's merge of refused positions writes it).
func withMerged(t *testing.T, b []byte, from, to int) []byte {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	tw := tar.NewWriter(zw)
	for i := 0; ; i++ {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		if i == 0 {
			var m incmeta.Meta
			if err := json.Unmarshal(data, &m); err != nil {
				t.Fatal(err)
			}
			m.Merged = []incmeta.Merged{{From: from, To: to, Reason: "grant refused"}}
			data, _ = json.Marshal(m)
			h.Size = int64(len(data))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write(data)
	}
	tw.Close()
	zw.Close()
	return out.Bytes()
}

// A merged upload fills the sequence from its first merged position; the
// positions it carries cannot be uploaded on their own, a merge may not
// overlap what the Work holds, and the metadata must say what the upload
// says.
func TestIncrementMergedUploads(t *testing.T) {
	e := newMatrixEnv(t)
	rw := e.tokens[callerReadWrite]
	w := e.freshWork(t, "wt-m")
	put := func(pos, merged int, b []byte) (int, api.ErrorBody, api.IncrementStoreResult) {
		t.Helper()
		path := fmt.Sprintf("/v1/repositories/proj/worktrees/wt-m/changelog/%d?%s", pos, api.IncrementUpload{Digest: digestOf(b), Session: "s", Merged: merged}.Query())
		status, body := e.do(t, "PUT", path, rw, b)
		var eb api.ErrorBody
		var res api.IncrementStoreResult
		if status == 200 {
			json.Unmarshal(body, &res)
		} else if err := json.Unmarshal(body, &eb); err != nil || eb.Error == nil {
			t.Fatalf("status %d body %s", status, body)
		}
		return status, eb, res
	}
	inc0 := testIncrement(t, 0, "s")
	if status, eb, _ := put(0, 0, inc0); status != 200 {
		t.Fatalf("upload 0: %d %+v", status, eb.Error)
	}
	m3 := withMerged(t, testIncrement(t, 3, "s"), 1, 2)
	if status, eb, res := put(3, 2, m3); status != 200 || res.Status != api.IncrementStored || res.Used.Objects != 2 {
		t.Fatalf("merged upload: %d %+v %+v", status, eb.Error, res)
	}
	if status, _, res := put(3, 2, m3); status != 200 || res.Status != api.IncrementDuplicate {
		t.Fatalf("merged upload again: %d %+v", status, res)
	}
	cases := []struct {
		name        string
		pos, merged int
		body        []byte
		status      int
		reason, msg string
	}{
		{"carried position", 2, 0, testIncrement(t, 2, "s"), 409, api.ReasonPositionMerged, "a later increment carries its writes"},
		{"merge past a hole", 7, 1, withMerged(t, testIncrement(t, 7, "s"), 6, 6), 409, api.ReasonIncrementsMissing, "upload position 4 first"},
		{"merge overlapping", 5, 3, withMerged(t, testIncrement(t, 5, "s"), 2, 4), 409, api.ReasonMergeOverlaps, "cannot also carry positions 2..3"},
		{"metadata without the merge", 5, 1, testIncrement(t, 5, "s"), 422, "", "merges positions 5..4, not the 1"},
		{"upload without the metadata's merge", 4, 0, withMerged(t, testIncrement(t, 4, "s"), 3, 3), 422, "", "merges positions 3..3, not the 0"},
		{"merged past position 0", 1, 2, testIncrement(t, 1, "s"), 400, "", "merged must be 0 to the position"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, eb, _ := put(tc.pos, tc.merged, tc.body)
			if status != tc.status || eb.Error.Reason != tc.reason || !strings.Contains(eb.Error.Message, tc.msg) {
				t.Fatalf("got %d %+v, want %d %s %q", status, eb.Error, tc.status, tc.reason, tc.msg)
			}
		})
	}
	p, _ := e.svc.EnsureLocal(context.Background(), "alice", "proj")
	list, err := e.svc.ListIncrements(context.Background(), p, "proj", w.ID, "")
	if err != nil || len(list.Increments) != 2 || list.Increments[1].Position != 3 {
		t.Fatalf("list %+v %v", list, err)
	}
}
