package cli

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/agentscm/agentscm/internal/capture"
)

// deferredCommand is `change-capture deferred`.
func deferredCommand() *Command {
	return &Command{Name: "deferred", Summary: "list a spool's sanitized deferred facts (read-only)", Run: runDeferred}
}

func runDeferred(ctx context.Context, env *Env, args []string) error {
	var limit *int
	dir, format, _, err := spoolArgs(env, "agentscm change-capture deferred", "--spool ABS [--limit N] [--format text|json]",
		`List the sanitized local facts the hook kept while no exact authorized
target resolved (no current Work, a refused target, or an unreachable Hub):
session, kind, tool, the reserved shared sequence, and the association.
"copied" facts copy the session's last exact target; the next reachable hook
makes their outage visible under that exact Work, generation and canonical
session. "unassociated" facts were kept before the session had any exact
target and stay local. "legacy" facts were written before shared sequences:
they have a null sequence and no association and never produce an
attributed gap. Facts hold no prompt, tool input or output, error or cwd.
Read-only: it neither locks nor changes the spool.`, args, true, false, func(fs *flag.FlagSet) {
			limit = fs.Int("limit", 1000, "list at most N facts (the rest are counted as omitted)")
		})
	if err != nil {
		return err
	}
	if *limit <= 0 {
		return usagef("--limit must be positive")
	}
	rep, err := capture.ListDeferred(dir, *limit)
	if err != nil {
		return err
	}
	if format == "json" {
		return writeJSON(env.Stdout, rep)
	}
	fmt.Fprintf(env.Stdout, "spool %s: %d deferred facts (%d omitted)\n", rep.Spool, rep.Total, rep.Omitted)
	for _, f := range rep.Facts {
		seq := "null"
		if f.Sequence != nil {
			seq = strconv.FormatUint(*f.Sequence, 10)
		}
		target := ""
		if f.Target != nil {
			target = fmt.Sprintf(" target=%s/%d/%s", f.Target.WorkID, f.Target.Generation, f.Target.Session)
		}
		what := string(f.Kind)
		if f.GapKind != "" {
			what += ":" + f.GapKind
		}
		if f.ToolName != "" {
			what += " tool=" + f.ToolName
		}
		if f.Source != nil {
			what += " source=" + f.Source.Head
			if f.Source.Dirty {
				what += "+dirty"
			}
		}
		fmt.Fprintf(env.Stdout, "  %6d  %s  session=%s  %-12s seq=%s  %s%s\n", f.SpoolSeq, f.ObservedAt.Format(time.RFC3339), f.Session, f.Association, seq, what, target)
	}
	return nil
}
