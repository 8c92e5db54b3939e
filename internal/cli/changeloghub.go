package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/changelog/hubremote"
	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/connections"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/hub/api"
)

// pickSequence returns the increments of one worktree's sequence in a
// Work's listing: the one named, else the only one.
func pickSequence(list api.IncrementList, worktree string) ([]api.IncrementInfo, error) {
	var names []string
	by := map[string][]api.IncrementInfo{}
	for _, in := range list.Increments {
		if _, ok := by[in.WorktreeID]; !ok {
			names = append(names, in.WorktreeID)
		}
		by[in.WorktreeID] = append(by[in.WorktreeID], in)
	}
	switch {
	case worktree != "":
		return by[worktree], nil
	case len(names) > 1:
		var desc []string
		for _, n := range names {
			desc = append(desc, fmt.Sprintf("%s (positions %d..%d)", n, by[n][0].Position, by[n][len(by[n])-1].Position))
		}
		return nil, usagef("work %s holds the changelogs of %d checkouts: %s; pass --worktree ID", list.WorkID, len(names), strings.Join(desc, ", "))
	case len(names) == 1:
		return by[names[0]], nil
	}
	return nil, nil
}

// hubApply is changelog apply --from-hub's request.
type hubApply struct {
	to       int
	worktree string
	work     string
	force    bool
	dryRun   bool
	resume   bool
	format   string
}

// openHubCheckout opens the connection of --root for a --from-hub command
// and returns the Work to read (--work, else the checkout's current Work).
func openHubCheckout(ctx context.Context, env *Env, rootFlag, work string) (connections.Connection, client.Conn, string, error) {
	c, conn, err := openCheckout(ctx, env, rootFlag)
	if err != nil {
		return c, nil, "", fmt.Errorf("--from-hub needs the checkout's client connection: %w", err)
	}
	if work == "" {
		cur, err := conn.CurrentWork(ctx, c.WorktreeID)
		if err != nil {
			conn.Close()
			if e, ok := api.AsError(err); ok && e.Code == api.CodeNotFound {
				return c, nil, "", fmt.Errorf("%s has no current work on the Hub; pass --work ID (agentscm work list shows them)", c.Root)
			}
			return c, nil, "", err
		}
		work = cur.Work.ID
	}
	return c, conn, work, nil
}

func runChangelogListFromHub(ctx context.Context, env *Env, root, work, format string) error {
	ctx, cancel := context.WithTimeout(ctx, hubTimeout)
	defer cancel()
	_, conn, work, err := openHubCheckout(ctx, env, root, work)
	if err != nil {
		return err
	}
	defer conn.Close()
	list, err := conn.ListIncrements(ctx, work)
	if err != nil {
		return err
	}
	if format == "json" {
		return writeJSON(env.Stdout, list)
	}
	fmt.Fprintf(env.Stdout, "work %s: %d of %d objects, %d of %d bytes granted\n", list.WorkID, list.Used.Objects, list.Grant.MaxObjects, list.Used.Bytes, list.Grant.MaxBytes)
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKTREE\tPOSITION\tKIND\tTOOL\tSIZE\tSESSION\tDIGEST\tNOTE")
	prev := map[string]int{}
	for _, in := range list.Increments {
		note := ""
		if in.Failed {
			note = "failed call"
		}
		p, ok := prev[in.WorktreeID]
		if !ok {
			p = -1
		}
		if in.Position > p+1 {
			note = strings.TrimSpace(note + fmt.Sprintf(" carries positions %d..%d (merged: the Hub refused them)", p+1, in.Position-1))
		}
		prev[in.WorktreeID] = in.Position
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\t%s\t%s\n", in.WorktreeID, in.Position, in.Kind, in.Tool, in.Size, in.Session, in.Digest[:12], note)
	}
	return tw.Flush()
}

// runChangelogApplyFromHub downloads a Work's increments 0..to, verifies
// each against its digest and applies them: onto a root with a changelog
// through ApplyFiles (undoable), onto an empty root by replaying them.
func runChangelogApplyFromHub(ctx context.Context, env *Env, rf *rootFlags, req hubApply) error {
	if !filepath.IsAbs(rf.root) {
		return usagef("--root %q is not an absolute path", rf.root)
	}
	if _, err := os.Lstat(rf.root); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(rf.root, 0o755); err != nil {
			return err
		}
	}
	home := env.Getenv("HOME")
	if req.resume && !filepath.IsAbs(home) {
		return usagef("--resume-conversation needs an absolute HOME (where Claude Code keeps transcripts)")
	}
	hctx, cancel := context.WithTimeout(ctx, hubTimeout)
	defer cancel()
	conn0, conn, work, err := openHubCheckout(hctx, env, rf.root, req.work)
	if isNoConnection(err) {
		// A fresh directory: connect it to the Hub holding the Work.
		if err := connectForWork(hctx, env, rf.root, req.work); err != nil {
			return err
		}
		conn0, conn, work, err = openHubCheckout(hctx, env, rf.root, req.work)
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	root := conn0.Root
	list, err := conn.ListIncrements(hctx, work)
	if err != nil {
		return err
	}
	seq, err := pickSequence(list, req.worktree)
	if err != nil {
		return err
	}
	var want []api.IncrementInfo
	var carrier *api.IncrementInfo // the increment that carries a merged target
	for i, in := range seq {
		if in.Position <= req.to {
			want = append(want, in)
		} else if carrier == nil {
			carrier = &seq[i]
		}
	}
	if len(want) == 0 || want[len(want)-1].Position != req.to {
		have := "none"
		if n := len(seq); n > 0 {
			have = fmt.Sprintf("positions %d..%d", seq[0].Position, seq[n-1].Position)
		}
		if carrier != nil && (len(want) == 0 || want[len(want)-1].Position < req.to) {
			prev := -1
			if len(want) > 0 {
				prev = want[len(want)-1].Position
			}
			return fmt.Errorf("%w: position %d has no increment of its own on the Hub: work %s's increment %d carries positions %d..%d (the Hub refused them; agentscm changelog list --root %s says why); apply --to %d, or --to %d locally",
				changelog.ErrNoIncrement, req.to, work, carrier.Position, prev+1, carrier.Position, root, carrier.Position, req.to)
		}
		return fmt.Errorf("%w: work %s on the Hub holds %s, not all of 0..%d", changelog.ErrNoIncrement, work, have, req.to)
	}
	cfg, err := binding.ConfigDir(env.Getenv)
	if err != nil {
		return err
	}
	if err := fsutil.MkdirPrivate(filepath.Join(cfg, "changelog")); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Join(cfg, "changelog"), ".download-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var paths []string
	var positions []int
	var total int64
	for _, in := range want {
		b, err := conn.GetIncrement(hctx, work, in)
		if err != nil {
			return fmt.Errorf("download increment %d of work %s: %w", in.Position, work, err)
		}
		p := filepath.Join(tmp, changelog.IncrementName(in.Position))
		if err := fsutil.WriteNew(p, b, fsutil.FileMode); err != nil {
			return err
		}
		paths = append(paths, p)
		positions = append(positions, in.Position)
		total += int64(len(b))
	}
	// Positions the Hub merged into a later increment leave holes: each
	// increment must carry the positions since the previous one.
	var metas []*incmeta.Meta
	for i, p := range paths {
		m, err := changelog.ReadMeta(p)
		if err != nil {
			return archiveExit(fmt.Errorf("increment %d of work %s: %w", positions[i], work, err))
		}
		metas = append(metas, m)
	}
	if err := changelog.CheckChain(metas); err != nil {
		return archiveExit(fmt.Errorf("work %s on the Hub: %w", work, err))
	}
	target, err := changelog.ReadMeta(paths[len(paths)-1])
	if err != nil {
		return archiveExit(fmt.Errorf("increment %d of work %s: %w", req.to, work, err))
	}
	// The roots of every increment: an uploaded form leaves out a
	// conversation root it shares nothing of, so the target's alone may
	// lack one that earlier increments hold.
	union := &incmeta.Meta{}
	seenRoot := map[string]bool{}
	for _, p := range paths {
		m, err := changelog.ReadMeta(p)
		if err != nil {
			return archiveExit(fmt.Errorf("increment %s of work %s: %w", filepath.Base(p), work, err))
		}
		for _, r := range m.Roots {
			if !seenRoot[r.Name] {
				seenRoot[r.Name] = true
				union.Roots = append(union.Roots, r)
			}
		}
	}
	roots, err := hubApplyRoots(root, home, union, rf.extra)
	if err != nil {
		return err
	}
	after, err := dropRestoredHooks(root)
	if err != nil {
		return err
	}
	dir := changelog.DirFor(cfg, root)
	if rf.dir != "" {
		dir = filepath.Clean(rf.dir)
	}
	out := map[string]any{"to": req.to, "work_id": work, "applied": len(paths), "downloaded_bytes": total}
	var merged []incmeta.Merged
	for _, m := range metas {
		merged = append(merged, m.Merged...)
	}
	if len(merged) > 0 {
		out["merged"] = merged
	}
	stored, err := changelog.LoadRoots(dir)
	partial := func() error { return nil } // exit 8 when the apply could not restore everything
	if errors.Is(err, fs.ErrNotExist) {
		// No changelog: nothing could undo an apply over files, so only
		// an empty root, which gets a changelog of its own: the apply is
		// then its pre-apply (the empty root) and its result, so it can
		// be undone and a second apply into the directory works too.
		ents, err := os.ReadDir(root)
		if err != nil {
			return err
		}
		if len(ents) > 0 {
			return fmt.Errorf("%s is not empty and has no changelog to undo the apply with; use an empty directory, or run agentscm changelog enable --root %s first", root, root)
		}
		if req.dryRun {
			return usagef("--dry-run with --from-hub needs a checkout with a changelog (agentscm changelog enable --root %s); onto the empty %s the apply only creates paths", root, root)
		}
		if err := rf.saveLocation(env); err != nil { // --dir: where the hooks and later commands find it
			return err
		}
		c, err := changelog.Open(dir, changelog.Options{Roots: roots, Exclude: []string{cfg}})
		if err != nil {
			return err
		}
		if err := c.SaveRoots(); err != nil {
			return err
		}
		stored = roots
	} else if err != nil {
		return err
	}
	{ // a block of its own (c, res), kept as it was to keep the diff small
		if stored[0].Path != root {
			return fmt.Errorf("changelog %s belongs to %s, not %s", dir, stored[0].Path, root)
		}
		for _, r := range roots[1:] {
			if !hasRoot(stored, r) {
				return fmt.Errorf("the changelog of %s has no capture root %s=%s; the increments need it", root, r.Name, r.Path)
			}
		}
		c, err := changelog.Open(dir, changelog.Options{Roots: stored, Exclude: []string{cfg}})
		if err != nil {
			return err
		}
		if !req.dryRun {
			g, err := holdTurns(env, c.Dir())
			if err != nil {
				return err
			}
			defer g.Release()
		}
		res, err := c.ApplyChain(ctx, paths, positions, changelog.ApplyRequest{To: req.to, AfterExtract: after, Force: req.force, DryRun: req.dryRun})
		if err != nil {
			return applyExit(env, stored, req.format, err)
		}
		warnMixed(env, res.Target)
		if res.DryRun {
			return printDryRun(env, stored, req.format, fmt.Sprintf("applying increments 0..%d of work %s", req.to, work), res)
		}
		warnForced(env, stored, res)
		out["unrestorable"], out["partial"] = jsonUnrestorable(stored, res.Unrestorable), isPartial(res)
		partial = func() error { return partialExit(env, stored, res) }
		out["undo_position"] = res.PreApply.Position
		out["result_position"] = res.Result.Position
	}
	var resumed *changelog.Resumed
	resultNote := ""
	convNote := ""
	if req.resume {
		convNote = conversationNotShared(target)
	}
	if convNote != "" {
		out["conversation_shared"] = false
		out["conversation_note"] = convNote
	} else if req.resume {
		out["conversation_shared"] = true
		if target.Kind != changelog.KindCall || target.SessionID == "" {
			return fmt.Errorf("applied position %d, but it is not a tool call of a session, so there is no conversation to resume", req.to)
		}
		tdir := changelog.ClaudeProjectDir(home, root)
		var pre []byte
		if target.ToolUseID != "" {
			if disk, err := changelog.ReadTranscript(tdir, target.SessionID); err != nil || !changelog.TranscriptHoldsResult(disk, target.ToolUseID) {
				var rest []api.IncrementInfo
				for _, in := range seq {
					if in.Position > req.to {
						rest = append(rest, in)
					}
				}
				slices.SortFunc(rest, func(x, y api.IncrementInfo) int { return cmp.Compare(x.Position, y.Position) })
				// Later increments store the bytes appended since the
				// previous one: they extend the copy the apply left.
				local, ok := changelog.TranscriptLocalSize(paths, target.SessionID+".jsonl")
				if !ok {
					local = int64(len(disk))
				}
				later, err := laterResult(hctx, conn, work, rest, target, disk, local)
				switch {
				case err != nil:
					fmt.Fprintf(env.Stderr, "agentscm: warning: reading call %d's result from the later increments: %s\n", req.to, oneLine(err.Error()))
					resultNote = fmt.Sprintf("call %d's result could not be read from the later increments of work %s (%v); the conversation resumes without it", req.to, work, err)
				case later == nil:
					resultNote = fmt.Sprintf("no later increment of work %s stores call %d's result (%d after it on the Hub, at most %d read; a later tool call's capture stores it); the conversation resumes without it", work, req.to, len(rest), changelog.MaxLaterIncrements)
				case !later.HoldsResult:
					// The rewound copy lacks even the call (the host wrote
					// its line after the hook): a later copy holds it.
					pre = later.Data
					resultNote = fmt.Sprintf("no later increment of work %s stores call %d's result; the conversation resumes after the call, without its result (the call from position %d)", work, req.to, later.Position)
				default:
					pre = later.Data
					out["result_from_position"] = later.Position
				}
			}
		}
		resumed, err = changelog.ResumeConversationFrom(tdir, target.SessionID, target.ToolUseID, pre)
		if err != nil {
			return fmt.Errorf("applied position %d, but the conversation could not be resumed: %w", req.to, err)
		}
		out["resumed"] = resumed
		if resultNote != "" {
			out["result_note"] = resultNote
		}
	}
	if req.format == "json" {
		if err := writeJSON(env.Stdout, out); err != nil {
			return err
		}
		return partial()
	}
	fmt.Fprintf(env.Stdout, "applied increments 0..%d of work %s from the Hub onto %s (%d bytes, digests verified)\n", req.to, work, root, total)
	for _, m := range merged {
		fmt.Fprintf(env.Stdout, "positions %d..%d came merged into a later increment (%s)\n", m.From, m.To, oneLine(m.Reason))
	}
	if convNote != "" {
		fmt.Fprintln(env.Stdout, convNote)
	}
	if u, ok := out["undo_position"]; ok {
		fmt.Fprintf(env.Stdout, "undo with: agentscm changelog apply --root %s --to %d\n", root, u)
	}
	if resumed != nil {
		if p, ok := out["result_from_position"]; ok {
			fmt.Fprintf(env.Stdout, "call %d's result read from the transcript stored by increment %d\n", req.to, p)
		}
		if resultNote != "" {
			fmt.Fprintln(env.Stdout, resultNote)
		}
		fmt.Fprintf(env.Stdout, "conversation of session %s bound to %s; continue it with:\n  %s\n", resumed.FromSession, resumed.SessionID, resumed.Command)
	}
	return partial()
}

// laterResult downloads the increments after the target in order, only as
// needed and at most changelog.MaxLaterIncrements of them, each verified
// against its digest, and returns the first copy of the target session's
// transcript that holds the target call's result (nil when none does).
func laterResult(ctx context.Context, conn client.Conn, work string, rest []api.IncrementInfo, target *incmeta.Meta, base []byte, baseLocal int64) (*changelog.LaterTranscript, error) {
	i := 0
	next := func(ctx context.Context) (*changelog.LaterIncrement, error) {
		if i >= len(rest) {
			return nil, nil
		}
		in := rest[i]
		i++
		b, err := conn.GetIncrement(ctx, work, in)
		if err != nil {
			return nil, fmt.Errorf("download increment %d of work %s: %w", in.Position, work, err)
		}
		return &changelog.LaterIncrement{Position: in.Position, Data: b}, nil
	}
	return changelog.FindResultTranscript(ctx, next, target.SessionID, target.ToolUseID, base, baseLocal)
}

func hasRoot(roots []changelog.Root, r changelog.Root) bool {
	for _, s := range roots {
		if s.Name == r.Name && s.Path == r.Path {
			return true
		}
	}
	return false
}

// hubApplyRoots maps the capture roots an increment declares onto this
// machine: "checkout" is root; the checkout's Claude Code transcript
// directory (changelog.TranscriptRootName) goes to this machine's project
// directory of root under home, so --resume-conversation finds it; every
// other root needs --extra-root NAME=ABS (which also overrides the default).
func hubApplyRoots(root, home string, m *incmeta.Meta, extra []string) ([]changelog.Root, error) {
	given := map[string]string{}
	for _, e := range extra {
		name, p, ok := strings.Cut(e, "=")
		if !ok || name == "" || !filepath.IsAbs(p) {
			return nil, usagef("--extra-root %q must be NAME=ABSPATH", e)
		}
		given[name] = filepath.Clean(p)
	}
	roots := []changelog.Root{{Name: "checkout", Path: root, Git: true}}
	var missing []string
	found := false
	for _, r := range m.Roots {
		if r.Name == "checkout" {
			found = true
			continue
		}
		p, ok := given[r.Name]
		if !ok && r.Name == changelog.TranscriptRootName && home != "" && filepath.IsAbs(home) {
			p, ok = filepath.Clean(changelog.ClaudeProjectDir(home, root)), true
		}
		if !ok {
			missing = append(missing, fmt.Sprintf("--extra-root %s=ABSPATH (it was /%s)", r.Name, r.Prefix))
			continue
		}
		roots = append(roots, changelog.Root{Name: r.Name, Path: p})
	}
	if !found {
		return nil, fmt.Errorf("the increments have no \"checkout\" capture root")
	}
	if len(missing) > 0 {
		return nil, usagef("the increments hold other capture roots; say where they go: %s", strings.Join(missing, ", "))
	}
	return roots, nil
}

// conversationNotShared explains why the increment target, as downloaded
// from the Hub, holds no conversation to resume ("" when it holds one).
func conversationNotShared(target *incmeta.Meta) string {
	if target.Conversation == incmeta.ConvWithheld {
		mode := target.ConversationMode
		if mode == "" {
			mode = "metadata-only"
		}
		return fmt.Sprintf("the conversation was not shared: the checkout that captured it was in %s mode, so its transcripts stayed on that machine (only shared-conversation mode uploads them, redacted); the files are restored, there is no conversation to resume", mode)
	}
	for _, r := range target.Roots {
		if changelog.IsConversationRoot(r.Name, r.Path) {
			return ""
		}
	}
	return "the increments hold no conversation (the changelog was enabled without a transcript root); the files are restored, there is no conversation to resume"
}

// hubView is what changelog status says the Hub holds of a checkout's
// sequence of next positions (0..next-1).
type hubView struct {
	Connected bool   `json:"connected"`
	Hub       string `json:"hub,omitempty"`
	WorkID    string `json:"work_id,omitempty"`
	// Next is the first position the Hub lacks (it holds 0..Next-1, or
	// has them merged into a later held position).
	Next  int              `json:"next"`
	Local int              `json:"local_next"`
	Grant *changelog.Grant `json:"grant,omitempty"`
	Used  *changelog.Usage `json:"used,omitempty"`
	// Error is why the Hub's holding is unknown (unreachable, no current
	// Work).
	Error string `json:"error,omitempty"`
}

// hubHolding asks the checkout's Hub, within statusTimeout, what it holds
// of the checkout's changelog under the current Work.
func hubHolding(ctx context.Context, env *Env, root string, next int) hubView {
	v := hubView{Local: next}
	cfg, err := configDir(env)
	if err != nil {
		v.Error = err.Error()
		return v
	}
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	c, err := connections.Lookup(cfg, root)
	if errors.Is(err, connections.ErrNoConnection) {
		return v
	}
	v.Connected, v.Hub = true, c.Hub
	if err != nil {
		v.Error = err.Error()
		return v
	}
	r, closeRemote, err := hubremote.ForCheckout(cfg)(ctx, root)
	if err != nil || r == nil {
		v.Error = fmt.Sprintf("the Hub does not answer: %v", err)
		return v
	}
	defer closeRemote()
	l, ok := r.(changelog.Lister)
	if !ok {
		v.Error = "this connection cannot list the Hub's increments"
		return v
	}
	h, err := l.Holding(ctx)
	if err != nil {
		v.Error = err.Error()
		return v
	}
	v.WorkID, v.Next, v.Grant, v.Used = h.WorkID, h.Next, &h.Grant, &h.Used
	return v
}

func (v hubView) describe() string {
	switch {
	case !v.Connected:
		return "none: the checkout has no client connection, so increments stay in the changelog directory"
	case v.Error != "":
		return fmt.Sprintf("%s: unknown: %s", v.Hub, oneLine(v.Error))
	}
	held := "holds none"
	if v.Next > 0 {
		held = fmt.Sprintf("holds positions 0..%d", v.Next-1)
	}
	s := fmt.Sprintf("%s of %d under work %s (%d of %d objects, %d of %d bytes granted)", held, v.Local, v.WorkID, v.Used.Objects, v.Grant.MaxObjects, v.Used.Bytes, v.Grant.MaxBytes)
	if v.Next < v.Local {
		s += fmt.Sprintf("; lacks %d..%d: agentscm changelog upload sends them (changelog list says why each waits)", v.Next, v.Local-1)
	}
	return s
}
