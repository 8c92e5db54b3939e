package attribution

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/changelog/incmeta"
)

// Owner kinds: who last wrote a line.
const (
	// KindAgent: a tool call of an agent session wrote it.
	KindAgent = "agent"
	// KindOutside: work done outside the agent (the user, an editor, a
	// formatter, another process), found between two calls, stored before
	// a rewind, or (Uncaptured) changed since the last captured position.
	KindOutside = "outside"
	// KindBeforeCapture: the line was there when the changelog began.
	KindBeforeCapture = "before_capture"
	// KindRewind: a rewind or revert (agentscm rewind, revert) put it
	// there and no earlier state had it.
	KindRewind = "rewind"
)

// Owner is who last wrote a line. Session, tool and prompt are set for an
// agent's tool call; Command (a shell call's command) is conversation
// content, shown by blame on this machine and never written to a note or
// an exported record.
type Owner struct {
	Kind      string `json:"kind"`
	Position  *int   `json:"position,omitempty"`
	Agent     string `json:"agent,omitempty"`
	Session   string `json:"session_id,omitempty"`
	Tool      string `json:"tool,omitempty"`
	ToolUseID string `json:"tool_use_id,omitempty"`
	Command   string `json:"command,omitempty"`
	// Prompt is the sequence number (1-based) of the session's prompt
	// whose turn ran the call; 0 when the transcript does not say.
	Prompt int    `json:"prompt,omitempty"`
	Model  string `json:"model,omitempty"`
	Failed bool   `json:"failed,omitempty"`
	// FoundBy, on an outside owner, is the session whose hook found the
	// work (not its author), and Before the tool call it preceded.
	FoundBy string `json:"found_by_session,omitempty"`
	Before  string `json:"before_tool,omitempty"`
	// Uncaptured: changed since the last captured position.
	Uncaptured bool `json:"uncaptured,omitempty"`
	// Rewind: an outside owner that is the state stored before a rewind.
	Rewind bool `json:"before_rewind,omitempty"`
}

// Describe is the owner in a few words.
func (o *Owner) Describe() string {
	switch o.Kind {
	case KindAgent:
		s := fmt.Sprintf("%s call %d", o.Tool, *o.Position)
		if o.Session != "" {
			s += " session " + short(o.Session)
		}
		if o.Prompt > 0 {
			s += fmt.Sprintf(" prompt %d", o.Prompt)
		}
		return s
	case KindOutside:
		switch {
		case o.Uncaptured:
			return "outside the agent (not captured yet)"
		case o.Rewind:
			return fmt.Sprintf("outside the agent (stored at %d, before a rewind)", *o.Position)
		}
		return fmt.Sprintf("outside the agent (position %d)", *o.Position)
	case KindRewind:
		return fmt.Sprintf("rewind (position %d)", *o.Position)
	}
	return "before capture"
}

func short(s string) string {
	if len(s) > 8 {
		return s[:8]
	}
	return s
}

// ErrNotText reports a file attribution cannot split into lines: a
// symlink, or a file larger than MaxFileBytes at some position.
var ErrNotText = errors.New("not a text file attribution can read")

// MaxFileBytes bounds the content of a file read from one increment.
const MaxFileBytes = 16 << 20

// maxRenameDepth bounds how many renames a history follows back.
const maxRenameDepth = 4

// Source reads increments for a Repo: a checkout's changelog, or the
// increments a Hub holds of a Work.
type Source interface {
	// FilesAt reads what the increment at pos records of rels (see
	// changelog.ReadFilesAt).
	FilesAt(pos int, rels []string) (*changelog.FilesAt, error)
}

// localSource reads a checkout's changelog.
type localSource struct{ log *changelog.Changelog }

func (s localSource) FilesAt(pos int, rels []string) (*changelog.FilesAt, error) {
	return changelog.ReadFilesAt(s.log.IncrementPath(pos), "checkout", rels, MaxFileBytes)
}

// Repo reads a checkout's changelog to attribute its files.
type Repo struct {
	src   Source
	log   *changelog.Changelog // nil for increments read elsewhere
	root  string               // the checkout root ("": none on this machine)
	infos []changelog.Info
	// owners is the owner table every history indexes into: 0 is before
	// capture, 1 uncaptured; one per position after.
	owners  []Owner
	byPos   map[int]int
	details map[string]map[string]callDetail // session -> tool_use_id -> detail
	// want are the paths Prefetch named: each increment read for one of
	// them is read for all, once (cache).
	want  map[string]bool
	cache map[int]*posFiles
	reads int // increments read (tests)
	// prefix caches repoPrefix.
	prefix *string
}

// posFiles is what one increment was read for.
type posFiles struct {
	at    *changelog.FilesAt
	asked map[string]bool
}

// Open reads the list of increments of the checkout's changelog c.
func Open(c *changelog.Changelog) (*Repo, error) {
	infos, err := c.List()
	if err != nil {
		return nil, err
	}
	return &Repo{src: localSource{c}, log: c, root: c.Roots()[0].Path, infos: infos, byPos: map[int]int{},
		owners:  []Owner{{Kind: KindBeforeCapture}, {Kind: KindOutside, Uncaptured: true}},
		details: map[string]map[string]callDetail{}, want: map[string]bool{}, cache: map[int]*posFiles{}}, nil
}

// OpenIncrements attributes the increments infos lists (in position
// order), read from src, with no checkout on this machine: no transcript,
// no git, no working tree.
func OpenIncrements(infos []changelog.Info, src Source) *Repo {
	return &Repo{src: src, infos: infos, byPos: map[int]int{},
		owners:  []Owner{{Kind: KindBeforeCapture}, {Kind: KindOutside, Uncaptured: true}},
		details: map[string]map[string]callDetail{}, want: map[string]bool{}, cache: map[int]*posFiles{}}
}

// Prefetch names the files the caller will attribute: an increment read
// for one of them is read for all of them at once, so a summary of many
// files reads each increment once, not once per file.
func (r *Repo) Prefetch(rels []string) {
	for _, rel := range rels {
		r.want[rel] = true
	}
}

// filesAt returns what the increment of inf records of rel (and of every
// prefetched path it may touch), reading it at most once per path.
func (r *Repo) filesAt(inf changelog.Info, first bool, rel string) (*changelog.FilesAt, error) {
	pf := r.cache[inf.Position]
	if pf != nil && pf.asked[rel] {
		return pf.at, nil
	}
	rels := []string{rel}
	for w := range r.want {
		if w != rel && (pf == nil || !pf.asked[w]) && (first || touches(inf.Changes, w)) {
			rels = append(rels, w)
		}
	}
	fa, err := r.src.FilesAt(inf.Position, rels)
	if err != nil {
		return nil, err
	}
	r.reads++
	if pf == nil {
		pf = &posFiles{at: fa, asked: map[string]bool{}}
		r.cache[inf.Position] = pf
	} else {
		for k, v := range fa.Files {
			pf.at.Files[k] = v
		}
	}
	for _, x := range rels {
		pf.asked[x] = true
	}
	return pf.at, nil
}

// Root is the checkout root.
func (r *Repo) Root() string { return r.root }

const (
	ownerBefore     = 0
	ownerUncaptured = 1
)

// History is the versions of one file, oldest first, with the position of
// each (-1 for the state before capture).
type History struct {
	Path      string
	Versions  []Version
	Positions []int
	// RenamedFrom lists the earlier paths the history followed, newest
	// first.
	RenamedFrom []string
}

// versionAt returns the index of the version the file had right after
// position pos (-1 when none).
func (h *History) versionAt(pos int) int {
	at := -1
	for i, p := range h.Positions {
		if p <= pos {
			at = i
		}
	}
	return at
}

// FileHistory reads the versions of the file rel (a slash path in the
// checkout) from the increments up to position upto (all when < 0).
func (r *Repo) FileHistory(ctx context.Context, rel string, upto int) (*History, error) {
	end := len(r.infos)
	if upto >= 0 {
		end = 0
		for end < len(r.infos) && r.infos[end].Position <= upto {
			end++
		}
	}
	return r.history(ctx, rel, end, 0)
}

// history reads rel's versions from r.infos[:end].
func (r *Repo) history(ctx context.Context, rel string, end, depth int) (*History, error) {
	h := &History{Path: rel}
	first := true
	for _, inf := range r.infos[:end] {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if inf.Err != "" {
			continue
		}
		isFirst := first
		first = false
		if !isFirst && !touches(inf.Changes, rel) {
			continue
		}
		fa, err := r.filesAt(inf, isFirst, rel)
		if err != nil {
			return nil, fmt.Errorf("position %d: %w", inf.Position, err)
		}
		st, ok := fa.Files[rel]
		if !ok {
			continue
		}
		if st.Change == changelog.FileAbsent {
			if n := len(h.Versions); n > 0 && h.Versions[n-1].Present {
				h.add(Version{Owner: r.ownerOf(inf, &fa.Meta)}, inf.Position)
			}
			continue
		}
		if st.Symlink || st.TooLarge {
			return nil, fmt.Errorf("%s at position %d: %w", rel, inf.Position, ErrNotText)
		}
		v := Version{Owner: r.ownerOf(inf, &fa.Meta), Present: true, Lines: SplitLines(st.Data)}
		switch {
		case isFirst:
			r.firstVersions(ctx, h, inf, v)
			continue
		case len(h.Versions) == 0 || !h.Versions[len(h.Versions)-1].Present:
			if depth < maxRenameDepth && len(h.Versions) == 0 {
				if from, old := r.renamedFrom(ctx, inf, rel, v.Lines, depth); old != nil {
					h.Versions, h.Positions = old.Versions, old.Positions
					h.RenamedFrom = append([]string{from}, old.RenamedFrom...)
				}
			}
		}
		switch fa.Meta.Kind {
		case changelog.KindApply:
			if fa.Meta.AppliedTo != nil {
				v.Prefer = []int{h.versionAt(*fa.Meta.AppliedTo)}
			}
		case changelog.KindRevert:
			if fa.Meta.Reverted != nil {
				v.Also = []int{h.versionAt(*fa.Meta.Reverted - 1)}
			}
		}
		h.add(v, inf.Position)
	}
	if first && depth == 0 && end == len(r.infos) {
		// No increment yet: the file as HEAD holds it is the state before
		// capture, as for a file the first increment reports modified.
		if b, err := r.gitShow(ctx, "HEAD", rel); err == nil {
			h.add(Version{Owner: ownerBefore, Present: true, Lines: SplitLines(b)}, -1)
		}
	}
	return h, nil
}

func (h *History) add(v Version, pos int) {
	h.Versions = append(h.Versions, v)
	h.Positions = append(h.Positions, pos)
}

// firstVersions adds the file as the first increment stores it. That
// increment stores every path; its Changes say which ones its call
// created or modified. A file it did not change was there before capture;
// one it modified is compared with the file in HEAD, the best guess of
// what it held before (the changelog keeps no earlier content).
func (r *Repo) firstVersions(ctx context.Context, h *History, inf changelog.Info, v Version) {
	ch := inf.Changes
	switch {
	case ch == nil || ch.Baseline:
		v.Owner = ownerBefore
	case slices.Contains(ch.Created, h.Path):
	case slices.Contains(ch.Modified, h.Path):
		if b, err := r.gitShow(ctx, "HEAD", h.Path); err == nil {
			h.add(Version{Owner: ownerBefore, Present: true, Lines: SplitLines(b)}, -1)
		}
	default:
		v.Owner = ownerBefore
	}
	h.add(v, inf.Position)
}

// renamedFrom looks, among the files the increment of inf deleted, for the
// one rel continues: the deleted file whose last content shares the most
// lines with rel's, at least half of the longer of the two.
func (r *Repo) renamedFrom(ctx context.Context, inf changelog.Info, rel string, lines []string, depth int) (string, *History) {
	if inf.Changes == nil {
		return "", nil
	}
	var cands []string
	for _, d := range inf.Changes.Deleted {
		if strings.Contains(d, ":") && !strings.HasPrefix(d, "./") {
			continue // another capture root's
		}
		if dir, ok := strings.CutSuffix(d, "/"); ok {
			// A directory went: rel may be one of its files, moved with a
			// created directory.
			for _, c := range inf.Changes.Created {
				if cdir, ok := strings.CutSuffix(c, "/"); ok && strings.HasPrefix(rel, cdir+"/") {
					cands = append(cands, dir+"/"+strings.TrimPrefix(rel, cdir+"/"))
				}
			}
			continue
		}
		cands = append(cands, d)
	}
	end := slices.IndexFunc(r.infos, func(i changelog.Info) bool { return i.Position == inf.Position })
	best, bestN := "", 0
	var bestH *History
	for _, c := range cands[:min(len(cands), 20)] {
		old, err := r.history(ctx, c, end, depth+1)
		if err != nil || len(old.Versions) == 0 || !old.Versions[len(old.Versions)-1].Present {
			continue
		}
		prev := old.Versions[len(old.Versions)-1].Lines
		n := 0
		for _, k := range Match(prev, lines) {
			if k >= 0 {
				n++
			}
		}
		if n > 0 && 2*n >= max(len(prev), len(lines)) && n > bestN {
			best, bestN, bestH = c, n, old
		}
	}
	return best, bestH
}

// touches reports whether an increment with these changes may have
// changed rel (always, when they are unknown or cut short).
func touches(ch *incmeta.Changes, rel string) bool {
	if ch == nil || ch.Baseline || ch.CreatedOmitted+ch.ModifiedOmitted+ch.DeletedOmitted > 0 {
		return true
	}
	if slices.Contains(ch.Created, rel) || slices.Contains(ch.Modified, rel) {
		return true
	}
	for _, d := range ch.Deleted {
		if d == rel || d == "./" || (strings.HasSuffix(d, "/") && strings.HasPrefix(rel, d)) {
			return true
		}
	}
	return false
}

// ownerOf returns the owner index of the increment inf.
func (r *Repo) ownerOf(inf changelog.Info, m *incmeta.Meta) int {
	if i, ok := r.byPos[inf.Position]; ok {
		return i
	}
	pos := inf.Position
	o := Owner{Position: &pos}
	switch m.Kind {
	case changelog.KindCall:
		o.Kind, o.Session, o.Tool, o.ToolUseID, o.Failed = KindAgent, m.SessionID, m.Tool, m.ToolUseID, m.Failed
		d := r.detail(m.SessionID, m.ToolUseID)
		o.Agent, o.Command, o.Prompt, o.Model = d.agent, d.command, d.prompt, d.model
		if o.Agent == "" {
			o.Agent = agentOfTool(m.Tool)
		}
	case changelog.KindOutside:
		o.Kind = KindOutside
		if m.Outside != nil {
			o.FoundBy, o.Before = m.Outside.SessionID, m.Outside.BeforeTool
		}
	case changelog.KindPreApply:
		o.Kind, o.Rewind = KindOutside, true
	default:
		o.Kind = KindRewind
	}
	r.owners = append(r.owners, o)
	r.byPos[pos] = len(r.owners) - 1
	return len(r.owners) - 1
}

// agentOfTool names the agent whose tools carry this name, when only one
// does ("" for a name several agents use, as Claude Code's and Codex's
// shell calls both are "Bash").
func agentOfTool(tool string) string {
	switch tool {
	case "Write", "Edit", "MultiEdit", "NotebookEdit":
		return "claude-code"
	case "apply_patch":
		return "codex"
	case "write_file", "replace", "run_shell_command":
		return "gemini"
	}
	return ""
}

// gitShow returns the content of path at rev in the checkout.
func (r *Repo) gitShow(ctx context.Context, rev, path string) ([]byte, error) {
	if r.root == "" {
		return nil, errors.New("no checkout on this machine")
	}
	return gitOutput(ctx, r.root, "show", rev+":./"+path)
}

func gitOutput(ctx context.Context, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = GitEnv()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// GitEnv is the environment git runs in here: this process's, without the
// variables git sets for its hooks (GIT_DIR, GIT_INDEX_FILE, ...), so that
// a command run in a directory works on that directory's repository.
func GitEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_PREFIX", "GIT_COMMON_DIR",
			"GIT_OBJECT_DIRECTORY", "GIT_IMPLICIT_WORK_TREE", "GIT_ALTERNATE_OBJECT_DIRECTORIES":
			continue
		}
		out = append(out, kv)
	}
	return append(out, "GIT_OPTIONAL_LOCKS=0")
}

// prefix is the checkout root's path inside its repository ("" at the
// top, else ending in "/"): records name files from the repository's top.
func (r *Repo) repoPrefix(ctx context.Context) string {
	if r.prefix == nil {
		p := ""
		if r.root != "" {
			if out, err := gitOutput(ctx, r.root, "rev-parse", "--show-prefix"); err == nil {
				p = strings.TrimSpace(string(out))
			}
		}
		r.prefix = &p
	}
	return *r.prefix
}

// Owner returns the owner at index i of the table histories index into.
func (r *Repo) Owner(i int) *Owner { return &r.owners[i] }

// conversationRoots lists the checkout's conversation roots.
func (r *Repo) conversationRoots() []string {
	var out []string
	if r.log == nil {
		return nil
	}
	for _, root := range r.log.Roots() {
		if changelog.IsConversationRoot(root.Name, root.Path) {
			out = append(out, root.Path)
		}
	}
	return out
}

// transcriptPath finds the session's Claude Code transcript in the
// checkout's conversation roots.
func (r *Repo) transcriptPath(session string) string {
	if session == "" || strings.ContainsAny(session, "/\\") {
		return ""
	}
	for _, root := range r.conversationRoots() {
		p := filepath.Join(root, session+".jsonl")
		if _, err := os.Stat(p); err == nil {
			return p
		}
		if m, _ := filepath.Glob(filepath.Join(root, "*", session+".jsonl")); len(m) > 0 {
			return m[0]
		}
	}
	return ""
}
