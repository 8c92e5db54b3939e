package cli

import (
	"bytes"
	"context"
	"fmt"

	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/spool"
	"github.com/agentscm/agentscm/internal/timeline"
)

// changeCaptureShowCommand is `agentscm change-capture show`; the
// change-capture group lists it.
func changeCaptureShowCommand() *Command {
	return &Command{Name: "show", Summary: "print a Work's timeline: each tool call with its files and result (read-only)", Run: runChangeCaptureShow}
}

func runChangeCaptureShow(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm change-capture show", "[--root PATH] [--work-id ID] [--verbose] [--format text|json | --record]",
		`Print a Work's timeline from its change record on the checkout's connected
Hub. By default: the Work's title, the coverage in words ("complete for what
Claude Code reports" when the only gaps are the host's normal missing
identities), then for each session one line with its calls, failures, files
created, modified and deleted and its duration, and one line per tool call
with its time, tool, result (succeeded, failed, or unknown and why), its
changelog position in brackets (what rewind --to takes) and the files it
created (+), modified (~) and deleted (-); last a summary line such as
"4 calls, 1 failed; 1 created, 1 modified, 1 deleted". No identifiers.

--verbose is the full view: the Work and session identifiers, each call's
sequence number, every reason for partial coverage and every gap with what
it means and why it is there, the actions with their source binding and
drift, and the usage totals. --format json carries everything (the exact
gaps and reasons, and coverage_words).

Without --root the checkout is the one containing the working directory;
without --work-id the Work is the checkout's current Work. File names come
from the checkout's local changelog (agentscm changelog enable), names only,
never contents; for a Work this checkout's changelog does not hold (another
checkout's, or none here) they come from the increments on the Hub (at most
64 MiB downloaded). It runs no model and changes nothing. Shared conversation
bodies are never part of it (read them with change-capture conversation).
--format json prints the timeline as JSON; --record prints the Hub's
change-record projection itself (the JSON of GET .../works/{work}/record).`)
	root := fs.String("root", "", rootHelp)
	id := fs.String("work-id", "", "the Work (default: the checkout's current Work)")
	format := formatFlag(fs)
	raw := fs.Bool("record", false, "print the Hub's change-record projection as JSON instead of the timeline")
	verbose := fs.Bool("verbose", false, "the full view: the Work and session identifiers, each call's sequence number, every gap with what it means and why, the actions and the usage")
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, hubTimeout)
	defer cancel()
	c, conn, err := openCheckout(ctx, env, *root)
	if err != nil {
		return err
	}
	defer conn.Close()
	// After the output: what this checkout's spool still holds for the Hub
	// gets a deliverer (the timeline shows what reached the Hub).
	defer kickCheckout(env, c.Root)
	work := *id
	if work == "" {
		cur, err := conn.CurrentWork(ctx, c.WorktreeID)
		if err != nil {
			return fmt.Errorf("%s has no current Work on the Hub (%w); pass --work-id (agentscm work list shows them)", c.Root, err)
		}
		work = cur.Work.ID
	}
	rec, err := conn.Record(ctx, work)
	if err != nil {
		return err
	}
	if *raw {
		return writeJSON(env.Stdout, rec)
	}
	incs, src := localIncrements(env, c.Root, c.WorktreeID)
	if !anyOf(incs, rec) {
		// Not this checkout's changelog (another checkout's Work, or no
		// changelog here): the increments the Hub holds for the Work.
		if hincs, hsrc := hubIncrements(ctx, conn, work); hsrc.Name != "" || src.Name == "" {
			if hsrc.Name == "" && src.Note != "" {
				hsrc.Note = src.Note + "; " + hsrc.Note
			}
			incs, src = hincs, hsrc
		}
	}
	src.Agents = spoolAgents(env, c.Root)
	tl := timeline.Build(rec, incs, src)
	if *format == "json" {
		return writeJSON(env.Stdout, tl)
	}
	if *verbose {
		timeline.WriteText(env.Stdout, tl)
	} else {
		timeline.WriteSummary(env.Stdout, tl)
	}
	return nil
}

// spoolAgents is the agent of each native session the checkout's spool
// holds (nil when it has none or it is unreadable): several agents may be
// captured in one checkout, and the Hub's record does not name them.
func spoolAgents(env *Env, root string) map[string]string {
	store, err := configStore(env)
	if err != nil {
		return nil
	}
	cfg, err := store.Bindings().Load()
	if err != nil {
		return nil
	}
	b := cfg.Find(root)
	if b == nil {
		return nil
	}
	sp, err := spool.OpenReadOnly(b.Spool)
	if err != nil {
		return nil
	}
	recs, err := sp.Events()
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for _, r := range recs {
		if r.Agent != "" && r.SessionID != "" {
			out[r.SessionID] = r.Agent
		}
	}
	return out
}

// localIncrements reads the checkout's local changelog for the timeline's
// file names; without one the timeline says so.
func localIncrements(env *Env, root, worktree string) ([]timeline.Increment, timeline.Source) {
	rf := rootFlags{root: root}
	cl, err := openChangelog(env, &rf, false)
	if err != nil {
		return nil, timeline.Source{Note: "this checkout has no local changelog (agentscm changelog enable --root " + root + " records each call's files)"}
	}
	list, err := cl.List()
	if err != nil {
		return nil, timeline.Source{Note: "the local changelog could not be read: " + err.Error()}
	}
	return changelogIncrements(list, worktree), timeline.Source{Name: "local changelog"}
}

// anyOf reports whether some increment belongs to a native session of rec.
func anyOf(incs []timeline.Increment, rec api.ChangeRecord) bool {
	natives := map[string]bool{}
	for _, s := range rec.Sessions {
		for _, n := range s.NativeSessionIDs {
			natives[n] = true
		}
	}
	for _, in := range incs {
		if natives[in.Session] {
			return true
		}
	}
	return false
}

// maxShowIncrementBytes bounds what show downloads from the Hub to read
// the increments' file names.
const maxShowIncrementBytes = 64 << 20

// hubIncrements reads the metadata of the Work's increments on the Hub
// (downloading at most maxShowIncrementBytes; the rest are listed without
// names).
func hubIncrements(ctx context.Context, conn client.Conn, work string) ([]timeline.Increment, timeline.Source) {
	list, err := conn.ListIncrements(ctx, work)
	if err != nil {
		return nil, timeline.Source{Note: "the Hub's changelog of the Work could not be listed: " + err.Error()}
	}
	if len(list.Increments) == 0 {
		return nil, timeline.Source{Note: "the Work holds no changelog increments on the Hub"}
	}
	budget := int64(maxShowIncrementBytes)
	skipped := 0
	out := make([]timeline.Increment, 0, len(list.Increments))
	for _, in := range list.Increments {
		bare := timeline.Increment{Position: in.Position, WorktreeID: in.WorktreeID, Session: in.Session, Tool: in.Tool, Failed: in.Failed, Kind: in.Kind}
		if in.Size > budget {
			skipped++
			bare.Unread = "its increment was not downloaded (show reads at most 64 MiB of increments from the Hub)"
			out = append(out, bare)
			continue
		}
		budget -= in.Size
		b, err := conn.GetIncrement(ctx, work, in)
		var m *incmeta.Meta
		if err == nil {
			m, err = incmeta.ReadFrom(bytes.NewReader(b))
		}
		if err != nil {
			skipped++
			bare.Unread = "its increment could not be read from the Hub: " + err.Error()
			out = append(out, bare)
			continue
		}
		out = append(out, timeline.FromMeta(m, in.WorktreeID))
	}
	src := timeline.Source{Name: "hub"}
	if skipped > 0 {
		src.Note = fmt.Sprintf("the file names of %d increments are missing (not downloaded or unreadable)", skipped)
	}
	return out, src
}

func changelogIncrements(list []changelog.Info, worktree string) []timeline.Increment {
	out := make([]timeline.Increment, 0, len(list))
	for _, in := range list {
		if in.Err != "" {
			continue
		}
		out = append(out, timeline.Increment{Position: in.Position, WorktreeID: worktree, Session: in.Session, ToolUseID: in.ToolUseID,
			Tool: in.Tool, Failed: in.Failed, Kind: in.Kind, Changes: in.Changes})
	}
	return out
}
