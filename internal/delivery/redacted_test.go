package delivery

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

// The secret every redaction call-site test plants, and what the one
// redaction function makes of it (internal/redact).
const (
	callSiteSecret   = "S3cr3tPw-9q"
	callSiteCommand  = "curl -u bob:" + callSiteSecret + " https://api.example"
	callSiteRedacted = "curl -u bob:[REDACTED:flag_value] https://api.example"
)

// A shared-conversation session: the hook payload bodies (prompt, tool
// input) and the transcript records the hook reads are redacted by the one
// function, each carries its count, each is followed in the spool by a
// redacted gap naming it, and the Hub's change record shows those gaps.
func TestSharedBodiesRedactedWithGap(t *testing.T) {
	f := newFixture(t)
	work := f.startWork(t)
	proj := f.withHistoryRoot(t, event.ModeSharedConversation)
	tr := filepath.Join(proj, "native-1.jsonl")
	appendFile(t, tr, `{"type":"user","sessionId":"native-1","message":{"role":"user","content":"hi"}}`+"\n")
	f.hook(t, f.payload("SessionStart", `,"source":"startup"`))
	prompt, _ := json.Marshal("run " + callSiteCommand + " please")
	f.hook(t, f.payload("UserPromptSubmit", `,"prompt":`+string(prompt)))
	input, _ := json.Marshal(map[string]string{"command": callSiteCommand})
	appendFile(t, tr, assistant("msg_1", `{"type":"text","text":"I will run `+callSiteCommand+`"}`, 10, 1))
	f.hook(t, f.payload("PreToolUse", `,"tool_name":"Bash","tool_use_id":"toolu_1","tool_input":`+string(input)))
	f.hook(t, f.payload("Stop", ""))

	sp, err := spool.Open(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := sp.Events()
	if err != nil {
		t.Fatal(err)
	}
	bodies := map[string]event.Record{} // by hook event
	gaps := map[uint64]event.Record{}   // redacted gaps by affected seq
	for _, r := range recs {
		if r.Body != nil {
			b, _ := json.Marshal(r.Body)
			if strings.Contains(string(b), callSiteSecret) {
				t.Fatalf("record %d kept the secret: %s", r.Seq, b)
			}
			if strings.Contains(string(b), "[REDACTED:flag_value]") {
				bodies[r.HookEvent] = r
			}
		}
		if r.Kind == event.KindGap && r.Gap.Kind == event.GapRedacted {
			gaps[r.Gap.AffectedSeq] = r
		}
	}
	for _, he := range []string{"UserPromptSubmit", "PreToolUse", "transcript"} {
		r, ok := bodies[he]
		if !ok {
			t.Fatalf("no redacted %s body in the spool: %+v", he, recs)
		}
		if r.Body.Redactions != 1 {
			t.Fatalf("%s body: %d redactions, want 1", he, r.Body.Redactions)
		}
		g, ok := gaps[r.Seq]
		if !ok || g.Seq <= r.Seq || g.Gap.Reason != "body_redacted" || g.WorkID != r.WorkID {
			t.Fatalf("%s record %d: redacted gap %+v", he, r.Seq, g)
		}
	}
	if b := bodies["UserPromptSubmit"].Body.Prompt; b != "run "+callSiteRedacted+" please" {
		t.Fatalf("prompt %q", b)
	}
	if b := string(bodies["PreToolUse"].Body.ToolInput); b != `{"command":"`+callSiteRedacted+`"}` {
		t.Fatalf("tool input %s", b)
	}
	if b := bodies["transcript"].Body.Message; b != "I will run "+callSiteRedacted {
		t.Fatalf("transcript text %q", b)
	}
	// The Hub's change record shows the bodies were altered.
	rec := f.record(t, work)
	n := 0
	for _, g := range rec.Gaps {
		if g.Kind == event.GapRedacted {
			n++
		}
	}
	if n != 3 || !strings.Contains(strings.Join(rec.Coverage.Reasons, "; "), "3 redacted gaps") {
		t.Fatalf("redacted gaps on the Hub: %d; coverage %+v; gaps %+v", n, rec.Coverage, rec.Gaps)
	}
}

// Local-conversation bodies stay on the machine unredacted (the seed's
// table) and gain no redacted gap.
func TestLocalBodiesNotRedacted(t *testing.T) {
	f := newFixture(t)
	f.startWork(t)
	f.withHistoryRoot(t, event.ModeLocalConversation)
	f.hook(t, f.payload("SessionStart", `,"source":"startup"`))
	prompt, _ := json.Marshal(callSiteCommand)
	f.hook(t, f.payload("UserPromptSubmit", `,"prompt":`+string(prompt)))
	sp, err := spool.Open(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := sp.Events()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range recs {
		if r.Body != nil && r.Body.Prompt == callSiteCommand && r.Body.Redactions == 0 {
			found = true
		}
		if r.Kind == event.KindGap && r.Gap.Kind == event.GapRedacted {
			t.Fatalf("redacted gap in local-conversation mode: %+v", r)
		}
	}
	if !found {
		t.Fatalf("local prompt not kept verbatim: %+v", recs)
	}
}
