package cli

import (
	"context"
	"fmt"

	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/timeline"
)

// changeCaptureShowCommand is `agentscm change-capture show`; the
// change-capture group lists it.
func changeCaptureShowCommand() *Command {
	return &Command{Name: "show", Summary: "print a Work's timeline: each tool call with its files and result (read-only)", Run: runChangeCaptureShow}
}

func runChangeCaptureShow(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm change-capture show", "[--root ABS] [--work-id ID] [--format text|json | --record]",
		`Print a Work's timeline from its change record on the checkout's connected
Hub: the coverage explained in words, each session's start and end, one line
per tool call with its sequence number, tool, result (succeeded, failed, or
unknown and why), changelog position and the files it created (+), modified
(~) and deleted (-), the gaps with what they mean and why they are there, the
actions with their source binding and drift, the usage totals, and last a
summary line such as "4 calls, 1 failed; 1 created, 1 modified, 1 deleted".

Without --root the checkout is the one containing the working directory;
without --work-id the Work is the checkout's current Work. File names come
from the checkout's local changelog (agentscm changelog enable), names only,
never contents. It runs no model and changes nothing. Shared conversation
bodies are never part of it (read them with change-capture conversation).
--format json prints the same timeline as JSON; --record prints the Hub's
change-record projection itself (the JSON of GET .../works/{work}/record).`)
	root := fs.String("root", "", "absolute path of the checkout (default: the checkout containing the working directory)")
	id := fs.String("work-id", "", "the Work (default: the checkout's current Work)")
	format := formatFlag(fs)
	raw := fs.Bool("record", false, "print the Hub's change-record projection as JSON instead of the timeline")
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, hubTimeout)
	defer cancel()
	c, conn, err := openCheckout(ctx, env, *root)
	if err != nil {
		return err
	}
	defer conn.Close()
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
	tl := timeline.Build(rec, incs, src)
	if *format == "json" {
		return writeJSON(env.Stdout, tl)
	}
	timeline.WriteText(env.Stdout, tl)
	return nil
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
