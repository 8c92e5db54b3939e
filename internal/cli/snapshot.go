package cli

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/fsutil"
)

// snapshotFile resolves the snapshot file of save or load: --file, or the
// older form (save --out, load's positional FILE), not both.
func snapshotFile(file, legacy, legacyName string) (string, error) {
	switch {
	case file != "" && legacy != "" && file != legacy:
		return "", usagef("--file %q and %s %q name different files", file, legacyName, legacy)
	case file == "":
		file = legacy
	}
	if file == "" {
		return "", usagef("--file FILE is required")
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		return "", usagef("--file %q: %v", file, err)
	}
	return abs, nil
}

// insideRoot returns the capture root that holds p (lexically, or once
// symlinks are resolved), nil when none does.
func insideRoot(p string, roots []changelog.Root) *changelog.Root {
	cands := []string{p}
	if d, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil {
		cands = append(cands, filepath.Join(d, filepath.Base(p)))
	}
	for i, r := range roots {
		rps := []string{r.Path}
		if real, err := filepath.EvalSymlinks(r.Path); err == nil && real != r.Path {
			rps = append(rps, real)
		}
		for _, c := range cands {
			for _, rp := range rps {
				if c == rp || strings.HasPrefix(c, rp+"/") {
					return &roots[i]
				}
			}
		}
	}
	return nil
}

func runSnapshotSave(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm snapshot save", "[--root PATH] --file FILE.tgz [flags]", `
Write a full archive of the checkout (without .git, .agentdiff and, by
default, git-ignored paths) and any extra roots, in the changelog's GNU tar
format. The file is never replaced, and it may not lie inside a capture
root (the checkout, an extra root, or a root of the checkout's changelog):
the archive would hold a truncated copy of itself. --out FILE is the older
spelling of --file.`)
	var rf rootFlags
	rf.register(fs, true)
	file := fs.String("file", "", "the snapshot file to create (required; never replaced; outside every capture root)")
	out := fs.String("out", "", "older spelling of --file")
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	path, err := snapshotFile(*file, *out, "--out")
	if err != nil {
		return err
	}
	roots, root, err := rf.roots()
	if err != nil {
		return err
	}
	check := roots
	if dir, err := rf.changelogDir(env, root); err == nil {
		if stored, err := changelog.LoadRoots(dir); err == nil {
			check = append(check, stored...)
		}
	}
	if r := insideRoot(path, check); r != nil {
		return usagef("the snapshot file %s lies inside the capture root %s (%s), so it would archive a truncated copy of itself; write it outside every capture root", path, r.Name, r.Path)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fsutil.FileMode)
	if err != nil {
		return err
	}
	meta, err := changelog.SaveSnapshot(ctx, roots, f, "", configExclude(env)...)
	if err == nil {
		err = f.Sync()
	}
	var size int64
	if fi, serr := f.Stat(); serr == nil {
		size = fi.Size()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsutil.SyncDir(filepath.Dir(path))
	}
	if err != nil {
		os.Remove(path)
		return err
	}
	if *format == "json" {
		return writeJSON(env.Stdout, map[string]any{"file": path, "root": root, "roots": roots, "files": meta.Files, "bytes": meta.Bytes, "size": size})
	}
	fmt.Fprintf(env.Stdout, "saved %d files (%d bytes) to %s\n", meta.Files, meta.Bytes, path)
	return nil
}

func runSnapshotLoad(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm snapshot load", "[--root PATH] --file FILE.tgz [flags]", `
Restore a snapshot into the checkout (and extra roots, matched by name), as
a rewind: the snapshot is validated first (an unreadable or hostile one is
refused with exit status 4 before anything changes); every path it would
create, modify or delete is compared with the newest captured position of
the checkout's changelog (with no changelog yet, every existing path counts
as changed), and paths changed since refuse the load with exit status 6 and
their list unless --force; the current state is stored as an undo point
(undo with agentscm changelog apply --to N; a checkout without a changelog
gets one for it); then files are restored, what the snapshot does not hold
is deleted (except .git, .agentdiff, the changelog directory and ignored
paths, which are never touched), capture hooks restored into
.claude/settings*.json are dropped, and the result is stored too. What it
cannot restore (a symlink to outside the capture roots) is listed, and the
load exits with status 8 (partial).
--dry-run lists what would change and changes nothing. Refused with exit
status 5 while any live session's agent turn runs (stale turns are set
aside and named). 'snapshot load [flags] FILE.tgz' is the
older form of --file.`)
	var rf rootFlags
	rf.register(fs, true)
	file := fs.String("file", "", "the snapshot file to load (required)")
	force := fs.Bool("force", false, "load even though paths it changes were changed after the newest captured position (the undo point still holds them); a running turn is never overridden")
	dryRun := fs.Bool("dry-run", false, "print what the load would create, modify and delete, and change nothing")
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, true); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return usagef("snapshot load takes one FILE")
	}
	path, err := snapshotFile(*file, fs.Arg(0), "FILE")
	if err != nil {
		return err
	}
	roots, root, err := rf.roots()
	if err != nil {
		return err
	}
	dir, err := rf.changelogDir(env, root)
	if err != nil {
		return err
	}
	stored, err := changelog.LoadRoots(dir)
	created := false
	switch {
	case errors.Is(err, iofs.ErrNotExist):
		if *dryRun {
			// A dry run leaves no changelog behind: a throwaway one.
			tmp, err := os.MkdirTemp(filepath.Dir(dir), ".dry-run-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			dir = tmp
		}
		created = true
	case err != nil:
		return err
	default:
		if stored[0].Path != root {
			return fmt.Errorf("changelog %s belongs to %s, not %s", dir, stored[0].Path, root)
		}
		for _, r := range roots[1:] {
			if !hasRoot(stored, r) {
				return fmt.Errorf("the changelog of %s has no capture root %s=%s; add it with agentscm changelog enable --extra-root first", root, r.Name, r.Path)
			}
		}
		roots = stored
	}
	c, err := changelog.Open(dir, changelog.Options{Roots: roots, Exclude: configExclude(env), ConversationRefs: conversationRefs(env, root)})
	if err != nil {
		return err
	}
	if created && !*dryRun {
		if err := c.SaveRoots(); err != nil {
			return err
		}
	}
	if !*dryRun {
		g, err := holdTurns(env, c.Dir())
		if err != nil {
			return err
		}
		defer g.Release()
	}
	after, err := dropRestoredHooks(root)
	if err != nil {
		return err
	}
	res, err := c.ApplySnapshot(ctx, path, changelog.ApplyRequest{AfterExtract: after, Force: *force, DryRun: *dryRun})
	if err != nil {
		return applyExit(env, c.Roots(), *format, err)
	}
	if res.DryRun {
		return printDryRun(env, c.Roots(), *format, "loading "+path, res)
	}
	warnForced(env, c.Roots(), res)
	if *format == "json" {
		if err := writeJSON(env.Stdout, map[string]any{"file": path, "root": root, "undo_position": res.PreApply.Position,
			"result_position": res.Result.Position, "changelog_created": created, "forced": jsonChanges(res.Conflicts),
			"unrestorable": jsonUnrestorable(c.Roots(), res.Unrestorable), "partial": isPartial(res)}); err != nil {
			return err
		}
		return partialExit(env, c.Roots(), res)
	}
	fmt.Fprintf(env.Stdout, "loaded %s into %s; undo with: agentscm changelog apply --root %s --to %d\n", path, root, root, res.PreApply.Position)
	return partialExit(env, c.Roots(), res)
}
