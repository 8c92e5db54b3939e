package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/delivery"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/spool"
)

// TestInspectListsRefusals: a real embedded Hub refuses an envelope
// (sequence_taken: another envelope took its number); change-capture
// inspect lists the refusal (reason, seq, kind) and, per pending
// envelope, its last attempt's outcome, in text and JSON.
func TestInspectListsRefusals(t *testing.T) {
	ctx := context.Background()
	tmp := t.TempDir()
	xdg := filepath.Join(tmp, "xdg")
	cfg := filepath.Join(xdg, "agentscm")
	root := filepath.Join(tmp, "repo")
	os.MkdirAll(root, 0o755)
	root, _ = filepath.EvalSymlinks(root)
	store := capture.StateDir{Dir: cfg}
	conn, _, err := client.SetupLocal(ctx, cfg, root, "demo", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	res, err := binding.EnableCapture(ctx, store, delivery.Connections{ConfigDir: cfg}, binding.EnableOptions{Root: root, ConfigDir: cfg, Executable: "/usr/local/bin/agentscm", Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Open(ctx, conn, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, err := c.StartWork(ctx, api.StartWorkRequest{Title: "t", WorktreeID: conn.WorktreeID})
	if err != nil {
		t.Fatal(err)
	}
	hook := func(ev, extra string) *capture.HookResult {
		p := `{"session_id":"native-1","cwd":"` + root + `","hook_event_name":"` + ev + `"` + extra + `}`
		r, err := capture.HandleClaudeHook(ctx, store, delivery.Opener{ConfigDir: cfg}, strings.NewReader(p), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	hook("SessionStart", `,"source":"startup"`)
	sp, err := spool.Open(res.Spool)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := sp.Events()
	if err != nil {
		t.Fatal(err)
	}
	first := recs[0]
	if _, err := c.Deliver(ctx, &api.Envelope{Identity: strings.Repeat("cd", 32), Type: api.TypeEvents, WorkID: w.ID, Generation: first.Generation,
		Session: first.CanonicalSession, Stream: first.Stream, Events: []api.Event{{Seq: int64(first.SharedSeq) + 1, Kind: "turn_end"}}}); err != nil {
		t.Fatal(err)
	}
	if r := hook("Stop", ""); r.Refused != 1 {
		t.Fatalf("%+v", r)
	}
	// The next hook delivers the hub_refused gap and passes over the
	// refused envelope until its retry time (docs/spool.md, "Refused
	// envelopes"): refused once, listed once.
	if r := hook("Stop", ""); r.Refused != 0 || r.Delivered != 2 {
		t.Fatalf("%+v", r)
	}

	var out, errb bytes.Buffer
	env := &Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Now: time.Now,
		Getenv: func(k string) string {
			if k == "XDG_CONFIG_HOME" {
				return xdg
			}
			return ""
		}}
	group := &Command{Name: "change-capture", Sub: spoolCommands()}
	if code := dispatch(ctx, env, group, []string{"agentscm"}, []string{"inspect", "--spool", res.Spool, "--format", "json"}); code != 0 {
		t.Fatalf("inspect: %d %s", code, errb.String())
	}
	var v capture.InspectView
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	if v.Report == nil || v.Deferred.Total != 1 || v.LedgerError != "" || v.Refused.Total != 1 || len(v.PendingOutcomes) != 1 {
		t.Fatalf("inspect json %s", out.String())
	}
	f, o := v.Refused.Refusals[0], v.PendingOutcomes[0]
	if f.Reason != "sequence_taken" || f.Kind != "turn_end" || !f.Gap || o.Seq != f.SpoolSeq || o.LastOutcome != "refused" || o.Refused != "sequence_taken" || o.Attempts != 1 {
		t.Fatalf("refusal %+v, outcome %+v", f, o)
	}
	out.Reset()
	if code := dispatch(ctx, env, group, []string{"agentscm"}, []string{"inspect", "--spool", res.Spool}); code != 0 {
		t.Fatalf("inspect text: %d %s", code, errb.String())
	}
	for _, want := range []string{"refused by the Hub: 1 (0 omitted", "turn_end", "sequence_taken (hub_refused gap appended)",
		"last attempt per pending envelope: 1", "attempted", "refused=sequence_taken  refused at "} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("inspect text lacks %q:\n%s", want, out.String())
		}
	}
	// Without a config directory inspect still works and says the
	// ledger was not read.
	out.Reset()
	env.Getenv = func(string) string { return "" }
	if code := dispatch(ctx, env, group, []string{"agentscm"}, []string{"inspect", "--spool", res.Spool}); code != 0 || !strings.Contains(out.String(), "refused by the Hub: unknown (capture ledger not read") {
		t.Fatalf("inspect without config: %d\n%s", code, out.String())
	}
}
