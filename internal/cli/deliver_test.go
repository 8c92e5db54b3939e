package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/delivery"
	"github.com/agentscm/agentscm/internal/spool"
)

// startsNothing is a Backgrounder whose deliverer never runs, so the
// hook's envelopes stay pending for `change-capture deliver`.
type startsNothing struct{ delivery.Opener }

func (startsNothing) StartDeliverer(*os.File, string) error { return nil }

func TestDeliverCommandDeliversPending(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "repo")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	root, _ = filepath.EvalSymlinks(root)
	vars := map[string]string{"XDG_CONFIG_HOME": filepath.Join(dir, "config")}
	var en struct {
		Spool string `json:"spool"`
	}
	r := runMain(t, vars, "", "change-capture", "enable", "--root", root, "--local", "--format", "json")
	if r.code != 0 || json.Unmarshal([]byte(r.stdout[strings.IndexByte(r.stdout, '{'):]), &en) != nil {
		t.Fatalf("enable: %+v", r)
	}
	if r = runMain(t, vars, "", "work", "start", "--root", root, "--title", "deliver"); r.code != 0 {
		t.Fatalf("work start: %+v", r)
	}
	store := capture.StateDir{Dir: filepath.Join(vars["XDG_CONFIG_HOME"], "agentscm")}
	pl := `{"session_id":"s1","cwd":"` + root + `","hook_event_name":"PreToolUse","tool_name":"Read","tool_use_id":"toolu_d1","tool_input":{"file_path":"/etc/hostname"}}`
	res, err := capture.HandleClaudeHook(context.Background(), store, startsNothing{delivery.Opener{ConfigDir: store.Dir}}, strings.NewReader(pl), time.Now())
	// The hook keeps the event durably (an intake file, or a sequence when
	// it took the locked path) and delivers nothing itself.
	if err != nil || (res.Seq == 0 && res.Intake == "") || res.Delivered != 0 {
		t.Fatalf("hook: %+v %v", res, err)
	}
	undelivered := func() int {
		rep, err := spool.Inspect(en.Spool, 1)
		if err != nil {
			t.Fatal(err)
		}
		return rep.Intake + rep.Pending.Total + rep.Deferred.Total
	}
	if n := undelivered(); n == 0 {
		t.Fatal("nothing pending before deliver")
	}
	r = runMain(t, vars, "", "change-capture", "deliver", "--spool", en.Spool, "--format", "json")
	var rep capture.DeliverReport
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rep) != nil || rep.Outcome != "idle" || rep.Delivered == 0 {
		t.Fatalf("deliver: %+v %+v", r, rep)
	}
	if n := undelivered(); n != 0 {
		t.Fatalf("%d undelivered after deliver", n)
	}
	if r = runMain(t, vars, "", "change-capture", "deliver"); r.code != 2 {
		t.Fatalf("deliver without --spool: %+v", r)
	}
}
