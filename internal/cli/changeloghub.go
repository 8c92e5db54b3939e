package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/changelog/hubapply"
	"github.com/agentscm/agentscm/internal/changelog/hubremote"
	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/connections"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/hub/api"
)

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
// hubapply plans and fetches; this applies, resumes and prints.
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
	plan, err := hubapply.PlanApply(list, hubapply.Request{Work: work, Worktree: req.worktree, To: req.to, Root: root})
	var amb *hubapply.AmbiguousWorktreeError
	if errors.As(err, &amb) {
		return usagef("%s", amb.Error())
	}
	if err != nil {
		return err
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
	f, err := hubapply.Fetch(hctx, conn, plan, tmp)
	if err != nil {
		return archiveExit(err)
	}
	out := map[string]any{"to": req.to, "work_id": work, "applied": len(f.Paths), "downloaded_bytes": f.Bytes}
	if len(f.Merged) > 0 {
		out["merged"] = f.Merged
	}
	h := &hubApplied{env: env, rf: rf, req: req, root: root, home: home, cfg: cfg, out: out, partial: func() error { return nil }}
	defer func() {
		if h.gate != nil {
			h.gate.Release() // held until the conversation is resumed too
		}
	}()
	if done, err := h.apply(ctx, plan, f); done || err != nil {
		return err
	}
	if err := h.resume(hctx, conn, plan, f); err != nil {
		return err
	}
	return h.print(plan, f)
}

// hubApplied is an apply from the Hub once its increments are fetched:
// what it printed, and the exit status it ends with.
type hubApplied struct {
	env        *Env
	rf         *rootFlags
	req        hubApply
	root, home string
	cfg        string
	out        map[string]any
	// partial is the exit when the apply could not restore everything (8).
	partial    func() error
	gate       *changelog.TurnGate // held while the workspace changes
	convNote   string
	resultNote string
	resumed    *changelog.Resumed
}

// apply applies the fetched chain onto the checkout's changelog, creating
// one for an empty root. done is true when nothing is left to do (a dry
// run, printed).
func (h *hubApplied) apply(ctx context.Context, plan *hubapply.Plan, f *hubapply.Fetched) (done bool, err error) {
	env, rf, req, root := h.env, h.rf, h.req, h.root
	roots, err := hubApplyRoots(root, h.home, f.Roots, rf.extra)
	if err != nil {
		return false, err
	}
	after, err := dropRestoredHooks(root)
	if err != nil {
		return false, err
	}
	dir := changelog.DirFor(h.cfg, root)
	if rf.dir != "" {
		dir = filepath.Clean(rf.dir)
	}
	stored, err := changelog.LoadRoots(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if stored, err = h.newChangelog(dir, roots); err != nil {
			return false, err
		}
	} else if err != nil {
		return false, err
	}
	if stored[0].Path != root {
		return false, fmt.Errorf("changelog %s belongs to %s, not %s", dir, stored[0].Path, root)
	}
	for _, r := range roots[1:] {
		if !hasRoot(stored, r) {
			return false, fmt.Errorf("the changelog of %s has no capture root %s=%s; the increments need it", root, r.Name, r.Path)
		}
	}
	c, err := changelog.Open(dir, changelog.Options{Roots: stored, Exclude: []string{h.cfg}})
	if err != nil {
		return false, err
	}
	if !req.dryRun {
		if h.gate, err = holdTurns(env, c.Dir()); err != nil {
			return false, err
		}
	}
	res, err := c.ApplyChain(ctx, f.Paths, f.Positions, changelog.ApplyRequest{To: req.to, AfterExtract: after, Force: req.force, DryRun: req.dryRun})
	if err != nil {
		return false, applyExit(env, stored, req.format, err)
	}
	warnMixed(env, res.Target)
	if res.DryRun {
		return true, printDryRun(env, stored, req.format, fmt.Sprintf("applying increments 0..%d of work %s", req.to, plan.Work), res)
	}
	warnForced(env, stored, res)
	h.out["unrestorable"], h.out["partial"] = jsonUnrestorable(stored, res.Unrestorable), isPartial(res)
	h.partial = func() error { return partialExit(env, stored, res) }
	h.out["undo_position"] = res.PreApply.Position
	h.out["result_position"] = res.Result.Position
	return false, nil
}

// newChangelog creates the changelog of an empty root the apply goes onto.
// With no changelog nothing could undo an apply over files, so only an
// empty root gets one of its own: the apply is then its pre-apply (the
// empty root) and its result, so it can be undone and a second apply into
// the directory works too.
func (h *hubApplied) newChangelog(dir string, roots []changelog.Root) ([]changelog.Root, error) {
	root := h.root
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	if len(ents) > 0 {
		return nil, fmt.Errorf("%s is not empty and has no changelog to undo the apply with; use an empty directory, or run agentscm changelog enable --root %s first", root, root)
	}
	if h.req.dryRun {
		return nil, usagef("--dry-run with --from-hub needs a checkout with a changelog (agentscm changelog enable --root %s); onto the empty %s the apply only creates paths", root, root)
	}
	if err := h.rf.saveLocation(h.env); err != nil { // --dir: where the hooks and later commands find it
		return nil, err
	}
	c, err := changelog.Open(dir, changelog.Options{Roots: roots, Exclude: []string{h.cfg}})
	if err != nil {
		return nil, err
	}
	if err := c.SaveRoots(); err != nil {
		return nil, err
	}
	return roots, nil
}

// resume binds the applied call's conversation to a new session when
// --resume-conversation asks, reading the call's result from a later
// increment when the rewound transcript lacks it.
func (h *hubApplied) resume(ctx context.Context, g hubapply.Getter, plan *hubapply.Plan, f *hubapply.Fetched) error {
	if !h.req.resume {
		return nil
	}
	target, req := f.Target, h.req
	if h.convNote = hubapply.ConversationNote(target); h.convNote != "" {
		h.out["conversation_shared"] = false
		h.out["conversation_note"] = h.convNote
		return nil
	}
	h.out["conversation_shared"] = true
	if target.Kind != changelog.KindCall || target.SessionID == "" {
		return fmt.Errorf("applied position %d, but it is not a tool call of a session, so there is no conversation to resume", req.to)
	}
	tdir := changelog.ClaudeProjectDir(h.home, h.root)
	var pre []byte
	if target.ToolUseID != "" {
		if disk, err := changelog.ReadTranscript(tdir, target.SessionID); err != nil || !changelog.TranscriptHoldsResult(disk, target.ToolUseID) {
			r := hubapply.FindResult(ctx, g, plan, f, disk)
			if r.Err != nil {
				fmt.Fprintf(h.env.Stderr, "agentscm: warning: reading call %d's result from the later increments: %s\n", req.to, oneLine(r.Err.Error()))
			}
			pre, h.resultNote = r.Pre, r.Note
			if r.FromPosition > 0 {
				h.out["result_from_position"] = r.FromPosition
			}
		}
	}
	resumed, err := changelog.ResumeConversationFrom(tdir, target.SessionID, target.ToolUseID, pre)
	if err != nil {
		return fmt.Errorf("applied position %d, but the conversation could not be resumed: %w", req.to, err)
	}
	h.resumed = resumed
	h.out["resumed"] = resumed
	if h.resultNote != "" {
		h.out["result_note"] = h.resultNote
	}
	return nil
}

// print reports the apply (JSON or text) and returns its exit.
func (h *hubApplied) print(plan *hubapply.Plan, f *hubapply.Fetched) error {
	env, out, to := h.env, h.out, h.req.to
	if h.req.format == "json" {
		if err := writeJSON(env.Stdout, out); err != nil {
			return err
		}
		return h.partial()
	}
	fmt.Fprintf(env.Stdout, "applied increments 0..%d of work %s from the Hub onto %s (%d bytes, digests verified)\n", to, plan.Work, h.root, f.Bytes)
	for _, m := range f.Merged {
		fmt.Fprintf(env.Stdout, "positions %d..%d came merged into a later increment (%s)\n", m.From, m.To, oneLine(m.Reason))
	}
	if h.convNote != "" {
		fmt.Fprintln(env.Stdout, h.convNote)
	}
	if u, ok := out["undo_position"]; ok {
		fmt.Fprintf(env.Stdout, "undo with: agentscm changelog apply --root %s --to %d\n", h.root, u)
	}
	if h.resumed != nil {
		if p, ok := out["result_from_position"]; ok {
			fmt.Fprintf(env.Stdout, "call %d's result read from the transcript stored by increment %d\n", to, p)
		}
		if h.resultNote != "" {
			fmt.Fprintln(env.Stdout, h.resultNote)
		}
		fmt.Fprintf(env.Stdout, "conversation of session %s bound to %s; continue it with:\n  %s\n", h.resumed.FromSession, h.resumed.SessionID, h.resumed.Command)
	}
	return h.partial()
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
