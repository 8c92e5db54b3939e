package attribution

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/agentscm/agentscm/internal/buildinfo"
)

// TraceVersion is the Agent Trace specification version the records
// follow (cursor/agent-trace, 0.1.0, an RFC of January 2026).
const TraceVersion = "0.1.0"

// TraceMediaType is the media type of one Agent Trace record.
const TraceMediaType = "application/vnd.agent-trace.record+json"

// VendorKey is the metadata key of agentscm's own fields in a record.
const VendorKey = "dev.agentscm"

// TraceRecord is an Agent Trace record.
type TraceRecord struct {
	Version   string         `json:"version"`
	ID        string         `json:"id"`
	Timestamp string         `json:"timestamp"`
	VCS       *TraceVCS      `json:"vcs,omitempty"`
	Tool      *TraceTool     `json:"tool,omitempty"`
	Files     []TraceFile    `json:"files"`
	Metadata  map[string]any `json:"metadata,omitempty"`
}

// TraceVCS names the revision a record's line numbers refer to.
type TraceVCS struct {
	Type     string `json:"type"`
	Revision string `json:"revision"`
}

// TraceTool is the tool that wrote a record.
type TraceTool struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
}

// TraceFile is the attributed ranges of one file.
type TraceFile struct {
	Path          string              `json:"path"`
	Conversations []TraceConversation `json:"conversations"`
}

// TraceConversation is the ranges one contributor wrote: one per agent
// session, one for work outside the agent, one for lines of unknown
// origin.
type TraceConversation struct {
	Contributor *TraceContributor `json:"contributor,omitempty"`
	Ranges      []TraceRange      `json:"ranges"`
	Related     []TraceRelated    `json:"related,omitempty"`
}

// TraceContributor is human, ai, mixed or unknown, with the model id the
// host reported.
type TraceContributor struct {
	Type    string `json:"type"`
	ModelID string `json:"model_id,omitempty"`
}

// TraceRange is lines start..end (1-based, inclusive) and the hash of
// their content.
type TraceRange struct {
	StartLine   int               `json:"start_line"`
	EndLine     int               `json:"end_line"`
	ContentHash string            `json:"content_hash,omitempty"`
	Contributor *TraceContributor `json:"contributor,omitempty"`
}

// TraceRelated is a resource related to a conversation.
type TraceRelated struct {
	Type string `json:"type"`
	URL  string `json:"url"`
}

// VendorRange is agentscm's detail of one attributed range (in the
// record's metadata under VendorKey): the tool call and the prompt's
// sequence number, never conversation text.
type VendorRange struct {
	Path      string `json:"path"`
	StartLine int    `json:"start_line"`
	EndLine   int    `json:"end_line"`
	Kind      string `json:"kind"`
	Session   string `json:"session_id,omitempty"`
	Agent     string `json:"agent,omitempty"`
	Position  *int   `json:"position,omitempty"`
	Tool      string `json:"tool,omitempty"`
	Prompt    int    `json:"prompt,omitempty"`
	// Model is the model id the host reported for the call.
	Model string `json:"model_id,omitempty"`
}

// SessionURI is the URI a record relates a session's conversation to.
func SessionURI(session string) string { return "urn:agentscm:session:" + session }

// ContentHash is the hash of lines as a range's content_hash: sha256 of
// the lines, each ended by "\n".
func ContentHash(lines []string) string {
	h := sha256.New()
	for _, l := range lines {
		h.Write([]byte(l))
		h.Write([]byte{'\n'})
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// NewTraceID returns a random (version 4) UUID.
func NewTraceID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported systems
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// modelID is a host's model name in the models.dev convention
// (provider/model) when the provider is known.
func modelID(o *Owner) string {
	if o.Model == "" || strings.Contains(o.Model, "/") {
		return o.Model
	}
	switch {
	case o.Agent == "claude-code" || strings.HasPrefix(o.Model, "claude"):
		return "anthropic/" + o.Model
	case strings.HasPrefix(o.Model, "gemini"):
		return "google/" + o.Model
	case strings.HasPrefix(o.Model, "gpt") || o.Agent == "codex":
		return "openai/" + o.Model
	}
	return o.Model
}

// conversationKey groups owners into a record's conversations.
func conversationKey(o *Owner) string {
	switch o.Kind {
	case KindAgent:
		return "session:" + o.Session
	case KindOutside:
		return "human"
	}
	return "unknown"
}

// fileTrace builds the conversations of one file from the owner of each
// of its lines, for the lines marked in attributed, and the vendor detail
// of each range.
func fileTrace(path string, lines []string, owners []*Owner, attributed []bool) (TraceFile, []VendorRange) {
	tf := TraceFile{Path: path, Conversations: []TraceConversation{}}
	index := map[string]int{}
	var vendor []VendorRange
	for i := 0; i < len(lines); {
		if !attributed[i] {
			i++
			continue
		}
		o := owners[i]
		k := conversationKey(o)
		j := i
		for j+1 < len(lines) && attributed[j+1] && conversationKey(owners[j+1]) == k && modelID(owners[j+1]) == modelID(o) {
			j++
		}
		ci, ok := index[k]
		if !ok {
			conv := TraceConversation{Ranges: []TraceRange{}}
			switch o.Kind {
			case KindAgent:
				conv.Contributor = &TraceContributor{Type: "ai", ModelID: modelID(o)}
				if o.Session != "" {
					conv.Related = []TraceRelated{{Type: "session", URL: SessionURI(o.Session)}}
				}
			case KindOutside:
				conv.Contributor = &TraceContributor{Type: "human"}
			default:
				conv.Contributor = &TraceContributor{Type: "unknown"}
			}
			tf.Conversations = append(tf.Conversations, conv)
			ci = len(tf.Conversations) - 1
			index[k] = ci
		}
		conv := &tf.Conversations[ci]
		r := TraceRange{StartLine: i + 1, EndLine: j + 1, ContentHash: ContentHash(lines[i : j+1])}
		if o.Kind == KindAgent && modelID(o) != conv.Contributor.ModelID {
			r.Contributor = &TraceContributor{Type: "ai", ModelID: modelID(o)}
		}
		conv.Ranges = append(conv.Ranges, r)
		// The vendor detail: one range per owner (tool call).
		for a := i; a <= j; {
			b := a
			for b+1 <= j && owners[b+1] == owners[a] {
				b++
			}
			oa := owners[a]
			vendor = append(vendor, VendorRange{Path: path, StartLine: a + 1, EndLine: b + 1, Kind: oa.Kind,
				Session: oa.Session, Agent: oa.Agent, Position: oa.Position, Tool: oa.Tool, Prompt: oa.Prompt, Model: modelID(oa)})
			a = b + 1
		}
		i = j + 1
	}
	return tf, vendor
}

// newRecord returns an empty record of agentscm at now.
func newRecord(now time.Time, toolVersion string) *TraceRecord {
	return &TraceRecord{Version: TraceVersion, ID: NewTraceID(), Timestamp: now.UTC().Format(time.RFC3339),
		Tool: &TraceTool{Name: "agentscm", Version: toolVersion}, Files: []TraceFile{}}
}

func (t *TraceRecord) setVendor(ranges []VendorRange, extra map[string]any) {
	v := map[string]any{"ranges": ranges}
	for k, x := range extra {
		v[k] = x
	}
	if ranges == nil {
		v["ranges"] = []VendorRange{}
	}
	t.Metadata = map[string]any{VendorKey: v}
}

// CommitTrace is the Agent Trace record of commit rev: for each file the
// commit adds lines to (against its first parent), the added lines by
// their author, as the changelog attributes the committed content.
func (r *Repo) CommitTrace(ctx context.Context, rev string, now time.Time, toolVersion string) (*TraceRecord, error) {
	out, err := gitOutput(ctx, r.root, "rev-parse", "--verify", rev+"^{commit}")
	if err != nil {
		return nil, err
	}
	sha := strings.TrimSpace(string(out))
	parent := ""
	if p, err := gitOutput(ctx, r.root, "rev-parse", "--verify", "-q", sha+"^1"); err == nil {
		parent = strings.TrimSpace(string(p))
	}
	changed, err := r.commitFiles(ctx, parent, sha)
	if err != nil {
		return nil, err
	}
	var rels []string
	for _, ch := range changed {
		rels = append(rels, ch.path)
	}
	r.Prefetch(rels)
	rec := newRecord(now, toolVersion)
	rec.VCS = &TraceVCS{Type: "git", Revision: sha}
	var vendor []VendorRange
	var skipped []string
	for _, ch := range changed {
		cur, err := r.gitShow(ctx, sha, ch.path)
		if err != nil {
			continue
		}
		var old []byte
		if parent != "" && ch.old != "" {
			old, _ = r.gitShow(ctx, parent, ch.old)
		}
		if bytes.IndexByte(cur, 0) >= 0 || bytes.IndexByte(old, 0) >= 0 {
			skipped = append(skipped, ch.path)
			continue
		}
		lines := SplitLines(cur)
		owners, err := r.OwnersOf(ctx, ch.path, cur)
		if err != nil {
			skipped = append(skipped, ch.path)
			continue
		}
		added := addedLines(SplitLines(old), lines)
		tf, vr := fileTrace(r.repoPrefix(ctx)+ch.path, lines, owners, added)
		if len(tf.Conversations) == 0 {
			continue
		}
		rec.Files = append(rec.Files, tf)
		vendor = append(vendor, vr...)
	}
	extra := map[string]any{}
	if len(skipped) > 0 {
		extra["skipped"] = skipped
	}
	rec.setVendor(vendor, extra)
	return rec, nil
}

// commitFiles lists the files commit sha adds to or modifies against
// parent ("" for a root commit), with renames.
func (r *Repo) commitFiles(ctx context.Context, parent, sha string) ([]changedFile, error) {
	args := []string{"diff-tree", "-r", "-z", "--name-status", "-M", "--no-commit-id", "--relative"}
	if parent == "" {
		args = append(args, "--root", sha)
	} else {
		args = append(args, parent, sha)
	}
	out, err := gitOutput(ctx, r.root, args...)
	if err != nil {
		return nil, err
	}
	files := parseNameStatus(out)
	sort.Slice(files, func(i, j int) bool { return files[i].path < files[j].path })
	return files, nil
}

// SessionTrace is the Agent Trace record of the lines the sessions wrote
// that the working tree still holds (no vcs revision: the lines are the
// working tree's).
func (r *Repo) SessionTrace(ctx context.Context, sessions []string, now time.Time, toolVersion string) (*TraceRecord, error) {
	want := map[string]bool{}
	for _, s := range sessions {
		want[s] = true
	}
	paths := map[string]bool{}
	for _, inf := range r.infos {
		if !want[inf.Session] || inf.Kind != "call" || inf.Changes == nil {
			continue
		}
		for _, p := range append(append([]string(nil), inf.Changes.Created...), inf.Changes.Modified...) {
			if !strings.HasSuffix(p, "/") && !strings.Contains(p, ":") {
				paths[p] = true
			}
		}
	}
	var sortedPaths []string
	for p := range paths {
		sortedPaths = append(sortedPaths, p)
	}
	sort.Strings(sortedPaths)
	r.Prefetch(sortedPaths)
	rec := newRecord(now, toolVersion)
	var vendor []VendorRange
	for _, p := range sortedPaths {
		b, err := r.Blame(ctx, p, -1)
		if err != nil {
			continue // gone since, or not text
		}
		lines := make([]string, len(b.Lines))
		owners := make([]*Owner, len(b.Lines))
		mine := make([]bool, len(b.Lines))
		for i, l := range b.Lines {
			lines[i], owners[i] = l.Text, l.Owner
			mine[i] = l.Owner.Kind == KindAgent && want[l.Owner.Session]
		}
		tf, vr := fileTrace(r.repoPrefix(ctx)+p, lines, owners, mine)
		if len(tf.Conversations) > 0 {
			rec.Files = append(rec.Files, tf)
			vendor = append(vendor, vr...)
		}
	}
	rec.setVendor(vendor, map[string]any{"session_ids": sessions, "working_tree": true})
	return rec, nil
}

// StateTrace is the Agent Trace record of the files the increments'
// calls, outside positions and rewinds created or modified, as the last
// increment leaves them: every line written since capture began (the
// lines there before capture are left out). It needs no working tree.
func (r *Repo) StateTrace(ctx context.Context, now time.Time, toolVersion string) (*TraceRecord, error) {
	paths := map[string]bool{}
	for _, inf := range r.infos {
		if inf.Changes == nil {
			continue
		}
		for _, p := range append(append([]string(nil), inf.Changes.Created...), inf.Changes.Modified...) {
			if !strings.HasSuffix(p, "/") && !strings.Contains(p, ":") {
				paths[p] = true
			}
		}
	}
	var sortedPaths []string
	for p := range paths {
		sortedPaths = append(sortedPaths, p)
	}
	sort.Strings(sortedPaths)
	r.Prefetch(sortedPaths)
	rec := newRecord(now, toolVersion)
	var vendor []VendorRange
	var skipped []string
	for _, p := range sortedPaths {
		h, err := r.FileHistory(ctx, p, -1)
		if err != nil {
			skipped = append(skipped, p)
			continue
		}
		n := len(h.Versions)
		if n == 0 || !h.Versions[n-1].Present {
			continue // deleted since
		}
		last := Attribute(h.Versions)[n-1]
		owners := make([]*Owner, len(last))
		written := make([]bool, len(last))
		for i, o := range last {
			owners[i] = r.Owner(o)
			written[i] = owners[i].Kind != KindBeforeCapture
		}
		tf, vr := fileTrace(r.repoPrefix(ctx)+p, h.Versions[n-1].Lines, owners, written)
		if len(tf.Conversations) > 0 {
			rec.Files = append(rec.Files, tf)
			vendor = append(vendor, vr...)
		}
	}
	extra := map[string]any{}
	if len(skipped) > 0 {
		extra["skipped"] = skipped
	}
	rec.setVendor(vendor, extra)
	return rec, nil
}

// ToolVersion is agentscm's version as a record's tool names it: the
// module version and the commit it was built from.
func ToolVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += "+" + s.Value[:12]
		}
	}
	if buildinfo.Stamp != "" {
		v += " build " + buildinfo.Stamp
	}
	return v
}

// ErrNoWork reports a Work none of the checkout's positions was uploaded
// under.
var ErrNoWork = errors.New("no position of this checkout was uploaded under that Work")

// WorkSessions lists the sessions whose tool calls the changelog uploaded
// under the Work workID (as its upload queue last heard).
func (r *Repo) WorkSessions(workID string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, inf := range r.infos {
		if inf.Hub == nil || inf.Hub.WorkID != workID || inf.Kind != "call" || inf.Session == "" || seen[inf.Session] {
			continue
		}
		seen[inf.Session] = true
		out = append(out, inf.Session)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNoWork, workID)
	}
	return out, nil
}
