package cli

import (
	"fmt"
	"io"

	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/spool"
)

// inspectView adds what the capture ledger of this config directory knows
// about the spool's delivery (refusals, last attempt outcomes) to rep.
// Without a config directory the view says so (LedgerError): inspect
// still works on any spool.
func inspectView(env *Env, dir string, rep *spool.Report) (*capture.InspectView, error) {
	store, err := configStore(env)
	if err != nil {
		v := capture.StateDir{}.Inspect(dir, rep)
		v.LedgerError = "capture ledger not read: " + err.Error()
		return v, nil
	}
	return store.Inspect(dir, rep), nil
}

func printInspectView(w io.Writer, v *capture.InspectView) {
	r := v.Refused
	if v.LedgerError != "" {
		fmt.Fprintf(w, "\nrefused by the Hub: unknown (%s)\n", v.LedgerError)
	} else {
		fmt.Fprintf(w, "\nrefused by the Hub: %d (%d omitted; retained, never acknowledged)\n", r.Total, r.Omitted)
	}
	for _, f := range r.Refusals {
		gap := "no gap"
		if f.Gap {
			gap = "hub_refused gap appended"
		}
		fmt.Fprintf(w, "  %6d  %-16s %s  %s (%s) %s\n", f.SpoolSeq, f.Kind, f.At.Format("2006-01-02T15:04:05Z"), f.Reason, gap, oneLine(f.Detail))
	}
	fmt.Fprintf(w, "\nlast attempt per pending envelope: %d\n", len(v.PendingOutcomes))
	for _, o := range v.PendingOutcomes {
		last := "no attempt in the kept history"
		if o.LastOutcome != "" {
			last = o.LastOutcome + " at " + o.LastAt.Format("2006-01-02T15:04:05Z")
			if o.LastDetail != "" {
				last += ": " + oneLine(o.LastDetail)
			}
		}
		refused := ""
		if o.Refused != "" {
			refused = " refused=" + o.Refused
		}
		fmt.Fprintf(w, "  %6d  %-9s %-16s attempts=%d%s  %s\n", o.Seq, o.State, o.Kind, o.Attempts, refused, last)
	}
}
