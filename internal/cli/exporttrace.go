package cli

import (
	"context"

	"github.com/agentscm/agentscm/internal/attribution"
)

func exportTraceCommand() *Command {
	return &Command{Name: "export", Summary: "write the Agent Trace record of a commit, a session or a Work (--format agent-trace)", Run: runExportTrace}
}

func runExportTrace(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm export", "--format agent-trace [--root ABS] (--commit REV | --session ID | --work-id ID)", `
Write one Agent Trace record (specification 0.1.0, media type
application/vnd.agent-trace.record+json) on stdout:

  --commit REV   the lines commit REV adds, by author (what the commit's
                 note under refs/notes/agentscm holds; written afresh
                 from the changelog)
  --session ID   the lines of the working tree that session's tool calls
                 wrote (no vcs revision: the line numbers are the working
                 tree's)
  --work-id ID   the same for every session whose tool calls this
                 checkout's changelog uploaded under that Work

A record never holds conversation text: a session appears as its id, a
prompt as its sequence number, a tool call as its position and tool name.
See docs/attribution.md.`)
	var rf rootFlags
	rf.register(fs, false)
	format := traceFormat("agent-trace")
	fs.Var(&format, "format", "the record format: agent-trace")
	commit := fs.String("commit", "", "the commit whose added lines to export")
	session := fs.String("session", "", "the session whose lines to export")
	work := fs.String("work-id", "", "the Work whose sessions' lines to export")
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	if format != "agent-trace" {
		return usagef("--format must be agent-trace, not %q", string(format))
	}
	if n := btoi(*commit != "") + btoi(*session != "") + btoi(*work != ""); n != 1 {
		return usagef("give one of --commit REV, --session ID and --work-id ID")
	}
	c, err := openChangelog(env, &rf, false)
	if err != nil {
		return err
	}
	repo, err := attribution.Open(c)
	if err != nil {
		return err
	}
	version := attribution.ToolVersion()
	var rec *attribution.TraceRecord
	switch {
	case *commit != "":
		rec, err = repo.CommitTrace(ctx, *commit, env.Now(), version)
	case *session != "":
		rec, err = repo.SessionTrace(ctx, []string{*session}, env.Now(), version)
	default:
		var sessions []string
		if sessions, err = repo.WorkSessions(*work); err == nil {
			if rec, err = repo.SessionTrace(ctx, sessions, env.Now(), version); err == nil {
				rec.Metadata[attribution.VendorKey].(map[string]any)["work_id"] = *work
			}
		}
	}
	if err != nil {
		return err
	}
	return writeJSON(env.Stdout, rec)
}

// ownFormat marks a --format flag whose values its command checks itself
// (parseFlags checks every other --format for text or json).
type ownFormat interface{ ownFormat() }

// traceFormat is export's --format: agent-trace.
type traceFormat string

func (f *traceFormat) String() string     { return string(*f) }
func (f *traceFormat) Set(v string) error { *f = traceFormat(v); return nil }
func (*traceFormat) ownFormat()           {}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
