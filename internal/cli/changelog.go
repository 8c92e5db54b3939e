package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/agentscm/agentscm/internal/agent/adapter"
	"github.com/agentscm/agentscm/internal/agent/codex"
	"github.com/agentscm/agentscm/internal/agent/hookfile"
	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/changelog/hubremote"
	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/agentscm/agentscm/internal/fsutil"
)

// ExitTurnRunning is the exit status of a changelog operation refused while
// an agent turn runs: the seed's 409.
const ExitTurnRunning = 5

// ExitUnreadableArchive is the exit status of an apply or load refused
// because an increment is not a readable (or is a hostile) archive: the
// seed's 422.
const ExitUnreadableArchive = 4

func changelogCommand() *Command {
	return &Command{
		Name:    "changelog",
		Summary: "per-tool-call increments of a checkout: capture, list, rewind",
		Sub: []*Command{
			{Name: "enable", Summary: "install the changelog hooks: every tool call becomes an increment", Run: runChangelogEnable},
			{Name: "disable", Summary: "remove only the changelog hooks (increments are kept)", Run: runChangelogDisable},
			{Name: "hook-claude", Summary: "the Claude Code changelog hook (reads one hook payload on stdin)", Run: func(ctx context.Context, env *Env, args []string) error {
				if len(args) > 0 {
					return usagef("hook-claude takes no arguments")
				}
				runHookArgs(ctx, env, "changelog", "hook-claude")
				return nil
			}},
			{Name: "watch-serve", Summary: "the on-demand filesystem watcher of a changelog (started by the hook)", Run: runChangelogWatchServe},
			{Name: "status", Summary: "the next position, the sessions' running and stale turns, and whether the filesystem watcher vouches for the next capture", Run: runChangelogStatus},
			{Name: "end-turn", Summary: "declare a session's turn over (an interrupted turn whose agent still runs)", Run: runChangelogEndTurn},
			{Name: "watch", Summary: "turn the changelog's filesystem watcher on or off, or stop its server", Run: runChangelogWatch},
			{Name: "hook-codex", Summary: "the Codex CLI changelog hook (reads one hook payload on stdin)", Run: func(ctx context.Context, env *Env, args []string) error {
				if len(args) > 0 {
					return usagef("hook-codex takes no arguments")
				}
				runHookArgs(ctx, env, "changelog", "hook-codex")
				return nil
			}},
			{Name: "hook-gemini", Summary: "the Gemini CLI changelog hook (reads one hook payload on stdin)", Run: func(ctx context.Context, env *Env, args []string) error {
				if len(args) > 0 {
					return usagef("hook-gemini takes no arguments")
				}
				runHookArgs(ctx, env, "changelog", "hook-gemini")
				return nil
			}},
			{Name: "capture", Summary: "store the writes and deletions since the last increment as the next one", Run: runChangelogCapture},
			{Name: "list", Summary: "list the stored increments: what each call changed and what the Hub holds", Run: runChangelogList},
			{Name: "upload", Summary: "upload the increments the Hub does not hold yet (what the hooks retry)", Run: runChangelogUpload},
			{Name: "apply", Summary: "rewind the capture roots to a position (undoable)", Run: runChangelogApply},
		},
	}
}

func snapshotCommand() *Command {
	return &Command{
		Name:    "snapshot",
		Summary: "save or load a whole workspace as one archive",
		Sub: []*Command{
			{Name: "save", Summary: "write a full archive of the capture roots", Run: runSnapshotSave},
			{Name: "load", Summary: "restore a snapshot into the capture roots", Run: runSnapshotLoad},
		},
	}
}

// rootFlags are the flags that locate a checkout's changelog.
type rootFlags struct {
	root, dir      string
	extra          multiFlag
	includeIgnored bool
	// transcript adds (transcriptOn) or drops (transcriptOff) the Claude
	// Code transcript directory of the checkout as a capture root when the
	// roots are recorded; transcriptKeep leaves the recorded roots alone.
	transcript transcriptMode
	home       string
}

func (rf *rootFlags) register(fs *flag.FlagSet, extraRoots bool) {
	fs.StringVar(&rf.root, "root", "", rootHelp)
	fs.StringVar(&rf.dir, "dir", "", "changelog directory (default: the checkout's, one per checkout under the agentscm config directory, or where changelog enable --dir put it)")
	if extraRoots {
		fs.Var(&rf.extra, "extra-root", "another capture root as NAME=ABSPATH, e.g. transcripts=/home/u/.claude/projects/x (repeatable)")
		fs.BoolVar(&rf.includeIgnored, "include-ignored", false, "capture git-ignored paths of the checkout too")
	}
}

// roots resolves the capture roots from the flags.
func (rf *rootFlags) roots() ([]changelog.Root, string, error) {
	root, err := binding.CanonicalRoot(rf.root)
	if err != nil {
		return nil, "", usagef("%v", err)
	}
	roots := []changelog.Root{{Name: "checkout", Path: root, Git: true, IncludeIgnored: rf.includeIgnored}}
	for _, e := range rf.extra {
		name, p, ok := strings.Cut(e, "=")
		if !ok || name == "" || !filepath.IsAbs(p) {
			return nil, "", usagef("--extra-root %q must be NAME=ABSPATH", e)
		}
		roots = append(roots, changelog.Root{Name: name, Path: filepath.Clean(p)})
	}
	return roots, root, nil
}

func (rf *rootFlags) changelogDir(env *Env, root string) (string, error) {
	if rf.dir != "" {
		if !filepath.IsAbs(rf.dir) {
			return "", usagef("--dir %q is not an absolute path", rf.dir)
		}
		return filepath.Clean(rf.dir), nil
	}
	cfg, err := binding.ConfigDir(env.Getenv)
	if err != nil {
		return "", err
	}
	if err := fsutil.MkdirPrivate(filepath.Join(cfg, "changelog")); err != nil {
		return "", err
	}
	return changelog.DirFor(cfg, root), nil
}

// openChangelog opens the checkout's changelog. With capture set, the roots
// given on the command line are recorded; otherwise the recorded roots are
// used and the checkout must already have a changelog.
func openChangelog(env *Env, rf *rootFlags, capture bool) (*changelog.Changelog, error) {
	roots, root, err := rf.roots()
	if err != nil {
		return nil, err
	}
	dir, err := rf.changelogDir(env, root)
	if err != nil {
		return nil, err
	}
	stored, err := changelog.LoadRoots(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if !capture {
			return nil, fmt.Errorf("no changelog for %s (looked in %s)", root, dir)
		}
	case err != nil:
		return nil, err
	case !capture || len(rf.extra) == 0:
		if stored[0].Path != root {
			return nil, fmt.Errorf("changelog %s belongs to %s, not %s", dir, stored[0].Path, root)
		}
		roots = stored
	}
	if capture {
		if roots, err = rf.withTranscript(env, roots); err != nil {
			return nil, err
		}
	}
	c, err := changelog.Open(dir, changelog.Options{Roots: roots, Exclude: configExclude(env), ConversationRefs: conversationRefs(env, root)})
	if err != nil {
		return nil, err
	}
	if capture {
		if err := c.SaveRoots(); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func runChangelogCapture(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm changelog capture", "[--root PATH] [flags]", `
Store the writes and deletions under the capture roots since the last stored
increment as increment <position:06d>.tgz (GNU incremental tar, gzip). The
capture hook does this after every tool call; this command does it by hand.`)
	var rf rootFlags
	rf.register(fs, true)
	pos := fs.Int("position", -1, "the tool call's zero-based position (default: after the last stored one)")
	session := fs.String("session", "", "the tool call's session id")
	tool := fs.String("tool", "", "the tool's name")
	failed := fs.Bool("failed", false, "the tool call failed (it still takes its position)")
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	c, err := openChangelog(env, &rf, true)
	if err != nil {
		return err
	}
	inc, err := c.Capture(ctx, changelog.CaptureRequest{Position: *pos, SessionID: *session, Tool: *tool, Failed: *failed})
	if err != nil {
		return err
	}
	if *format == "json" {
		return writeJSON(env.Stdout, map[string]any{"position": inc.Position, "path": inc.Path, "size": inc.Size,
			"files": inc.Meta.Files, "deleted": inc.Meta.Deleted, "bytes": inc.Meta.Bytes, "removed_roots": inc.Meta.RemovedRoots,
			"changes": inc.Meta.Changes})
	}
	if ch := inc.Meta.Changes; ch != nil {
		fmt.Fprintf(env.Stdout, "stored increment %d: %d created, %d modified, %d deleted (%d bytes changed); %d files stored (%d bytes), %d bytes compressed\n",
			inc.Position, len(ch.Created)+ch.CreatedOmitted, len(ch.Modified)+ch.ModifiedOmitted, len(ch.Deleted)+ch.DeletedOmitted, ch.Bytes,
			inc.Meta.Files, inc.Meta.Bytes, inc.Size)
		return nil
	}
	fmt.Fprintf(env.Stdout, "stored increment %d: %d files (%d bytes), %d deleted, %d bytes compressed\n",
		inc.Position, inc.Meta.Files, inc.Meta.Bytes, inc.Meta.Deleted, inc.Size)
	return nil
}

func runChangelogList(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm changelog list", "[--root PATH] [flags]", `
List the stored increments of a checkout: position, kind, tool, the paths
the call created (+), modified (~) and deleted (-) with their counts (at
most 100 paths of each kind are named), the bytes the call changed (created
files' sizes, modified files' new sizes; what the conversation's transcript
grew by is a note of its own),
the archive size, and what the checkout's Hub holds of the position
(uploaded, pending, refused, merged into a later position and why, or
local-only). With --from-hub, the increments a Work holds on the checkout's
connected Hub, with its grant and usage.`)
	var rf rootFlags
	rf.register(fs, false)
	fromHub := fs.Bool("from-hub", false, "list the increments a Work holds on the checkout's connected Hub instead")
	work := fs.String("work", "", "with --from-hub: the Work (default: the checkout's current Work)")
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	if *fromHub {
		return runChangelogListFromHub(ctx, env, rf.root, *work, *format)
	}
	c, err := openChangelog(env, &rf, false)
	if err != nil {
		return err
	}
	list, err := c.List()
	if err != nil {
		return err
	}
	if *format == "json" {
		if list == nil {
			list = []changelog.Info{}
		}
		return writeJSON(env.Stdout, map[string]any{"dir": c.Dir(), "increments": list})
	}
	// The rows go through the tabwriter; each row's path lines are put
	// under it afterwards, so they do not break the columns.
	var rows bytes.Buffer
	tw := tabwriter.NewWriter(&rows, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POSITION\tKIND\tTOOL\tCREATED\tMODIFIED\tDELETED\tBYTES\tSIZE\tHUB\tNOTE")
	pathLines := make([][]string, len(list))
	// With several sessions in the sequence (parallel sessions), each
	// position names its session.
	sessions := map[string]bool{}
	for _, in := range list {
		if in.Kind == changelog.KindCall {
			sessions[in.Session] = true
		}
	}
	for k, in := range list {
		var notes []string
		if len(sessions) > 1 && in.Session != "" {
			notes = append(notes, "session "+cell(in.Session))
		}
		if len(in.Concurrent) > 0 {
			notes = append(notes, "taken while the turn of session "+cell(strings.Join(in.Concurrent, ", "))+" ran: its writes may be mixed in")
		}
		switch {
		case in.Err != "":
			notes = append(notes, "unreadable: "+oneLine(in.Err))
		case in.Failed:
			notes = append(notes, "failed call")
		}
		if o := in.Outside; o != nil {
			notes = append(notes, outsideNote(o))
		}
		for _, h := range in.Holds {
			notes = append(notes, heldNote(h))
		}
		if in.Reverted != nil {
			notes = append(notes, fmt.Sprintf("reverted call %d", *in.Reverted))
		}
		if len(in.Removed) > 0 {
			notes = append(notes, "removed roots: "+strings.Join(in.Removed, ","))
		}
		created, modified, deleted, bytes := fmt.Sprint(in.Files), "?", fmt.Sprint(in.Deleted), in.Bytes
		ch := in.Changes
		if ch != nil {
			created = fmt.Sprint(len(ch.Created) + ch.CreatedOmitted)
			modified = fmt.Sprint(len(ch.Modified) + ch.ModifiedOmitted)
			deleted = fmt.Sprint(len(ch.Deleted) + ch.DeletedOmitted)
			bytes = ch.Bytes
			if ch.TranscriptBytes > 0 {
				notes = append(notes, fmt.Sprintf("conversation +%d bytes", ch.TranscriptBytes))
			}
			if ch.Baseline {
				notes = append(notes, "first capture without a baseline: every stored path counts as created")
			}
		} else if in.Err == "" {
			notes = append(notes, "captured before per-call changes were recorded: files stored, not created")
		}
		hub := "-"
		if h := in.Hub; h != nil {
			hub = h.State
			switch h.State {
			case "merged":
				hub = fmt.Sprintf("merged into %d", h.Into)
				notes = append(notes, "refused: "+cell(h.Reason))
			case "refused":
				notes = append(notes, "refused (the next uploaded increment carries its writes): "+oneLine(h.Reason))
			case "pending", "local-only":
				if h.Reason != "" {
					notes = append(notes, oneLine(h.Reason))
				}
			}
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", in.Position, oneLine(in.Kind), cell(in.Tool), created, modified, deleted, bytes, in.Size, hub, strings.Join(notes, "; "))
		if ch != nil {
			for _, l := range []struct {
				sign  string
				paths []string
				more  int
				what  string
			}{{"+", ch.Created, ch.CreatedOmitted, "created"}, {"~", ch.Modified, ch.ModifiedOmitted, "modified"}, {"-", ch.Deleted, ch.DeletedOmitted, "deleted"}} {
				for _, p := range l.paths {
					pathLines[k] = append(pathLines[k], fmt.Sprintf("  %s %s", l.sign, showPath(p)))
				}
				if l.more > 0 {
					pathLines[k] = append(pathLines[k], fmt.Sprintf("  %s ... and %d more %s", l.sign, l.more, l.what))
				}
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	lines := strings.Split(strings.TrimSuffix(rows.String(), "\n"), "\n")
	fmt.Fprintln(env.Stdout, lines[0])
	for k, l := range lines[1:] {
		fmt.Fprintln(env.Stdout, l)
		for _, p := range pathLines[k] {
			fmt.Fprintln(env.Stdout, p)
		}
	}
	return nil
}

// outsideNote says where an outside increment's work was found.
func outsideNote(o *incmeta.Outside) string {
	switch {
	case o.Event == "UserPromptSubmit":
		return "work done outside the agent, found before a prompt of session " + cell(o.SessionID)
	case o.BeforeTool != "":
		return "work done outside the agent, found before the " + cell(o.BeforeTool) + " call " + cell(o.BeforeToolUseID)
	}
	return "work done outside the agent"
}

// heldNote says which lost position an increment carries.
func heldNote(h incmeta.Held) string {
	what := "call"
	if h.Kind == changelog.KindOutside {
		what = "outside work"
	} else if h.Tool != "" {
		what = cell(h.Tool) + " call"
	}
	return fmt.Sprintf("also holds the %s of position %d, whose increment was not stored (%s)", what, h.Position, oneLine(h.Error))
}

// cell renders a value as one table cell: one line, no tabs.
func cell(s string) string { return strings.ReplaceAll(oneLine(s), "\t", " ") }

// showPath renders a path of a change list, quoted when it holds control
// characters (a newline in a file name would otherwise start a line).
func showPath(p string) string {
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return strconv.Quote(p)
		}
	}
	return p
}

func runChangelogUpload(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm changelog upload", "[--root PATH] [--format text|json]", `
Upload the stored increments the checkout's Hub does not hold yet, oldest
first, under the checkout's current Work and within its grant: what the
hooks do after each tool call, for the positions still pending (the Hub was
unreachable, or had no current Work for the checkout). It first compares
with the Hub's list: the grant is read afresh (after work grant raised it,
positions refused before are uploaded each on its own) and positions the
Hub's sequence lacks are uploaded again. A position the grant refuses is
merged into the next increment uploaded; changelog list says where each
position went, changelog status what the Hub holds.`)
	var rf rootFlags
	rf.register(fs, false)
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	c, err := openChangelog(env, &rf, false)
	if err != nil {
		return err
	}
	cfg, err := binding.ConfigDir(env.Getenv)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, hubTimeout)
	defer cancel()
	r, closeRemote, err := hubremote.ForCheckout(cfg)(ctx, c.Roots()[0].Path)
	if err != nil {
		return err
	}
	if r == nil {
		return fmt.Errorf("%s has no client connection, so there is no Hub to upload to (agentscm client setup)", c.Roots()[0].Path)
	}
	defer closeRemote()
	next, err := c.NextPosition()
	if err != nil {
		return err
	}
	out, err := c.Upload(ctx, r, changelog.UploadOptions{Through: next - 1, Reconcile: true})
	if err != nil {
		return err
	}
	if *format == "json" {
		return writeJSON(env.Stdout, out)
	}
	if len(out.Uploaded) == 0 {
		fmt.Fprintf(env.Stdout, "uploaded nothing")
	} else {
		fmt.Fprintf(env.Stdout, "uploaded positions %s to work %s", joinInts(out.Uploaded), out.WorkID)
	}
	fmt.Fprintf(env.Stdout, "; %d pending\n", out.Pending)
	for _, m := range out.Merged {
		fmt.Fprintf(env.Stdout, "positions %d..%d merged into %d: %s\n", m.From, m.To, m.Into, oneLine(m.Reason))
	}
	if len(out.Refused) > 0 {
		fmt.Fprintf(env.Stdout, "refused by the grant (the next uploaded increment carries them): %s\n", joinInts(out.Refused))
	}
	switch {
	case out.LocalOnly != "":
		return fmt.Errorf("the Hub has nowhere to store them: %s", out.LocalOnly)
	case out.Err != "":
		return fmt.Errorf("%s", out.Err)
	}
	return nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ",")
}

// dropRestoredHooks returns the AfterExtract callback that removes the
// agentscm capture hooks a rewind restored into the checkout's
// .claude/settings*.json: a settings file that had no marked hook before the
// rewind gets none after it.
func dropRestoredHooks(root string) (func(context.Context, []changelog.Root) error, error) {
	files := []string{filepath.Join(root, ".claude", "settings.json"), filepath.Join(root, ".claude", "settings.local.json"), filepath.Join(root, ".codex", "hooks.json"), filepath.Join(root, ".gemini", "settings.json")}
	had := map[string]bool{}
	for _, f := range files {
		ev, err := hookfile.MarkedEvents(f)
		if err == nil && len(ev) > 0 {
			had[f] = true
		}
	}
	return func(context.Context, []changelog.Root) error {
		for _, f := range files {
			if had[f] {
				continue
			}
			if _, err := hookfile.RemoveHooks(f); err != nil {
				return fmt.Errorf("drop restored capture hooks from %s: %w", f, err)
			}
		}
		return nil
	}, nil
}

func archiveExit(err error) error {
	if errors.Is(err, changelog.ErrUnreadableArchive) {
		return &ExitCodeError{Code: ExitUnreadableArchive, Err: err}
	}
	return err
}

// ExitChangedSinceCapture is the exit status of a rewind (changelog apply,
// rewind, snapshot load) refused because paths it would change were changed
// after the newest captured position; --force overrides it.
const ExitChangedSinceCapture = 6

func runChangelogApply(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm changelog apply", "[--root PATH] --to POSITION [flags]", `
Rewind the capture roots to the state after tool call POSITION: the
increments 0..POSITION are validated (an unreadable or hostile one is
refused with exit status 4 before anything changes), the current state is
stored as its own increment (apply --to that position undoes the rewind),
the increments are extracted in order with their deletions and removed
roots, capture hooks restored into .claude/settings*.json are dropped, and
the result is stored as the next increment. While any live session's
agent turn runs in the checkout it is refused with exit status 5, naming
each (nothing overrides that); a turn whose agent process is gone, or
whose lease expired, is set aside and named on stderr. A rewind to a
position taken while another session's turn ran (parallel sessions) warns
that that session's writes are mixed in.

Safe rewind: before anything changes, every path the rewind would create,
modify or delete is compared with its state at the newest captured
position. If any was changed since (by you, another session or any process
the changelog did not capture), the rewind is refused with exit status 6
and the list of those paths; --discard-uncaptured-edits rewinds anyway (the
undo point, which holds them, is still stored first; --force is its
deprecated alias). Work done outside the agent between tool calls is
captured as its own "outside" position; a rewind that would change or
delete outside work recorded after POSITION is refused with exit status 6
too, listing it, unless --discard-outside-edits (the undo point holds it).
What a rewind cannot restore (a symlink whose target lies outside every
capture root, a conversation root withheld from the Hub) is listed by the
rewind, its --dry-run and --format json, and the exit status is then 8
(partial: everything else was rewound). --dry-run prints what would be
created, modified and deleted and changes nothing. The Claude transcript
root is not checked. Excluded paths (.git, .agentdiff, the changelog
directory, everything git ignores) are never deleted or changed.`)
	var rf rootFlags
	rf.register(fs, false)
	to := fs.Int("to", -1, "the position to rewind to (required)")
	force := fs.Bool("force", false, "deprecated: the same as --discard-uncaptured-edits (a running turn is never overridden)")
	var discard discardFlags
	discard.register(fs)
	dryRun := fs.Bool("dry-run", false, "print what the rewind would create, modify and delete, and change nothing")
	resume := fs.Bool("resume-conversation", false, "also bind the conversation, cut right after the target call's result, to a fresh session id and print the claude --resume command")
	agent := fs.String("agent", "", "with --resume-conversation: claude-code, codex or gemini (default: the one agent whose hook file holds changelog hooks); codex cuts the session's rollout under $CODEX_HOME/sessions and prints codex exec resume <id>, gemini cuts its chat under ~/.gemini/tmp and prints gemini --resume <id>")
	fromHub := fs.Bool("from-hub", false, "take the increments 0..POSITION of a Work from the checkout's connected Hub (the root may be a fresh empty directory)")
	work := fs.String("work", "", "with --from-hub: the Work (default: the checkout's current Work)")
	worktree := fs.String("worktree", "", "with --from-hub: whose changelog, when the Work holds several checkouts' (after a takeover)")
	fs.Var(&rf.extra, "extra-root", "with --from-hub: where another capture root of the increments goes, as NAME=ABSPATH (repeatable; claude-transcript defaults to this machine's Claude Code project directory of --root)")
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	if *to < 0 {
		return usagef("--to POSITION is required")
	}
	if *dryRun && *resume {
		return usagef("--dry-run changes nothing, so it cannot resume a conversation; drop --resume-conversation")
	}
	if *fromHub && *resume && *agent != "" {
		if a, err := adapter.For(*agent); err != nil {
			return usagef("--agent: %v", err)
		} else if !a.ChangelogTranscript() {
			return usagef("--from-hub --resume-conversation resumes Claude Code conversations only: the %s session file is not part of the uploaded increments (rewind on the machine that ran the session instead)", a.Name())
		}
	}
	if *fromHub {
		return runChangelogApplyFromHub(ctx, env, &rf, hubApply{to: *to, work: *work, worktree: *worktree, force: *force, dryRun: *dryRun, resume: *resume, format: *format})
	}
	if *work != "" || *worktree != "" || len(rf.extra) > 0 {
		return usagef("--work, --worktree and --extra-root go with --from-hub")
	}
	c, err := openChangelog(env, &rf, false)
	if err != nil {
		return err
	}
	if !*dryRun {
		g, err := holdTurns(env, c.Dir())
		if err != nil {
			return err
		}
		defer g.Release()
	}
	after, err := dropRestoredHooks(c.Roots()[0].Path)
	if err != nil {
		return err
	}
	home := env.Getenv("HOME")
	ad, err := rewindAgent(env, *agent, c.Roots()[0].Path)
	if err != nil {
		return err
	}
	isCodex := !ad.ChangelogTranscript() // Codex or Gemini: their own session files
	if *resume && !isCodex && !filepath.IsAbs(home) {
		return usagef("--resume-conversation needs an absolute HOME (where Claude Code keeps transcripts)")
	}
	uncaptured, outside := discard.resolve(env, *force)
	req := changelog.ApplyRequest{To: *to, AfterExtract: after, Force: uncaptured, DiscardOutsideEdits: outside, DryRun: *dryRun}
	// With the transcript directory a capture root, the rewind restores the
	// transcript as the hook saw it (before the host appended the call's
	// result): the live copy, read first, supplies the result.
	projectDir := transcriptDir(c, home)
	var live []byte
	if *resume && !isCodex {
		req.BeforeExtract = func(_ context.Context, target incmeta.Meta) error {
			live, _ = changelog.ReadTranscript(projectDir, target.SessionID)
			return nil
		}
	}
	res, err := c.Apply(ctx, req)
	if err != nil {
		return applyExit(env, c.Roots(), *format, err)
	}
	warnMixed(env, res.Target)
	if res.DryRun {
		return printDryRun(env, c.Roots(), *format, fmt.Sprintf("rewinding to position %d", *to), res)
	}
	warnForced(env, c.Roots(), res)
	var resumed *changelog.Resumed
	fromAgent := false // rebuilt from the agent's own transcript (metadata-only)
	if *resume {
		if res.Target.Kind != changelog.KindCall || res.Target.SessionID == "" {
			return fmt.Errorf("rewound to position %d, but it is not a tool call of a session, so there is no conversation to resume", *to)
		}
		if ad.Name() == codex.AgentName {
			resumed, err = resumeCodex(env, res.Target, env.Now())
		} else if isCodex {
			resumed, err = resumeGemini(env, res.Target, env.Now())
		} else {
			if ref := changelog.TranscriptRefFor(&res.Target, res.Target.SessionID); ref != nil {
				// Metadata-only: no copy was kept; the agent's transcript
				// must still hold what the position saw.
				if err := changelog.CheckTranscriptRef(projectDir, ref); err != nil {
					return fmt.Errorf("rewound to position %d, but the conversation can no longer be resumed: %w", *to, err)
				}
				fromAgent = true
			}
			resumed, err = changelog.ResumeConversationFrom(projectDir, res.Target.SessionID, res.Target.ToolUseID, live)
		}
		if err != nil {
			return fmt.Errorf("rewound to position %d, but the conversation could not be resumed: %w", *to, err)
		}
	}
	if *format == "json" {
		out := map[string]any{"to": *to, "applied": res.Applied, "undo_position": res.PreApply.Position, "result_position": res.Result.Position, "resumed": resumed, "forced": jsonChanges(res.Conflicts),
			"discarded_outside_work": jsonChanges(res.Outside), "unrestorable": jsonUnrestorable(c.Roots(), res.Unrestorable), "partial": isPartial(res)}
		if fromAgent {
			out["conversation_source"] = "agent_transcript"
		}
		if err := writeJSON(env.Stdout, out); err != nil {
			return err
		}
		return partialExit(env, c.Roots(), res)
	}
	fmt.Fprintf(env.Stdout, "rewound to position %d (applied %d increments); undo with: agentscm changelog apply --root %s --to %d\n",
		*to, len(res.Applied), c.Roots()[0].Path, res.PreApply.Position)
	if resumed != nil {
		note := "it ends with the call's result"
		if !resumed.IncludesResult {
			note = "the host had not written the call's result yet"
		}
		if fromAgent {
			fmt.Fprintf(env.Stdout, "conversation rebuilt from the agent's own transcript, which still holds what position %d saw (metadata-only mode keeps no copy)\n", *to)
		}
		fmt.Fprintf(env.Stdout, "conversation of session %s bound to %s (%s); continue it with:\n  %s\n", resumed.FromSession, resumed.SessionID, note, resumed.Command)
	}
	return partialExit(env, c.Roots(), res)
}
