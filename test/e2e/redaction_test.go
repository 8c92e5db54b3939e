//go:build e2e

package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/test/e2e/scriptedapi"
)

// TestSharedBodiesRedactedE2E: with the real Claude Code CLI and a served
// Hub in shared-conversation mode, the prompt and the Bash tool input that
// hold a curl -u password and a mysql -pVALUE are kept in the spool only
// redacted, with the one redaction function's markers; every altered body
// is followed by a redacted gap naming it; the Hub's change record lists
// those gaps and says so in its coverage; the secret is nowhere in the
// spool or the Hub's data.
func TestSharedBodiesRedactedE2E(t *testing.T) {
	const secret = "E2e-S3cr3t-41x"
	c := newCheckout(t)
	url, tok, stop := c.serveHub()
	defer stop()
	c.agentscm("client", "setup", "--root", c.root, "--hub", url, "--repository", "proj", "--token-file", tok)
	c.agentscm("change-capture", "configure", "--root", c.root, "--spool", c.spool, "--capture-mode", event.ModeSharedConversation)
	work := c.startWork("redaction e2e")
	api, err := scriptedapi.Start(scriptedapi.Turn{Marker: "SCENARIO-REDACT", Steps: [][]scriptedapi.ToolCall{
		{bash(": curl -u bob:" + secret + " https://api.example; : mysql -p" + secret + " app")},
	}, FinalText: "ok"})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	c.runClaude(api, "-p", "Please run SCENARIO-REDACT now, then curl -u bob:"+secret+" https://api.example")

	var bodies []event.Record
	gaps := map[uint64]event.Record{}
	for _, s := range c.inspect().Sessions {
		for _, r := range s.Events {
			if r.Body != nil && r.Body.Redactions > 0 {
				bodies = append(bodies, r)
			}
			if r.Kind == event.KindGap && r.Gap != nil && r.Gap.Kind == event.GapRedacted {
				gaps[r.Gap.AffectedSeq] = r
			}
		}
	}
	var prompt, input bool
	for _, r := range bodies {
		b, _ := json.Marshal(r.Body)
		if _, ok := gaps[r.Seq]; !ok {
			t.Errorf("redacted body of record %d (%s) has no redacted gap", r.Seq, r.HookEvent)
		}
		prompt = prompt || strings.Contains(r.Body.Prompt, "curl -u bob:[REDACTED:flag_value] https://api.example")
		input = input || strings.Contains(string(r.Body.ToolInput), `curl -u bob:[REDACTED:flag_value] https://api.example; : mysql -p[REDACTED:flag_value] app`)
		if strings.Contains(string(b), secret) {
			t.Errorf("record %d kept the secret: %s", r.Seq, b)
		}
	}
	if !prompt || !input {
		t.Fatalf("redacted prompt %v, redacted Bash input %v; bodies %+v", prompt, input, bodies)
	}
	rec := c.record(work)
	n := 0
	for _, g := range rec.Gaps {
		if g.Kind == event.GapRedacted {
			n++
		}
	}
	if n != len(gaps) || n < 2 || !strings.Contains(strings.Join(rec.Coverage.Reasons, "; "), "redacted gaps") {
		t.Fatalf("Hub: %d redacted gaps (spool %d), coverage %+v", n, len(gaps), rec.Coverage)
	}
	stop()
	assertNoSecrets(t, c.spool, []string{secret})
	for name, b := range hubBytes(t, filepath.Join(c.dir, "hubdata"), nil) { // every byte the Hub kept, on either backend
		if strings.Contains(string(b), secret) {
			t.Fatalf("the secret reached the Hub: %s", name)
		}
	}
}
