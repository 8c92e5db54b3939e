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
//
// The steps: observe (git's facts), plan (pure: which paths, the scope,
// the omissions and the path bound), read (the working bytes, within the
// file, total and time bounds) and seal (the manifest and its identity).
func Capture(ctx context.Context, root string, o Options) (*event.SourceBinding, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	lim := o.Limits.withDefaults()
	rd, err := openRoot(root)
	if err != nil {
		return nil, err
	}
	defer rd.close()
	f, err := observe(ctx, root, o)
	if f == nil {
		return nil, err
	}
	sb := &event.SourceBinding{Head: f.head, Dirty: len(f.entries) > 0, Tree: f.tree, MergeBase: f.mergeBase}
	if err != nil {
		return stopped(sb, baseOmissions(f), err, o.StopLog)
	}
	p := plan(f, lim)
	sb.Transformed = len(f.transforms) > 0
	if p.manifest == nil {
		sb.Omissions = sortedKeys(p.omit)
		sb.Partial = len(sb.Omissions) > 0
		return sb, nil
	}
	if p.stop != nil {
		return stopped(sb, p.omit, p.stop, o.StopLog)
	}
	r := &reader{rd: rd, store: o.Store, lim: lim}
	if err := r.read(ctx, p); err != nil {
		return stopped(sb, p.omit, err, o.StopLog)
	}
	if !rd.same() {
		return stopped(sb, p.omit, stop(StopRootChanged, root, errors.New("the worktree path no longer names the directory that was read")), o.StopLog)
	}
	if err := r.seal(p, sb, f.wantMergeBase); err != nil {
		return stopped(sb, p.omit, err, o.StopLog)
	}
	return sb, nil
}

// stopped returns sb as a stopped binding when err stops the capture, and
// err otherwise.
func stopped(sb *event.SourceBinding, omit map[string]bool, err error, log func(error)) (*event.SourceBinding, error) {
	var se *stopError
	if !errors.As(err, &se) {
		return nil, err
	}
	if log != nil {
		log(err)
	}
	sb.Stopped, sb.Partial, sb.Omissions = se.reason, true, sortedKeys(omit)
	return sb, nil
}

// facts is what git says about a checkout: observe's result, plan's input.
type facts struct {
	head          string
	entries       []statusEntry
	tree          string
	mergeBase     string
	wantMergeBase bool            // a base ref is configured (and trees looked up)
	transforms    map[string]bool // what makes the worktree differ from the tree's blobs
	tracked       []trackedPath   // the index's paths, listed when a transform applies
}

// observe asks git about the checkout at root: status, HEAD's tree, the
// merge-base with the configured base ref, the transforms and (when one
// applies) the tracked paths. A nil result comes with the error git failed
// with; a non-nil one with an error is a capture that stopped.
func observe(ctx context.Context, root string, o Options) (*facts, error) {
	g, err := runGitFacts(ctx, root, o)
	if err != nil {
		return nil, err
	}
	head, entries, err := parseStatusV2(g.status)
	if err != nil {
		return nil, err
	}
	f := &facts{head: head, entries: entries, wantMergeBase: o.BaseRef != "" && !o.NoTree, transforms: map[string]bool{}}
	if head != "" && !o.NoTree {
		if f.tree, err = treeOf(ctx, root, head, o.TreeCache); err != nil {
			return nil, err
		}
	}
	// rev-parse prints the info/attributes path, then the base commit; a
	// base ref that does not resolve fails it (the path is still printed).
	lines := strings.Split(strings.TrimSpace(string(g.revParse)), "\n")
	infoAttr := lines[0]
	if g.revParseErr != nil && exitCode(g.revParseErr) < 0 {
		return nil, g.revParseErr
	}
	if infoAttr != "" && !strings.HasPrefix(infoAttr, "/") {
		infoAttr = root + "/" + infoAttr
	}
	if f.wantMergeBase {
		base := ""
		if g.revParseErr == nil && len(lines) == 2 && isObjectID(lines[1]) {
			base = lines[1]
		}
		if base != "" && head != "" {
			if f.mergeBase, err = mergeBaseOf(ctx, root, head, base, cacheBeside(o.TreeCache)); err != nil {
				return nil, err
			}
		}
	}
	// Transforms: settings, then the attributes of the tracked files when
	// any attributes file can apply.
	if g.set.crlf {
		f.transforms[TransformCRLF] = true
	}
	hasAttrFiles := len(bytes.Trim(g.attrs, "\x00")) > 0 || attributeSourcesOutside(infoAttr, g.set)
	for _, e := range entries {
		if e.Path == ".gitattributes" || strings.HasSuffix(e.Path, "/.gitattributes") {
			hasAttrFiles = true
		}
	}
	if hasAttrFiles {
		cands, err := transformCandidates(ctx, root, g.set)
		if err != nil {
			return f, err
		}
		ak, err := attrTransforms(ctx, root, cands, g.set)
		if err != nil {
			return nil, err
		}
		for k := range ak {
			f.transforms[k] = true
		}
	}
	if len(f.transforms) > 0 {
		if f.tracked, err = listTracked(ctx, root); err != nil {
			return f, err
		}
	}
	return f, nil
}

// gitFacts are the outputs of the independent git processes of a capture.
type gitFacts struct {
	status, attrs, revParse []byte
	revParseErr             error // kept: a base ref that does not resolve fails rev-parse
	set                     settings
}

// runGitFacts runs the independent git processes concurrently: status,
// the settings, the attributes files and rev-parse.
func runGitFacts(ctx context.Context, root string, o Options) (gitFacts, error) {
	var (
		wg               sync.WaitGroup
		g                gitFacts
		serr, aerr, cerr error
	)
	wg.Add(4)
	go func() {
		defer wg.Done()
		g.status, serr = RunGit(ctx, root, maxGitOutput, "status", "--porcelain=v2", "--branch", "-z", "--untracked-files=all", "--ignore-submodules=none")
	}()
	go func() {
		defer wg.Done()
		g.set, cerr = readSettings(ctx, root)
	}()
	go func() {
		defer wg.Done()
		g.attrs, aerr = RunGit(ctx, root, maxGitOutput, "ls-files", "-z", "--", ":(glob)**/.gitattributes")
	}()
	go func() {
		defer wg.Done()
		args := []string{"rev-parse", "--git-path", "info/attributes"}
		if o.BaseRef != "" && !o.NoTree && !strings.HasPrefix(o.BaseRef, "-") {
			args = append(args, "--verify", "--quiet", "--end-of-options", o.BaseRef+"^{commit}")
		}
		g.revParse, g.revParseErr = RunGit(ctx, root, 8192, args...)
	}()
	wg.Wait()
	for _, err := range []error{serr, cerr, aerr} {
		if err != nil {
			return g, err
		}
	}
	return g, nil
}

// reader reads the planned paths' working bytes through the held root and
// hands them to the store in batches.
type reader struct {
	rd      *rootDir
	store   BlobStore
	lim     Limits
	blobs   []spool.Blob
	pending int64 // bytes in blobs
	total   int64 // working bytes read
}

// flush hands the batched blobs to the store.
func (r *reader) flush() error {
	if r.store == nil || len(r.blobs) == 0 {
		r.blobs, r.pending = nil, 0
		return nil
	}
	if _, err := r.store.PutBlobs(r.blobs); err != nil {
		return stop(StopSpoolRefused, "", err)
	}
	r.blobs, r.pending = nil, 0
	return nil
}

// read fills in the planned entries from the worktree in path order and
// records the omissions it meets in p.omit; it returns the stop (or the
// error) that ends it early.
func (r *reader) read(ctx context.Context, p *capturePlan) error {
	for _, pe := range p.entries {
		e := pe.entry
		if err := ctx.Err(); err != nil {
			return stop(StopTimeout, e.Path, err)
		}
		if pe.pathErr != nil {
			return pe.pathErr
		}
		if e.Kind == "omitted" {
			p.omit[e.Reason] = true
			continue
		}
		if pe.nested {
			// An untracked nested repository: git lists the directory.
			e.Kind, e.Reason = "omitted", OmissionUnsupported
			p.omit[OmissionUnsupported] = true
			continue
		}
		obj, err := r.rd.read(e.Path, pe.parts, r.lim.FileBytes)
		if errors.Is(err, errTooLarge) {
			return stop(StopFileBound, e.Path, fmt.Errorf("above %d bytes", r.lim.FileBytes))
		}
		if err != nil {
			return err
		}
		switch obj.kind {
		case "deleted":
			e.Kind = "deleted"
		case "symlink":
			e.Kind, e.Target = "symlink", obj.target
		case "file":
			r.total += int64(len(obj.data))
			if r.total > r.lim.TotalBytes {
				return stop(StopTotalBound, e.Path, fmt.Errorf("above %d bytes in all", r.lim.TotalBytes))
			}
			sum := sha256.Sum256(obj.data)
			e.Kind, e.Executable, e.Size, e.SHA256 = "file", obj.exec, int64(len(obj.data)), hex.EncodeToString(sum[:])
			if r.store != nil {
				r.blobs = append(r.blobs, spool.Blob{MediaType: FileMediaType, Data: obj.data})
				if r.pending += int64(len(obj.data)); r.pending >= flushBytes {
					if err := r.flush(); err != nil {
						return err
					}
				}
			}
		default: // a directory where git reported a path, a FIFO, socket or device
			e.Kind, e.Reason = "omitted", OmissionUnsupported
			p.omit[OmissionUnsupported] = true
		}
	}
	return nil
}

// seal completes the manifest, retains it with the last working bytes
// (when there is a store) and records its identity and the omissions in sb.
func (r *reader) seal(p *capturePlan, sb *event.SourceBinding, wantMergeBase bool) error {
	m := p.manifest
	m.Entries = make([]ManifestEntry, len(p.entries))
	for i, pe := range p.entries {
		m.Entries[i] = *pe.entry
	}
	delete(p.omit, OmissionMergeBase) // a binding fact, not one of the worktree
	m.Omissions = sortedKeys(p.omit)
	if sb.MergeBase == "" && wantMergeBase {
		p.omit[OmissionMergeBase] = true
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if r.store != nil {
		// The last working bytes and the manifest go in one call (one
		// directory fsync), the manifest last.
		r.blobs = append(r.blobs, spool.Blob{MediaType: ManifestMediaType, Data: b})
		if err := r.flush(); err != nil {
			return err
		}
		sb.Retained = true
	} else {
		p.omit[OmissionNotRetained] = true
	}
	sum := sha256.Sum256(b)
	sb.ManifestDigest, sb.ManifestBytes = hex.EncodeToString(sum[:]), int64(len(b))
	sb.Omissions = sortedKeys(p.omit)
	sb.Partial = len(sb.Omissions) > 0
	return nil
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
