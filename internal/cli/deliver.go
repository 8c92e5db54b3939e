package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/delivery"
	"github.com/agentscm/agentscm/internal/spool"
)

// runDeliver is `change-capture deliver`: one foreground deliverer run
// over a spool, the same capture.DeliverSpool the hooks' background
// deliverer runs, under the same per-spool deliver lock.
func runDeliver(ctx context.Context, env *Env, args []string) error {
	dir, format, _, err := spoolArgs(env, "agentscm change-capture deliver", "--spool ABS [--format text|json]",
		`Deliver the spool's pending envelopes to the Hub now, in the foreground:
admit waiting intake files, then deliver page by page until nothing more is
deliverable, the Hub fails (the envelopes stay pending) or 20 s pass. It
takes the spool's deliver lock, so it never runs beside the background
deliverer the installed hook starts; when that one runs, it waits for it
(up to 30 s) and reports its last status instead. The enabled capture
binding whose spool this is names the checkout and its Hub connection.
Afterwards it runs the delivery path's checks (the same as inspect) and
exits non-zero when one fails (it prints the fix), or when deliverable
envelopes observed before the run, or intake files received before it,
were not delivered.`, args, true, false, nil)
	if err != nil {
		return err
	}
	store, err := configStore(env)
	if err != nil {
		return err
	}
	rep, err := capture.DeliverSpool(ctx, store, delivery.Opener{ConfigDir: store.Dir}, dir, nil, capture.DeliverBounds{AttemptNow: true})
	if rep != nil && rep.Outcome == "busy" {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		werr := store.WaitDeliverer(wctx, dir)
		cancel()
		if werr != nil {
			return werr
		}
		if rep, err = store.DeliverStatus(dir); err != nil {
			return err
		}
		if rep == nil {
			return errors.New("the background deliverer left no status")
		}
	} else if err != nil {
		// The run could not run: say which of the delivery path's checks
		// fails, when one does, and what fixes it.
		if h := store.Health(dir); h.Failing != nil {
			return fmt.Errorf("%w\ndelivery stopped: %s", err, h.Failing)
		}
		return err
	}
	out := deliverOut{DeliverReport: rep, Health: store.Health(dir)}
	und, uerr := store.Undelivered(dir, rep.Started)
	if uerr != nil {
		return uerr
	}
	out.Undelivered = und
	if format == "json" {
		if err := writeJSON(env.Stdout, out); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(env.Stdout, "%s: %d delivered, %d failed (%d refused), %d intake files admitted in %d rounds", rep.Outcome, rep.Delivered, rep.Failed, rep.Refused, rep.Admitted, rep.Rounds)
		if rep.Detail != "" {
			fmt.Fprintf(env.Stdout, "; %s", rep.Detail)
		}
		fmt.Fprintln(env.Stdout)
		if f := out.Health.Failing; f != nil {
			fmt.Fprintf(env.Stdout, "delivery stopped: %s: %s\n  fix: %s\n", f.Name, f.Problem, f.Fix)
		}
		if und.Envelopes > 0 {
			fmt.Fprintf(env.Stdout, "not delivered: %d deliverable envelopes (from sequence %d) stay pending\n", und.Envelopes, und.FirstSeq)
		}
		if und.Intake > 0 {
			fmt.Fprintf(env.Stdout, "not admitted: %d intake files wait\n", und.Intake)
		}
	}
	switch {
	case rep.Outcome == "failed" || rep.Outcome == "error":
		return fmt.Errorf("delivery %s: pending envelopes stay pending", rep.Outcome)
	case out.Health.Failing != nil:
		return fmt.Errorf("delivery stopped at the %s check: %s", out.Health.Failing.Name, out.Health.Failing.Fix)
	case und.Envelopes > 0 || und.Intake > 0:
		return fmt.Errorf("delivery incomplete: %d envelopes pending, %d intake files waiting (%s)", und.Envelopes, und.Intake, rep.Outcome)
	}
	return nil
}

// deliverOut is change-capture deliver's --format json: the run's report
// (its fields as before) with the delivery path's checks after it and what
// it left undelivered.
type deliverOut struct {
	*capture.DeliverReport
	Health      spool.Health        `json:"health"`
	Undelivered capture.Undelivered `json:"undelivered"`
}
