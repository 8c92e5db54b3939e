package hub_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/agentscm/agentscm/internal/hub"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/hub/store/sqlite"
)

// setJSON replaces the value at path ("events.0.seq") of a decoded JSON
// object with raw JSON.
func setJSON(t *testing.T, m map[string]any, path string, raw string) {
	t.Helper()
	parts := strings.Split(path, ".")
	var cur any = m
	for i, p := range parts {
		last := i == len(parts)-1
		switch c := cur.(type) {
		case map[string]any:
			if last {
				c[p] = json.RawMessage(raw)
				return
			}
			cur = c[p]
		case []any:
			n, err := strconv.Atoi(p)
			if err != nil {
				t.Fatalf("path %s", path)
			}
			if last {
				c[n] = json.RawMessage(raw)
				return
			}
			cur = c[n]
		default:
			t.Fatalf("path %s: %T", path, cur)
		}
	}
}

// envelopeJSON is a valid envelope of each type for a Work at generation 1,
// as a decoded JSON object.
func envelopeJSON(t *testing.T, kind, workID string, n int64) map[string]any {
	t.Helper()
	sum := sha256.Sum256([]byte(fmt.Sprint("bounds", kind, n)))
	env := api.Envelope{Identity: hex.EncodeToString(sum[:]), Type: kind, WorkID: workID, Generation: 1, Session: "default"}
	one := int64(1)
	code := 0
	switch kind {
	case api.TypeEvents:
		env.Events = []api.Event{{Seq: 1, Kind: "session_start", ObservedAt: 1}}
	case api.TypeUsage:
		env.Usage = &api.Usage{Scope: api.UsageScopeRequest, MessageID: "msg_1", InputTokens: &one, OutputTokens: &one, CacheCreationInputTokens: &one, CacheReadInputTokens: &one}
	case api.TypeActionStart:
		env.ActionStart = &api.ActionStart{ActionID: "a1", Tool: "Bash", Class: "execution", ObservationOrder: 1, StartedAt: 1}
	case api.TypeActionFinish:
		env.ActionFinish = &api.ActionFinish{ActionID: "a1", Result: "succeeded", Verification: "unknown", ExitCode: &code, FinishedAt: 1}
	case api.TypeGap:
		env.Gap = &api.Gap{Kind: "outage", FromSeq: 1, ToSeq: 1}
	}
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestIntegerBoundsOverHTTP sends every integer field of every envelope type
// at its bound (accepted), one past it and at hostile values (refused with
// 400 naming the field, or 400 bad_json for what is not an int64), and
// checks that the change record of every Work answers 200 afterwards.
func TestIntegerBoundsOverHTTP(t *testing.T) {
	e := newMatrixEnv(t)
	tok := e.tokens[callerReadWrite]
	fields := []struct {
		kind, path, field string
		min, max          int64
	}{
		{api.TypeEvents, "generation", "generation", 1, api.MaxGeneration},
		{api.TypeEvents, "events.0.seq", "events[0].seq", 1, api.MaxSeq},
		{api.TypeEvents, "events.0.observed_at", "events[0].observed_at", 0, api.MaxUnixTime},
		{api.TypeUsage, "usage.input_tokens", "usage.input_tokens", 0, api.MaxTokenCount},
		{api.TypeUsage, "usage.output_tokens", "usage.output_tokens", 0, api.MaxTokenCount},
		{api.TypeUsage, "usage.cache_creation_input_tokens", "usage.cache_creation_input_tokens", 0, api.MaxTokenCount},
		{api.TypeUsage, "usage.cache_read_input_tokens", "usage.cache_read_input_tokens", 0, api.MaxTokenCount},
		{api.TypeActionStart, "action_start.observation_order", "action_start.observation_order", 0, api.MaxSeq},
		{api.TypeActionStart, "action_start.started_at", "action_start.started_at", 0, api.MaxUnixTime},
		{api.TypeActionFinish, "action_finish.exit_code", "action_finish.exit_code", api.MinExitCode, api.MaxExitCode},
		{api.TypeActionFinish, "action_finish.finished_at", "action_finish.finished_at", 0, api.MaxUnixTime},
		{api.TypeGap, "gap.from_seq", "gap.from_seq", 0, api.MaxSeq},
		{api.TypeGap, "gap.to_seq", "gap.to_seq", 0, api.MaxSeq},
	}
	hostileNotInt := []string{"1.5", "-0.5", "1e30", "9223372036854775808", "-9223372036854775809", "99999999999999999999999", `"12"`, "true", "[]", "{}"}
	var works []string
	for _, f := range fields {
		cases := []struct {
			raw    string
			status int
			code   string // expected error code ("" for 200)
		}{
			{strconv.FormatInt(f.max, 10), 200, ""},
			{strconv.FormatInt(f.max+1, 10), 400, api.CodeBadRequest},
			{strconv.FormatInt(math.MaxInt64, 10), 400, api.CodeBadRequest},
			{strconv.FormatInt(math.MinInt64, 10), 400, api.CodeBadRequest},
			{strconv.FormatInt(f.min-1, 10), 400, api.CodeBadRequest},
		}
		if f.field == "generation" {
			// Accepted by admission, refused by the Work (it is at 1).
			cases[0].status, cases[0].code = 422, api.CodeTargetRefused
		}
		if f.field == "gap.from_seq" {
			// from_seq may not pass to_seq (1): the bound is checked first.
			cases[0].status = 400
		}
		for _, h := range hostileNotInt {
			cases = append(cases, struct {
				raw    string
				status int
				code   string
			}{h, 400, api.CodeBadJSON})
		}
		for i, c := range cases {
			n := e.seq.Add(1)
			w := e.freshWork(t, fmt.Sprintf("wt-b%d", n))
			works = append(works, w.ID)
			m := envelopeJSON(t, f.kind, w.ID, n)
			setJSON(t, m, f.path, c.raw)
			if f.field == "gap.from_seq" && i == 0 {
				setJSON(t, m, "gap.to_seq", c.raw) // a range at the bound
				c.status, c.code = 200, ""
			}
			b, _ := json.Marshal(m)
			status, body := e.do(t, "POST", "/v1/repositories/proj/envelopes", tok, b)
			if status != c.status {
				t.Errorf("%s = %s: status %d, want %d: %s", f.field, c.raw, status, c.status, body)
				continue
			}
			if status == 200 {
				continue
			}
			var eb api.ErrorBody
			if err := json.Unmarshal(body, &eb); err != nil || eb.Error == nil {
				t.Fatalf("%s = %s: body %s", f.field, c.raw, body)
			}
			if eb.Error.Code != c.code {
				t.Errorf("%s = %s: code %q, want %q: %s", f.field, c.raw, eb.Error.Code, c.code, body)
			}
			if c.code == api.CodeBadRequest && (eb.Error.Reason != api.ReasonOutOfBounds || eb.Error.Detail == nil || eb.Error.Detail.Field != f.field || !strings.Contains(eb.Error.Message, f.field)) {
				t.Errorf("%s = %s: the refusal does not name the field: %s", f.field, c.raw, body)
			}
		}
	}
	// A null where a number goes: never a server error.
	for _, f := range fields {
		n := e.seq.Add(1)
		w := e.freshWork(t, fmt.Sprintf("wt-n%d", n))
		m := envelopeJSON(t, f.kind, w.ID, n)
		setJSON(t, m, f.path, "null")
		b, _ := json.Marshal(m)
		if status, body := e.do(t, "POST", "/v1/repositories/proj/envelopes", tok, b); status >= 500 {
			t.Errorf("%s = null: %d %s", f.field, status, body)
		}
	}
	for _, id := range works {
		if status, body := e.do(t, "GET", "/v1/repositories/proj/works/"+id+"/record", tok, nil); status != 200 {
			t.Fatalf("record of %s: %d %s", id, status, body)
		}
	}
}

// TestOtherRoutesHostileIntegers: the grant, the checkpoint and the
// changelog routes answer 4xx, never 500, to hostile integers.
func TestOtherRoutesHostileIntegers(t *testing.T) {
	e := newMatrixEnv(t)
	tok := e.tokens[callerReadWrite]
	w := e.freshWork(t, "wt-h")
	hostile := []string{"-1", "0", "9223372036854775807", "-9223372036854775808", "9223372036854775808", "1.5", "1e30", `"7"`, "null", "true"}
	for _, h := range hostile {
		for _, tc := range []struct{ path, body string }{
			{"/v1/repositories/proj/works/" + w.ID + "/grant", `{"max_objects":` + h + `,"max_bytes":1024}`},
			{"/v1/repositories/proj/works/" + w.ID + "/grant", `{"max_objects":5,"max_bytes":` + h + `}`},
			{"/v1/repositories/proj/works/" + w.ID + "/checkpoints", `{"action":"pause","expect_generation":` + h + `}`},
			{"/v1/repositories/proj/works", `{"worktree_id":"wt-g` + fmt.Sprint(e.seq.Add(1)) + `","changelog_grant":{"max_objects":` + h + `,"max_bytes":1}}`},
		} {
			status, body := e.do(t, "POST", tc.path, tok, []byte(tc.body))
			if status >= 500 || (status == 200 && h != "null") {
				t.Errorf("POST %s %s: %d %s", tc.path, tc.body, status, body)
			}
			if strings.Contains(tc.body, "expect_generation") && status == 400 && h != "1.5" && h != "1e30" && h != `"7"` && h != "true" && h != "9223372036854775808" && !strings.Contains(string(body), "expect_generation") {
				t.Errorf("POST %s %s: the refusal does not name expect_generation: %s", tc.path, tc.body, body)
			}
		}
		for _, pos := range []string{h, "1000000", "-0", "+1", "01"} {
			path := fmt.Sprintf("/v1/repositories/proj/works/%s/changelog/%s", w.ID, pos)
			if status, body := e.do(t, "GET", path, tok, nil); status != 400 && status != 404 {
				t.Errorf("GET %s: %d %s", path, status, body)
			}
		}
	}
}

// TestRecordNeverFailsOnSums: usage at the largest accepted counts sums
// exactly; counts written into the database around the Hub (2^63-1, which
// SQLite's sum() overflows on) saturate and are named, and the change
// record, the changelog listing and an upload still answer without a
// server error.
func TestRecordNeverFailsOnSums(t *testing.T) {
	ctx := context.Background()
	data := filepath.Join(t.TempDir(), "data")
	svc, err := hub.Open(ctx, data, hub.Config{RetentionDays: 9})
	if err != nil {
		t.Fatal(err)
	}
	p, err := svc.EnsureLocal(ctx, "alice", "proj")
	if err != nil {
		t.Fatal(err)
	}
	w, err := svc.StartWork(ctx, p, "proj", api.StartWorkRequest{WorktreeID: "wt"})
	if err != nil {
		t.Fatal(err)
	}
	max := int64(api.MaxTokenCount)
	for i := 0; i < 3; i++ {
		sum := sha256.Sum256([]byte(fmt.Sprint("usage", i)))
		env := &api.Envelope{Identity: hex.EncodeToString(sum[:]), Type: api.TypeUsage, WorkID: w.ID, Generation: 1, Session: "default",
			Usage: &api.Usage{Scope: api.UsageScopeRequest, MessageID: fmt.Sprint("msg_", i), InputTokens: &max, OutputTokens: &max, CacheCreationInputTokens: &max, CacheReadInputTokens: &max}}
		if _, err := svc.Ingest(ctx, p, "proj", env); err != nil {
			t.Fatal(err)
		}
	}
	sum := sha256.Sum256([]byte("events"))
	if _, err := svc.Ingest(ctx, p, "proj", &api.Envelope{Identity: hex.EncodeToString(sum[:]), Type: api.TypeEvents, WorkID: w.ID, Generation: 1, Session: "default",
		Events: []api.Event{{Seq: 1, Kind: "session_start"}, {Seq: api.MaxSeq, Kind: "session_end", ObservedAt: api.MaxUnixTime}}}); err != nil {
		t.Fatal(err)
	}
	inc0 := testIncrement(t, 0, "s")
	if _, err := svc.UploadIncrement(ctx, p, "proj", "wt", api.IncrementUpload{Position: 0, Session: "s", Digest: digestOf(inc0), Size: int64(len(inc0))}, bytes.NewReader(inc0)); err != nil {
		t.Fatal(err)
	}
	rec, err := svc.Record(ctx, p, "proj", w.ID)
	if err != nil {
		t.Fatal(err)
	}
	if u := rec.Usage; u.Records != 3 || u.InputTokens != 3*max || u.CacheReadInputTokens != 3*max || len(u.Saturated) != 0 {
		t.Fatalf("usage at the bound = %+v", u)
	}
	if s := rec.Sessions[0]; s.LastSeq != api.MaxSeq || s.MissingSeqs != api.MaxSeq-2 {
		t.Fatalf("session = %+v", s)
	}
	svc.Close()

	// Around the Hub: values admission would refuse.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(data, sqlite.DBFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"UPDATE usage SET input=9223372036854775807, output=9223372036854775807, cache_read=-9223372036854775808",
		"UPDATE events SET seq=9223372036854775807 WHERE kind='session_end'",
		"UPDATE events SET seq=-9223372036854775808 WHERE kind='session_start'",
		"UPDATE changelog_increments SET size=9223372036854775807",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(q, err)
		}
	}
	db.Close()
	svc, err = hub.Open(ctx, data, hub.Config{RetentionDays: 9})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	rec, err = svc.Record(ctx, p, "proj", w.ID)
	if err != nil {
		t.Fatalf("record over overflowing data: %v", err)
	}
	u := rec.Usage
	if u.InputTokens != math.MaxInt64 || u.OutputTokens != math.MaxInt64 || u.CacheReadInputTokens != math.MinInt64 || u.CacheCreationInputTokens != 3*max {
		t.Fatalf("saturated usage = %+v", u)
	}
	if got := strings.Join(u.Saturated, ","); got != "input_tokens,output_tokens,cache_read_input_tokens" {
		t.Fatalf("saturated = %q", got)
	}
	if s := rec.Sessions[0]; s.LastSeq != math.MaxInt64 || s.MissingSeqs < 0 {
		t.Fatalf("session = %+v", s)
	}
	srv := httptest.NewServer(hub.NewHandler(svc, nil))
	defer srv.Close()
	k, err := svc.CreateToken(ctx, hub.Operator(), api.CreateTokenRequest{Human: "alice", Repository: "proj", Scope: api.ScopeReadWrite})
	if err != nil {
		t.Fatal(err)
	}
	me := &matrixEnv{svc: svc, srv: srv}
	if status, body := me.do(t, "GET", "/v1/repositories/proj/works/"+w.ID+"/record", k.Secret, nil); status != 200 || !strings.Contains(string(body), `"saturated":["input_tokens"`) {
		t.Fatalf("record over HTTP: %d %s", status, body)
	}
	if status, body := me.do(t, "GET", "/v1/repositories/proj/works/"+w.ID+"/changelog", k.Secret, nil); status != 200 {
		t.Fatalf("changelog list: %d %s", status, body)
	}
	inc := testIncrement(t, 1, "s")
	if _, err := svc.UploadIncrement(ctx, p, "proj", "wt", api.IncrementUpload{Position: 1, Session: "s", Digest: digestOf(inc), Size: int64(len(inc))}, strings.NewReader(string(inc))); err == nil {
		t.Fatal("an upload past a saturated byte usage was stored")
	} else if e, ok := api.AsError(err); !ok || e.Code != api.CodeGrantExceeded {
		t.Fatalf("upload past a saturated byte usage: %v", err)
	}
}

// TestTakeoverCompareAndSwap: a takeover expecting the generation the Work
// has wins; one expecting an older generation is refused with 409
// generation_changed naming the generation now; of 12 concurrent takeovers
// expecting the same generation, over HTTP and in process, exactly one wins
// and only its worktree is current.
func TestTakeoverCompareAndSwap(t *testing.T) {
	ctx := context.Background()
	e := newMatrixEnv(t)
	p, err := e.svc.EnsureLocal(ctx, "alice", "proj")
	if err != nil {
		t.Fatal(err)
	}
	w := e.freshWork(t, "wt-0")
	gen := func(n int64) *int64 { return &n }
	if _, err := e.svc.Checkpoint(ctx, p, "proj", w.ID, api.CheckpointRequest{Action: api.CheckpointTakeover, WorktreeID: "wt-1", ExpectGeneration: gen(1)}); err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.Checkpoint(ctx, p, "proj", w.ID, api.CheckpointRequest{Action: api.CheckpointTakeover, WorktreeID: "wt-2", ExpectGeneration: gen(1)})
	if now, ok := api.GenerationChanged(err); !ok || now != 2 {
		t.Fatalf("stale takeover: %v", err)
	}
	if e, ok := api.AsError(err); !ok || e.Status != 409 {
		t.Fatalf("stale takeover status: %v", err)
	}
	for _, bad := range []int64{0, -1, api.MaxGeneration + 1, math.MaxInt64} {
		_, err := e.svc.Checkpoint(ctx, p, "proj", w.ID, api.CheckpointRequest{Action: api.CheckpointTakeover, WorktreeID: "wt-2", ExpectGeneration: gen(bad)})
		if e, ok := api.AsError(err); !ok || e.Status != 400 || e.Detail == nil || e.Detail.Field != "expect_generation" {
			t.Fatalf("expect_generation %d: %v", bad, err)
		}
	}

	for _, via := range []string{"service", "http"} {
		cur, err := e.svc.GetWork(ctx, p, "proj", w.ID)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		type result struct {
			wt  string
			gen int64
			err error
		}
		results := make([]result, 12)
		for i := range results {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				wt := fmt.Sprintf("wt-%s-%d", via, i)
				req := api.CheckpointRequest{Action: api.CheckpointTakeover, WorktreeID: wt, ExpectGeneration: gen(cur.Generation)}
				results[i].wt = wt
				if via == "service" {
					out, err := e.svc.Checkpoint(ctx, p, "proj", w.ID, req)
					results[i].gen, results[i].err = out.Generation, err
					return
				}
				b, _ := json.Marshal(req)
				status, body := e.doAsync("POST", "/v1/repositories/proj/works/"+w.ID+"/checkpoints", e.tokens[callerReadWrite], b)
				if status == 200 {
					var out api.Work
					results[i].err = json.Unmarshal(body, &out)
					results[i].gen = out.Generation
					return
				}
				var eb api.ErrorBody
				if err := json.Unmarshal(body, &eb); err != nil || eb.Error == nil {
					results[i].err = fmt.Errorf("status %d: %s", status, body)
					return
				}
				eb.Error.Status = status
				results[i].err = eb.Error
			}(i)
		}
		wg.Wait()
		var winners []result
		for _, r := range results {
			if r.err == nil {
				winners = append(winners, r)
				continue
			}
			if now, ok := api.GenerationChanged(r.err); !ok || now != cur.Generation+1 {
				t.Fatalf("%s: loser %s: %v", via, r.wt, r.err)
			}
		}
		if len(winners) != 1 || winners[0].gen != cur.Generation+1 {
			t.Fatalf("%s: winners %+v", via, winners)
		}
		after, err := e.svc.GetWork(ctx, p, "proj", w.ID)
		if err != nil {
			t.Fatal(err)
		}
		if after.Generation != cur.Generation+1 {
			t.Fatalf("%s: generation %d after one winning takeover from %d", via, after.Generation, cur.Generation)
		}
		for _, r := range results {
			cw, err := e.svc.CurrentWork(ctx, p, "proj", r.wt)
			if r.err == nil {
				if err != nil || cw.Generation != after.Generation {
					t.Fatalf("%s: winner %s: %+v %v", via, r.wt, cw, err)
				}
			} else if err == nil {
				t.Fatalf("%s: loser %s is current: %+v", via, r.wt, cw)
			}
		}
	}
}

// doAsync is do for goroutines: errors become status 0 with the message.
func (e *matrixEnv) doAsync(method, path, token string, body []byte) (int, []byte) {
	req, err := http.NewRequest(method, e.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		return 0, []byte(err.Error())
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestTakeoverAtLastGeneration: a Work at the largest generation (written
// into the database; 2^31-1 takeovers are out of reach) refuses a takeover
// with 409 invalid_state instead of passing the bound envelopes are held to.
func TestTakeoverAtLastGeneration(t *testing.T) {
	ctx := context.Background()
	data := filepath.Join(t.TempDir(), "data")
	svc, err := hub.Open(ctx, data, hub.Config{RetentionDays: 9})
	if err != nil {
		t.Fatal(err)
	}
	p, err := svc.EnsureLocal(ctx, "alice", "proj")
	if err != nil {
		t.Fatal(err)
	}
	w, err := svc.StartWork(ctx, p, "proj", api.StartWorkRequest{WorktreeID: "wt"})
	if err != nil {
		t.Fatal(err)
	}
	svc.Close()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(data, sqlite.DBFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("UPDATE works SET generation=?", int64(api.MaxGeneration)); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if svc, err = hub.Open(ctx, data, hub.Config{RetentionDays: 9}); err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	_, err = svc.Checkpoint(ctx, p, "proj", w.ID, api.CheckpointRequest{Action: api.CheckpointTakeover, WorktreeID: "wt-2"})
	if e, ok := api.AsError(err); !ok || e.Status != 409 || e.Code != api.CodeInvalidState {
		t.Fatalf("takeover at the last generation: %v", err)
	}
	if _, err := svc.Record(ctx, p, "proj", w.ID); err != nil {
		t.Fatal(err)
	}
}
