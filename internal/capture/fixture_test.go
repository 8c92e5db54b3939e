package capture

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/connections"
	"github.com/agentscm/agentscm/internal/event"
)

// The fixture the capture tests share with internal/binding's (a checkout
// connected to a Hub repository through a real connections file).

type fixture struct {
	store StateDir
	conns conns
	root  string
	spool string
	exe   string
}

// conns reads the real client connections file of a config directory.
type conns struct{ dir string }

func (c conns) Lock() (func() error, error) {
	l, err := connections.Lock(c.dir)
	if err != nil {
		return nil, err
	}
	return l.Unlock, nil
}

func (c conns) Current(root string) (binding.Lineage, error) {
	conn, err := connections.Lookup(c.dir, root)
	if errors.Is(err, connections.ErrNoConnection) {
		return binding.Lineage{}, binding.ErrNoConnection
	}
	return binding.Lineage{Hub: conn.Hub, Repository: conn.Repository, WorktreeID: conn.WorktreeID}, err
}

// newFixture makes a checkout connected to a Hub repository through a real
// connections file.
func newFixture(t *testing.T) fixture {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config", "agentscm")
	f := fixture{store: StateDir{Dir: cfg}, conns: conns{cfg}, root: filepath.Join(dir, "repo"), spool: filepath.Join(dir, "spool"), exe: "/usr/local/bin/agentscm"}
	if err := os.MkdirAll(f.root, 0o755); err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.EvalSymlinks(f.root)
	if _, err := connections.Put(cfg, connections.Connection{Root: root, Kind: connections.KindHub, Hub: "http://127.0.0.1:1", Repository: "demo", WorktreeID: connections.NewWorktreeID()}); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f fixture) configure(t *testing.T, mode string) *binding.ConfigureResult {
	t.Helper()
	res, err := binding.Configure(context.Background(), f.store, f.conns, binding.ConfigureOptions{Root: f.root, Spool: f.spool, CaptureMode: mode, Executable: f.exe, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestSessionObservation(t *testing.T) {
	f := newFixture(t)
	f.configure(t, event.ModeLocalConversation)
	cfg, _ := f.store.Bindings().Load()
	b := cfg.Bindings[0]
	obs := func(session, ev, source string) Observation {
		t.Helper()
		o, err := f.store.Observe(&b, session, ev, source)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	// Only a startup SessionStart first establishes an original start.
	if o := obs("s1", "SessionStart", "startup"); o.StartedLate || o.Mode != event.ModeLocalConversation {
		t.Fatalf("startup: %+v", o)
	}
	if o := obs("s1", "SessionStart", "compact"); o.StartedLate {
		t.Fatalf("a compact restart of an observed session: %+v", o)
	}
	if o := obs("s2", "SessionStart", "resume"); !o.StartedLate || o.Reason != "session_start_resume" {
		t.Fatalf("resume first: %+v", o)
	}
	if o := obs("s2", "UserPromptSubmit", ""); o.StartedLate {
		t.Fatalf("the gap is recorded once: %+v", o)
	}
	if o := obs("s3", "PreToolUse", ""); !o.StartedLate || o.Reason != "first_event_PreToolUse" {
		t.Fatalf("no SessionStart first: %+v", o)
	}
	// Switched to sharing mid-session: s1 keeps its bodies local, a new
	// session shares; lowering applies at once.
	b.CaptureMode = event.ModeSharedConversation
	if o := obs("s1", "Stop", ""); o.Mode != event.ModeLocalConversation {
		t.Fatalf("running session switched to %q", o.Mode)
	}
	if o := obs("s4", "SessionStart", "startup"); o.Mode != event.ModeSharedConversation {
		t.Fatalf("next session: %q", o.Mode)
	}
	b.CaptureMode = event.ModeMetadataOnly
	if o := obs("s4", "Stop", ""); o.Mode != event.ModeMetadataOnly {
		t.Fatalf("lowered mode not applied: %q", o.Mode)
	}
	if o := obs("../x", "Stop", ""); o.Mode != event.ModeMetadataOnly || o.StartedLate {
		t.Fatalf("hostile session id: %+v", o)
	}
}
