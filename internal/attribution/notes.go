package attribution

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// NotesRef is the notes ref the attribution hooks write Agent Trace
// records under, one note per commit.
const NotesRef = "refs/notes/agentscm"

// hookNames are the git hooks attribution enable installs.
func hookNames() []string { return []string{"post-commit", "post-rewrite"} }

// ErrNoNote reports a commit without an agentscm note.
var ErrNoNote = errors.New("no agentscm note")

// hookMarker is the line that marks a hook file as agentscm's.
const hookMarker = "# agentscm attribution hook"

// ChainedSuffix names the user's own hook, kept beside agentscm's and run
// by it first.
const ChainedSuffix = ".agentscm-chained"

// HookChange is what enable or disable did to one hook file.
type HookChange struct {
	Hook string `json:"hook"`
	Path string `json:"path"`
	// Action: installed, updated, removed, absent, or left (a hook that is
	// not agentscm's, which disable never touches).
	Action string `json:"action"`
	// Chained is the user's hook enable kept (and runs first), or disable
	// put back.
	Chained string `json:"chained,omitempty"`
}

// ErrChainTaken reports a hook whose chained copy exists already while the
// hook itself is not agentscm's: enable will not overwrite either.
var ErrChainTaken = errors.New("the chained hook's name is taken")

// HooksDir returns the directory git runs the checkout's hooks from
// (core.hooksPath honoured).
func HooksDir(ctx context.Context, root string) (string, error) {
	out, err := gitOutput(ctx, root, "rev-parse", "--git-path", "hooks")
	if err != nil {
		return "", err
	}
	p := strings.TrimSpace(string(out))
	if !filepath.IsAbs(p) {
		p = filepath.Join(root, p)
	}
	return filepath.Clean(p), nil
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// hookScript is agentscm's hook: it runs the chained hook with the same
// arguments and input, then agentscm, whose failure never fails the hook.
func hookScript(name, executable, root string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#!/bin/sh\n%s: installed by agentscm attribution enable, removed by agentscm attribution disable.\n", hookMarker)
	fmt.Fprintf(&b, "# It runs the hook that was here before (%s%s), then attaches Agent Trace notes (%s).\n", name, ChainedSuffix, NotesRef)
	b.WriteString("status=0\n")
	fmt.Fprintf(&b, "chained=\"$(dirname \"$0\")/%s%s\"\n", name, ChainedSuffix)
	run := fmt.Sprintf("%s attribution hook %s --root %s", shellQuote(executable), name, shellQuote(root))
	if name == "post-rewrite" {
		b.WriteString("input=$(cat)\n")
		b.WriteString("if [ -x \"$chained\" ]; then printf '%s\\n' \"$input\" | \"$chained\" \"$@\" || status=$?; fi\n")
		fmt.Fprintf(&b, "printf '%%s\\n' \"$input\" | %s \"$@\" || true\n", run)
	} else {
		b.WriteString("if [ -x \"$chained\" ]; then \"$chained\" \"$@\" || status=$?; fi\n")
		fmt.Fprintf(&b, "%s \"$@\" </dev/null || true\n", run)
	}
	b.WriteString("exit $status\n")
	return b.String()
}

// isOurs reports whether the hook at path is agentscm's (a regular file
// with the marker line); a symlink (a hook manager's) is the user's.
func isOurs(path string) (bool, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return false, err
	}
	if !fi.Mode().IsRegular() {
		return false, nil
	}
	b, err := fsutil.ReadFileNoFollow(path, 1<<20)
	if err != nil {
		return false, err
	}
	return bytes.Contains(b, []byte(hookMarker)), nil
}

// EnableHooks installs the post-commit and post-rewrite hooks of the
// checkout at root, which call executable. A hook already there that is
// not agentscm's is kept as NAME.agentscm-chained and run first.
func EnableHooks(ctx context.Context, root, executable string) ([]HookChange, error) {
	dir, err := HooksDir(ctx, root)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// Refuse before changing anything.
	for _, name := range hookNames() {
		path := filepath.Join(dir, name)
		ours, err := isOurs(path)
		if err == nil && !ours {
			if _, err := os.Lstat(path + ChainedSuffix); err == nil {
				return nil, fmt.Errorf("%s: %w (%s exists)", path, ErrChainTaken, path+ChainedSuffix)
			}
		}
	}
	var out []HookChange
	for _, name := range hookNames() {
		path := filepath.Join(dir, name)
		chained := path + ChainedSuffix
		hc := HookChange{Hook: name, Path: path, Action: "installed"}
		ours, err := isOurs(path)
		switch {
		case err == nil && ours:
			hc.Action = "updated"
		case err == nil:
			if err := os.Rename(path, chained); err != nil {
				return out, err
			}
			hc.Chained = chained
		case !errors.Is(err, fs.ErrNotExist):
			return out, err
		}
		if hc.Chained == "" {
			if _, err := os.Lstat(chained); err == nil {
				hc.Chained = chained
			}
		}
		if err := fsutil.WriteAtomic(path, []byte(hookScript(name, executable, root)), 0o755); err != nil {
			return out, err
		}
		if err := os.Chmod(path, 0o755); err != nil {
			return out, err
		}
		out = append(out, hc)
	}
	// An enable cut off between keeping a hook as chained and writing
	// agentscm's is completed by running enable again.
	return out, fsutil.SyncDir(dir)
}

// DisableHooks removes the hooks EnableHooks installed and puts each
// chained hook back; a hook that is not agentscm's is left alone. Notes
// already written stay.
func DisableHooks(ctx context.Context, root string) ([]HookChange, error) {
	dir, err := HooksDir(ctx, root)
	if err != nil {
		return nil, err
	}
	var out []HookChange
	for _, name := range hookNames() {
		path := filepath.Join(dir, name)
		chained := path + ChainedSuffix
		hc := HookChange{Hook: name, Path: path, Action: "removed"}
		ours, err := isOurs(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			hc.Action = "absent"
			out = append(out, hc)
			continue
		case err != nil:
			return out, err
		case !ours:
			hc.Action = "left"
			out = append(out, hc)
			continue
		}
		if _, err := os.Lstat(chained); err == nil {
			if err := os.Rename(chained, path); err != nil {
				return out, err
			}
			hc.Chained = chained
		} else if err := os.Remove(path); err != nil {
			return out, err
		}
		out = append(out, hc)
	}
	return out, fsutil.SyncDir(dir)
}

// ReadNote returns the agentscm note of commit rev, or ErrNoNote.
func ReadNote(ctx context.Context, root, rev string) (*TraceRecord, error) {
	out, err := gitOutput(ctx, root, "notes", "--ref", NotesRef, "show", rev)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", rev, ErrNoNote)
	}
	var rec TraceRecord
	if err := json.Unmarshal(out, &rec); err != nil {
		return nil, fmt.Errorf("the note of %s: %w", rev, err)
	}
	return &rec, nil
}

// WriteNote attaches rec to commit rev under NotesRef, replacing a note
// there.
func WriteNote(ctx context.Context, root, rev string, rec *TraceRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "git", "notes", "--ref", NotesRef, "add", "-f", "-F", "-", rev)
	cmd.Dir = root
	cmd.Env = GitEnv()
	cmd.Stdin = bytes.NewReader(append(b, '\n'))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git notes add: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// RebaseInProgress reports whether the checkout's repository is in the
// middle of a rebase (whose post-rewrite hook carries the notes over).
func RebaseInProgress(ctx context.Context, root string) bool {
	for _, p := range []string{"rebase-merge", "rebase-apply"} {
		out, err := gitOutput(ctx, root, "rev-parse", "--git-path", p)
		if err != nil {
			continue
		}
		d := strings.TrimSpace(string(out))
		if !filepath.IsAbs(d) {
			d = filepath.Join(root, d)
		}
		if _, err := os.Stat(d); err == nil {
			return true
		}
	}
	return false
}

// Rewritten is one line of post-rewrite's input: commit Old became New.
type Rewritten struct{ Old, New string }

// ParseRewritten reads post-rewrite's input ("old new [extra]" lines).
func ParseRewritten(r io.Reader) ([]Rewritten, error) {
	var out []Rewritten
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		out = append(out, Rewritten{Old: f[0], New: f[1]})
	}
	return out, sc.Err()
}

// RewriteNotes carries the notes of rewritten commits over to the commits
// they became, moving each attributed line to where it is in the new
// commit (lines the new commit no longer holds drop out). Commits squashed
// into one give it all their lines. With keepOwn, a new commit whose note
// already names it (written by post-commit on an amend) keeps it.
func RewriteNotes(ctx context.Context, root string, pairs []Rewritten, keepOwn bool, now time.Time, toolVersion string) (written int, err error) {
	olds := map[string][]string{}
	var order []string
	for _, p := range pairs {
		if _, ok := olds[p.New]; !ok {
			order = append(order, p.New)
		}
		olds[p.New] = append(olds[p.New], p.Old)
	}
	for _, nw := range order {
		if keepOwn {
			if rec, err := ReadNote(ctx, root, nw); err == nil && rec.VCS != nil && rec.VCS.Revision == fullSHA(ctx, root, nw) {
				continue
			}
		}
		rec, err := remap(ctx, root, olds[nw], nw, now, toolVersion)
		if err != nil {
			return written, err
		}
		if rec == nil {
			continue
		}
		if err := WriteNote(ctx, root, nw, rec); err != nil {
			return written, err
		}
		written++
	}
	return written, nil
}

func fullSHA(ctx context.Context, root, rev string) string {
	out, err := gitOutput(ctx, root, "rev-parse", "--verify", rev+"^{commit}")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// remap builds the record of commit nw from the notes of olds (nil when
// none has a note).
func remap(ctx context.Context, root string, olds []string, nw string, now time.Time, toolVersion string) (*TraceRecord, error) {
	sha := fullSHA(ctx, root, nw)
	type fileOwners struct {
		lines  []string
		owners []*Owner
	}
	files := map[string]*fileOwners{}
	var paths []string
	var from []string
	for _, old := range olds {
		rec, err := ReadNote(ctx, root, old)
		if err != nil {
			continue
		}
		from = append(from, fullSHA(ctx, root, old))
		vendor := vendorRanges(rec)
		for _, tf := range rec.Files {
			oldContent, err := gitOutput(ctx, root, "show", old+":"+tf.Path)
			if err != nil {
				continue
			}
			newContent, err := gitOutput(ctx, root, "show", nw+":"+tf.Path)
			if err != nil {
				continue // the file is gone (or moved) in the new commit
			}
			fo := files[tf.Path]
			if fo == nil {
				fo = &fileOwners{lines: SplitLines(newContent)}
				fo.owners = make([]*Owner, len(fo.lines))
				files[tf.Path] = fo
				paths = append(paths, tf.Path)
			}
			oldOwners := ownersFromRecord(tf, vendor[tf.Path], len(SplitLines(oldContent)))
			for j, k := range Match(SplitLines(oldContent), fo.lines) {
				if k >= 0 && oldOwners[k] != nil && fo.owners[j] == nil {
					fo.owners[j] = oldOwners[k]
				}
			}
		}
	}
	if len(from) == 0 {
		return nil, nil
	}
	rec := newRecord(now, toolVersion)
	rec.VCS = &TraceVCS{Type: "git", Revision: sha}
	var vendor []VendorRange
	for _, p := range paths {
		fo := files[p]
		attributed := make([]bool, len(fo.owners))
		for i, o := range fo.owners {
			attributed[i] = o != nil
		}
		tf, vr := fileTrace(p, fo.lines, fo.owners, attributed)
		if len(tf.Conversations) > 0 {
			rec.Files = append(rec.Files, tf)
			vendor = append(vendor, vr...)
		}
	}
	rec.setVendor(vendor, map[string]any{"rewritten_from": from})
	return rec, nil
}

// vendorRanges indexes a record's vendor ranges by path.
func vendorRanges(rec *TraceRecord) map[string][]VendorRange {
	out := map[string][]VendorRange{}
	v, ok := rec.Metadata[VendorKey]
	if !ok {
		return out
	}
	b, err := json.Marshal(v)
	if err != nil {
		return out
	}
	var m struct {
		Ranges []VendorRange `json:"ranges"`
	}
	if json.Unmarshal(b, &m) != nil {
		return out
	}
	for _, r := range m.Ranges {
		out[r.Path] = append(out[r.Path], r)
	}
	return out
}

// ownersFromRecord returns the owner of each of n lines as one file of a
// record says: from its vendor ranges when it has them, else from its
// conversations (any Agent Trace record).
func ownersFromRecord(tf TraceFile, vendor []VendorRange, n int) []*Owner {
	out := make([]*Owner, n)
	set := func(start, end int, o *Owner) {
		for l := start; l <= end && l <= n; l++ {
			if l >= 1 && out[l-1] == nil {
				out[l-1] = o
			}
		}
	}
	for _, v := range vendor {
		set(v.StartLine, v.EndLine, &Owner{Kind: v.Kind, Session: v.Session, Agent: v.Agent, Position: v.Position,
			Tool: v.Tool, Prompt: v.Prompt, Model: v.Model})
	}
	for _, c := range tf.Conversations {
		o := &Owner{Kind: "unknown"}
		if c.Contributor != nil {
			switch c.Contributor.Type {
			case "ai":
				o = &Owner{Kind: KindAgent, Model: c.Contributor.ModelID}
				for _, r := range c.Related {
					if s, ok := strings.CutPrefix(r.URL, "urn:agentscm:session:"); ok {
						o.Session = s
					}
				}
			case "human":
				o = &Owner{Kind: KindOutside}
			}
		}
		for _, r := range c.Ranges {
			set(r.StartLine, r.EndLine, o)
		}
	}
	return out
}
