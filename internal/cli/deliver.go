package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/delivery"
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
binding whose spool this is names the checkout and its Hub connection.`, args, true, false, nil)
	if err != nil {
		return err
	}
	store, err := configStore(env)
	if err != nil {
		return err
	}
	rep, err := capture.DeliverSpool(ctx, store, delivery.Opener{ConfigDir: store.Dir}, dir, nil, capture.DeliverBounds{})
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
		return err
	}
	if format == "json" {
		return writeJSON(env.Stdout, rep)
	}
	fmt.Fprintf(env.Stdout, "%s: %d delivered, %d failed (%d refused), %d intake files admitted in %d rounds", rep.Outcome, rep.Delivered, rep.Failed, rep.Refused, rep.Admitted, rep.Rounds)
	if rep.Detail != "" {
		fmt.Fprintf(env.Stdout, "; %s", rep.Detail)
	}
	fmt.Fprintln(env.Stdout)
	if rep.Outcome == "failed" || rep.Outcome == "error" {
		return fmt.Errorf("delivery %s: pending envelopes stay pending", rep.Outcome)
	}
	return nil
}
