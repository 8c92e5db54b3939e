//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/test/e2e/scriptedapi"
)

// TestTranscriptUsageDelivered: with --claude-history-root at the directory
// where the real CLI writes its transcripts (HOME/.claude/projects, one
// project directory per checkout), the usage the scripted API returned for
// every conversation request reaches the Work's change record once, and a
// session-cumulative record is kept apart from the sums.
func TestTranscriptUsageDelivered(t *testing.T) {
	c := newCheckout(t)
	history := filepath.Join(c.home, ".claude", "projects")
	if err := os.MkdirAll(history, 0o700); err != nil {
		t.Fatal(err)
	}
	c.agentscm("client", "setup", "--root", c.root, "--local")
	c.agentscm("change-capture", "configure", "--root", c.root, "--spool", c.spool, "--capture-mode", "local-conversation",
		"--claude-history-root", history)
	work := c.startWork("e2e transcript usage")
	srv, err := scriptedapi.Start(firstTurn(c.root), resumeTurn())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	u := scriptedapi.Usage{InputTokens: 1234, OutputTokens: 56, CacheCreationInputTokens: 7, CacheReadInputTokens: 89}
	srv.SetUsage(u)
	res := c.runClaude(srv, "-p", "Please run SCENARIO-FIRST now.")
	c.runClaude(srv, "-p", "--resume", res.SessionID, "Continue with SCENARIO-RESUME.")

	main := 0
	for _, r := range srv.Requests() {
		if r.Main {
			main++
		}
	}
	// The transcript the CLI wrote is where the reader looked.
	matches, _ := filepath.Glob(filepath.Join(history, "*", res.SessionID+".jsonl"))
	if len(matches) != 1 {
		t.Fatalf("transcripts %v", matches)
	}
	rec := c.record(work)
	got := rec.Usage
	n := int64(main)
	if got.Records != n || got.InputTokens != n*1234 || got.OutputTokens != n*56 || got.CacheCreationInputTokens != n*7 || got.CacheReadInputTokens != n*89 || len(got.Unknown) != 0 {
		t.Fatalf("usage on the Hub %+v, want %d records of %+v", got, main, u)
	}
	// The first run's final cost record is read on resume: the host's own
	// session total, never added to the request records.
	for _, sc := range got.SessionCumulative {
		if sc.Scope != "session_cumulative" || sc.InputTokens == nil {
			t.Fatalf("cumulative %+v", sc)
		}
	}
	t.Logf("%d conversation requests; %d session-cumulative records kept apart; coverage %+v", main, len(got.SessionCumulative), rec.Coverage)
	// Assistant text is kept locally (local-conversation) and the Hub holds
	// only its identity; no transcript text reaches the Hub.
	b, _ := json.Marshal(rec)
	if strings.Contains(string(b), "First turn finished.") {
		t.Fatal("assistant text reached the Hub")
	}
	var usage, texts int
	for _, r := range c.inspect().Sessions[0].Events {
		switch {
		case r.Kind == event.KindUsage:
			usage++
		case r.Kind == event.MessageDisplay && r.HookEvent == "transcript":
			texts++
			if r.BodyRef == nil {
				t.Fatalf("assistant text without a retained body: %+v", r)
			}
		}
	}
	if usage < main || texts == 0 {
		t.Fatalf("spool: %d usage records for %d requests, %d assistant texts", usage, main, texts)
	}
	// The setup the real CLI's hooks exposed (permission_mode, effort) is
	// shared with what it did not expose; never as a complete setup.
	if len(rec.Setups) == 0 {
		t.Fatal("no setup on the Hub")
	}
	for _, st := range rec.Setups {
		if st.PermissionMode == "" || !strings.HasPrefix(st.Artifact, "sha256:") || !slices.Contains(st.Unobserved, "system_prompt") {
			t.Fatalf("setup %+v", st)
		}
	}
	t.Logf("setups: %+v", rec.Setups)
	// The transcript reader added no gap of its own.
	for _, g := range rec.Gaps {
		if strings.HasPrefix(g.Reason, "transcript_") {
			t.Fatalf("gap %+v", g)
		}
	}
}
