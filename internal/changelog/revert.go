package changelog

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// RevertRequest asks to undo one tool call's changes.
type RevertRequest struct {
	// Call is the position of the tool call to undo.
	Call int
	// DryRun computes the plan and changes nothing.
	DryRun    bool
	SessionID string
}

// RevertResult reports a revert.
type RevertResult struct {
	Call int
	// Reverted lists what the revert changes back (or would, in a dry
	// run); Conflicts the paths it leaves alone and why.
	Reverted  []RevertAction
	Conflicts []RevertConflict
	// PreApply is the undo point (rewinding to its position undoes the
	// revert); Result the state the revert produced. Both nil in a dry
	// run and when there was nothing to change.
	PreApply *Increment
	Result   *Increment
	DryRun   bool
}

// ErrNotACall reports a revert of a position that is not a tool call.
var ErrNotACall = errors.New("that position is not a tool call")

// Revert undoes tool call req.Call alone, keeping every later call's and
// the user's work: each path the call changed is set back to its state
// before the call only when its current state equals its state right after
// the call (seed 001's recovery rule); every other path is listed as a
// conflict and left as it is (planRevert). Conversation roots and excluded
// paths are never touched. Like a rewind, it stores the current state as
// its undo point first and the result after.
func (c *Changelog) Revert(ctx context.Context, req RevertRequest) (*RevertResult, error) {
	lk, err := c.lock()
	if err != nil {
		return nil, err
	}
	defer lk.Unlock()
	st, err := c.stateForCapture()
	if err != nil {
		return nil, err
	}
	pos, err := c.positions()
	if err != nil {
		return nil, err
	}
	var paths []string
	found := false
	for _, p := range pos {
		if p > req.Call {
			if !found {
				if m, err := ReadMeta(c.incrementPath(p)); err == nil {
					for _, h := range m.Holds {
						if h.Position == req.Call {
							return nil, fmt.Errorf("%w: %d (its increment was not stored: %s; increment %d carries its writes together with its own)", ErrNoIncrement, req.Call, h.Error, p)
						}
					}
				}
			}
			break
		}
		paths = append(paths, c.incrementPath(p))
		found = found || p == req.Call
	}
	if !found {
		return nil, fmt.Errorf("%w: %d", ErrNoIncrement, req.Call)
	}
	rp, err := readReplay(ctx, paths, c.opts.Roots, c.LocalUnpackBound())
	if err != nil {
		return nil, err
	}
	defer rp.close()
	call := rp.archives[len(rp.archives)-1]
	if call.a.Meta.Kind != KindCall {
		return nil, fmt.Errorf("%w: position %d is of kind %s", ErrNotACall, req.Call, call.a.Meta.Kind)
	}
	empty := &scanDisk{entries: map[string][]entry{}}
	before := &replay{roots: rp.roots, archives: rp.archives[:len(rp.archives)-1], disk: empty}
	after := &replay{roots: rp.roots, archives: rp.archives, disk: empty}
	if err := before.simulate(); err != nil {
		return nil, err
	}
	if err := after.simulate(); err != nil {
		return nil, err
	}
	sc, err := c.scanLocked(ctx, st)
	if err != nil {
		return nil, fmt.Errorf("scan the state before the revert: %w", err)
	}
	prot := newProtection(sc.plans)
	inputs, err := revertInputs(call, before.sim, after.sim, sc, prot, rp)
	if err != nil {
		return nil, err
	}
	actions, conflicts := planRevert(inputs)
	res := &RevertResult{Call: req.Call, Reverted: actions, Conflicts: conflicts, DryRun: req.DryRun}
	if req.DryRun || len(actions) == 0 {
		return res, nil
	}
	pre, st, err := c.storeLocked(ctx, sc, CaptureRequest{Position: -1, SessionID: req.SessionID, Tool: "agentscm revert", holes: c.loadHoles()}, KindPreApply, nil)
	if err != nil {
		return nil, fmt.Errorf("capture the state before the revert: %w", err)
	}
	if len(pre.Meta.Holds) > 0 {
		c.clearHoles()
	}
	res.PreApply = pre
	if err := executeRevert(ctx, rp.roots, actions, before.sim); err != nil {
		return res, fmt.Errorf("revert (undo with --to %d): %w", pre.Position, err)
	}
	call0 := req.Call
	post, _, err := c.captureLocked(ctx, CaptureRequest{Position: pre.Position + 1, SessionID: req.SessionID, Tool: "agentscm revert", reverted: &call0}, KindRevert, nil, st)
	if err != nil {
		return res, fmt.Errorf("capture the reverted state: %w", err)
	}
	res.Result = post
	return res, nil
}

// revertInputs lists every path the call's increment changed, with its
// kinds before and right after the call and now.
func revertInputs(call *replayArchive, before, after *overlay, sc *walked, prot *protection, rp *replay) ([]RevertPath, error) {
	plans := map[string]*rootPlan{}
	for _, pl := range sc.plans {
		plans[pl.root.Name] = pl
	}
	seen := map[[2]string]bool{}
	var out []RevertPath
	var add func(root, rel string) error
	add = func(root, rel string) error {
		k := [2]string{root, rel}
		if seen[k] {
			return nil
		}
		seen[k] = true
		pl := plans[root]
		if pl == nil || pl.conv || prot.keep(root, rel) && rel != "" {
			return nil
		}
		b, a := before.lookup(root, rel), after.lookup(root, rel)
		bref, bok := before.src[vkey(root, rel)]
		aref, aok := after.src[vkey(root, rel)]
		same := b == a && (b != vFile && b != vSymlink || (bok && aok && bref.ra == aref.ra && bref.m == aref.m))
		// A deleted directory's former contents go too.
		if b == vDir && a != vDir {
			for _, ch := range before.children[vkey(root, rel)] {
				if before.lookup(root, ch) != vGone {
					if err := add(root, ch); err != nil {
						return err
					}
				}
			}
		}
		if same || rel == "" {
			return nil
		}
		in := RevertPath{Root: root, Rel: rel, Before: vname(b), After: vname(a), Current: kindGone, ParentCurrent: kindGone}
		var cur *entry
		if pl.state.Exists {
			if e := findEntry(pl.state.Entries, rel); e != nil && !e.Excluded {
				cur = e
				in.Current = vname(kindOf(e.Type))
			}
			if pe := findEntry(pl.state.Entries, parentOf(rel)); pe != nil && !pe.Excluded {
				in.ParentCurrent = vname(kindOf(pe.Type))
			}
		}
		if in.Current == "dir" {
			for i := range pl.state.Entries {
				e := &pl.state.Entries[i]
				if e.Path != "" && parentOf(e.Path) == rel && e.Path != rel {
					in.Children = append(in.Children, e.Path)
				}
			}
		}
		switch {
		case in.Current != in.After:
		case a == vFile || a == vSymlink:
			ok, err := rp.sameContent(root, rel, cur, aref)
			if err != nil {
				return err
			}
			in.CurrentIsAfter = aok && ok
		default:
			in.CurrentIsAfter = true
		}
		out = append(out, in)
		return nil
	}
	for _, name := range call.a.Meta.RemovedRoots {
		for _, ch := range before.children[vkey(name, "")] {
			if err := add(name, ch); err != nil {
				return nil, err
			}
		}
	}
	for mi := range call.a.Members {
		m := &call.a.Members[mi]
		if err := add(m.Root, m.Rel); err != nil {
			return nil, err
		}
		if m.Type != typeDumpdir {
			continue
		}
		// What the listing purged: the directory's former entries.
		for _, ch := range before.children[vkey(m.Root, m.Rel)] {
			if err := add(m.Root, ch); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

func vname(v vkind) string {
	switch v {
	case vGone, vUnknown:
		return kindGone
	}
	return v.String()
}

// executeRevert carries out the plan: first what goes (deepest first),
// then what comes back (shallowest first), each restored path from the
// member that held it before the call.
func executeRevert(ctx context.Context, roots map[string]Root, actions []RevertAction, before *overlay) error {
	opened := map[string]*os.Root{}
	defer func() {
		for _, r := range opened {
			r.Close()
		}
	}()
	open := func(name string) (*os.Root, error) {
		if r, ok := opened[name]; ok {
			return r, nil
		}
		r, err := os.OpenRoot(roots[name].Path)
		if err != nil {
			return nil, err
		}
		opened[name] = r
		return r, nil
	}
	for i := len(actions) - 1; i >= 0; i-- {
		a := actions[i]
		if a.from == kindGone || (a.from == a.Kind && a.Kind == "dir") {
			continue
		}
		if a.Change != ChangeDeleted && a.from == "file" && a.Kind == "file" {
			continue // overwritten in place below
		}
		r, err := open(a.Root)
		if err != nil {
			return err
		}
		if err := r.Remove(a.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", a.Path, err)
		}
	}
	for _, a := range actions {
		if err := ctx.Err(); err != nil {
			return err
		}
		if a.Change == ChangeDeleted {
			continue
		}
		r, err := open(a.Root)
		if err != nil {
			return err
		}
		ref := before.src[vkey(a.Root, a.Path)]
		switch a.Kind {
		case "dir":
			if err := r.Mkdir(a.Path, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("restore directory %s: %w", a.Path, err)
			}
		case "symlink":
			if ref.m == nil {
				return fmt.Errorf("restore %s: no stored symlink", a.Path)
			}
			if err := r.Symlink(ref.m.Linkname, a.Path); err != nil {
				return fmt.Errorf("restore symlink %s: %w", a.Path, err)
			}
		case "file":
			if ref.m == nil || ref.m.Type != tar.TypeReg {
				return fmt.Errorf("restore %s: no stored content", a.Path)
			}
			data, err := memberBytes(ref)
			if err != nil {
				return err
			}
			if err := writeRootFile(r, a.Path, data, ref.m.Mode, ref.m.ModTime); err != nil {
				return err
			}
		}
	}
	return nil
}

// memberBytes reads a stored regular file's content.
func memberBytes(ref memberRef) ([]byte, error) {
	if ref.m.data != nil || ref.m.Size == 0 {
		return bytes.Clone(ref.m.data), nil
	}
	rd, done, err := memberContent(ref)
	if err != nil {
		return nil, err
	}
	defer done()
	b, err := io.ReadAll(rd)
	if err == nil && int64(len(b)) != ref.m.Size {
		err = fmt.Errorf("%w: %s: short member", ErrUnreadableArchive, ref.m.Name)
	}
	return b, err
}
