package delivery

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

// secondWorktree connects another checkout of the fixture's repository
// ("demo" on the same embedded Hub) and enables capture there: its own
// binding, worktree id, spool and capture ledger.
func (f *fixture) secondWorktree(t *testing.T, name string) *fixture {
	t.Helper()
	root := filepath.Join(filepath.Dir(f.root), name)
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	root, _ = filepath.EvalSymlinks(root)
	ctx := context.Background()
	c, _, err := client.SetupLocal(ctx, f.cfg, root, "demo", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	res, err := binding.EnableCapture(ctx, f.store, Connections{f.cfg}, binding.EnableOptions{Root: root, ConfigDir: f.cfg, Executable: "/usr/local/bin/agentscm", Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{cfg: f.cfg, root: root, store: f.store, conn: c, spool: res.Spool}
}

func (f *fixture) sessionPayload(session, event, extra string) string {
	return strings.Replace(f.payload(event, extra), `"session_id":"native-1"`, `"session_id":"`+session+`"`, 1)
}

// TestTwoWorktreeSpools: two checkouts of one repository, each with its
// own one-step setup (spool, ledger, stream) and current Work, both on one
// Hub. The same native session runs in the first, is resumed in the second
// and goes on in the first; a separate session runs in the second; both
// read one transcript, so the same provider requests reach both spools.
// On main the second spool's numbers and identities collided with the
// first's (identity_reused, sequence_taken) and stayed pending. Now every
// envelope of both spools is acknowledged, nothing is refused, each Work's
// sessions have one stream each with no missing number, and a provider
// request is counted once per Work.
func TestTwoWorktreeSpools(t *testing.T) {
	f := newFixture(t)
	proj := f.withHistoryRoot(t, event.ModeMetadataOnly)
	g := f.secondWorktree(t, "feature")
	if g.spool == f.spool || g.conn.WorktreeID == f.conn.WorktreeID {
		t.Fatalf("second worktree shares spool %s or worktree id %s", g.spool, g.conn.WorktreeID)
	}
	if err := f.store.Bindings().Update(func(c *binding.Config) (bool, error) {
		for i := range c.Bindings {
			c.Bindings[i].ClaudeHistoryRoot = filepath.Dir(proj)
		}
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	work1, work2 := f.startWork(t), g.startWork(t)
	tr := filepath.Join(proj, "native-1.jsonl")
	appendFile(t, tr, `{"type":"user","sessionId":"native-1","message":{"role":"user","content":"hi"}}`+"\n")

	run := func(x *fixture, session string, payloads ...[2]string) {
		t.Helper()
		for _, p := range payloads {
			r := x.hook(t, x.sessionPayload(session, p[0], p[1]))
			if r.Failed != 0 || r.Refused != 0 || r.DeliveryErr != nil {
				t.Fatalf("%s %s in %s: %+v (%v)", session, p[0], x.root, r, r.DeliveryErr)
			}
		}
	}
	run(f, "native-1",
		[2]string{"SessionStart", `,"source":"startup"`},
		[2]string{"UserPromptSubmit", `,"prompt":"one"`},
		[2]string{"PreToolUse", `,"tool_name":"Read","tool_use_id":"t1","tool_input":{"file_path":"/x"}`})
	appendFile(t, tr, assistant("msg_1", `{"type":"tool_use","id":"t1","name":"Read","input":{}}`, 100, 10))
	run(f, "native-1",
		[2]string{"PostToolUse", `,"tool_name":"Read","tool_use_id":"t1","tool_input":{"file_path":"/x"},"tool_response":{}`},
		[2]string{"Stop", ""})
	// Resumed in the second worktree: its spool's transcript reader starts
	// at the transcript's end, then reads msg_2, which the first
	// worktree's reader reads too when the session comes back there.
	run(g, "native-1",
		[2]string{"SessionStart", `,"source":"resume"`},
		[2]string{"UserPromptSubmit", `,"prompt":"two"`})
	appendFile(t, tr, assistant("msg_2", `{"type":"text","text":"two"}`, 200, 20))
	run(g, "native-1",
		[2]string{"PreToolUse", `,"tool_name":"Read","tool_use_id":"t2","tool_input":{"file_path":"/y"}`},
		[2]string{"PostToolUse", `,"tool_name":"Read","tool_use_id":"t2","tool_input":{"file_path":"/y"},"tool_response":{}`},
		[2]string{"Stop", ""})
	run(g, "native-2",
		[2]string{"SessionStart", `,"source":"startup"`},
		[2]string{"UserPromptSubmit", `,"prompt":"separate"`},
		[2]string{"Stop", ""},
		[2]string{"SessionEnd", `,"reason":"other"`})
	// Back in the first worktree.
	run(f, "native-1",
		[2]string{"UserPromptSubmit", `,"prompt":"three"`},
		[2]string{"Stop", ""},
		[2]string{"SessionEnd", `,"reason":"other"`})

	streams := map[string]string{}
	for _, x := range []*fixture{f, g} {
		rep, err := spool.Inspect(x.spool, 100)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Pending.Total+rep.Deferred.Total != 0 {
			t.Fatalf("%s: %d pending, %d attempted and unacknowledged", x.spool, rep.Pending.Total, rep.Deferred.Total)
		}
		if r, err := x.store.Refusals(x.spool); err != nil || r.Total != 0 {
			t.Fatalf("%s: refusals %+v %v", x.spool, r, err)
		}
		sp, err := spool.Open(x.spool)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := sp.Events()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Kind == event.KindUsage || r.Stream == "" {
				continue
			}
			if s, ok := streams[x.spool]; ok && s != r.Stream {
				t.Fatalf("%s: streams %s and %s", x.spool, s, r.Stream)
			}
			streams[x.spool] = r.Stream
		}
	}
	if len(streams) != 2 || streams[f.spool] == streams[g.spool] {
		t.Fatalf("streams %v", streams)
	}
	for _, w := range []struct {
		id, stream string
		sessions   int
		usage      int64
	}{{work1, streams[f.spool], 1, 2}, {work2, streams[g.spool], 2, 1}} {
		rec := f.record(t, w.id)
		if len(rec.Sessions) != w.sessions {
			t.Fatalf("work %s: sessions %+v", w.id, rec.Sessions)
		}
		for _, s := range rec.Sessions {
			if s.MissingSeqs != 0 || len(s.Streams) != 1 || s.Streams[0].Stream != w.stream || s.FirstSeq != 1 {
				t.Fatalf("work %s: session %+v", w.id, s)
			}
		}
		for _, g := range rec.Gaps {
			if g.Derived || (g.Kind != "adapter_started_late" && g.Kind != "identity_uncertain") {
				t.Fatalf("work %s: gap %+v", w.id, g)
			}
		}
		if rec.Usage.Records != w.usage {
			t.Fatalf("work %s: usage %+v, want %d records", w.id, rec.Usage, w.usage)
		}
	}
}
