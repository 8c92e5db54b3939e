package timeline

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode"
)

// Time formats a receipt time for people: UTC to the second, or "time not
// reported".
func Time(unix int64) string {
	if unix == 0 {
		return "time not reported"
	}
	return time.Unix(unix, 0).UTC().Format("2006-01-02 15:04:05Z")
}

// Clean makes agent-controlled text safe for one terminal line: control
// characters (escape sequences, newlines) become U+FFFD.
func Clean(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '\uFFFD'
		}
		return r
	}, s)
}

// Files joins a call's names as +created ~modified -deleted, with the
// omitted counts.
func (c Call) Files() string {
	var parts []string
	add := func(sign string, names []string, omitted int) {
		for _, n := range names {
			parts = append(parts, sign+Clean(n))
		}
		if omitted > 0 {
			parts = append(parts, fmt.Sprintf("%s(%d more)", sign, omitted))
		}
	}
	add("+", c.Created, c.CreatedOmitted)
	add("~", c.Modified, c.ModifiedOmitted)
	add("-", c.Deleted, c.DeletedOmitted)
	if len(parts) == 0 {
		if c.Position != nil {
			return "no files changed"
		}
		return ""
	}
	return strings.Join(parts, " ")
}

// WriteText writes the terminal view: the Work, its coverage explained,
// one line per tool call with its position, files and result, the gaps,
// actions and usage, and the summary line last.
func WriteText(w io.Writer, tl *Timeline) {
	wk := tl.Work
	title := Clean(wk.Title)
	if title == "" {
		title = "(untitled)"
	}
	fmt.Fprintf(w, "%s  %s\n  repository %s, %s, generation %d, started by %s at %s\n",
		wk.ID, title, Clean(wk.Repository), wk.State, wk.Generation, Clean(wk.CreatedBy), Time(wk.CreatedAt))
	fmt.Fprintf(w, "\ncoverage: %s\n", tl.Coverage.State)
	for _, r := range tl.Coverage.Reasons {
		line := "  - " + r.Text
		if r.Meaning != "" {
			line += ": " + r.Meaning
		}
		fmt.Fprintln(w, line)
		for _, why := range r.Why {
			fmt.Fprintf(w, "      because %s\n", why)
		}
	}
	if tl.Changes == "" && tl.ChangesNote != "" {
		fmt.Fprintf(w, "\nfiles: %s\n", tl.ChangesNote)
	}
	for _, s := range tl.Sessions {
		natives := "no native session yet"
		if len(s.NativeSessionIDs) > 0 {
			natives = "native " + Clean(strings.Join(s.NativeSessionIDs, ", "))
		}
		end := "not ended"
		if s.Ended {
			end = "ended " + Time(s.End)
		} else if s.End != 0 {
			end = "last event " + Time(s.End) + ", not ended"
		}
		agent := "agent unknown"
		if s.Agent != "" {
			agent = "agent " + Clean(s.Agent)
		}
		fmt.Fprintf(w, "\nsession %s (generation %d, %s, %s): started %s, %s; %d events, coverage %s\n",
			Clean(s.Session), s.Generation, agent, natives, Time(s.Start), end, s.Events, s.Coverage)
		if s.MissingSeqs > 0 {
			fmt.Fprintf(w, "  %d sequence numbers never reached the Hub\n", s.MissingSeqs)
		}
		for _, c := range s.Calls {
			pos := "position -"
			if c.Position != nil {
				pos = fmt.Sprintf("position %d", *c.Position)
			}
			line := fmt.Sprintf("  #%-4d %-10s %-9s %s", c.Seq, Clean(c.Tool), c.Result, pos)
			if f := c.Files(); f != "" {
				line += "  " + f
			}
			if c.Result == "unknown" {
				line += "  (" + c.ResultWhy + ")"
			}
			if c.ActionResult != "" && c.ActionResult != c.Result {
				line += "  [action " + c.ActionResult + "]"
			}
			fmt.Fprintln(w, line)
		}
		for _, g := range groupGaps(s.Gaps) {
			reason := ""
			if g.Reason != "" {
				reason = " (" + Clean(g.Reason) + ")"
			}
			fmt.Fprintf(w, "  %s %s%s%s: %s; %s\n", plural(g.Count, "gap", "gaps"), g.Kind, reason, g.At, g.Meaning, g.Why)
		}
	}
	if len(tl.Rewinds) > 0 {
		fmt.Fprintln(w, "\nother changelog positions:")
		for _, p := range tl.Rewinds {
			fmt.Fprintf(w, "  position %d  %s  %s\n", p.Position, p.Kind, p.Note)
		}
	}
	if len(tl.Actions) > 0 {
		fmt.Fprintf(w, "\nactions (%d):\n", len(tl.Actions))
	}
	for _, a := range tl.Actions {
		line := fmt.Sprintf("  %s  %s %s  %s: %s", a.ActionID, a.Class, Clean(a.Tool), a.Result, a.ResultWhy)
		if len(a.Recipe) >= 12 {
			line += "  recipe=" + a.Recipe[:12] + " caller_asserted"
		}
		fmt.Fprintln(w, line)
		fmt.Fprintf(w, "    source: %s\n", a.Source)
		drift := a.Drift
		if drift == "" {
			drift = "-"
		}
		fmt.Fprintf(w, "    drift: %s (%s)\n", drift, a.DriftWhy)
	}
	u := tl.Usage
	fmt.Fprintf(w, "\nusage: %d records, input %d, output %d, cache creation %d, cache read %d tokens\n",
		u.Records, u.InputTokens, u.OutputTokens, u.CacheCreationInputTokens, u.CacheReadInputTokens)
	for _, name := range []string{"input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"} {
		if n := u.Unknown[name]; n > 0 {
			fmt.Fprintf(w, "  %s unknown in %d records (the sum covers the others)\n", name, n)
		}
	}
	for _, st := range tl.Setups {
		fmt.Fprintf(w, "setup %s (session %s): model %s, permission mode %s, effort %s; unobserved: %s\n",
			st.Artifact, Clean(st.Session), orUnobserved(st.Model), orUnobserved(st.PermissionMode), orUnobserved(st.Effort), Clean(strings.Join(st.Unobserved, ", ")))
	}
	for _, cu := range u.SessionCumulative {
		fmt.Fprintf(w, "  session %s (generation %d) reported its own total for %s, not added: input %s, output %s\n",
			Clean(cu.Session), cu.Generation, Clean(cu.Model), count(cu.InputTokens), count(cu.OutputTokens))
	}
	if tl.EventsOmitted > 0 {
		fmt.Fprintf(w, "\n%d later events are omitted from this record\n", tl.EventsOmitted)
	}
	fmt.Fprintf(w, "\n%s\n", tl.Summary.Text)
}

// GapGroup is the gaps of one kind and reason in a session.
type GapGroup struct {
	Gap
	Count int
	// At lists where they are (" at #2, #10"), or "".
	At string
}

// GapGroups folds the session's gaps of one kind and reason into one
// entry that lists where they are.
func (s Session) GapGroups() []GapGroup { return groupGaps(s.Gaps) }

// groupGaps folds a session's gaps of one kind and reason into one line
// that lists where they are.
func groupGaps(gaps []Gap) []GapGroup {
	var out []GapGroup
	idx := map[string]int{}
	for _, g := range gaps {
		k := g.Kind + "\x00" + g.Reason
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, GapGroup{Gap: g})
		}
		gg := &out[i]
		gg.Count++
		if g.FromSeq != 0 {
			at := fmt.Sprintf("#%d", g.FromSeq)
			if g.ToSeq > g.FromSeq {
				at = fmt.Sprintf("#%d..#%d", g.FromSeq, g.ToSeq)
			}
			if gg.At == "" {
				gg.At = " at " + at
			} else {
				gg.At += ", " + at
			}
		}
	}
	return out
}

func orUnobserved(s string) string {
	if s == "" {
		return "unobserved"
	}
	return Clean(s)
}

func count(v *int64) string {
	if v == nil {
		return "unknown"
	}
	return fmt.Sprint(*v)
}
