package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/spool"
)

// The installed intake hook while another process holds the spool lock and
// the intake cannot take the event (a prompt over the intake's 256 KiB
// bound, an intake write failing with ENOSPC): it hands the event to
// agentscm-hook (exec), which waits for the lock, gives up and notes the
// loss under the session's target at receipt; the deliverer publishes a
// capture_interrupted gap over sequences reserved for it, and every number
// the Hub is missing is covered by a gap. On main the loss had no target
// and no sequence: the Hub never heard of it.
func TestIntakeHookBusyLockLossesReachTheHub(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and waits out the 10 s lock wait")
	}
	bin := build(t)
	intake := filepath.Join(bin, "agentscm-hook-intake")
	big := strings.Repeat("y", 300<<10)
	for _, tc := range []struct {
		name, reason, payload string
		env                   []string
	}{
		{"large prompt", "lock_timeout", `"hook_event_name":"UserPromptSubmit","prompt":"` + big + `"`, nil},
		{"enospc", "no_space", `"hook_event_name":"PreToolUse","tool_name":"Read","tool_use_id":"toolu_lost","tool_input":{"file_path":"/etc/hostname"}`,
			[]string{spool.FailpointEnv + "=intake=enospc"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, bin)
			f.agentscm(t, "change-capture", "set-mode", "--root", f.root, "--mode", "local-conversation")
			f.hook(t, intake, "toolu_before")
			f.waitDeliverer(t)
			lock, err := os.OpenFile(filepath.Join(f.spool, "spool.lock"), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(intake, "change-capture", "hook-claude")
			cmd.Env = append(f.env(), tc.env...)
			cmd.Stdin = strings.NewReader(`{"session_id":"intake-test","cwd":"` + f.root + `",` + tc.payload + `}`)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			err = cmd.Run()
			lock.Close()
			if err != nil || out.Len() > 0 || strings.Count(errb.String(), "\n") != 1 || !strings.Contains(errb.String(), "capture_interrupted") {
				t.Fatalf("lost event's hook: %v, stdout %q, stderr %q; want exit 0 and one line naming the gap to come", err, out.String(), errb.String())
			}
			f.hook(t, intake, "toolu_after")
			f.waitDeliverer(t)
			if _, _, undelivered := f.delivered(t); undelivered != 0 {
				f.hook(t, intake, "toolu_after2")
				f.waitDeliverer(t)
			}
			var rec api.ChangeRecord
			if err := json.Unmarshal([]byte(f.agentscm(t, "change-capture", "show", "--root", f.root, "--record")), &rec); err != nil {
				t.Fatal(err)
			}
			if len(rec.Sessions) != 1 || len(rec.Sessions[0].Streams) != 1 {
				t.Fatalf("sessions %+v", rec.Sessions)
			}
			st := rec.Sessions[0].Streams[0]
			held := map[int64]bool{}
			for _, e := range rec.Events {
				held[e.Seq] = true
			}
			named := 0
			for seq := int64(1); seq <= st.LastSeq; seq++ {
				covered := false
				for _, g := range rec.Gaps {
					if g.Kind == "capture_interrupted" && g.Stream == st.Stream && g.FromSeq <= seq && seq <= g.ToSeq {
						covered = true
						if g.Reason == tc.reason {
							named++
						}
					}
				}
				if !held[seq] && !covered {
					t.Fatalf("sequence %d never reached the Hub and no gap covers it: %+v", seq, rec.Gaps)
				}
			}
			if named != 1 || st.MissingSeqs != 1 {
				t.Fatalf("%d numbers named by a %s gap, %d missing; want the one lost event: %+v", named, tc.reason, st.MissingSeqs, rec.Gaps)
			}
		})
	}
}
