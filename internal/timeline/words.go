package timeline

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/agentscm/agentscm/internal/hub/api"
)

// normalGap reports a gap every session of the host has: an event the
// host's payload gives no identity of its own (identity_uncertain,
// no_provider_identity). It loses nothing.
func normalGap(kind, reason string) bool {
	return kind == "identity_uncertain" && reason == "no_provider_identity"
}

// coverageWords says the record's coverage as a person reads it: complete
// for what the host reports when the only reasons it is partial are the
// host's normal missing identities (and sessions still running), else
// partial with the other reasons named.
func coverageWords(rec api.ChangeRecord, tl *Timeline) string {
	switch tl.Coverage.State {
	case "complete":
		return "complete"
	case "none", "":
		return "nothing captured yet"
	}
	abnormalKinds := map[string]bool{}
	for _, g := range rec.Gaps {
		if !normalGap(g.Kind, g.Reason) {
			abnormalKinds[g.Kind] = true
		}
	}
	running := false
	var other []string
	for _, r := range tl.Coverage.Reasons {
		switch {
		case r.Kind != "" && !abnormalKinds[r.Kind]:
		case strings.Contains(r.Text, "has not ended"):
			running = true
		case r.Meaning != "":
			other = append(other, r.Meaning+" ("+r.Text+")")
		default:
			other = append(other, r.Text)
		}
	}
	if len(other) > 0 {
		return "partial: " + strings.Join(other, "; ")
	}
	words := "complete for what " + hostsOf(tl) + " reports"
	if running {
		words += " so far (a session is still running, or ended without saying so)"
	}
	return words
}

// hostsOf names the agents that ran the sessions ("Claude Code", "Codex
// CLI and Claude Code").
func hostsOf(tl *Timeline) string {
	seen := map[string]bool{}
	var names []string
	for _, s := range tl.Sessions {
		n := agentName(s.Agent)
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return agentName("")
	}
	sort.Strings(names)
	return strings.Join(names, " and ")
}

func agentName(agent string) string {
	if n, ok := agentText[agent]; ok {
		return n
	}
	return agentText[AgentClaude]
}

// WriteSummary writes the default terminal view: the Work's title, the
// coverage in words, then per session one summary line (calls, failures,
// files created, modified and deleted, duration) and one line per call
// (time, tool, result, files, the changelog position to rewind to); no
// internal identifiers. WriteText is the full view (--verbose).
func WriteSummary(w io.Writer, tl *Timeline) {
	title := Clean(tl.Work.Title)
	if title == "" {
		title = "(untitled)"
	}
	fmt.Fprintf(w, "%s: %s, started %s\n", title, tl.Work.State, Time(tl.Work.CreatedAt))
	fmt.Fprintf(w, "record: %s\n", tl.CoverageWords)
	if tl.Changes == "" && tl.ChangesNote != "" {
		fmt.Fprintf(w, "files: %s\n", tl.ChangesNote)
	}
	for i, s := range tl.Sessions {
		if s.Events == 0 && len(s.Calls) == 0 {
			continue
		}
		fmt.Fprintf(w, "\nsession %d (%s) %s: %s\n", i+1, agentName(s.Agent), span(s), sessionCounts(s.Summary))
		for _, c := range s.Calls {
			fmt.Fprintln(w, callLine(c))
		}
	}
	fmt.Fprintf(w, "\n%s\n", tl.Summary.Text)
	fmt.Fprintln(w, "(rewind --to N puts the files back as they were after the call marked N; --verbose shows the gaps, identifiers, actions and usage)")
}

// span is a session's time span in words.
func span(s Session) string {
	if s.Start == 0 {
		return "time not reported"
	}
	start := time.Unix(s.Start, 0).UTC()
	out := start.Format("2006-01-02 15:04:05Z")
	if s.End >= s.Start {
		out += fmt.Sprintf(", %s", time.Duration(s.End-s.Start)*time.Second)
	}
	if !s.Ended {
		out += ", not ended"
	}
	return out
}

func sessionCounts(s Summary) string {
	t := plural(s.Calls, "call", "calls")
	t += fmt.Sprintf(", %d failed", s.Failed)
	if s.Unknown > 0 {
		t += fmt.Sprintf(", %d unknown", s.Unknown)
	}
	return fmt.Sprintf("%s; %d created, %d modified, %d deleted", t, s.Created, s.Modified, s.Deleted)
}

// callLine is one call: time, tool, result, files and its rewind mark.
func callLine(c Call) string {
	at := "--:--:--"
	if t := c.StartedAt; t != 0 {
		at = time.Unix(t, 0).UTC().Format("15:04:05")
	} else if c.FinishedAt != 0 {
		at = time.Unix(c.FinishedAt, 0).UTC().Format("15:04:05")
	}
	result := c.Result
	if result == "" {
		result = "running"
	}
	line := fmt.Sprintf("  %s  %-10s %-9s", at, Clean(c.Tool), result)
	if c.Position != nil {
		line += fmt.Sprintf(" [%d]", *c.Position)
	}
	if f := c.Files(); f != "" {
		line += "  " + f
	}
	if c.Result == "unknown" {
		line += "  (" + c.ResultWhy + ")"
	}
	return line
}
