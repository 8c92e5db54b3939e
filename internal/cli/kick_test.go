package cli

import (
	"bytes"
	"context"
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
)

// noDeliverer is a hook's Hub opener that takes the deliver lock and
// starts no deliverer: the hook was killed before it started one.
type noDeliverer struct{ delivery.Opener }

func (noDeliverer) StartDeliverer(*os.File, string) error { return nil }

// TestReadingCommandsResumeDelivery: events wait in the spool's intake
// and no deliverer runs (the hook that should have started one was killed
// first). Each reading command (change-capture status, status, show)
// prints its output and then starts a real detached deliverer process
// (`agentscm change-capture deliver-spool`, here the test binary under
// that name), which delivers them. On main none of them did: the events
// waited for the next hook, perhaps the next day.
func TestReadingCommandsResumeDelivery(t *testing.T) {
	for _, args := range [][]string{
		{"change-capture", "status", "--root", "ROOT"},
		{"status", "--root", "ROOT"},
		{"change-capture", "show", "--root", "ROOT"},
	} {
		t.Run(strings.Join(args[:len(args)-2], " "), func(t *testing.T) {
			resumeCase(t, args)
		})
	}
}

func resumeCase(t *testing.T, args []string) {
	ctx := context.Background()
	tmp := t.TempDir()
	xdg := filepath.Join(tmp, "xdg")
	cfg := filepath.Join(xdg, "agentscm")
	root := filepath.Join(tmp, "repo")
	os.MkdirAll(root, 0o755)
	root, _ = filepath.EvalSymlinks(root)
	// The test binary answers as agentscm when started under that name
	// (TestMain), so the deliverer it starts is a real process.
	exe := filepath.Join(tmp, "bin", "agentscm")
	os.MkdirAll(filepath.Dir(exe), 0o755)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, exe); err != nil {
		t.Fatal(err)
	}
	store := capture.StateDir{Dir: cfg}
	conn, _, err := client.SetupLocal(ctx, cfg, root, "demo", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := binding.EnableCapture(ctx, store, delivery.Connections{ConfigDir: cfg}, binding.EnableOptions{Root: root, ConfigDir: cfg, Executable: exe, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	c, err := client.Open(ctx, conn, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.StartWork(ctx, api.StartWorkRequest{Title: "t", WorktreeID: conn.WorktreeID})
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{
		`"hook_event_name":"SessionStart","source":"startup"`,
		`"hook_event_name":"PreToolUse","tool_name":"Read","tool_use_id":"toolu_1","tool_input":{"file_path":"/etc/hostname"}`,
		`"hook_event_name":"Stop"`,
	} {
		pl := `{"session_id":"native-1","cwd":"` + root + `",` + p + `}`
		res, err := capture.HandleClaudeHook(ctx, store, noDeliverer{delivery.Opener{ConfigDir: cfg}}, strings.NewReader(pl), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if res.Delivered != 0 {
			t.Fatalf("the hook delivered: %+v", res)
		}
	}
	var out, errb bytes.Buffer
	env := &Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Now: time.Now, Executable: exe,
		Getenv: func(k string) string {
			switch k {
			case "XDG_CONFIG_HOME":
				return xdg
			case "HOME":
				return tmp
			}
			return ""
		}}
	for i := range args {
		if args[i] == "ROOT" {
			args[i] = root
		}
	}
	Main(ctx, env, args)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := store.WaitDeliverers(wctx); err != nil {
		t.Fatal(err)
	}
	c, err = client.Open(ctx, conn, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rec, err := c.Record(ctx, w.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Events) != 3 {
		t.Fatalf("%v: %d events on the Hub, want 3 (output %q, stderr %q)", args, len(rec.Events), out.String(), errb.String())
	}
}
