// Package incmeta reads the metadata member of a changelog increment. It is
// a leaf package with only the standard library, so the Hub (and with it the
// lean hook binary) can check an uploaded increment without linking the
// changelog's compressor and tree walker.
package incmeta

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// Dir is the top-level archive directory that holds an increment's
// metadata. No capture root can contain it (roots are absolute paths below
// "/" and Dir is itself a top-level name), and extraction leaves it out.
const Dir = ".agentscm-changelog-meta"

// Member is the archive member holding the increment's Meta as JSON.
const Member = Dir + "/meta.json"

// MaxBytes bounds the metadata member.
const MaxBytes = 1 << 20

// Meta is the metadata stored in every increment.
type Meta struct {
	Version   int    `json:"version"`
	Position  int    `json:"position"`
	SessionID string `json:"session_id,omitempty"`
	// ToolUseID is the host's id of the tool call, used to cut a resumed
	// transcript right after that call's result.
	ToolUseID string    `json:"tool_use_id,omitempty"`
	Tool      string    `json:"tool,omitempty"`
	Failed    bool      `json:"failed,omitempty"`
	Kind      string    `json:"kind"` // call, pre-apply, apply, outside or revert
	Full      bool      `json:"full,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// Roots lists every configured capture root at capture time.
	Roots []Root `json:"roots"`
	// RemovedRoots names (by Name) the capture roots removed since the last
	// stored capture; replay removes them before extracting this increment.
	RemovedRoots []string `json:"removed_roots"`
	// Files and Bytes count the regular files and symlinks stored and their
	// content bytes; Deleted counts entries removed since the last capture.
	Files   int   `json:"files"`
	Bytes   int64 `json:"bytes"`
	Deleted int   `json:"deleted"`
	// AppliedTo is the target position of the rewind that produced this
	// increment (KindApply only).
	AppliedTo *int `json:"applied_to,omitempty"`
	// Transcripts lists the files of a conversation root (the Claude Code
	// transcripts) this increment stores: whole, as the regular member of
	// their path, or as the bytes appended since the previous increment,
	// in a member of Dir (see Part).
	Transcripts []Part `json:"transcripts,omitempty"`
	// Conversation says what an uploaded form of the increment kept of the
	// conversation roots: "" in the local form (everything), ConvWithheld
	// when the checkout was not sharing conversations (no conversation
	// root and no transcript left the machine), ConvRedacted when the
	// transcript copies were redacted for sharing.
	Conversation string `json:"conversation,omitempty"`
	// ConversationMode is the capture mode that decided Conversation.
	ConversationMode string `json:"conversation_mode,omitempty"`
	// WithheldRoots names the conversation roots an uploaded form left out.
	WithheldRoots []string `json:"withheld_roots,omitempty"`
	// Redactions counts the redactions of an uploaded, redacted form.
	Redactions int `json:"redactions,omitempty"`
	// TranscriptRefs, in the local increments of a checkout in
	// metadata-only mode, stand for the conversation roots, which are then
	// not copied: each names the session's transcript by file identity,
	// length and digest of its bytes up to that length, so a resume can
	// rebuild the conversation from the agent's own transcript while it
	// still matches. Absent in older increments and in uploaded forms.
	TranscriptRefs []TranscriptRef `json:"transcript_refs,omitempty"`
	// WithheldFiles lists the secret files (redact.FileSet) of the
	// workspace roots whose bytes an uploaded form left out: each by path
	// and digest, so a rewind from the Hub can name it and verify a local
	// copy. Only uploaded forms have it; older ones never withheld a file.
	WithheldFiles []WithheldFile `json:"withheld_files,omitempty"`
	// Changes names the paths this increment's capture created, modified
	// and deleted and the bytes it changed (nil in increments written
	// before it was recorded).
	Changes *Changes `json:"changes,omitempty"`
	// Merged lists, in order, the ranges of positions whose writes this
	// increment also carries because the Hub refused them (or no increment
	// was stored there): they have no increment of their own in the
	// uploaded sequence, and the ranges run without a hole up to Position-1.
	// Only uploaded increments have it.
	Merged []Merged `json:"merged,omitempty"`
	// ConcurrentSessions names the other sessions whose turn was running
	// when this position was taken (parallel sessions): their writes may
	// be mixed into it. Absent in older increments.
	ConcurrentSessions []string `json:"concurrent_sessions,omitempty"`
	// Holds lists, in order, the earlier positions whose increments could
	// not be stored locally (the capture failed) and whose writes this
	// increment therefore carries: a tool call keeps its position even
	// when its increment is lost, and the next stored increment says so.
	Holds []Held `json:"holds,omitempty"`
	// Outside, on an increment of kind "outside", says where the changes
	// made outside the agent were found: before which tool call (or
	// prompt) of which session they were captured.
	Outside *Outside `json:"outside,omitempty"`
	// Reverted is the position of the tool call an increment of kind
	// "revert" undid (see agentscm revert).
	Reverted *int `json:"reverted,omitempty"`
	// CaptureID identifies the hook's request of a capture the watcher
	// was asked to take (see changelog.CaptureOps): a hook that gave up
	// waiting recognises the increment by it rather than store a second
	// one. Absent in older increments and in captures no watcher was
	// asked for.
	CaptureID string `json:"capture_id,omitempty"`
}

// TranscriptRef is a transcript a metadata-only increment names instead of
// copying it.
type TranscriptRef struct {
	Root string `json:"root"`
	Path string `json:"path"` // slash path inside the root
	// Dev and Ino identify the file; Length is how many of its bytes the
	// position saw (cut at the last complete line) and Digest their
	// SHA-256 (hex).
	Dev    uint64 `json:"dev,omitempty"`
	Ino    uint64 `json:"ino,omitempty"`
	Length int64  `json:"length"`
	Digest string `json:"digest"`
}

// WithheldFile is a secret file an uploaded increment names without its
// bytes.
type WithheldFile struct {
	Root string `json:"root"`
	Path string `json:"path"` // slash path inside the root
	// Digest is the SHA-256 of the file's bytes (hex), Size their count.
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
	// Pattern is the secret-file pattern that withheld it.
	Pattern string `json:"pattern,omitempty"`
}

// Held is a position whose increment could not be stored, carried by a
// later increment.
type Held struct {
	Position int    `json:"position"`
	Kind     string `json:"kind"`
	Tool     string `json:"tool,omitempty"`
	// Error is why its increment was not stored.
	Error string `json:"error,omitempty"`
}

// Outside describes an increment of kind "outside": the changes under the
// capture roots (the conversation roots aside) found between two tool
// calls, made by the user or any other process, never by the agent's call.
type Outside struct {
	// Event is the hook event that found them: "PreToolUse" (before the
	// tool call BeforeToolUseID) or "UserPromptSubmit" (before a turn).
	Event string `json:"event"`
	// SessionID is the session whose hook found them.
	SessionID string `json:"session_id,omitempty"`
	// BeforeToolUseID and BeforeTool name the tool call that was about
	// to start; that call's increment is the next one of its session.
	BeforeToolUseID string `json:"before_tool_use_id,omitempty"`
	BeforeTool      string `json:"before_tool,omitempty"`
}

// Values of Meta.Conversation.
const (
	ConvWithheld = "withheld"
	ConvRedacted = "redacted"
)

// AppendDir holds the members with a transcript's appended bytes.
const AppendDir = Dir + "/append"

// Part is one transcript file an increment stores. Offset and Length are in
// the bytes of the local transcript: a whole copy has Offset 0 and Length
// its stored size; an appended part holds the local bytes
// [Offset, Offset+Length) and extends the copy the sequence held before,
// which must then be Offset bytes long. In a redacted upload the stored
// bytes are the redacted form of those, so Length may differ from the
// member's size.
type Part struct {
	Root string `json:"root"`
	Path string `json:"path"` // slash path inside the root
	// Member is the archive member holding appended bytes ("" for a whole
	// copy, stored as the regular member of its path).
	Member string `json:"member,omitempty"`
	Offset int64  `json:"offset"`
	Length int64  `json:"length"`
	// Dev and Ino identify the local file the bytes came from.
	Dev        uint64 `json:"dev,omitempty"`
	Ino        uint64 `json:"ino,omitempty"`
	Redactions int    `json:"redactions,omitempty"`
}

// MaxChangePaths bounds each of a Changes' path lists; the paths past it
// are only counted.
const MaxChangePaths = 100

// Changes is what one capture changed, relative to the previous one (or,
// for a changelog's first capture, to the baseline recorded when it was
// enabled). Paths are relative to the checkout root, or "root:path" for
// another capture root (the transcript root's are only counted in
// TranscriptBytes); directories end in "/".
type Changes struct {
	Created  []string `json:"created"`
	Modified []string `json:"modified"`
	Deleted  []string `json:"deleted"`
	// The Omitted counts are the paths of each kind past MaxChangePaths.
	CreatedOmitted  int `json:"created_omitted,omitempty"`
	ModifiedOmitted int `json:"modified_omitted,omitempty"`
	DeletedOmitted  int `json:"deleted_omitted,omitempty"`
	// Bytes is what the call changed in the workspace: the size of each
	// created file and the new size of each modified one.
	Bytes int64 `json:"bytes"`
	// TranscriptBytes is what the conversation grew by: the bytes appended
	// to (or created in) the transcript root, whose paths the lists leave
	// out.
	TranscriptBytes int64 `json:"transcript_bytes,omitempty"`
	// Baseline is set when there was nothing to compare with (a first
	// capture without a recorded baseline, or a root captured in full
	// again): every stored path is then listed as created.
	Baseline bool `json:"baseline,omitempty"`
}

// Merged is a range of positions whose writes an uploaded increment
// carries.
type Merged struct {
	From int `json:"from"`
	To   int `json:"to"` // inclusive
	// Reason is why the Hub has no increment of their own (the grant
	// refusal, as the Hub or its last-read grant said it).
	Reason string `json:"reason"`
}

// MergedFrom returns the first position m carries: its first merged
// position, else its own.
func (m *Meta) MergedFrom() int {
	if len(m.Merged) > 0 {
		return m.Merged[0].From
	}
	return m.Position
}

// CheckMerged reports whether m's merged ranges are well formed: in order,
// without a hole, ending right before m's position.
func (m *Meta) CheckMerged() error {
	next := -1
	for i, r := range m.Merged {
		if r.From < 0 || r.To < r.From || (i > 0 && r.From != next) {
			return fmt.Errorf("merged range %d..%d is out of order", r.From, r.To)
		}
		next = r.To + 1
	}
	if len(m.Merged) > 0 && next != m.Position {
		return fmt.Errorf("merged ranges end at %d, not right before position %d", next-1, m.Position)
	}
	return nil
}

// Root describes one capture root inside an increment.
type Root struct {
	Name   string `json:"name"`   // stable label, e.g. "checkout" or "transcripts"
	Path   string `json:"path"`   // absolute path at capture time
	Prefix string `json:"prefix"` // member name prefix: Path without its leading "/"
	Exists bool   `json:"exists"`
}

// ReadFrom reads the metadata of the increment in r (its first member)
// without validating the rest. Errors say why r is not an increment.
func ReadFrom(r io.Reader) (*Meta, error) {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("gzip: %v", err)
	}
	defer gz.Close()
	tr := tar.NewReader(gz)
	h, err := tr.Next()
	if err != nil {
		return nil, fmt.Errorf("tar: %v", err)
	}
	if h.Name != Member || h.Typeflag != tar.TypeReg {
		return nil, fmt.Errorf("first member is %q, not the metadata", h.Name)
	}
	b, err := io.ReadAll(io.LimitReader(tr, MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("metadata: %v", err)
	}
	if len(b) > MaxBytes {
		return nil, fmt.Errorf("metadata: larger than %d bytes", MaxBytes)
	}
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("metadata: %v", err)
	}
	return &m, nil
}
