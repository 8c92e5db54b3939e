package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/delivery"
	"github.com/agentscm/agentscm/internal/hookrun"
	"github.com/agentscm/agentscm/internal/spool"
)

// intakeOnly is a Backgrounder that starts no deliverer: hooks through it
// leave their events in the intake, as intake hooks whose deliverer is
// busy elsewhere do.
type intakeOnly struct{ delivery.Opener }

func (intakeOnly) StartDeliverer(*os.File, string) error { return nil }

// A real deliverer process whose drain bound stopped a run that made
// progress in every window (hookrun's successorDue) is killed at the
// hand-over: before it starts its successor (deliver.successor.due) and
// right after (deliver.successor.started). No later hook is needed: the
// successor delivers everything, or the run's durable note (Resume) makes
// the next process of any kind (here `change-capture status`) start a
// deliverer that does. Every event ends in the spool once and delivered.
func TestSuccessorHandOverSurvivesKill(t *testing.T) {
	for _, fp := range []string{"deliver.successor.due", "deliver.successor.started"} {
		t.Run(fp, func(t *testing.T) {
			f := newBurstFixture(t)
			f.detached = true
			cfg := filepath.Join(f.vars["XDG_CONFIG_HOME"], "agentscm")
			store := capture.StateDir{Dir: cfg}
			t.Cleanup(func() { f.waitDeliverer(t) })
			var ids []string
			hook := func() {
				id := fmt.Sprintf("toolu_succ_%04d", len(ids))
				res, err := capture.HandleClaudeHook(context.Background(), store, intakeOnly{delivery.Opener{ConfigDir: cfg}}, strings.NewReader(f.pre("succ", id)), time.Now())
				if err != nil || res.Intake == "" {
					t.Errorf("hook %s: %+v %v", id, res, err)
				}
				ids = append(ids, id)
			}
			for range 100 {
				hook()
			}
			// The deliverer, with windows short enough that its drain bound
			// comes while work still arrives (hooks go on writing the
			// intake while it runs, so every window makes progress).
			cmd := exec.Command(os.Args[0], "change-capture", "deliver-spool", "--config-dir", cfg, "--spool", f.spool)
			cmd.Env = append(os.Environ(), envAsHook+"=1", envDetached+"=1", "XDG_CONFIG_HOME="+f.vars["XDG_CONFIG_HOME"],
				changelog.FailpointEnv+"="+fp, hookrun.DelivererTestBoundsEnv+"=2s,5s")
			var outb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &outb, &outb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			var err error
		feed:
			for {
				select {
				case err = <-done:
					break feed
				case <-time.After(20 * time.Millisecond):
					hook()
				}
			}
			out := outb.String()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("the deliverer was not killed at %s (%v): %s", fp, err, out)
			}
			if fp == "deliver.successor.due" {
				// Nothing runs now: the run's note says work is left.
				st, err := store.DeliverStatus(f.spool)
				if err != nil || st == nil || !st.Resume || st.Outcome != "bound" {
					t.Fatalf("deliver status after the kill: %+v %v", st, err)
				}
				rep, err := spool.Inspect(f.spool, 1)
				if err != nil || rep.Intake+rep.Pending.Total == 0 {
					t.Fatalf("nothing was left for a successor: %+v %v", rep, err)
				}
				f.statusKicks(t)
			}
			f.waitDeliverer(t)
			rep, err := spool.Inspect(f.spool, 1)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Intake != 0 || rep.Pending.Total+rep.Deferred.Total != 0 || len(rep.Problems) != 0 {
				t.Fatalf("after the hand-over with no later hook: %d intake, %d pending, %d deferred, problems %v",
					rep.Intake, rep.Pending.Total, rep.Deferred.Total, rep.Problems)
			}
			got := f.toolStarts(t)
			for _, id := range ids {
				if got[id] != 1 {
					t.Errorf("%s retained %d times, want once", id, got[id])
				}
			}
		})
	}
}

// statusKicks runs `agentscm change-capture status` as a user would, with
// an agentscm executable (this test binary run as the hook binary) that
// it may start a deliverer with.
func (f *burstFixture) statusKicks(t *testing.T) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wrap := filepath.Join(f.dir, "wrap", "agentscm")
	if err := os.MkdirAll(filepath.Dir(wrap), 0o755); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("#!/bin/sh\nexec env %s=1 %s=1 XDG_CONFIG_HOME='%s' '%s' \"$@\"\n", envAsHook, envDetached, f.vars["XDG_CONFIG_HOME"], self)
	if err := os.WriteFile(wrap, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	f.agentscmAs(t, wrap, "change-capture", "status", "--root", f.root)
}
