package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/hookroute"
	"github.com/agentscm/agentscm/internal/spool"
)

// holdDeliverLock takes the spool's deliver lock the way a running
// deliverer holds it, so that a hook starts none, and returns its release.
func (f *burstFixture) holdDeliverLock(t *testing.T) func() {
	t.Helper()
	sum := sha256.Sum256([]byte(f.spool))
	dir := filepath.Join(f.vars["XDG_CONFIG_HOME"], "agentscm", "capture-ledger", hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	fh, err := os.OpenFile(filepath.Join(dir, "deliver.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(fh.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	return func() { fh.Close() }
}

// TestEveryAgentIsIntakeFirst: the Claude Code, Codex CLI and Gemini CLI
// capture hooks of the installed binary all take the intake-first path:
// with the spool lock free and a deliverer running (its lock held here),
// the hook leaves its event in the intake (no spool lock, no Hub, no
// delivery inside the agent's wait) and appends nothing itself; once the
// deliverer runs, it admits and delivers the event. Every route stays
// silent and exits 0.
func TestEveryAgentIsIntakeFirst(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		payload func(f *burstFixture) string
		kind    event.Kind
	}{
		{[]string{"change-capture", "hook-claude"}, func(f *burstFixture) string {
			return `{"session_id":"claude-1","cwd":"` + f.root + `","hook_event_name":"UserPromptSubmit","prompt":"hello"}`
		}, event.PromptSubmit},
		{[]string{"change-capture", "hook-codex"}, func(f *burstFixture) string {
			return `{"session_id":"codex-1","turn_id":"t1","transcript_path":null,"cwd":"` + f.root + `","hook_event_name":"UserPromptSubmit","model":"gpt-5","prompt":"hello"}`
		}, event.PromptSubmit},
		{[]string{"change-capture", "hook-gemini"}, func(f *burstFixture) string {
			return `{"session_id":"gemini-1","transcript_path":"","cwd":"` + f.root + `","hook_event_name":"BeforeAgent","timestamp":"2026-12-02T10:00:00Z","prompt":"hello"}`
		}, event.PromptSubmit},
	} {
		t.Run(tc.args[1], func(t *testing.T) {
			f := newBurstFixture(t)
			f.detached = true
			t.Cleanup(func() { f.waitDeliverer(t) })
			release := f.holdDeliverLock(t)
			t.Cleanup(release) // before waitDeliverer (cleanups run last first)
			cmd := f.hookCmd(tc.payload(f))
			cmd.Args = append([]string{cmd.Args[0]}, tc.args...)
			out, err := cmd.CombinedOutput()
			if err != nil || len(out) != 0 {
				t.Fatalf("hook: %v %q", err, out)
			}
			rep, err := spool.Inspect(f.spool, 1)
			if err != nil {
				t.Fatal(err)
			}
			sp, err := spool.OpenReadOnly(f.spool)
			if err != nil {
				t.Fatal(err)
			}
			evs, err := sp.Events()
			if err != nil {
				t.Fatal(err)
			}
			if rep.Intake != 1 || len(evs) != 0 {
				t.Fatalf("after the hook: %d intake files, %d records appended; want the event in the intake only", rep.Intake, len(evs))
			}
			release()
			f.waitDelivered(t) // one more hook starts the deliverer
			rec := f.hubRecord(t)
			n := 0
			for _, e := range rec.Events {
				if e.Kind == string(tc.kind) {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("the Hub holds %d %s events: %+v", n, tc.kind, rec.Events)
			}
		})
	}
}

// TestEveryRouteRuns: agentscm-hook runs every route of the route table
// (every command line an installed entry names): a payload outside any
// binding or changelog exits 0 and says nothing, where a command it did
// not route would print the usage and exit 2.
func TestEveryRouteRuns(t *testing.T) {
	cfg := t.TempDir()
	getenv := func(k string) string {
		if k == "XDG_CONFIG_HOME" || k == "HOME" {
			return cfg
		}
		return ""
	}
	for _, r := range hookroute.Table() {
		var out, errb bytes.Buffer
		in := `{"session_id":"s1","cwd":"/nowhere","hook_event_name":"SessionStart","source":"startup"}`
		code := run(context.Background(), r.Args, strings.NewReader(in), &out, &errb, getenv, time.Now, "")
		if code != 0 || out.Len() != 0 || errb.Len() != 0 {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", r.Command(), code, out.String(), errb.String())
		}
	}
}
