package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/hub/api"
)

// The hook checks a session id with the Hub's own rule before it asks the
// Hub: the events of a session the Hub would refuse (a/b, ../../x) stay
// local as deferred facts under the named reason bad_session_id, which
// status and inspect explain; every one of them is passed by the delivery
// cursor (inspect lists none as pending), and a valid session's later
// events are still delivered.
func TestHookRefusesSessionIDsTheHubRefuses(t *testing.T) {
	base := t.TempDir()
	env := map[string]string{"HOME": filepath.Join(base, "home")}
	root := filepath.Join(base, "repo")
	os.MkdirAll(root, 0o755)
	if out, err := exec.Command("git", "-C", root, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	root, _ = filepath.EvalSymlinks(root)
	must := func(args ...string) string {
		t.Helper()
		r := runMain(t, env, "", args...)
		if r.code != 0 {
			t.Fatalf("%v: %d %s", args, r.code, r.stderr)
		}
		return r.stdout
	}
	var en struct {
		Spool string `json:"spool"`
	}
	must("client", "setup", "--root", root, "--local")
	if err := json.Unmarshal([]byte(must("change-capture", "enable", "--root", root, "--format", "json")), &en); err != nil || en.Spool == "" {
		t.Fatalf("enable: %v %+v", err, en)
	}
	must("work", "start", "--root", root, "--title", "t")
	hook := func(session, event string) {
		t.Helper()
		p := fmt.Sprintf(`{"session_id":%q,"cwd":%q,"hook_event_name":%q,"source":"startup","prompt":"hi"}`, session, root, event)
		if r := runMain(t, env, p, "change-capture", "hook-claude"); r.code != 0 || r.stdout != "" {
			t.Fatalf("hook %s %s: %d %q %q", session, event, r.code, r.stdout, r.stderr)
		}
	}
	bad := []string{"a/b", "../../x", `back\slash`}
	for _, s := range append([]string{"good-1"}, bad...) {
		hook(s, "SessionStart")
		hook(s, "UserPromptSubmit")
	}
	hook("good-1", "UserPromptSubmit") // after them: still delivered
	hook("a/b", "UserPromptSubmit")    // the spool ends in facts that stay local
	must("change-capture", "deliver", "--spool", en.Spool)

	var view capture.InspectView
	if err := json.Unmarshal([]byte(must("change-capture", "inspect", "--spool", en.Spool, "--format", "json")), &view); err != nil {
		t.Fatal(err)
	}
	if view.Pending.Total != 0 {
		t.Errorf("inspect lists %d envelopes as pending after the deliverer passed them: %+v", view.Pending.Total, view.Pending.Items)
	}
	badFacts := 0
	for _, it := range view.Deferred.Items {
		isBad := false
		for _, s := range bad {
			isBad = isBad || it.SessionID == s
		}
		if !isBad {
			t.Errorf("envelope %d of session %q is not acknowledged", it.Seq, it.SessionID)
			continue
		}
		badFacts++
	}
	if badFacts < 2*len(bad) {
		t.Errorf("%d deferred facts of the bad sessions, want at least %d", badFacts, 2*len(bad))
	}
	for _, o := range view.PendingOutcomes {
		if o.State == "pending" {
			t.Errorf("envelope %d still pending", o.Seq)
		}
		if o.DeferredReason != api.ReasonBadSessionID || !strings.Contains(o.DeferredDescription, "not one the Hub accepts") {
			t.Errorf("envelope %d: deferred reason %q (%q), want %s explained", o.Seq, o.DeferredReason, o.DeferredDescription, api.ReasonBadSessionID)
		}
	}
	text := must("change-capture", "inspect", "--spool", en.Spool)
	if !strings.Contains(text, "deferred fact, stays local: the agent's session id is not one the Hub accepts") || !strings.Contains(text, "pending: 0") {
		t.Errorf("inspect text:\n%s", text)
	}
	status := must("change-capture", "status", "--root", root)
	if !strings.Contains(status, "in 3 sessions: the agent's session id is not one the Hub accepts") || !strings.Contains(status, "[bad_session_id]") {
		t.Errorf("status:\n%s", status)
	}
}
