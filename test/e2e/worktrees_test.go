//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/test/e2e/scriptedapi"
)

// tryClaude runs the real Claude Code CLI in the checkout like runClaude,
// but returns a failure instead of failing the test.
func (c *checkout) tryClaude(api *scriptedapi.Server, args ...string) (claudeResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	full := append([]string{"--output-format", "json", "--allowedTools", "Write,Edit,Bash,Read"}, args...)
	cmd := exec.CommandContext(ctx, h.claude, full...)
	cmd.Dir = c.root
	cmd.Env = append(c.env(),
		"ANTHROPIC_BASE_URL="+api.URL,
		"ANTHROPIC_API_KEY=sk-ant-e2e-dummy-key",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_AUTOUPDATER=1",
		"DISABLE_TELEMETRY=1",
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	var res claudeResult
	if err := cmd.Run(); err != nil {
		return res, fmt.Errorf("claude %v: %w\nstdout: %s\nstderr: %s", full, err, stdout.String(), stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil || res.IsError || res.SessionID == "" {
		return res, fmt.Errorf("claude %v: %v: %s\nstderr: %s", full, err, stdout.String(), stderr.String())
	}
	return res, nil
}

func (c *checkout) setting() binding.Setting {
	c.t.Helper()
	var st binding.Setting
	if err := json.Unmarshal([]byte(c.agentscm("change-capture", "status", "--root", c.root, "--format", "json")), &st); err != nil {
		c.t.Fatal(err)
	}
	return st
}

// claudeProjectDir is where Claude Code keeps the transcripts of sessions
// run in root (~/.claude/projects/<root with every non-alphanumeric byte
// replaced by '-'>).
func (c *checkout) claudeProjectDir(root string) string {
	var b strings.Builder
	for _, r := range root {
		if r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	return filepath.Join(c.home, ".claude", "projects", b.String())
}

// TestTwoWorktreesOneRepository: two checkouts of one repository (the main
// checkout and a `git worktree add` of it), each set up with its own
// one-step `change-capture enable --local` and so its own spool, both on the
// one embedded Hub repository, each with its own current Work. A session
// runs in the main checkout, the same Claude session is then resumed in the
// second worktree, a separate session runs there, and the first session
// goes on in the main checkout. On main the second spool restarted
// sequences at 1 under identities that did not distinguish spools, so the
// Hub refused what it had already seen from the first (identity_reused).
// Now every event of both spools is acknowledged, nothing is pending or
// refused, and every session of both Work records shows one stream per
// spool that fed it with no missing number; the only gaps are the ones
// the Hub names (the resumed session's adapter_started_late in the second
// Work, identity_uncertain of events without provider identity).
//
// It runs twice: on the embedded local Hub (one-step `enable --local`) and
// on a served Hub (`agentscm hub serve` on loopback, both worktrees
// connected with one token, then one-step `enable`).
func TestTwoWorktreesOneRepository(t *testing.T) {
	t.Run("local", func(t *testing.T) { twoWorktrees(t, false) })
	t.Run("served", func(t *testing.T) { twoWorktrees(t, true) })
}

func twoWorktrees(t *testing.T, served bool) {
	main := newCheckout(t)
	second := &checkout{t: t, dir: main.dir, root: filepath.Join(main.dir, "feature"), home: main.home, config: main.config}
	main.git("worktree", "add", "-q", "-b", "feature", second.root)
	if served {
		hub := main.serveConnectedHub()
		second.agentscm("client", "setup", "--root", second.root, "--hub", hub.url, "--repository", "proj", "--token-file", filepath.Join(main.dir, "alice.token"))
	}
	for _, c := range []*checkout{main, second} {
		if served {
			c.agentscm("change-capture", "enable", "--root", c.root)
		} else {
			c.agentscm("change-capture", "enable", "--root", c.root, "--local")
		}
		st := c.setting()
		if !st.Enabled || st.Spool == "" {
			t.Fatalf("%s: status after enable %+v", c.root, st)
		}
		c.spool = st.Spool
	}
	if main.spool == second.spool {
		t.Fatalf("both worktrees share spool %s", main.spool)
	}
	work1 := main.startWork("main checkout")
	work2 := second.startWork("feature worktree")

	api1, err := scriptedapi.Start(firstTurn(main.root), resumeTurn(), thirdTurn())
	if err != nil {
		t.Fatal(err)
	}
	defer api1.Close()
	s1 := main.runClaude(api1, "-p", "Please run SCENARIO-FIRST now. "+promptSecret)

	// The same Claude session resumed in the other worktree. Claude Code
	// looks a session up among the transcripts of its working directory;
	// when it does not find it there, the transcript is copied over (what
	// a person moving a conversation between worktrees does).
	resumedAcross := true
	if _, err := second.tryClaude(api1, "-p", "--resume", s1.SessionID, "Continue with SCENARIO-RESUME."); err != nil {
		t.Logf("resume in the other worktree without its transcript: %v", err)
		src := filepath.Join(main.claudeProjectDir(main.root), s1.SessionID+".jsonl")
		b, rerr := os.ReadFile(src)
		if rerr != nil {
			t.Fatalf("transcript of %s: %v", s1.SessionID, rerr)
		}
		dst := second.claudeProjectDir(second.root)
		if err := os.MkdirAll(dst, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, s1.SessionID+".jsonl"), b, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := second.tryClaude(api1, "-p", "--resume", s1.SessionID, "Continue with SCENARIO-RESUME."); err != nil {
			t.Logf("the host does not resume a session in another worktree: %v", err)
			resumedAcross = false
		}
	}
	s2 := second.runClaude(api1, "-p", "Please run SCENARIO-THIRD now.")
	// The first session goes on where it started.
	main.runClaude(api1, "-p", "--resume", s1.SessionID, "Continue with SCENARIO-RESUME.")
	if s2.SessionID == s1.SessionID {
		t.Fatalf("separate session got id %s", s2.SessionID)
	}

	// Both spools: every envelope acknowledged, nothing pending, refused
	// or quarantined; each spool is one stream, distinct from the other's.
	type tally struct{ events, actions int }
	delivered := map[string]*tally{work1: {}, work2: {}}
	streams := map[string]string{}
	for _, c := range []*checkout{main, second} {
		rep := c.report()
		if rep.Pending.Total+rep.Deferred.Total != 0 || rep.Quarantine.Total != 0 {
			t.Fatalf("%s: %d pending, %d attempted and unacknowledged, %d quarantined", c.root, rep.Pending.Total, rep.Deferred.Total, rep.Quarantine.Total)
		}
		if st := c.setting(); st.Refused != nil {
			t.Fatalf("%s: refusals %+v", c.root, st.Refused)
		}
		for _, s := range c.inspect().Sessions {
			for _, r := range s.Events {
				if r.Stream != "" {
					if prev, ok := streams[c.spool]; ok && prev != r.Stream {
						t.Fatalf("%s: records in streams %s and %s", c.spool, prev, r.Stream)
					}
					streams[c.spool] = r.Stream
				}
				if r.Deferred || r.Kind == event.KindGap || r.Kind == event.KindUsage {
					continue
				}
				d := delivered[r.WorkID]
				if d == nil {
					t.Fatalf("%s: record %d for work %q", c.spool, r.Seq, r.WorkID)
				}
				switch {
				case r.Kind == event.ActionStart:
					d.actions++
				case r.Kind == event.ActionFinish:
				case r.Sequenced && r.SharedSeq != 0:
					d.events++
				default:
					t.Fatalf("%s: record %d (%s) is neither an event nor an action of the Hub: %+v", c.spool, r.Seq, r.Kind, r)
				}
			}
		}
	}
	if len(streams) != 2 || streams[main.spool] == streams[second.spool] {
		t.Fatalf("streams %v", streams)
	}

	for _, w := range []struct {
		id, stream string
		c          *checkout
		sessions   int
	}{{work1, streams[main.spool], main, 1}, {work2, streams[second.spool], second, 1}} {
		if w.id == work2 && resumedAcross {
			w.sessions = 2
		}
		rec := main.record(w.id)
		d := delivered[w.id]
		if len(rec.Sessions) != w.sessions || len(rec.Events) != d.events || rec.EventsOmitted != 0 {
			t.Fatalf("work %s: %d sessions (want %d), %d events on the Hub, %d delivered by the spools: %+v", w.id, len(rec.Sessions), w.sessions, len(rec.Events), d.events, rec.Sessions)
		}
		var held int64
		for _, s := range rec.Sessions {
			if s.WorktreeID != w.c.setting().WorktreeID || s.MissingSeqs != 0 || len(s.Streams) != 1 || s.Streams[0].Stream != w.stream ||
				s.Streams[0].FirstSeq != 1 || s.Streams[0].MissingSeqs != 0 {
				t.Fatalf("work %s: session %+v (stream %s)", w.id, s, w.stream)
			}
			held += s.Events
		}
		if held != int64(d.events) {
			t.Fatalf("work %s: sessions hold %d events, the spools delivered %d", w.id, held, d.events)
		}
		complete := 0
		for _, a := range rec.Actions {
			if a.Status != "complete" {
				t.Fatalf("work %s: action %+v", w.id, a)
			}
			complete++
		}
		if complete != d.actions {
			t.Fatalf("work %s: %d complete actions on the Hub, %d started in the spools", w.id, complete, d.actions)
		}
		late := 0
		for _, g := range rec.Gaps {
			switch {
			case g.Derived:
				t.Fatalf("work %s: derived gap %+v (one stream per session)", w.id, g)
			case g.Kind == "adapter_started_late" && w.id == work2:
				late++
			case g.Kind == "identity_uncertain" && g.FromSeq >= 1 && g.FromSeq == g.ToSeq:
			default:
				t.Fatalf("work %s: unexpected gap %+v", w.id, g)
			}
		}
		if want := map[bool]int{true: 1, false: 0}[w.id == work2 && resumedAcross]; late != want {
			t.Fatalf("work %s: %d adapter_started_late gaps, want %d", w.id, late, want)
		}
		t.Logf("work %s: %d sessions, %d events, %d actions, %d gaps, stream %s", w.id, len(rec.Sessions), len(rec.Events), complete, len(rec.Gaps), w.stream)
	}
	if !resumedAcross {
		t.Log("the resumed-across-worktrees half was not exercised: the host refused the resume")
	}
}
