package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/source"
	"github.com/agentscm/agentscm/internal/spool"
)

// The failpoints an intake file's admission passes when its action start
// bound dirty source bytes (grep fail(" in internal/spool): the blobs the
// intake record carries are written as artifacts, the staged ones renamed
// into the artifacts. internal/delivery's TestAdmissionCrashAtEveryFailpoint
// covers the admission's other failpoints.
var sourceAdmissionFailpoints = []string{
	"blob.artifact.temp-written", "blob.artifact.temp-synced", "blob.artifact.linked", "stage.admit.renamed",
}

// The installed intake hook binds a dirty checkout's bytes (a small file
// carried in the intake record, a large one staged); the deliverer it
// starts is killed (SIGKILL) at each failpoint of that start's admission.
// Then more events arrive through the intake hook and `change-capture
// deliver` runs: nothing waits in the intake or undelivered, both action
// starts retained every byte (the killed admission's too, exactly once),
// and the Hub holds both actions complete and retained, each event once.
func TestIntakeAdmissionOfSourceBytesKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	bin := build(t)
	intake := filepath.Join(bin, "agentscm-hook-intake")
	for _, fp := range sourceAdmissionFailpoints {
		t.Run(fp, func(t *testing.T) {
			f, work := newDirtyFixture(t, bin)
			secret := "ADMIT-KILLED-" + fp
			f.write(t, "tracked.txt", "edited "+secret+"\n")
			f.write(t, "notes/large.txt", strings.Repeat("large "+secret+"\n", 4000))
			if _, killed := f.bash(t, intake, "toolu_k", false, spool.FailpointEnv+"="+fp); killed {
				t.Fatalf("the intake hook itself was killed at %s", fp)
			}
			f.waitDeliverer(t)
			rep, err := spool.Inspect(f.spool, 1)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Intake == 0 {
				t.Fatalf("the deliverer admitted the start past %s: it was not killed there", fp)
			}
			f.bash(t, intake, "toolu_k", true)
			f.bash(t, intake, "toolu_next", false)
			f.bash(t, intake, "toolu_next", true)
			f.agentscm(t, "change-capture", "deliver", "--spool", f.spool)
			if _, left, undelivered := f.delivered(t); left != 0 || undelivered != 0 {
				t.Fatalf("after deliver: %d intake files, %d undelivered envelopes", left, undelivered)
			}
			starts := f.starts(t)
			for _, id := range []string{"toolu_k", "toolu_next"} {
				checkRetained(t, f.spool, starts[id], secret)
			}
			if rep, err := spool.Inspect(f.spool, 10); err != nil || len(rep.Problems) > 0 || rep.Quarantine.Total != 0 {
				t.Fatalf("inspect: problems %v, quarantine %d, %v", rep.Problems, rep.Quarantine.Total, err)
			}
			var rec api.ChangeRecord
			if err := json.Unmarshal([]byte(f.agentscm(t, "change-capture", "show", "--root", f.root, "--work-id", work, "--record")), &rec); err != nil {
				t.Fatal(err)
			}
			if len(rec.Actions) != 2 {
				t.Fatalf("hub actions %+v, want 2", rec.Actions)
			}
			for _, a := range rec.Actions {
				// (No base ref resolves here: merge_base is the one
				// omission a fixture without a remote names.)
				if s := a.Start.Source; a.Status != "complete" || s == nil || !s.Retained || slices.Contains(s.Omissions, source.OmissionNotRetained) {
					b, _ := json.Marshal(a)
					t.Fatalf("hub action %s", b)
				}
			}
			seen := map[string]int{}
			for _, e := range rec.Events {
				seen[e.Kind+"/"+e.ToolUseID]++
			}
			for k, n := range seen {
				if n != 1 {
					t.Fatalf("the Hub holds %s %d times", k, n)
				}
			}
			if rec.Sessions[0].MissingSeqs != 0 || rec.Sessions[0].Events != 4 {
				t.Fatalf("session %+v, want its 4 events and no missing number", rec.Sessions[0])
			}
			for _, g := range rec.Gaps {
				if g.Kind != event.GapAdapterStartedLate { // the session began with a PreToolUse
					t.Fatalf("gap %+v: nothing was lost", g)
				}
			}
		})
	}
}
