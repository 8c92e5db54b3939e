//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/hub/api"
)

// exitGenerationChanged is agentscm's exit status for a takeover refused
// because the Work was taken over meanwhile (cli.ExitGenerationChanged).
const exitGenerationChanged = 7

// TestConcurrentTakeoversHubServe runs 12 `agentscm work takeover`
// processes at once, each from its own checkout, against a real
// `agentscm hub serve`: with a shared --expect-generation exactly one wins;
// without it (each command expects the generation it reads), while the Hub
// is stopped so that every command reads before any writes, not all win.
// Every loser exits 7 saying the Work was taken over meanwhile, every winner
// won a distinct generation, and only the last winner's checkout is current.
func TestConcurrentTakeoversHubServe(t *testing.T) {
	owner := newCheckout(t)
	data := filepath.Join(owner.dir, "hubdata")
	tokenFile := filepath.Join(owner.dir, "alice.token")
	owner.agentscm("hub", "admin", "human", "create", "--data", data, "--name", "alice")
	owner.agentscm("hub", "admin", "repository", "create", "--data", data, "--name", "proj")
	owner.agentscm("hub", "admin", "token", "create", "--data", data, "--human", "alice", "--repository", "proj", "--output", tokenFile)
	hubCmd, url := startHubProcess(t, owner, data)
	const n = 12
	takers := make([]*checkout, n)
	for i := range takers {
		takers[i] = newCheckout(t)
	}
	for _, c := range append([]*checkout{owner}, takers...) {
		c.agentscm("client", "setup", "--root", c.root, "--hub", url, "--repository", "proj", "--token-file", tokenFile)
	}
	var w api.Work
	if err := json.Unmarshal([]byte(owner.agentscm("work", "start", "--root", owner.root, "--format", "json")), &w); err != nil {
		t.Fatal(err)
	}
	for _, expect := range []bool{true, false} {
		before := showWork(t, owner, w.ID).Generation
		type result struct {
			code           int
			stdout, stderr string
		}
		results := make([]result, n)
		cmds := make([]*exec.Cmd, n)
		outs := make([][2]*bytes.Buffer, n)
		if !expect {
			// Every command's first request (its read) waits at the stopped
			// Hub; they are all answered before any takeover is written.
			if err := hubCmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
		}
		for i, c := range takers {
			args := []string{"work", "takeover", "--root", c.root, "--work-id", w.ID, "--format", "json"}
			if expect {
				args = append(args, "--expect-generation", fmt.Sprint(before))
			}
			cmds[i] = exec.Command(h.agentscm, args...)
			cmds[i].Env = c.env()
			outs[i] = [2]*bytes.Buffer{{}, {}}
			cmds[i].Stdout, cmds[i].Stderr = outs[i][0], outs[i][1]
			if err := cmds[i].Start(); err != nil {
				t.Fatal(err)
			}
		}
		if !expect {
			time.Sleep(2 * time.Second)
			if err := hubCmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
		}
		for i, cmd := range cmds {
			err := cmd.Wait()
			results[i] = result{code: cmd.ProcessState.ExitCode(), stdout: outs[i][0].String(), stderr: outs[i][1].String()}
			if err != nil && results[i].code <= 0 {
				t.Fatalf("takeover %d: %v", i, err)
			}
		}
		won := map[int64]int{}
		last, lastGen := -1, int64(0)
		for i, r := range results {
			switch r.code {
			case 0:
				var tw api.Work
				if err := json.Unmarshal([]byte(r.stdout), &tw); err != nil {
					t.Fatalf("takeover %d: %v %q", i, err, r.stdout)
				}
				if _, dup := won[tw.Generation]; dup || tw.Generation <= before {
					t.Fatalf("takeover %d told generation %d (won: %v)", i, tw.Generation, won)
				}
				won[tw.Generation] = i
				if tw.Generation > lastGen {
					last, lastGen = i, tw.Generation
				}
			case exitGenerationChanged:
				if !strings.Contains(r.stderr, "taken over meanwhile") || r.stdout != "" {
					t.Fatalf("loser %d: %+v", i, r)
				}
			default:
				t.Fatalf("takeover %d: %+v", i, r)
			}
		}
		t.Logf("expect=%v: %d of %d takeovers won", expect, len(won), n)
		if len(won) == 0 || (expect && len(won) != 1) || len(won) == n {
			t.Fatalf("expect=%v: %d winners of %d: %v", expect, len(won), n, won)
		}
		for g := before + 1; g <= before+int64(len(won)); g++ {
			if _, ok := won[g]; !ok {
				t.Fatalf("generations won are not a chain from %d: %v", before, won)
			}
		}
		after := showWork(t, owner, w.ID)
		if after.Generation != lastGen {
			t.Fatalf("work at generation %d, last winner told %d", after.Generation, lastGen)
		}
		wantWT := worktreeOf(t, takers[last])
		current := 0
		for _, cw := range after.Worktrees {
			if cw.Generation == after.Generation {
				current++
				if cw.WorktreeID != wantWT {
					t.Fatalf("current worktree %s, want the last winner's %s", cw.WorktreeID, wantWT)
				}
			}
		}
		if current != 1 {
			t.Fatalf("%d worktrees current at generation %d: %+v", current, after.Generation, after.Worktrees)
		}
	}
}

func showWork(t *testing.T, c *checkout, id string) api.Work {
	t.Helper()
	var w api.Work
	if err := json.Unmarshal([]byte(c.agentscm("work", "show", "--root", c.root, "--work-id", id, "--format", "json")), &w); err != nil {
		t.Fatal(err)
	}
	return w
}

func worktreeOf(t *testing.T, c *checkout) string {
	t.Helper()
	var st struct {
		Connections []struct {
			WorktreeID string `json:"worktree_id"`
		}
	}
	if err := json.Unmarshal([]byte(c.agentscm("client", "status", "--root", c.root, "--format", "json")), &st); err != nil || len(st.Connections) != 1 {
		t.Fatalf("client status: %+v %v", st, err)
	}
	return st.Connections[0].WorktreeID
}

// startHubProcess is startHub keeping the process, so the test can stop and
// continue it.
func startHubProcess(t *testing.T, c *checkout, data string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(h.agentscm, "hub", "serve", "--listen", "127.0.0.1:0", "--data", data)
	cmd.Env = c.env()
	url, _ := serveProc(t, cmd)
	return cmd, url
}
