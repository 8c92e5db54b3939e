package hub_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/hub"
	"github.com/agentscm/agentscm/internal/hub/api"
)

// fuzzHub opens one Hub for a whole fuzz run (every execution reuses it)
// with one human, repository and Work. Its data directory is on tmpfs when
// the machine has one: an execution that stores an increment then costs no
// disk flush, so the fuzzer runs thousands of executions instead of waiting
// on fsync. The Hub code under test is the same.
func fuzzHub(tb testing.TB) (*hub.Service, hub.Principal) {
	tb.Helper()
	base := ""
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "agentscm-hubfuzz-"); err == nil {
			base = d
			tb.Cleanup(func() { os.RemoveAll(d) })
		}
	}
	if base == "" {
		base = tb.TempDir()
	}
	ctx := context.Background()
	svc, err := hub.Open(ctx, filepath.Join(base, "data"), hub.Config{RetentionDays: 9})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { svc.Close() })
	p, err := svc.EnsureLocal(ctx, "alice", "proj")
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := svc.StartWork(ctx, p, "proj", api.StartWorkRequest{WorktreeID: "wt-fuzz"}); err != nil {
		tb.Fatal(err)
	}
	return svc, p
}

// FuzzUploadIncrement feeds arbitrary bodies (with their true digest) to the
// upload: the Hub must answer with a typed error or store a body whose
// metadata names the position and session, never panic. One Hub serves every
// execution (no per-execution process or database). Go's fuzzer does not
// count the executions it spends minimizing a new interesting input (up to
// -fuzzminimizetime, 60 s by default), so its exec rate reads 0/sec then;
// with -fuzzminimizetime 200x it reports over 100,000 executions a minute.
func FuzzUploadIncrement(f *testing.F) {
	f.Add(testIncrement(f, 0, "s"), "s")
	f.Add([]byte("\x1f\x8b\x08\x00garbage"), "s")
	f.Add([]byte{}, "")
	svc, p := fuzzHub(f)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, body []byte, session string) {
		res, err := svc.UploadIncrement(ctx, p, "proj", "wt-fuzz",
			api.IncrementUpload{Position: 0, Session: session, Digest: digestOf(body), Size: int64(len(body))}, bytes.NewReader(body))
		if err != nil {
			e, ok := api.AsError(err)
			if !ok {
				t.Fatalf("untyped error: %v", err)
			}
			if e.Status >= 500 {
				t.Fatalf("server error for client input: %v", err)
			}
			return
		}
		if res.Position != 0 || res.Digest != digestOf(body) {
			t.Fatalf("stored %+v", res)
		}
	})
}

// FuzzReadMeta fuzzes the parser the Hub runs on every uploaded body.
func FuzzReadMeta(f *testing.F) {
	f.Add(testIncrement(f, 3, "s"))
	f.Add([]byte("\x1f\x8b\x08\x00garbage"))
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := changelog.ReadMetaFrom(bytes.NewReader(body))
		if err == nil && m == nil {
			t.Fatal("no metadata and no error")
		}
	})
}

// FuzzIngestRecord feeds arbitrary envelope bodies (the literal WORK stands
// for the fuzz Work's id) through the Hub's decoder and Ingest, then reads
// the change record: every refusal is a typed client error (never 5xx), and
// the record of whatever was accepted always answers. One Hub serves every
// execution.
func FuzzIngestRecord(f *testing.F) {
	id := strings.Repeat("b", 64)
	for _, v := range []string{"1", "1099511627776", "9223372036854775807", "-1", "0", "1.5", "1e19", `"3"`, "null"} {
		f.Add(`{"identity":"` + id + `","type":"events","work_id":"WORK","generation":1,"session":"default","events":[{"seq":` + v + `,"kind":"turn_end","observed_at":` + v + `}]}`)
		f.Add(`{"identity":"` + id + `","type":"usage","work_id":"WORK","generation":1,"session":"default","usage":{"scope":"request","message_id":"m` + v + `","input_tokens":` + v + `,"output_tokens":1099511627776,"cache_creation_input_tokens":null,"cache_read_input_tokens":` + v + `}}`)
		f.Add(`{"identity":"` + id + `","type":"usage","work_id":"WORK","generation":1,"session":"default","usage":{"scope":"session_cumulative","input_tokens":` + v + `,"output_tokens":null,"cache_creation_input_tokens":null,"cache_read_input_tokens":null}}`)
		f.Add(`{"identity":"` + id + `","type":"action_start","work_id":"WORK","generation":1,"session":"default","action_start":{"action_id":"a","tool":"Bash","class":"execution","observation_order":` + v + `,"started_at":` + v + `}}`)
		f.Add(`{"identity":"` + id + `","type":"action_finish","work_id":"WORK","generation":1,"session":"default","action_finish":{"action_id":"a","result":"failed","verification":"unknown","exit_code":` + v + `,"finished_at":` + v + `}}`)
		f.Add(`{"identity":"` + id + `","type":"gap","work_id":"WORK","generation":` + v + `,"session":"default","gap":{"kind":"outage","from_seq":` + v + `,"to_seq":` + v + `}}`)
	}
	svc, p := fuzzHub(f)
	ctx := context.Background()
	cur, err := svc.CurrentWork(ctx, p, "proj", "wt-fuzz")
	if err != nil {
		f.Fatal(err)
	}
	work := cur.Work.ID
	f.Fuzz(func(t *testing.T, body string) {
		var env api.Envelope
		err := api.DecodeBytesStrict([]byte(strings.ReplaceAll(body, "WORK", work)), &env)
		if err == nil {
			_, err = svc.Ingest(ctx, p, "proj", &env)
		}
		if err != nil {
			e, ok := api.AsError(err)
			if !ok || e.Status >= 500 {
				t.Fatalf("envelope %s: %v", body, err)
			}
		}
		if _, err := svc.Record(ctx, p, "proj", work); err != nil {
			t.Fatalf("record after %s: %v", body, err)
		}
	})
}
