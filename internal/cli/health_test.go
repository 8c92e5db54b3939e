package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/action"
	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/delivery"
	"github.com/agentscm/agentscm/internal/spool"
)

// healthFixture is a checkout with local capture enabled, a current Work
// and n envelopes the real hook path appended but did not deliver (its
// background deliverer never starts).
type healthFixture struct {
	vars  map[string]string
	root  string
	spool string
	store capture.StateDir
}

func newHealthFixture(t *testing.T, n int) *healthFixture {
	t.Helper()
	dir := t.TempDir()
	root := filepath.Join(dir, "repo")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	root, _ = filepath.EvalSymlinks(root)
	f := &healthFixture{vars: map[string]string{"XDG_CONFIG_HOME": filepath.Join(dir, "config")}, root: root}
	var en struct {
		Spool string `json:"spool"`
	}
	r := runMain(t, f.vars, "", "change-capture", "enable", "--root", root, "--local", "--format", "json")
	if r.code != 0 || json.Unmarshal([]byte(r.stdout[strings.IndexByte(r.stdout, '{'):]), &en) != nil {
		t.Fatalf("enable: %+v", r)
	}
	f.spool = en.Spool
	if r = runMain(t, f.vars, "", "work", "start", "--root", root, "--title", "health"); r.code != 0 {
		t.Fatalf("work start: %+v", r)
	}
	f.store = capture.StateDir{Dir: filepath.Join(f.vars["XDG_CONFIG_HOME"], "agentscm")}
	f.hooks(t, "s1", n)
	return f
}

// hooks runs n UserPromptSubmit hooks of session through the real hook
// path, leaving their envelopes undelivered.
func (f *healthFixture) hooks(t *testing.T, session string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		pl := fmt.Sprintf(`{"session_id":%q,"cwd":%q,"hook_event_name":"UserPromptSubmit","prompt":"p%d"}`, session, f.root, i)
		res, err := capture.HandleClaudeHook(context.Background(), f.store, startsNothing{delivery.Opener{ConfigDir: f.store.Dir}}, strings.NewReader(pl), time.Now())
		if err != nil || (res.Seq == 0 && res.Intake == "") || res.Delivered != 0 {
			t.Fatalf("hook: %+v %v", res, err)
		}
	}
}

// hubDown is the real Hub connection whose deliveries fail as during an
// outage: resolution works, every Deliver fails transiently.
type hubDown struct{ delivery.Opener }

type downHub struct{ capture.Hub }

func (o hubDown) Open(ctx context.Context, root string) (capture.Hub, error) {
	h, err := o.Opener.Open(ctx, root)
	if err != nil {
		return nil, err
	}
	return downHub{h}, nil
}

func (downHub) Deliver(context.Context, *spool.Envelope) (string, error) {
	return "", errors.New("dial tcp 127.0.0.1:1: connection refused")
}

// admitUndelivered runs one deliverer during a Hub outage: it admits the
// intake through the real admission path and delivers nothing.
func (f *healthFixture) admitUndelivered(t *testing.T) {
	t.Helper()
	rep, err := capture.DeliverSpool(context.Background(), f.store, hubDown{delivery.Opener{ConfigDir: f.store.Dir}}, f.spool, nil, capture.DeliverBounds{})
	if err != nil || rep.Delivered != 0 || rep.Outcome != "failed" {
		t.Fatalf("deliver during the outage: %+v %v", rep, err)
	}
	if w, _ := spool.WaitingIntake(f.spool); len(w) != 0 {
		t.Fatalf("%d intake files left after admission", len(w))
	}
}

// inspectHealth runs change-capture inspect --format json and returns its
// health.
func (f *healthFixture) inspectHealth(t *testing.T) (spool.Health, bool) {
	t.Helper()
	r := runMain(t, f.vars, "", "change-capture", "inspect", "--spool", f.spool, "--format", "json")
	var v struct {
		Health          spool.Health `json:"health"`
		DeliveryStopped bool         `json:"delivery_stopped"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &v) != nil {
		t.Fatalf("inspect: %+v", r)
	}
	return v.Health, v.DeliveryStopped
}

// follow runs a fix as a user would: an agentscm command through Main, any
// other through the shell.
func (f *healthFixture) follow(t *testing.T, fix string) {
	t.Helper()
	if rest, ok := strings.CutPrefix(fix, "agentscm "); ok {
		if r := runMain(t, f.vars, "", strings.Fields(rest)...); r.code != 0 {
			t.Fatalf("fix %q: %+v", fix, r)
		}
		return
	}
	if out, err := exec.Command("sh", "-c", fix).CombinedOutput(); err != nil {
		t.Fatalf("fix %q: %v %s", fix, err, out)
	}
}

// TestHealthReportsTampering: each tampering that stops delivery is named
// by inspect (the failing check and its fix), shown by change-capture
// status and agentscm status, and makes deliver exit non-zero; following
// the fix makes delivery go through. An untouched spool reports healthy.
func TestHealthReportsTampering(t *testing.T) {
	lastEnvelope := func(t *testing.T, f *healthFixture) string {
		ents, err := os.ReadDir(filepath.Join(f.spool, "outbox"))
		if err != nil || len(ents) == 0 {
			t.Fatalf("outbox: %v %v", ents, err)
		}
		return filepath.Join(f.spool, "outbox", ents[len(ents)-1].Name())
	}
	cases := []struct {
		name   string
		tamper func(t *testing.T, f *healthFixture)
		check  string // "" = healthy
		fix    string // a prefix of the fix
	}{
		{"healthy", func(*testing.T, *healthFixture) {}, "", ""},
		{"mode", func(t *testing.T, f *healthFixture) {
			if err := os.Chmod(lastEnvelope(t, f), 0o644); err != nil {
				t.Fatal(err)
			}
		}, spool.CheckEvidence, "chmod 600 "},
		{"owner", func(t *testing.T, f *healthFixture) {
			if err := os.Lchown(lastEnvelope(t, f), 4242, 4242); err != nil {
				t.Fatal(err)
			}
		}, spool.CheckEvidence, fmt.Sprintf("chown %d ", os.Geteuid())},
		{"link count", func(t *testing.T, f *healthFixture) {
			if err := os.Link(lastEnvelope(t, f), filepath.Join(t.TempDir(), "second-name")); err != nil {
				t.Fatal(err)
			}
		}, spool.CheckEvidence, "agentscm change-capture repair --spool "},
		{"corrupt cursor", func(t *testing.T, f *healthFixture) {
			if err := os.WriteFile(filepath.Join(f.spool, "cursor.json"), []byte("not a cursor frame\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, spool.CheckCursor, "agentscm change-capture repair --spool "},
		{"malformed acknowledgement", func(t *testing.T, f *healthFixture) {
			// A marker for a pending envelope that does not decode.
			name := filepath.Base(lastEnvelope(t, f))
			if err := os.WriteFile(filepath.Join(f.spool, "acks", name[:16]+".ack"), []byte("garbage"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, spool.CheckAcknowledgements, "agentscm change-capture repair --spool "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newHealthFixture(t, 3)
			f.admitUndelivered(t)
			tc.tamper(t, f)

			h, stopped := f.inspectHealth(t)
			if tc.check == "" {
				if !h.Healthy || h.Failing != nil || stopped {
					t.Fatalf("a healthy spool reports %+v (stopped %v)", h, stopped)
				}
			} else if h.Failing == nil || h.Failing.Name != tc.check || !strings.HasPrefix(h.Failing.Fix, tc.fix) || !stopped {
				t.Fatalf("inspect health %+v (stopped %v), want the %s check failing with fix %q...", h, stopped, tc.check, tc.fix)
			}
			r := runMain(t, f.vars, "", "change-capture", "inspect", "--spool", f.spool)
			if tc.check == "" {
				if !strings.Contains(r.stdout, "delivery checks: all 10 pass") || !strings.Contains(r.stdout, "delivery stopped: no") {
					t.Fatalf("inspect text:\n%s", r.stdout)
				}
			} else if !strings.Contains(r.stdout, "delivery check failing: "+tc.check+": ") || !strings.Contains(r.stdout, "  fix: "+h.Failing.Fix+"\n") ||
				!strings.Contains(r.stdout, "delivery stopped: yes") {
				t.Fatalf("inspect text:\n%s", r.stdout)
			}

			// Both status commands name the failing check and the command
			// that fixes it.
			named := func(out, prefix string) bool {
				return strings.Contains(out, prefix+tc.check+": ") && strings.Contains(out, h.Failing.Fix)
			}
			r = runMain(t, f.vars, "", "change-capture", "status", "--root", f.root)
			if got := tc.check != "" && named(r.stdout, "problem: delivery stopped: "); r.code != 0 || got != (tc.check != "") {
				t.Fatalf("change-capture status:\n%s", r.stdout)
			}
			r = runMain(t, f.vars, "", "status", "--root", f.root)
			if got := tc.check != "" && named(r.stdout, "warning: spool: delivery stopped: "); r.code != 0 || got != (tc.check != "") {
				t.Fatalf("status:\n%s", r.stdout)
			}

			r = runMain(t, f.vars, "", "change-capture", "deliver", "--spool", f.spool)
			if tc.check == "" {
				if r.code != 0 || !strings.HasPrefix(r.stdout, "idle: 7 delivered") {
					t.Fatalf("deliver of a healthy spool: %+v", r)
				}
				return
			}
			if r.code == 0 || !strings.Contains(r.stdout+r.stderr, h.Failing.Fix) {
				t.Fatalf("deliver with the %s check failing: %+v", tc.check, r)
			}

			// Following the fix makes delivery go through.
			f.follow(t, h.Failing.Fix)
			if h, _ := f.inspectHealth(t); !h.Healthy {
				t.Fatalf("after the fix: %+v", h.Failing)
			}
			r = runMain(t, f.vars, "", "change-capture", "deliver", "--spool", f.spool, "--format", "json")
			var out struct {
				capture.DeliverReport
				Health      spool.Health        `json:"health"`
				Undelivered capture.Undelivered `json:"undelivered"`
			}
			if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil || out.Outcome != "idle" || out.Delivered != 7 || !out.Health.Healthy || out.Undelivered.Envelopes != 0 {
				t.Fatalf("deliver after the fix: %+v %+v", r, out)
			}
		})
	}
}

// TestHealthReportsWedgedIntake: an intake file the deliverer cannot admit
// blocks every later file. inspect names the intake check (with the
// deliverer's own error) and its fix, status shows it, deliver exits
// non-zero.
func TestHealthReportsWedgedIntake(t *testing.T) {
	f := newHealthFixture(t, 0)
	received := time.Now().Add(-time.Minute)
	hook := func(pl string) {
		t.Helper()
		res, err := capture.HandleClaudeHook(context.Background(), f.store, startsNothing{delivery.Opener{ConfigDir: f.store.Dir}}, strings.NewReader(pl), received)
		if err != nil || res.Intake == "" {
			t.Fatalf("hook: %+v %v", res, err)
		}
		received = received.Add(time.Millisecond)
	}
	// A Bash start (an action under enable's rule), then two prompts.
	hook(fmt.Sprintf(`{"session_id":"s1","cwd":%q,"hook_event_name":"PreToolUse","tool_name":"Bash","tool_use_id":"toolu_w1","tool_input":{"command":"true"}}`, f.root))
	for i := range 2 {
		hook(fmt.Sprintf(`{"session_id":"s1","cwd":%q,"hook_event_name":"UserPromptSubmit","prompt":"p%d"}`, f.root, i))
	}
	// The action receipts directory is no longer private: admitting the
	// start fails, and admission stops there.
	sp, err := spool.OpenReadOnly(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	receipts := action.OpenReceipts(f.store.Dir, sp).Dir()
	if err := os.MkdirAll(receipts, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(receipts, 0o755); err != nil {
		t.Fatal(err)
	}

	// Before any holder tried, health names the waiting intake as the
	// deliverer's last run saw it; deliver then admits what it can and
	// quarantines the file it cannot admit after maxAdmitAttempts failures,
	// with an admission_failed gap (issue 27 item 2): nothing stays wedged,
	// and the loss is named. Its output carries the admission's error.
	r := runMain(t, f.vars, "", "change-capture", "deliver", "--spool", f.spool)
	if !strings.Contains(r.stdout, "admit intake ") || !strings.Contains(r.stdout, "has mode 0755") {
		t.Fatalf("deliver with an unadmittable intake file: %+v", r)
	}
	waiting, err := spool.WaitingIntake(f.spool)
	if err != nil || len(waiting) != 0 {
		t.Fatalf("intake after deliver: %v %v", waiting, err)
	}
	ev := runMain(t, f.vars, "", "change-capture", "events", "--spool", f.spool, "--format", "json")
	if !strings.Contains(ev.stdout, "admission_failed") {
		t.Fatalf("no admission_failed gap names the quarantined file:\n%s", ev.stdout)
	}
	if h, stopped := f.inspectHealth(t); h.Failing != nil || stopped {
		t.Fatalf("inspect after the quarantine: %+v (stopped %v)", h.Failing, stopped)
	}
}
