package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/agentscm/agentscm/internal/hub/api"
)

// changeCaptureShowCommand is `agentscm change-capture show`; the
// change-capture group lists it.
func changeCaptureShowCommand() *Command {
	return &Command{Name: "show", Summary: "print a Work's change record from the Hub (read-only)", Run: runChangeCaptureShow}
}

func runChangeCaptureShow(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm change-capture show", "--root ABS --work-id ID [--format text|json]",
		`Read a Work's change-record projection from the checkout's connected Hub:
sessions, events, actions, gaps, usage totals and coverage. It runs no model
and changes nothing on the Hub. Shared conversation bodies are never part of
it.`)
	root := fs.String("root", "", "absolute path of the checkout (required)")
	id := fs.String("work-id", "", "the Work (required)")
	format := formatFlag(fs)
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	if *root == "" || *id == "" {
		return usagef("--root and --work-id are required")
	}
	ctx, cancel := context.WithTimeout(ctx, hubTimeout)
	defer cancel()
	_, conn, err := openCheckout(ctx, env, *root)
	if err != nil {
		return err
	}
	defer conn.Close()
	rec, err := conn.Record(ctx, *id)
	if err != nil {
		return err
	}
	if *format == "json" {
		return writeJSON(env.Stdout, rec)
	}
	printRecord(env.Stdout, rec)
	return nil
}

func printRecord(out io.Writer, r api.ChangeRecord) {
	printWork(out, r.Work, "")
	fmt.Fprintf(out, "\ncoverage: %s\n", r.Coverage.State)
	for _, why := range r.Coverage.Reasons {
		fmt.Fprintf(out, "  - %s\n", why)
	}
	fmt.Fprintf(out, "\nsessions (%d):\n", len(r.Sessions))
	for _, s := range r.Sessions {
		natives := "no native session yet"
		if len(s.NativeSessionIDs) > 0 {
			natives = "native " + strings.Join(s.NativeSessionIDs, ", ")
		}
		fmt.Fprintf(out, "  %s  gen %d  worktree %s  %s\n", s.Session, s.Generation, s.WorktreeID, natives)
		if s.Events > 0 {
			fmt.Fprintf(out, "    %d events, seq %d..%d, %d missing\n", s.Events, s.FirstSeq, s.LastSeq, s.MissingSeqs)
		}
	}
	fmt.Fprintf(out, "\nevents (%d shown, %d omitted):\n", len(r.Events), r.EventsOmitted)
	for _, e := range r.Events {
		detail := []string{}
		for _, kv := range [][2]string{{"tool", e.ToolName}, {"tool_use", e.ToolUseID}, {"source", e.Source}, {"reason", e.Reason}, {"outcome", e.Outcome}, {"agent", e.AgentType}} {
			if kv[1] != "" {
				detail = append(detail, kv[0]+"="+kv[1])
			}
		}
		fmt.Fprintf(out, "  gen %d %s #%d  %-15s %s  %s\n", e.Generation, e.Session, e.Seq, e.Kind, ts(e.ObservedAt), strings.Join(detail, " "))
	}
	fmt.Fprintf(out, "\nactions (%d):\n", len(r.Actions))
	for _, a := range r.Actions {
		line := fmt.Sprintf("  %s  %s", a.ActionID, a.Status)
		if a.Start != nil {
			line += fmt.Sprintf("  %s %s %s", a.Start.Class, a.Start.Tool, describeSource(a.Start.Source))
			if d := a.Start.RecipeDigest; len(d) >= 12 {
				// A managed recipe run: its result is caller_asserted.
				line += " recipe=" + d[:12] + " caller_asserted"
			}
		}
		if a.Finish != nil {
			line += fmt.Sprintf("  result=%s verification=%s", a.Finish.Result, a.Finish.Verification)
			if a.Finish.ExitCode != nil {
				line += fmt.Sprintf(" exit=%d", *a.Finish.ExitCode)
			}
			if a.Finish.Drift != "" {
				line += " drift=" + a.Finish.Drift
			}
			if a.Finish.Stale {
				line += " stale (setup changed since the start)"
			}
		}
		fmt.Fprintln(out, line)
	}
	fmt.Fprintf(out, "\ngaps (%d):\n", len(r.Gaps))
	for _, g := range r.Gaps {
		line := fmt.Sprintf("  gen %d %s  %s", g.Generation, g.Session, g.Kind)
		if g.FromSeq != 0 || g.ToSeq != 0 {
			line += fmt.Sprintf(" seq %d..%d", g.FromSeq, g.ToSeq)
		}
		if g.Reason != "" {
			line += "  " + g.Reason
		}
		fmt.Fprintln(out, line)
	}
	u := r.Usage
	fmt.Fprintf(out, "\nusage: %d records, input %d, output %d, cache creation %d, cache read %d tokens\n",
		u.Records, u.InputTokens, u.OutputTokens, u.CacheCreationInputTokens, u.CacheReadInputTokens)
	for _, name := range []string{"input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"} {
		if n := u.Unknown[name]; n > 0 {
			fmt.Fprintf(out, "  %s unknown in %d records (the sum covers the others)\n", name, n)
		}
	}
	for _, c := range u.SessionCumulative {
		fmt.Fprintf(out, "  session %s (generation %d) reported its own total for %s, not added: input %s, output %s\n",
			c.Session, c.Generation, c.Model, count(c.InputTokens), count(c.OutputTokens))
	}
	for _, st := range r.Setups {
		fmt.Fprintf(out, "setup %s (session %s): model %s, permission mode %s, effort %s; unobserved: %s\n",
			st.Artifact, st.Session, orUnobserved(st.Model), orUnobserved(st.PermissionMode), orUnobserved(st.Effort), strings.Join(st.Unobserved, ", "))
	}
}

func count(v *int64) string {
	if v == nil {
		return "unknown"
	}
	return fmt.Sprint(*v)
}

func orUnobserved(s string) string {
	if s == "" {
		return "unobserved"
	}
	return s
}
