package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/connections"
	"github.com/agentscm/agentscm/internal/hub"
	"github.com/agentscm/agentscm/internal/hub/api"
)

func workCommand() *Command {
	cp := func(action, summary string) *Command {
		return &Command{Name: action, Summary: summary, Run: func(ctx context.Context, env *Env, args []string) error {
			return runWorkCheckpoint(ctx, env, action, args)
		}}
	}
	return &Command{
		Name:    "work",
		Summary: "start Work and record its checkpoints on the connected Hub",
		Sub: []*Command{
			{Name: "start", Summary: "start a Work and make it current for this checkout", Run: runWorkStart},
			{Name: "list", Summary: "list the repository's Works", Run: runWorkList},
			{Name: "show", Summary: "show a Work (default: the checkout's current Work)", Run: runWorkShow},
			{Name: "grant", Summary: "show or set a Work's changelog grant (objects and bytes on the Hub)", Run: runWorkGrant},
			cp(api.CheckpointPause, "pause a Work (capture continues; a resumed session keeps capturing)"),
			cp(api.CheckpointResume, "resume a paused or blocked Work"),
			cp(api.CheckpointBlock, "mark a Work blocked (capture continues)"),
			cp(api.CheckpointFinish, "finish a Work (capture into it is refused from now on)"),
			cp(api.CheckpointHandover, "hand a Work over (capture is refused until someone takes it over)"),
			cp(api.CheckpointTakeover, "take a Work over: a new generation, current for this checkout"),
		},
	}
}

// openCheckout finds the connection of --root (parseFlags defaults it to
// the checkout enclosing the working directory) and opens it.
func openCheckout(ctx context.Context, env *Env, rootFlag string) (connections.Connection, client.Conn, error) {
	root, err := canonicalRoot(rootFlag)
	if err != nil {
		return connections.Connection{}, nil, err
	}
	dir, err := configDir(env)
	if err != nil {
		return connections.Connection{}, nil, err
	}
	c, err := connections.Lookup(dir, root)
	if errors.Is(err, connections.ErrNoConnection) {
		return c, nil, fmt.Errorf("%w (%s); run agentscm client setup --root %s --local, or with --hub", err, root, root)
	}
	if err != nil {
		return c, nil, err
	}
	conn, err := client.Open(ctx, c, client.Options{})
	return c, conn, err
}

// hubTimeout bounds one CLI request to a Hub.
const hubTimeout = 30 * time.Second

func runWorkStart(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm work start", "[--root PATH] [--title TEXT] [--session-alias NAME] [--format text|json]",
		`Start a Work in the checkout's connected repository and make it the current
Work of this checkout's worktree: from now on capture in this checkout is
recorded under it. The first agent session on the worktree joins the
canonical session named by --session-alias (default "default").`)
	root := fs.String("root", "", rootHelp)
	title := fs.String("title", "", "a short title")
	alias := fs.String("session-alias", "", `canonical session name for the first native session (default "default")`)
	maxObjects := fs.Int64("changelog-max-objects", 0, fmt.Sprintf("the Work's changelog grant: increments the Hub stores (default %d)", api.DefaultGrantObjects))
	maxBytes := fs.Int64("changelog-max-bytes", 0, fmt.Sprintf("the Work's changelog grant: increment bytes the Hub stores (default %d)", int64(api.DefaultGrantBytes)))
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	var grant *api.Grant
	if *maxObjects != 0 || *maxBytes != 0 {
		g := api.DefaultGrant()
		if *maxObjects != 0 {
			g.MaxObjects = *maxObjects
		}
		if *maxBytes != 0 {
			g.MaxBytes = *maxBytes
		}
		if err := g.Validate(); err != nil {
			return usagef("%s", err.(*api.Error).Message)
		}
		grant = &g
	}
	ctx, cancel := context.WithTimeout(ctx, hubTimeout)
	defer cancel()
	c, conn, err := openCheckout(ctx, env, *root)
	if err != nil {
		return err
	}
	// A new Work is a destination for what waited for one (changelog
	// increments, held events): deliver it now, after the Hub is closed.
	defer kickCheckout(env, c.Root)
	defer conn.Close()
	w, err := conn.StartWork(ctx, api.StartWorkRequest{Title: *title, WorktreeID: c.WorktreeID, SessionAlias: *alias, ChangelogGrant: grant})
	if err != nil {
		return err
	}
	forgetGrant(env, c.Root)
	session := *alias
	if session == "" {
		session = hub.DefaultSessionAlias
	}
	noteWorkStarted(env, c.Root, capture.Target{WorkID: w.ID, Generation: w.Generation, Session: session})
	if *format == "json" {
		return writeJSON(env.Stdout, w)
	}
	fmt.Fprintf(env.Stdout, "started %s (%s, generation %d), current for %s\n", w.ID, w.State, w.Generation, c.Root)
	return nil
}

func runWorkList(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm work list", "[--root PATH] [--format text|json]", "List the Works of the checkout's connected repository, newest first.")
	root := fs.String("root", "", rootHelp)
	format := formatFlag(fs)
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
	l, err := conn.ListWorks(ctx)
	if err != nil {
		return err
	}
	if *format == "json" {
		return writeJSON(env.Stdout, l)
	}
	cur, _ := conn.CurrentWork(ctx, c.WorktreeID)
	if len(l.Works) == 0 {
		fmt.Fprintf(env.Stdout, "no works in repository %s; run agentscm work start\n", c.Repository)
	}
	for _, w := range l.Works {
		mark := " "
		if w.ID == cur.Work.ID {
			mark = "*"
		}
		fmt.Fprintf(env.Stdout, "%s %s  %-8s gen %-3d %s  %s\n", mark, w.ID, w.State, w.Generation, time.Unix(w.CreatedAt, 0).UTC().Format(time.RFC3339), w.Title)
	}
	if l.Omitted > 0 {
		fmt.Fprintf(env.Stdout, "(%d older works omitted)\n", l.Omitted)
	}
	return nil
}

// workID returns --work-id, or the checkout's current Work.
func workID(ctx context.Context, conn client.Conn, c connections.Connection, flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	cur, err := conn.CurrentWork(ctx, c.WorktreeID)
	if err != nil {
		if e, ok := api.AsError(err); ok && e.Code == api.CodeNotFound {
			return "", fmt.Errorf("this checkout has no current work; pass --work-id or run agentscm work start")
		}
		return "", err
	}
	return cur.Work.ID, nil
}

func runWorkShow(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm work show", "[--root PATH] [--work-id ID] [--format text|json]", "Show a Work, its checkpoints and the worktrees it is current for.")
	root := fs.String("root", "", rootHelp)
	id := fs.String("work-id", "", "the Work (default: the checkout's current Work)")
	format := formatFlag(fs)
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
	wid, err := workID(ctx, conn, c, *id)
	if err != nil {
		return err
	}
	w, err := conn.GetWork(ctx, wid)
	if err != nil {
		return err
	}
	if *format == "json" {
		return writeJSON(env.Stdout, w)
	}
	printWork(env.Stdout, w, c.WorktreeID)
	return nil
}

func printWork(out io.Writer, w api.Work, worktree string) {
	title := w.Title
	if title == "" {
		title = "(untitled)"
	}
	fmt.Fprintf(out, "%s  %s\n  repository: %s\n  state:      %s\n  generation: %d\n  created by: %s at %s\n",
		w.ID, title, w.Repository, w.State, w.Generation, w.CreatedBy, ts(w.CreatedAt))
	for _, c := range w.Worktrees {
		note := ""
		if c.WorktreeID == worktree {
			note = " (this checkout)"
		}
		stale := ""
		if c.Generation != w.Generation {
			stale = " — stale: capture there is refused"
		}
		fmt.Fprintf(out, "  current on: %s at generation %d%s%s\n", c.WorktreeID, c.Generation, note, stale)
	}
	if len(w.Checkpoints) > 0 {
		fmt.Fprintln(out, "  checkpoints:")
	}
	for _, c := range w.Checkpoints {
		from := c.From
		if from == "" {
			from = "-"
		}
		line := fmt.Sprintf("    %d. %s  %s -> %s  gen %d  by %s at %s", c.Seq, c.Action, from, c.To, c.Generation, c.Human, ts(c.At))
		if c.Note != "" {
			line += "  (" + c.Note + ")"
		}
		fmt.Fprintln(out, line)
	}
}

func ts(unix int64) string {
	if unix == 0 {
		return "time not reported"
	}
	return time.Unix(unix, 0).UTC().Format(time.RFC3339)
}

// ExitGenerationChanged is the exit status of a checkpoint refused because
// the Work's generation is not the one expected: someone took it over
// meanwhile (the Hub's 409 generation_changed).
const ExitGenerationChanged = 7

func runWorkCheckpoint(ctx context.Context, env *Env, action string, args []string) error {
	synopsis := "[--root PATH] [--work-id ID] [--expect-generation N] [--note TEXT] [--format text|json]"
	desc := fmt.Sprintf(`Record a %s checkpoint on a Work (default: the checkout's current Work).
With --expect-generation N it is recorded only if the Work is still at
generation N; otherwise it exits %d and changes nothing.`, action, ExitGenerationChanged)
	if action == api.CheckpointTakeover {
		synopsis = "[--root PATH] --work-id ID [--expect-generation N] [--note TEXT] [--format text|json]"
		desc = fmt.Sprintf(`Take a Work over into this checkout: its generation increases, it becomes
the current Work of this checkout's worktree, and capture at any older
generation (the previous holder's sessions) is refused from now on.

The takeover applies only to the generation you expect: --expect-generation N,
or, without it, the generation the Work has when this command reads it. If
someone took the Work over in between, nothing changes, this checkout is not
current for it, and the command exits %d naming the Work's generation now.
Of concurrent takeovers exactly one wins each generation.`, ExitGenerationChanged)
	}
	fs := newFlags(env, "agentscm work "+action, synopsis, desc)
	root := fs.String("root", "", rootHelp)
	id := fs.String("work-id", "", "the Work")
	note := fs.String("note", "", "a note recorded with the checkpoint")
	expect := fs.Int64("expect-generation", 0, fmt.Sprintf("apply only if the Work is at this generation (1 to %d)", api.MaxGeneration))
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	if action == api.CheckpointTakeover && *id == "" {
		return usagef("takeover needs --work-id")
	}
	expectSet := false
	fs.Visit(func(f *flag.Flag) { expectSet = expectSet || f.Name == "expect-generation" })
	if expectSet && (*expect < 1 || *expect > api.MaxGeneration) {
		return usagef("--expect-generation must be 1 to %d, not %d", api.MaxGeneration, *expect)
	}
	ctx, cancel := context.WithTimeout(ctx, hubTimeout)
	defer cancel()
	c, conn, err := openCheckout(ctx, env, *root)
	if err != nil {
		return err
	}
	defer conn.Close()
	wid, err := workID(ctx, conn, c, *id)
	if err != nil {
		return err
	}
	req := api.CheckpointRequest{Action: action, Note: *note}
	if expectSet {
		req.ExpectGeneration = expect
	}
	if action == api.CheckpointTakeover {
		req.WorktreeID = c.WorktreeID
		if !expectSet {
			// The generation this caller saw: the Hub compares and swaps, so
			// of concurrent takeovers only one moves the Work past it.
			seen, err := conn.GetWork(ctx, wid)
			if err != nil {
				return err
			}
			req.ExpectGeneration = &seen.Generation
		}
	}
	w, err := conn.Checkpoint(ctx, wid, req)
	if now, ok := api.GenerationChanged(err); ok {
		why := ""
		if now > *req.ExpectGeneration {
			why = " (someone took it over meanwhile)"
		}
		msg := fmt.Errorf("work %s was not changed: it is at generation %d now, not %d%s", wid, now, *req.ExpectGeneration, why)
		if action == api.CheckpointTakeover && now > *req.ExpectGeneration {
			msg = fmt.Errorf("work %s was taken over meanwhile: it is at generation %d now, not %d; this checkout is not current for it (see 'agentscm work show --work-id %s'; to take it over from there, run again with --expect-generation %d)",
				wid, now, *req.ExpectGeneration, wid, now)
		}
		return &ExitCodeError{Code: ExitGenerationChanged, Err: msg}
	}
	if err != nil {
		return err
	}
	if action == api.CheckpointTakeover {
		forgetGrant(env, c.Root)
		// The takeover's new generation starts with the Hub's default
		// alias session, which this checkout's first session joins.
		noteWorkStarted(env, c.Root, capture.Target{WorkID: w.ID, Generation: w.Generation, Session: hub.DefaultSessionAlias})
	}
	if *format == "json" {
		return writeJSON(env.Stdout, w)
	}
	if action == api.CheckpointTakeover {
		fmt.Fprintf(env.Stdout, "%s: %s, generation %d; current for this checkout\n", w.ID, w.State, w.Generation)
		return nil
	}
	fmt.Fprintf(env.Stdout, "%s: %s, generation %d\n", w.ID, w.State, w.Generation)
	return nil
}

func runWorkGrant(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm work grant", "[--root PATH] [--work-id ID] [--max-objects N] [--max-bytes N] [--format text|json]",
		`Show a Work's changelog grant and usage (default: the checkout's current
Work), or set it with --max-objects and --max-bytes: how many increments,
and how many bytes of them, the Hub stores for the Work. An upload over the
grant is refused (422 grant_exceeded) and its writes go to the next
increment. Lowering the grant keeps what is stored.`)
	root := fs.String("root", "", rootHelp)
	id := fs.String("work-id", "", "the Work (default: the checkout's current Work)")
	maxObjects := fs.Int64("max-objects", 0, fmt.Sprintf("increments the Hub stores for the Work (1 to %d)", api.MaxGrantObjects))
	maxBytes := fs.Int64("max-bytes", 0, fmt.Sprintf("increment bytes the Hub stores for the Work (1 to %d)", int64(api.MaxGrantBytes)))
	format := formatFlag(fs)
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
	wid, err := workID(ctx, conn, c, *id)
	if err != nil {
		return err
	}
	list, err := conn.ListIncrements(ctx, wid)
	if err != nil {
		return err
	}
	view := api.GrantView{WorkID: wid, Grant: list.Grant, Used: list.Used}
	if *maxObjects != 0 || *maxBytes != 0 {
		req := api.GrantRequest(list.Grant)
		if *maxObjects != 0 {
			req.MaxObjects = *maxObjects
		}
		if *maxBytes != 0 {
			req.MaxBytes = *maxBytes
		}
		if view, err = conn.SetGrant(ctx, wid, req); err != nil {
			return err
		}
		// This checkout's hook refuses from the grant it last read: give it
		// the new one at once.
		if cfg, err := configDir(env); err == nil {
			res := &changelog.Reservation{Path: filepath.Join(changelog.DirFor(cfg, c.Root), changelog.ReservationFile)}
			if u, err := res.Used(); err == nil && u.WorkID == wid {
				_ = res.Sync(wid, changelog.Grant(view.Grant), changelog.Usage{Objects: view.Used.Objects, Bytes: view.Used.Bytes}, env.Now())
			}
		}
	}
	if *format == "json" {
		return writeJSON(env.Stdout, view)
	}
	fmt.Fprintf(env.Stdout, "work %s changelog grant: %d of %d objects, %d of %d bytes used\n", view.WorkID, view.Used.Objects, view.Grant.MaxObjects, view.Used.Bytes, view.Grant.MaxBytes)
	return nil
}

// noteWorkChanged tells capture that the checkout's current Work or
// generation changed (capture.StateDir.NoteWorkChanged), so that the events
// of its running sessions are no longer recorded under the former one at
// receipt. A failure is a warning: the Work changed all the same.
func noteWorkChanged(env *Env, root string) {
	store, err := configStore(env)
	if err == nil {
		err = store.NoteWorkChanged(root)
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "warning: %v; events of sessions already running in this checkout may be held to the former Work until the next one is delivered\n", err)
	}
}

// noteWorkStarted is noteWorkChanged for a Work this checkout just started
// or took over, whose exact target t the Hub returned
// (capture.StateDir.NoteWorkStarted): a session that begins right after,
// while the Hub is unreachable, keeps its events under t from receipt.
func noteWorkStarted(env *Env, root string, t capture.Target) {
	store, err := configStore(env)
	if err == nil {
		err = store.NoteWorkStarted(root, t)
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "warning: %v; events of sessions already running in this checkout may be held to the former Work until the next one is delivered\n", err)
	}
}

// forgetGrant drops the Hub grant the checkout's changelog hook last read:
// its current Work changed, so the next increment asks the Hub.
func forgetGrant(env *Env, root string) {
	cfg, err := configDir(env)
	if err != nil {
		return
	}
	path := filepath.Join(changelog.DirFor(cfg, root), changelog.ReservationFile)
	if _, err := os.Lstat(path); err == nil {
		_ = (&changelog.Reservation{Path: path}).Forget()
	}
}
