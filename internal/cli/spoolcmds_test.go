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

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

// runSpoolCmd dispatches args through a group holding spoolCommands, as the
// change-capture group does.
func runSpoolCmd(t *testing.T, args ...string) run {
	t.Helper()
	var out, errb bytes.Buffer
	env := &Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }, Now: time.Now}
	group := &Command{Name: "change-capture", Sub: spoolCommands()}
	code := dispatch(context.Background(), env, group, []string{"agentscm"}, args)
	return run{code, out.String(), errb.String()}
}

func TestSpoolCommands(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "spool")
	sp, err := spool.Init(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []event.Kind{event.SessionStart, event.PromptSubmit, event.TurnEnd} {
		if _, err := sp.Append(&event.Record{SessionID: "s1", Kind: k, ObservedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	pend, _ := sp.Pending(ctx, 10)
	if err := sp.Ack(ctx, 1, pend[0].Digest); err != nil {
		t.Fatal(err)
	}
	sp.RecordAttempt(ctx, spool.Attempt{Seq: 2, Digest: pend[1].Digest, Outcome: "failed", At: time.Now()})
	os.WriteFile(filepath.Join(dir, "outbox", "debris"), []byte("x"), 0o600)

	// inspect is read-only: the debris is reported, not moved.
	r := runSpoolCmd(t, "inspect", "--spool", dir, "--format", "json", "--limit", "1")
	var rep spool.Report
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rep) != nil {
		t.Fatalf("inspect: %+v", r)
	}
	if !rep.Committed || rep.Completeness != "unknown" || rep.ExecutionAuthority != "none" || rep.Deferred.Total != 1 ||
		rep.Pending.Total != 1 || rep.Attempts.Total != 1 || rep.Diagnostics.Total != 1 || rep.Acknowledged != 1 {
		t.Fatalf("report %s", r.stdout)
	}
	r = runSpoolCmd(t, "inspect", "--spool", dir)
	for _, want := range []string{"format v4 commit", "completeness: unknown", "pending: 1 (0 omitted)", "deferred: 1 (0 omitted)", "outbox/debris"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("inspect text lacks %q:\n%s", want, r.stdout)
		}
	}

	// compact runs recovery (quarantining the debris) and compacts seq 1.
	r = runSpoolCmd(t, "compact", "--spool", dir)
	if r.code != 0 || !strings.Contains(r.stdout, "1 digests") {
		t.Fatalf("compact: %+v", r)
	}
	r = runSpoolCmd(t, "quarantine", "--spool", dir, "--format", "json")
	var q struct{ Quarantine []spool.QuarantineEntry }
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &q) != nil || len(q.Quarantine) != 1 {
		t.Fatalf("quarantine: %+v", r)
	}
	name := q.Quarantine[0].Name
	if r = runSpoolCmd(t, "prune-quarantine", "--spool", dir, "no-such-name"); r.code != 1 || !strings.Contains(r.stderr, "nothing was deleted") {
		t.Fatalf("prune unknown: %+v", r)
	}
	if r = runSpoolCmd(t, "prune-quarantine", "--spool", dir, name); r.code != 0 || r.stdout != "deleted "+name+"\n" {
		t.Fatalf("prune: %+v", r)
	}
	if r = runSpoolCmd(t, "quarantine", "--spool", dir); !strings.Contains(r.stdout, "0 quarantined") {
		t.Fatalf("after prune: %+v", r)
	}
}

func TestSpoolCommandUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"inspect"}, "--spool is required"},
		{[]string{"inspect", "--spool", "/x", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"inspect", "--spool", "/x", "--format", "xml"}, "--format"},
		{[]string{"prune-quarantine", "--spool", "/x"}, "name at least one"},
		{[]string{"compact", "--spool", "/x", "extra"}, "unexpected argument"},
	} {
		r := runSpoolCmd(t, tc.args...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Fatalf("%v: %+v", tc.args, r)
		}
	}
	// A directory that is not a spool is refused by mutating commands, but
	// inspected.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "x"), nil, 0o600)
	if r := runSpoolCmd(t, "compact", "--spool", dir); r.code != 1 || !strings.Contains(r.stderr, "not an agentscm spool") {
		t.Fatalf("compact of non-spool: %+v", r)
	}
	if r := runSpoolCmd(t, "inspect", "--spool", dir); r.code != 0 || !strings.Contains(r.stdout, "no valid managed occurrence format v4 commit") {
		t.Fatalf("inspect of non-spool: %+v", r)
	}
}
