package capture

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
	"github.com/agentscm/agentscm/internal/transcript"
)

// Deliverable reports whether the deliverer sends rec to the Hub: not a
// deferred fact, under a Work, and not a local-only transcript record. The
// deliverer and the health report both ask it.
func Deliverable(rec *event.Record) bool {
	return !rec.Deferred && rec.WorkID != "" && !transcript.LocalOnly(rec)
}

// intakeStuckMargin: an intake file received this long before a deliverer
// run started was installed before that run listed the intake.
const intakeStuckMargin = 2 * time.Second

// CheckIntake is the intake admission check. Admission needs the capture
// ledger and the Hub and cannot run read-only, so the check reads the
// delivery path's own durable verdict: the last deliverer run's status. A
// run that ended idle (nothing more it could admit or deliver) while intake
// files received before it started still wait could not admit them, and
// admission takes files in receipt order, so every later file waits behind
// the first.
func (s StateDir) CheckIntake(spoolDir string) spool.Check {
	c := spool.Check{Name: spool.CheckIntake, OK: true}
	files, err := spool.WaitingIntake(spoolDir)
	if err != nil {
		c.OK, c.Problem, c.Path = false, "the intake cannot be listed: "+err.Error(), filepath.Join(spoolDir, "intake")
		c.Fix = "none known: see the problem"
		return c
	}
	if len(files) == 0 || s.Dir == "" {
		return c
	}
	st, err := s.DeliverStatus(spoolDir)
	if err != nil || st == nil || st.Outcome != "idle" {
		return c
	}
	var stuck []spool.WaitingFile
	for _, f := range files {
		if f.ReceivedAt.Before(st.Started.Add(-intakeStuckMargin)) {
			stuck = append(stuck, f)
		}
	}
	if len(stuck) == 0 {
		return c
	}
	c.OK = false
	c.Path = filepath.Join(spoolDir, "intake", stuck[0].Name)
	c.Problem = fmt.Sprintf("%d of %d intake files, received before the last deliverer run (started %s, outcome %s), were not admitted; admission stops at the first, %s, and every later file waits behind it",
		len(stuck), len(files), st.Started.Format(time.RFC3339), st.Outcome, stuck[0].Name)
	if st.Detail != "" {
		c.Problem += ": " + st.Detail
	}
	c.Fix = "agentscm change-capture deliver --spool " + spoolDir
	return c
}

// CheckSpool replaces rep's health (a spool.Inspect of spoolDir) with
// Health's, which adds the capture layer's view: the hook summary the
// hooks and the deliverer trust, and intake admission.
func (s StateDir) CheckSpool(spoolDir string, rep *spool.Report) {
	if !rep.Committed {
		return
	}
	rep.SetHealth(s.Health(spoolDir))
}

// Health is the delivery path's checks of spoolDir: spool.CheckHealthWith
// with the hook summary capture keeps for it, then the intake admission
// check.
func (s StateDir) Health(spoolDir string) spool.Health {
	var o spool.HealthOptions
	if s.Dir != "" {
		o.SummaryPath = filepath.Join(s.ledgerDir(spoolDir), summaryName)
	}
	h := spool.CheckHealthWith(spoolDir, o)
	if len(h.Checks) > 0 && h.Checks[0].OK { // committed
		h.Add(s.CheckIntake(spoolDir))
	}
	return h
}

// Undelivered is what a deliverer run left that it should have delivered:
// deliverable envelopes (Deliverable) observed before the run started that
// no acknowledgement hides and the Hub did not refuse, and intake files
// received before it started.
type Undelivered struct {
	Envelopes int    `json:"envelopes"`
	FirstSeq  uint64 `json:"first_seq,omitempty"`
	Intake    int    `json:"intake"`
}

// Undelivered counts, read-only, what the deliverer run that started at
// since left undelivered in spoolDir (see Undelivered).
func (s StateDir) Undelivered(spoolDir string, since time.Time) (Undelivered, error) {
	var u Undelivered
	envs, err := spool.Unacknowledged(spoolDir)
	if err != nil {
		return u, err
	}
	refused := map[string]bool{}
	if s.Dir != "" {
		if r, err := s.Refusals(spoolDir); err == nil {
			for _, f := range r.Refusals {
				refused[f.Digest] = true
			}
		}
	}
	for i := range envs {
		e := &envs[i]
		if !Deliverable(&e.Record) || refused[e.Digest] || !e.Record.ObservedAt.Before(since) {
			continue
		}
		if u.Envelopes == 0 {
			u.FirstSeq = e.Record.Seq
		}
		u.Envelopes++
	}
	files, err := spool.WaitingIntake(spoolDir)
	if err != nil {
		return u, err
	}
	for _, f := range files {
		if f.ReceivedAt.Before(since) {
			u.Intake++
		}
	}
	return u, nil
}
