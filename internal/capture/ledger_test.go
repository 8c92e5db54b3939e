package capture

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/agent"
	"github.com/agentscm/agentscm/internal/agent/claude"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

func mustPayload(t *testing.T, s string) (*agent.Payload, *event.Record) {
	t.Helper()
	p, err := agent.DecodePayload([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	rec, ok, err := claude.Map(p, event.ModeMetadataOnly, time.Now())
	if err != nil || !ok {
		t.Fatalf("map %s: %v %v", s, ok, err)
	}
	return p, rec
}

func TestProviderOccurrence(t *testing.T) {
	base := `{"session_id":"s","cwd":"/r","hook_event_name":`
	cases := []struct {
		payload  string
		phase    string
		identity string
		info     bool
	}{
		{`"PreToolUse","tool_name":"Bash","tool_use_id":"t1"}`, "pre", "tool_use_id:t1", false},
		{`"PostToolUse","tool_name":"Bash","tool_use_id":"t1"}`, "post", "tool_use_id:t1", false},
		{`"PostToolUseFailure","tool_name":"Bash","tool_use_id":"t1"}`, "post", "tool_use_id:t1", false},
		{`"PreToolUse","tool_name":"Bash"}`, "", "", false},
		{`"MessageDisplay","message_id":"m","index":2}`, "MessageDisplay", "message:m:2", false},
		{`"MessageDisplay","message_id":"m"}`, "", "", false},
		{`"SubagentStart","agent_id":"a1"}`, "SubagentStart", "agent_id:a1", true},
		{`"SubagentStop","agent_id":"a1"}`, "SubagentStop", "agent_id:a1", true},
		{`"SessionStart","source":"startup"}`, "SessionStart", "session_start:startup", false},
		{`"SessionStart","source":"resume"}`, "", "", false},
		{`"SessionStart","source":"fork"}`, "", "", false},
		{`"UserPromptSubmit","prompt":"x"}`, "", "", false},
		{`"SessionEnd","reason":"logout"}`, "", "", false},
		{`"Stop"}`, "", "", true},
		{`"PreCompact"}`, "", "", true},
	}
	for _, tc := range cases {
		_, rec := mustPayload(t, base+tc.payload)
		occ, ok := ProviderOccurrence(rec)
		if ok != (tc.identity != "") || occ.Phase != tc.phase || occ.Identity != tc.identity {
			t.Errorf("%s: %+v %v", tc.payload, occ, ok)
		}
		if Informational(rec.Kind) != tc.info {
			t.Errorf("%s: informational %v", tc.payload, !tc.info)
		}
	}
}

func TestPhaseFingerprint(t *testing.T) {
	fp := func(s string) string {
		p, rec := mustPayload(t, s)
		return PhaseFingerprint(p, rec)
	}
	a := fp(`{"session_id":"s","cwd":"/r","hook_event_name":"PostToolUse","tool_name":"Bash","tool_use_id":"t","tool_input":{"a":1,"b":[1.50,"x"]},"tool_response":{"out":"y"}}`)
	same := []string{
		// Key order, whitespace, cwd, transcript path and extra fields never count.
		`{"tool_response":{"out":"y"},"cwd":"/other","transcript_path":"/t","session_id":"s","hook_event_name":"PostToolUse","tool_name":"Bash","tool_use_id":"t","tool_input":{ "b":[1.50, "x"], "a":1 },"permission_mode":"default"}`,
	}
	for _, s := range same {
		if fp(s) != a {
			t.Errorf("fingerprint changed for %s", s)
		}
	}
	differ := []string{
		`{"session_id":"s","cwd":"/r","hook_event_name":"PostToolUse","tool_name":"Bash","tool_use_id":"t","tool_input":{"a":2,"b":[1.50,"x"]},"tool_response":{"out":"y"}}`,
		`{"session_id":"s","cwd":"/r","hook_event_name":"PostToolUse","tool_name":"Bash","tool_use_id":"t","tool_input":{"a":1,"b":[1.5,"x"]},"tool_response":{"out":"y"}}`,
		`{"session_id":"s","cwd":"/r","hook_event_name":"PostToolUse","tool_name":"Bash","tool_use_id":"t","tool_input":{"a":1,"b":[1.50,"x"]},"tool_response":{"out":"z"}}`,
		`{"session_id":"s","cwd":"/r","hook_event_name":"PostToolUseFailure","tool_name":"Bash","tool_use_id":"t","tool_input":{"a":1,"b":[1.50,"x"]},"error":"boom"}`,
		`{"session_id":"s","cwd":"/r","hook_event_name":"PostToolUse","tool_name":"Write","tool_use_id":"t","tool_input":{"a":1,"b":[1.50,"x"]},"tool_response":{"out":"y"}}`,
	}
	for _, s := range differ {
		if fp(s) == a {
			t.Errorf("fingerprint unchanged for %s", s)
		}
	}
	if len(a) != 64 {
		t.Fatal("fingerprint is not 64 hex")
	}
}

func TestLedgerClaimsAndSequences(t *testing.T) {
	store := StateDir{Dir: filepath.Join(t.TempDir(), "cfg")}
	spoolDir := "/abs/spool"
	open := func() *Ledger {
		t.Helper()
		l, err := store.OpenLedger(spoolDir)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.BindStream("obs_test"); err != nil {
			t.Fatal(err)
		}
		return l
	}
	tA := Target{WorkID: "wrk_a", Generation: 1, Session: "default"}
	tB := Target{WorkID: "wrk_a", Generation: 1, Session: "native-2"}
	l := open()
	for i, tc := range []struct {
		target Target
		want   uint64
	}{{tA, 1}, {tA, 2}, {tB, 1}, {tA, 3}} {
		r := Route{Target: tc.target, Association: AssocExact}
		if err := l.Reserve("n", &r); err != nil || r.SharedSeq != tc.want {
			t.Fatalf("reserve %d: %d %v", i, r.SharedSeq, err)
		}
	}
	// Unflushed reservations are dropped with the lock: nothing was
	// appended with them.
	l.Close()
	l = open()
	if l.LastSeq(tA) != 0 {
		t.Fatalf("unflushed reservation kept: %d", l.LastSeq(tA))
	}
	occ := Occurrence{Session: "n", Phase: "pre", Identity: "tool_use_id:t1"}
	fp1, fp2 := strings.Repeat("a", 64), strings.Repeat("b", 64)
	r, st, err := l.Claim(occ, fp1, Route{Target: tA, Association: AssocExact, Rule: "Bash=execution:partial:process_exit_code"})
	if err != nil || st != ClaimNew || r.SharedSeq != 1 {
		t.Fatalf("claim: %+v %v %v", r, st, err)
	}
	l.Close()
	l = open()
	defer l.Close()
	if l.LastSeq(tA) != 1 {
		t.Fatalf("claimed reservation not durable: %d", l.LastSeq(tA))
	}
	// Claimed but never appended: a retry resumes the original.
	if r, st, _ := l.Claim(occ, fp1, Route{Target: tB, Association: AssocExact}); st != ClaimResumed || r.Target != tA || r.SharedSeq != 1 {
		t.Fatalf("resume: %+v %v", r, st)
	}
	if err := l.MarkAppended(occ, 0); err != nil {
		t.Fatal(err)
	}
	// The original route wins even though the current target changed.
	if r, st, _ := l.Claim(occ, fp1, Route{Target: tB, Association: AssocExact}); st != ClaimDuplicate || r.Target != tA || r.SharedSeq != 1 || r.Rule == "" {
		t.Fatalf("duplicate: %+v %v", r, st)
	}
	if _, st, _ := l.Claim(occ, fp2, Route{Target: tA, Association: AssocExact}); st != ClaimConflict {
		t.Fatalf("changed fact: %v", st)
	}
	if l.LastSeq(tA) != 1 {
		t.Fatalf("a duplicate or conflict reserved a sequence: %d", l.LastSeq(tA))
	}
	// Copied routes record an outage run; unassociated ones their own stream.
	for i := 0; i < 3; i++ {
		r := Route{Target: tA, Association: AssocCopied, Deferred: true}
		if err := l.Reserve("n", &r); err != nil {
			t.Fatal(err)
		}
		u := Route{Association: AssocUnassociated, Deferred: true}
		if err := l.Reserve("m", &u); err != nil || u.SharedSeq != uint64(i+1) {
			t.Fatalf("unassociated %d: %+v %v", i, u, err)
		}
	}
	if o := l.Outages(); len(o) != 1 || o[0] != (Outage{Observed: "n", Target: tA, From: 2, To: 4, Stream: l.Stream()}) {
		t.Fatalf("outages %+v", o)
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	// Private: directories 0700, files 0600.
	dir := store.ledgerDir(spoolDir)
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		want := os.FileMode(0o600)
		if fi.IsDir() {
			want = 0o700
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s mode %v, want %v", p, fi.Mode().Perm(), want)
		}
		return nil
	})
	// A malformed ledger is refused, never half-read.
	os.WriteFile(filepath.Join(dir, ledgerFile), []byte(`{"version":1,"x":`), 0o600)
	l.Close()
	if _, err := store.OpenLedger(spoolDir); err == nil || !strings.Contains(err.Error(), "unreadable") {
		t.Fatalf("malformed ledger: %v", err)
	}
}

func TestListDeferredLegacy(t *testing.T) {
	f := newFixture(t)
	f.configure(t, event.ModeMetadataOnly)
	sp, err := spool.Open(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	// A deferred record written before shared sequences.
	if _, err := sp.Append(&event.Record{Agent: "claude-code", SessionID: "old", Kind: event.PromptSubmit, HookEvent: "UserPromptSubmit", Deferred: true, ObservedAt: time.Unix(5, 0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Append(&event.Record{Agent: "claude-code", SessionID: "new", Kind: event.TurnEnd, HookEvent: "Stop", Deferred: true, Sequenced: true,
		Association: AssocCopied, SharedSeq: 7, WorkID: "wrk_x", Generation: 2, CanonicalSession: "default"}); err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Append(&event.Record{Agent: "claude-code", SessionID: "new", Kind: event.TurnEnd, HookEvent: "Stop", Sequenced: true, SharedSeq: 8, WorkID: "wrk_x", Generation: 2, CanonicalSession: "default"}); err != nil {
		t.Fatal(err)
	}
	rep, err := ListDeferred(f.spool, 10)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Total != 2 || rep.Facts[0].Association != "legacy" || rep.Facts[0].Sequence != nil || rep.Facts[0].Target != nil {
		t.Fatalf("legacy: %+v", rep.Facts)
	}
	if g := rep.Facts[1]; g.Association != AssocCopied || g.Sequence == nil || *g.Sequence != 7 || g.Target == nil || *g.Target != (Target{WorkID: "wrk_x", Generation: 2, Session: "default"}) {
		t.Fatalf("copied: %+v", g)
	}
	b, _ := json.Marshal(rep.Facts[0])
	if !strings.Contains(string(b), `"sequence":null`) || !strings.Contains(string(b), `"target":null`) {
		t.Fatalf("legacy json %s", b)
	}
}

// TestLedgerAfterReboot: in the same boot the un-fsynced fast copy is
// exact; after a reboot (another boot id) or with the fast copy lost, every
// stream resumes above its durable ceiling, so a number handed out before
// the crash is never handed out again.
func TestLedgerAfterReboot(t *testing.T) {
	if bootID() == "" {
		t.Skip("no kernel boot id here")
	}
	store := StateDir{Dir: filepath.Join(t.TempDir(), "cfg")}
	tA := Target{WorkID: "wrk_a", Generation: 1, Session: "default"}
	reserve := func() uint64 {
		t.Helper()
		l, err := store.OpenLedger("/s")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if _, err := l.BindStream("obs_test"); err != nil {
			t.Fatal(err)
		}
		r := Route{Target: tA, Association: AssocExact}
		u := Route{Association: AssocUnassociated}
		if err := l.Reserve("n", &r); err != nil {
			t.Fatal(err)
		}
		if err := l.Reserve("m", &u); err != nil {
			t.Fatal(err)
		}
		if err := l.Flush(); err != nil {
			t.Fatal(err)
		}
		if u.SharedSeq != r.SharedSeq {
			t.Fatalf("unassociated %d, target %d", u.SharedSeq, r.SharedSeq)
		}
		return r.SharedSeq
	}
	for want := uint64(1); want <= 3; want++ {
		if got := reserve(); got != want {
			t.Fatalf("reserve %d, want %d", got, want)
		}
	}
	fast := filepath.Join(store.ledgerDir("/s"), ledgerFastFile)
	b, _ := os.ReadFile(fast)
	os.WriteFile(fast, []byte(strings.Replace(string(b), bootID(), "another-boot", 1)), 0o600)
	if got := reserve(); got != seqBlock+1 {
		t.Fatalf("after a reboot: %d, want %d", got, seqBlock+1)
	}
	if got := reserve(); got != seqBlock+2 {
		t.Fatalf("same boot again: %d", got)
	}
	os.Remove(fast)
	if got := reserve(); got != 2*seqBlock+1 {
		t.Fatalf("fast copy lost: %d, want %d", got, 2*seqBlock+1)
	}
}
