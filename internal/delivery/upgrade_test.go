package delivery

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/agent"
	"github.com/agentscm/agentscm/internal/agent/claude"
	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/spool"
)

// writeV1Ledger writes the spool's capture ledger as a version 1 client
// (before streams) left it: target T's stream reserved up to last, an
// outage recorded over from..to, and the claim of occurrence payload
// durably made under SharedSeq claimSeq but never appended (a crash
// between the claim and the append).
func writeV1Ledger(t *testing.T, f *fixture, tg capture.Target, last, from, to, claimSeq uint64, payload string) {
	t.Helper()
	sum := sha256.Sum256([]byte(f.spool))
	dir := filepath.Join(f.cfg, "capture-ledger", hex.EncodeToString(sum[:8]))
	st := map[string]any{
		"version": 1, "tick": 1, "gen": 1, "claims": 1,
		"targets":  []map[string]any{{"work_id": tg.WorkID, "generation": tg.Generation, "session": tg.Session, "last": last, "ceiling": last}},
		"sessions": map[string]any{"native-1": map[string]any{"target": tg, "attributed": true, "seen": 1}},
		"outages":  []map[string]any{{"observed": "native-1", "target": tg, "from": from, "to": to}},
	}
	b, _ := json.Marshal(st)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ledger.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := agent.DecodePayload([]byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := claude.Map(p, event.ModeMetadataOnly, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	occ, ok := capture.ProviderOccurrence(rec)
	if !ok {
		t.Fatal("no provider occurrence")
	}
	id, _ := json.Marshal([]string{"agentscm-claim-v1", occ.Session, occ.Phase, occ.Identity})
	isum, ssum := sha256.Sum256(id), sha256.Sum256([]byte(occ.Session))
	cp := filepath.Join(dir, "claims", hex.EncodeToString(ssum[:8]), hex.EncodeToString(isum[:]))
	claim, _ := json.Marshal(map[string]any{"version": 1, "occurrence": occ, "fingerprint": capture.PhaseFingerprint(p, rec),
		"route": map[string]any{"target": tg, "association": capture.AssocExact, "shared_seq": claimSeq}})
	if err := os.MkdirAll(filepath.Dir(cp), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cp, claim, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestUpgradeKeepsLegacyNumbers: a spool written before streams (records
// in the legacy stream "", a version 1 ledger) is upgraded mid-session.
// What the old ledger reserved keeps its old number in the stream that
// number belongs to: a claim made before the upgrade and appended after it
// goes out as legacy seq 5 (not seq 5 of the new stream, where it took a
// number the new stream reaches later: sequence_taken), the old outage's
// gap names 3..4 of the legacy stream, and a refused legacy record gets
// its hub_refused gap in the legacy stream. New events start the new
// stream at 1. Nothing stays pending unnamed; every hole is a named gap.
func TestUpgradeKeepsLegacyNumbers(t *testing.T) {
	f := newFixture(t)
	work := f.startWork(t)
	ctx := context.Background()
	conn, err := client.Open(ctx, f.conn, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	at, err := conn.Resolve(ctx, api.ResolveRequest{WorktreeID: f.conn.WorktreeID, NativeSessionID: "native-1"})
	if err != nil {
		t.Fatal(err)
	}
	tg := capture.Target{WorkID: at.WorkID, Generation: at.Generation, Session: at.Session}
	// What the old client appended: legacy seq 1, 2 and 6 (3..4 were
	// deferred during an outage, 5 is the unappended claim).
	sp, err := spool.Open(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		seq  uint64
		kind event.Kind
		hook string
	}{{1, event.SessionStart, "SessionStart"}, {2, event.PromptSubmit, "UserPromptSubmit"}, {6, event.TurnEnd, "Stop"}} {
		rec := &event.Record{Agent: "claude-code", SessionID: "native-1", Kind: r.kind, HookEvent: r.hook, Source: map[bool]string{true: "startup"}[r.seq == 1],
			ObservedAt: time.Now(), CaptureMode: event.ModeMetadataOnly, WorkID: tg.WorkID, Generation: tg.Generation, CanonicalSession: tg.Session,
			Association: capture.AssocExact, Sequenced: true, SharedSeq: r.seq}
		if _, err := sp.Append(rec); err != nil {
			t.Fatal(err)
		}
	}
	// Another envelope took legacy seq 6 first: the old record is refused.
	if _, err := conn.Deliver(ctx, &api.Envelope{Identity: strings.Repeat("ef", 32), Type: api.TypeEvents, WorkID: tg.WorkID, Generation: tg.Generation,
		Session: tg.Session, Events: []api.Event{{Seq: 6, Kind: "turn_end"}}}); err != nil {
		t.Fatal(err)
	}
	pre := f.payload("PreToolUse", `,"tool_name":"Read","tool_use_id":"t5","tool_input":{"file_path":"/x"}`)
	writeV1Ledger(t, f, tg, 6, 3, 4, 5, pre)

	// The upgraded hook retries the claimed occurrence, then the session
	// goes on.
	if r := f.hook(t, pre); r.Claim != capture.ClaimResumed.String() {
		t.Fatalf("retried claim: %+v", r)
	}
	for _, p := range []string{
		f.payload("PostToolUse", `,"tool_name":"Read","tool_use_id":"t5","tool_input":{"file_path":"/x"},"tool_response":{}`),
		f.payload("Stop", ""),
		f.payload("Stop", ""),
	} {
		f.hook(t, p)
	}
	rep, err := f.store.Refusals(f.spool)
	if err != nil || rep.Total != 1 || rep.Refusals[0].Reason != "sequence_taken" || !rep.Refusals[0].Gap {
		t.Fatalf("refusals %+v %v", rep, err)
	}
	ir, err := spool.Inspect(f.spool, 100)
	if err != nil {
		t.Fatal(err)
	}
	// Only the refused legacy record stays unacknowledged.
	if ir.Pending.Total != 0 || ir.Deferred.Total != 1 || ir.Deferred.Items[0].Seq != 3 {
		t.Fatalf("pending %+v, attempted %+v", ir.Pending, ir.Deferred)
	}
	rec := f.record(t, work)
	if len(rec.Sessions) != 1 {
		t.Fatalf("sessions %+v", rec.Sessions)
	}
	s := rec.Sessions[0]
	if len(s.Streams) != 2 || s.Streams[0].Stream != "" || s.Streams[1].Stream == "" {
		t.Fatalf("streams %+v", s.Streams)
	}
	legacy, cur := s.Streams[0], s.Streams[1]
	// Legacy: 1, 2, 5 and the foreign 6; 3..4 missing (the old outage).
	if legacy.Events != 4 || legacy.LastSeq != 6 || legacy.MissingSeqs != 2 || cur.FirstSeq != 1 || cur.MissingSeqs != 0 {
		t.Fatalf("legacy %+v, new %+v", legacy, cur)
	}
	var outage, refused, boundary int
	for _, g := range rec.Gaps {
		switch {
		case g.Derived && g.Reason == api.GapReasonStreamBoundary && g.Stream == cur.Stream && g.PreviousStream == "":
			boundary++
		case g.Reason == "target_unavailable" && g.Stream == "" && g.FromSeq == 3 && g.ToSeq == 4:
			outage++
		case g.Reason == "hub_refused:sequence_taken" && g.Stream == "" && g.FromSeq == 6 && g.ToSeq == 6:
			refused++
		case g.Kind == "identity_uncertain":
		default:
			t.Fatalf("unexpected gap %+v", g)
		}
	}
	if outage != 1 || refused != 1 || boundary != 1 {
		t.Fatalf("outage %d, refused %d, boundary %d: %+v", outage, refused, boundary, rec.Gaps)
	}
	var five bool
	for _, e := range rec.Events {
		if e.Stream == "" && e.Seq == 5 && e.Kind == "tool_start" {
			five = true
		}
	}
	if !five {
		t.Fatalf("the resumed claim is not legacy seq 5: %+v", rec.Events)
	}
}
