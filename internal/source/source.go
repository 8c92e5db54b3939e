// Package source binds the Git source an action runs on (seed 000,
// "Source-bound observed commands"): HEAD, its tree and the merge-base
// with the configured base ref; for a dirty checkout, or a clean one whose
// attributes or settings transform materialized bytes, the working bytes
// and a content-addressed manifest retained in the private spool, with
// only the manifest's identity in the shared binding. It never modifies the
// index, refs, hooks or working files.
package source

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

// Timeout bounds one capture (all its git processes and reads).
const Timeout = 3 * time.Second

const (
	maxGitOutput = 8 << 20 // git status, ls-files and check-attr output
	flushBytes   = 8 << 20 // working bytes handed to the store at a time
	// ManifestMediaType is the media type of a retained manifest.
	ManifestMediaType = "application/vnd.agentscm.source-manifest+json"
	// FileMediaType is the media type of retained working bytes.
	FileMediaType = "application/octet-stream"
)

// Default bounds of a capture; past one the capture stops (Stopped names
// the bound), never cut silently.
const (
	DefaultMaxPaths = 2000
	DefaultMaxFile  = 16 << 20
	DefaultMaxTotal = 64 << 20
)

// Omission kinds: what a binding names as not covered. Any omission makes
// the binding partial.
const (
	OmissionIndex       = "index_state"        // staged or unmerged index entries differ from HEAD and the worktree
	OmissionSubmodule   = "submodule"          // submodule contents
	OmissionUnsupported = "unsupported_type"   // a FIFO, socket, device or nested repository
	OmissionMergeBase   = "merge_base"         // the configured base ref did not resolve or shares no history
	OmissionNotRetained = "bytes_not_retained" // the working bytes are not in the spool (digest only): see Admit
)

// Stop reasons: why a capture stopped instead of claiming exact source.
const (
	StopUnsafePath       = "unsafe_path"
	StopNotUTF8          = "not_utf8"
	StopSymlinkComponent = "symlink_component"
	StopRootChanged      = "root_changed"
	StopChanged          = "changed_during_read"
	StopUnreadable       = "unreadable"
	StopPathBound        = "path_bound"
	StopFileBound        = "file_bound"
	StopTotalBound       = "total_bound"
	StopSpoolRefused     = "spool_refused"
	StopTimeout          = "timeout" // the capture's time bound (Timeout) passed while reading
)

// Limits bound a capture; zero fields take the defaults.
type Limits struct {
	Paths      int
	FileBytes  int64
	TotalBytes int64
}

func (l Limits) withDefaults() Limits {
	if l.Paths <= 0 {
		l.Paths = DefaultMaxPaths
	}
	if l.FileBytes <= 0 {
		l.FileBytes = DefaultMaxFile
	}
	if l.TotalBytes <= 0 {
		l.TotalBytes = DefaultMaxTotal
	}
	return l
}

// BlobStore retains content-addressed artifacts: *spool.Tx and
// *spool.Spool are blob stores.
type BlobStore interface {
	PutBlobs(blobs []spool.Blob) ([]event.ArtifactRef, error)
}

// Options tunes a capture.
type Options struct {
	// TreeCache is a private file remembering the tree of recent HEAD
	// commits (a commit's tree never changes), so a capture usually runs
	// no rev-parse for it; empty: always ask git. The merge-base cache is
	// the file beside it with "-merge-base" appended.
	TreeCache string
	// NoTree leaves Tree and MergeBase empty (a drift check compares
	// HEAD, which fixes the tree).
	NoTree bool
	// BaseRef is the configured base ref the merge-base is computed with;
	// empty: no merge-base.
	BaseRef string
	// Store retains the working bytes and the manifest; nil: the manifest
	// is only digested (the binding names bytes_not_retained).
	Store BlobStore
	// Limits bound the capture.
	Limits Limits
	// StopLog, when set, receives the error a stopped capture stopped on
	// (the binding keeps only its reason).
	StopLog func(error)
}

// Manifest is the local-private description of the captured working
// files. Scope "delta" lists the paths differing from HEAD's tree (the
// rest of the worktree is exactly the tree's blobs, as no transform
// applies); scope "worktree" lists every tracked and non-ignored
// untracked path, because a transform makes the worktree, not the tree,
// the input.
type Manifest struct {
	Version    int             `json:"version"`
	Head       string          `json:"head,omitempty"`
	Scope      string          `json:"scope"`
	Transforms []string        `json:"transforms,omitempty"`
	Entries    []ManifestEntry `json:"entries"`
	Omissions  []string        `json:"omissions,omitempty"`
}

// ManifestEntry is one path of a manifest.
type ManifestEntry struct {
	Path string `json:"path"`
	// Status is git's XY for a path git status reported.
	Status string `json:"status,omitempty"`
	// Kind is file, symlink, deleted or omitted (with Reason).
	Kind       string `json:"kind"`
	Executable bool   `json:"executable,omitempty"`
	Size       int64  `json:"size,omitempty"`
	// SHA256 is the digest of the file's bytes: the retained artifact's
	// identity.
	SHA256 string `json:"sha256,omitempty"`
	// Target is a symlink's target (local bytes, never followed).
	Target string `json:"target,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// CaptureSource binds the source of the checkout at root without a spool
// (Capture with zero Options).
func CaptureSource(ctx context.Context, root string) (*event.SourceBinding, error) {
	return Capture(ctx, root, Options{})
}

// Capture binds the source of the checkout at root. It fails (and the
// caller's action starts unbound) only when git cannot describe the
// checkout; a capture that must not claim exact source returns a binding
// with Stopped set and no manifest identity.
func Capture(ctx context.Context, root string, o Options) (*event.SourceBinding, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	lim := o.Limits.withDefaults()
	rd, err := openRoot(root)
	if err != nil {
		return nil, err
	}
	defer rd.close()

	// The independent git processes run concurrently.
	var (
		wg                    sync.WaitGroup
		status, attrs, rp     []byte
		serr, aerr, perr, cer error
		set                   settings
	)
	wg.Add(4)
	go func() {
		defer wg.Done()
		status, serr = RunGit(ctx, root, maxGitOutput, "status", "--porcelain=v2", "--branch", "-z", "--untracked-files=all", "--ignore-submodules=none")
	}()
	go func() {
		defer wg.Done()
		set, cer = readSettings(ctx, root)
	}()
	go func() {
		defer wg.Done()
		attrs, aerr = RunGit(ctx, root, maxGitOutput, "ls-files", "-z", "--", ":(glob)**/.gitattributes")
	}()
	go func() {
		defer wg.Done()
		args := []string{"rev-parse", "--git-path", "info/attributes"}
		if o.BaseRef != "" && !o.NoTree && !strings.HasPrefix(o.BaseRef, "-") {
			args = append(args, "--verify", "--quiet", "--end-of-options", o.BaseRef+"^{commit}")
		}
		rp, perr = RunGit(ctx, root, 8192, args...)
	}()
	wg.Wait()
	if serr != nil {
		return nil, serr
	}
	if cer != nil {
		return nil, cer
	}
	if aerr != nil {
		return nil, aerr
	}
	head, entries, err := parseStatusV2(status)
	if err != nil {
		return nil, err
	}
	sb := &event.SourceBinding{Head: head, Dirty: len(entries) > 0}
	omit := map[string]bool{}
	if head != "" && !o.NoTree {
		if sb.Tree, err = treeOf(ctx, root, head, o.TreeCache); err != nil {
			return nil, err
		}
	}
	// rev-parse prints the info/attributes path, then the base commit; a
	// base ref that does not resolve fails it (the path is still printed).
	lines := strings.Split(strings.TrimSpace(string(rp)), "\n")
	infoAttr := lines[0]
	if perr != nil && exitCode(perr) < 0 {
		return nil, perr
	}
	if infoAttr != "" && !strings.HasPrefix(infoAttr, "/") {
		infoAttr = root + "/" + infoAttr
	}
	if o.BaseRef != "" && !o.NoTree {
		base := ""
		if perr == nil && len(lines) == 2 && isObjectID(lines[1]) {
			base = lines[1]
		}
		if base != "" && head != "" {
			if sb.MergeBase, err = mergeBaseOf(ctx, root, head, base, cacheBeside(o.TreeCache)); err != nil {
				return nil, err
			}
		}
		if sb.MergeBase == "" {
			omit[OmissionMergeBase] = true
		}
	}

	// Transforms: settings, then the attributes of the tracked files when
	// any attributes file can apply.
	kinds := map[string]bool{}
	if set.crlf {
		kinds[TransformCRLF] = true
	}
	hasAttrFiles := len(bytes.Trim(attrs, "\x00")) > 0 || attributeSourcesOutside(infoAttr, set)
	for _, e := range entries {
		if e.Path == ".gitattributes" || strings.HasSuffix(e.Path, "/.gitattributes") {
			hasAttrFiles = true
		}
	}
	stopped := func(err error) (*event.SourceBinding, error) {
		var se *stopError
		if !errors.As(err, &se) {
			return nil, err
		}
		if o.StopLog != nil {
			o.StopLog(err)
		}
		sb.Stopped, sb.Partial, sb.Omissions = se.reason, true, sortedKeys(omit)
		return sb, nil
	}
	if hasAttrFiles {
		cands, err := transformCandidates(ctx, root, set)
		if err != nil {
			return stopped(err)
		}
		ak, err := attrTransforms(ctx, root, cands, set)
		if err != nil {
			return nil, err
		}
		for k := range ak {
			kinds[k] = true
		}
	}
	var tracked []trackedPath
	if len(kinds) > 0 {
		if tracked, err = listTracked(ctx, root); err != nil {
			return stopped(err)
		}
	}
	sb.Transformed = len(kinds) > 0
	if len(entries) == 0 && !sb.Transformed {
		sb.Omissions = sortedKeys(omit)
		sb.Partial = len(sb.Omissions) > 0
		return sb, nil
	}
	m := &Manifest{Version: 1, Head: head, Scope: "delta", Transforms: sortedKeys(kinds)}
	want := map[string]*ManifestEntry{}
	add := func(p, status string) *ManifestEntry {
		if e, ok := want[p]; ok {
			if status != "" {
				e.Status = status
			}
			return e
		}
		e := &ManifestEntry{Path: p, Status: status}
		want[p] = e
		return e
	}
	for _, e := range entries {
		me := add(e.Path, e.Status)
		if e.staged() {
			omit[OmissionIndex] = true
		}
		if strings.HasSuffix(e.Status, " S") {
			me.Kind, me.Reason = "omitted", OmissionSubmodule
		}
	}
	if sb.Transformed {
		m.Scope = "worktree"
		for _, t := range tracked {
			me := add(t.path, "")
			if t.gitlink {
				me.Kind, me.Reason = "omitted", OmissionSubmodule
			}
		}
	}
	list := make([]*ManifestEntry, 0, len(want))
	for _, e := range want {
		list = append(list, e)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Path < list[j].Path })

	if len(list) > lim.Paths {
		return stopped(stop(StopPathBound, list[lim.Paths].Path, fmt.Errorf("%d paths, bound %d", len(list), lim.Paths)))
	}
	var total, pending int64
	var blobs []spool.Blob
	flush := func() error {
		if o.Store == nil || len(blobs) == 0 {
			blobs, pending = nil, 0
			return nil
		}
		if _, err := o.Store.PutBlobs(blobs); err != nil {
			return stop(StopSpoolRefused, "", err)
		}
		blobs, pending = nil, 0
		return nil
	}
	for _, e := range list {
		if err := ctx.Err(); err != nil {
			return stopped(stop(StopTimeout, e.Path, err))
		}
		path, nested := strings.CutSuffix(e.Path, "/")
		parts, err := checkPath(path)
		if err != nil {
			return stopped(err)
		}
		if e.Kind == "omitted" {
			omit[e.Reason] = true
			continue
		}
		if nested {
			// An untracked nested repository: git lists the directory.
			e.Kind, e.Reason = "omitted", OmissionUnsupported
			omit[OmissionUnsupported] = true
			continue
		}
		obj, err := rd.read(e.Path, parts, lim.FileBytes)
		if errors.Is(err, errTooLarge) {
			return stopped(stop(StopFileBound, e.Path, fmt.Errorf("above %d bytes", lim.FileBytes)))
		}
		if err != nil {
			return stopped(err)
		}
		switch obj.kind {
		case "deleted":
			e.Kind = "deleted"
		case "symlink":
			e.Kind, e.Target = "symlink", obj.target
		case "file":
			total += int64(len(obj.data))
			if total > lim.TotalBytes {
				return stopped(stop(StopTotalBound, e.Path, fmt.Errorf("above %d bytes in all", lim.TotalBytes)))
			}
			sum := sha256.Sum256(obj.data)
			e.Kind, e.Executable, e.Size, e.SHA256 = "file", obj.exec, int64(len(obj.data)), hex.EncodeToString(sum[:])
			if o.Store != nil {
				blobs = append(blobs, spool.Blob{MediaType: FileMediaType, Data: obj.data})
				if pending += int64(len(obj.data)); pending >= flushBytes {
					if err := flush(); err != nil {
						return stopped(err)
					}
				}
			}
		default: // a directory where git reported a path, a FIFO, socket or device
			e.Kind, e.Reason = "omitted", OmissionUnsupported
			omit[OmissionUnsupported] = true
		}
	}
	if !rd.same() {
		return stopped(stop(StopRootChanged, root, errors.New("the worktree path no longer names the directory that was read")))
	}
	m.Entries = make([]ManifestEntry, len(list))
	for i, e := range list {
		m.Entries[i] = *e
	}
	delete(omit, OmissionMergeBase) // a binding fact, not one of the worktree
	m.Omissions = sortedKeys(omit)
	if sb.MergeBase == "" && o.BaseRef != "" && !o.NoTree {
		omit[OmissionMergeBase] = true
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	if o.Store != nil {
		// The last working bytes and the manifest go in one call (one
		// directory fsync), the manifest last.
		blobs = append(blobs, spool.Blob{MediaType: ManifestMediaType, Data: b})
		if err := flush(); err != nil {
			return stopped(err)
		}
		sb.Retained = true
	} else {
		omit[OmissionNotRetained] = true
	}
	sum := sha256.Sum256(b)
	sb.ManifestDigest, sb.ManifestBytes = hex.EncodeToString(sum[:]), int64(len(b))
	sb.Omissions = sortedKeys(omit)
	sb.Partial = len(sb.Omissions) > 0
	return sb, nil
}

// cacheBeside names the merge-base cache beside the tree cache.
func cacheBeside(treeCache string) string {
	if treeCache == "" {
		return ""
	}
	return treeCache + "-merge-base"
}

// trackedPath is one index entry of `git ls-files --stage`.
type trackedPath struct {
	path    string
	gitlink bool
}

// listTracked lists the index's paths (stage 0 and conflict stages once).
func listTracked(ctx context.Context, root string) ([]trackedPath, error) {
	out, err := RunGit(ctx, root, maxGitOutput, "ls-files", "-z", "--stage")
	if err != nil {
		if exitCode(err) < 0 && ctx.Err() == nil {
			return nil, stop(StopPathBound, "", err) // the index listing is past its bound
		}
		return nil, err
	}
	var res []trackedPath
	seen := map[string]bool{}
	for _, f := range bytes.Split(out, []byte{0}) {
		if len(f) == 0 {
			continue
		}
		meta, p, ok := bytes.Cut(f, []byte{'\t'})
		if !ok {
			return nil, fmt.Errorf("git ls-files: malformed entry %q", f)
		}
		if seen[string(p)] {
			continue
		}
		seen[string(p)] = true
		res = append(res, trackedPath{path: string(p), gitlink: bytes.HasPrefix(meta, []byte("160000 "))})
	}
	return res, nil
}

// ReadManifest reads and verifies the retained manifest a binding names
// from the spool.
func ReadManifest(sp *spool.Spool, sb *event.SourceBinding) (*Manifest, error) {
	if sb == nil || sb.ManifestDigest == "" {
		return nil, errors.New("the binding names no manifest")
	}
	b, err := sp.ReadBlob(event.ArtifactRef{Digest: "sha256:" + sb.ManifestDigest, Bytes: sb.ManifestBytes})
	if err != nil {
		return nil, fmt.Errorf("read source manifest: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode source manifest: %w", err)
	}
	return &m, nil
}

// Drift compares the source at completion with the start's binding:
// none_observed when they agree, changed when they differ, unknown when
// either could not be captured or stopped.
func Drift(start, now *event.SourceBinding) string {
	if start == nil || now == nil || start.Stopped != "" || now.Stopped != "" {
		return "unknown"
	}
	// HEAD fixes the tree, which a drift capture does not look up; the
	// manifest digest fixes every captured working byte.
	if start.Head == now.Head && start.Dirty == now.Dirty && start.ManifestDigest == now.ManifestDigest && start.Transformed == now.Transformed {
		return "none_observed"
	}
	return "changed"
}
