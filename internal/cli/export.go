package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/spool"
)

// exportCommands are change-capture export, verify-export and move-spool.
func exportCommands() []*Command {
	return []*Command{
		{Name: "export", Summary: "write a bounded, byte-verified archive of a spool without changing it", Run: runExport},
		{Name: "verify-export", Summary: "re-read an export archive against its manifest (read-only)", Run: runVerifyExport},
		{Name: "move-spool", Summary: "apply the offline same-inode move of a disabled binding's spool", Run: runMoveSpool},
	}
}

func runExport(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm change-capture export", "--spool ABS --destination ABS [--format text|json]",
		`Write a bounded, byte-verified, nonresumable archive of the spool to
DESTINATION without changing the source. DESTINATION must not exist: it is
installed with an atomic no-replace rename, and an existing or racing
destination is never adopted, changed or deleted. A destination beneath the
spool is refused before anything is created.

The archive is a directory: spool/ holds a byte copy of every spool entry
(directories 0700, files 0600) and manifest.json, written last, lists each
entry's path, size and sha256. An archive without manifest.json is
incomplete and not evidence ('change-capture verify-export' checks one).
Files above 64 MiB (the per-entry digest limit), unreadable files,
symbolic links and files whose digest changes while they are copied are
refused: nothing is ever copied by size only.

The export holds the spool lock shared while it copies (hooks that find it
busy leave their events in SPOOL/intake/; those written after the snapshot
are not in the archive, and a writer's temporary intake file is listed as
excluded). It creates a random private anchor directory
(.agentscm-export-<32 hex>) beside DESTINATION, checks that it is a private
directory owned by you and empty, builds the archive inside it and renames
it to DESTINATION. On success the empty anchor is left in place (removing
it by name could remove a replacement): remove it with rmdir when you like.
A failure names every object it left (anchor, archive directory, installed
destination, foreign entries) with its identity and what is uncertain, and
removes nothing. The archive is evidence, not a spool: a copy is a
different identity and can be inspected but never used for capture.
Linux only.`)
	src := fs.String("spool", "", "path of the spool to export")
	dst := fs.String("destination", "", "path of the new archive directory (must not exist)")
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	if err := checkFormat(*format); err != nil {
		return err
	}
	if *src == "" || *dst == "" {
		return usagef("--spool and --destination are required")
	}
	res, err := spool.Export(ctx, spool.ExportOptions{Spool: *src, Destination: *dst, Now: env.Now()})
	if err != nil {
		var ee *spool.ExportError
		if *format == "json" && errors.As(err, &ee) {
			if werr := writeJSON(env.Stdout, map[string]any{"exported": false, "failure": ee}); werr != nil {
				return werr
			}
		}
		return err
	}
	if *format == "json" {
		return writeJSON(env.Stdout, map[string]any{"exported": true, "result": res})
	}
	printExport(env.Stdout, res)
	return nil
}

func printExport(w io.Writer, r *spool.ExportResult) {
	id := "no valid format v4 commit"
	if r.Committed {
		id = "spool id " + r.SpoolID
	}
	fmt.Fprintf(w, "exported %s (%s) to %s\n", r.Spool, id, r.Destination)
	fmt.Fprintf(w, "  %d files, %d directories, %d bytes, each verified by sha256\n", r.Files, r.Dirs, r.Bytes)
	fmt.Fprintf(w, "  manifest %s (sha256 %s)\n", r.Manifest, r.ManifestSHA256)
	lock := "held (shared) while copying"
	if !r.SpoolLockHeld {
		lock = "absent (no spool.lock: copied without it)"
	}
	fmt.Fprintf(w, "  spool lock: %s\n", lock)
	for _, x := range r.Excluded {
		fmt.Fprintf(w, "  excluded %s: %s\n", x.Path, x.Reason)
	}
	fmt.Fprintf(w, "  anchor left in place (empty): %s\n", r.Anchor)
}

func runVerifyExport(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm change-capture verify-export", "--archive ABS [--format text|json]",
		`Re-read an archive written by 'change-capture export' against its
manifest.json: every listed entry must exist with its type, size and
sha256, and the archive must hold nothing the manifest does not list.
Read-only.`)
	dir := fs.String("archive", "", "path of the archive directory")
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	if err := checkFormat(*format); err != nil {
		return err
	}
	if *dir == "" {
		return usagef("--archive is required")
	}
	m, err := spool.VerifyExport(*dir)
	if err != nil {
		return err
	}
	if *format == "json" {
		return writeJSON(env.Stdout, map[string]any{"archive": *dir, "verified": true, "source": m.Source, "spool_id": m.SpoolID,
			"files": m.Files, "dirs": m.Dirs, "bytes": m.Bytes, "created_at": m.CreatedAt, "excluded": m.Excluded})
	}
	fmt.Fprintf(env.Stdout, "archive %s verified: %d files, %d directories, %d bytes of %s (spool id %s, exported %s)\n",
		*dir, m.Files, m.Dirs, m.Bytes, m.Source, m.SpoolID, m.CreatedAt.Format("2006-01-02T15:04:05Z"))
	return nil
}

func runMoveSpool(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm change-capture move-spool", "[--root PATH] --spool NEW_ABS [--format text|json]",
		`Apply the offline same-inode move of a checkout's spool and update the
binding. The binding must be disabled first (change-capture unconfigure),
so no hook uses the spool while it moves. When the spool is still at the
bound path, agentscm renames it to NEW itself (under the spool lock, with a
no-replace rename, on the same filesystem only); when you already moved it
(mv on one filesystem keeps the inode), the spool at NEW must be exactly the
bound one: the same random spool id and the same root directory inode its
commit binds. A copied, restored, recreated or replaced spool is a
different identity and is refused before anything changes; NEW is never
replaced. The private capture state kept for the spool under the config
directory (ledger, session records, transcript offsets, action receipts)
moves with it, and the binding is saved last. After a crash, run the same
command again. Then run change-capture enable --root ROOT to capture again.`)
	root := fs.String("root", "", rootHelp)
	to := fs.String("spool", "", "the spool's new absolute path")
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	if err := checkFormat(*format); err != nil {
		return err
	}
	if *to == "" {
		return usagef("--spool is required")
	}
	store, err := configStore(env)
	if err != nil {
		return err
	}
	res, err := binding.MoveSpool(ctx, store, binding.MoveSpoolOptions{Root: *root, To: *to})
	if err != nil {
		return err
	}
	if *format == "json" {
		return writeJSON(env.Stdout, res)
	}
	how := "the directory was already moved; verified"
	if res.Renamed {
		how = "renamed by agentscm"
	}
	fmt.Fprintf(env.Stdout, "spool of %s moved: %s -> %s (%s, same inode; %s)\n", res.Root, res.From, res.To, res.Identity, how)
	for _, s := range res.State {
		fmt.Fprintf(env.Stdout, "  capture state moved to %s\n", s)
	}
	if !res.Enabled {
		fmt.Fprintf(env.Stdout, "  the binding stays disabled: run 'agentscm change-capture enable --root %s' to capture again\n", res.Root)
	}
	return nil
}
