package changelog

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/klauspost/compress/gzip"
)

// ErrNoMember reports that an increment does not store the file asked for.
var ErrNoMember = errors.New("the increment does not store the file")

// ReadMember returns the content of the regular file name (a slash path
// inside the capture root named root) stored in the increment at path,
// without extracting anything: the whole archive is validated first as an
// apply validates it (ErrUnreadableArchive), then the member is read from
// a second pass. ErrNoMember when the increment does not store name as a
// regular file; fsutil.ErrTooLarge when it is longer than limit bytes.
func ReadMember(path, root, name string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open increment: %w", err)
	}
	defer f.Close()
	return ReadMemberFrom(f, root, name, limit)
}

// ReadMemberFrom is ReadMember on an increment read from r.
func ReadMemberFrom(r io.ReadSeeker, root, name string, limit int64) ([]byte, error) {
	sp, err := ReadPartFrom(r, root, name, limit)
	if err != nil {
		return nil, err
	}
	if !sp.Whole {
		return nil, fmt.Errorf("%w: %s in capture root %s (only the bytes appended since the previous increment are stored)", ErrNoMember, name, root)
	}
	return sp.Data, nil
}

// StoredPart is what an increment stores of one file: the whole file, or
// (a transcript) the local bytes [Offset, Offset+Length) appended to the
// copy the increments before it hold, as Data (redacted in a redacted
// upload, so len(Data) may differ from Length).
type StoredPart struct {
	Whole  bool
	Offset int64
	Length int64
	Data   []byte
}

// ReadPartFrom is ReadMemberFrom that also returns an appended transcript
// part (see StoredPart).
func ReadPartFrom(r io.ReadSeeker, root, name string, limit int64) (*StoredPart, error) {
	if n, err := cleanMemberName(name); err != nil || n != name {
		return nil, fmt.Errorf("invalid member path %q", name)
	}
	a, err := readArchive(r, nil)
	if err != nil {
		return nil, err
	}
	var m *Member
	for i := range a.Members {
		if a.Members[i].Root == root && a.Members[i].Rel == name {
			m = &a.Members[i]
			break
		}
	}
	if m == nil || (m.Type != tar.TypeReg && m.Type != typeAppend) {
		return nil, fmt.Errorf("%w: %s in capture root %s", ErrNoMember, name, root)
	}
	sp := &StoredPart{Whole: m.Type == tar.TypeReg, Length: m.localLen()}
	if m.part != nil {
		sp.Offset = m.part.Offset
	}
	if m.Size > limit {
		return nil, fmt.Errorf("%s in capture root %s: %w (%d bytes, limit %d)", name, root, fsutil.ErrTooLarge, m.Size, limit)
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	gz, err := gzip.NewReader(r)
	if err != nil {
		return nil, archiveError("%v", err)
	}
	defer gz.Close()
	gz.Multistream(false)
	tr := tar.NewReader(gz)
	var h *tar.Header
	for i := 0; i <= m.offset; i++ {
		if h, err = tr.Next(); err != nil {
			return nil, fmt.Errorf("%w: archive changed while being read: %v", ErrUnreadableArchive, err)
		}
	}
	if strings.TrimSuffix(h.Name, "/") != m.archName() || h.Size != m.Size {
		return nil, fmt.Errorf("%w: archive changed while being read", ErrUnreadableArchive)
	}
	b := make([]byte, m.Size)
	if _, err := io.ReadFull(tr, b); err != nil {
		return nil, archiveError("member %q: %v", m.Name, err)
	}
	sp.Data = b
	return sp, nil
}

// MaxLaterIncrements bounds how many later increments FindResultTranscript
// reads before giving up.
const MaxLaterIncrements = 32

// LaterTranscript is a copy of a session's transcript, read from a later
// increment, that holds a tool call's result.
type LaterTranscript struct {
	Position int    // the increment it was read from
	Data     []byte // the whole stored transcript
	Read     int    // later increments read to find it
	// HoldsResult is false for a copy that holds the call but not its
	// result, returned when no later copy holds the result.
	HoldsResult bool
}

// LaterIncrement is one increment after the target, as the caller fetches
// it (downloaded and digest-verified): its position and content.
type LaterIncrement struct {
	Position int
	Data     []byte
}

// FindResultTranscript looks for the result of tool call toolUseID in the
// copies of session's transcript (<session>.jsonl in the TranscriptRootName
// root) that later increments store. next returns the later increments in
// order, (nil, nil) when there is none left; it is called only as needed and
// at most MaxLaterIncrements times. The hook captures call k before the host
// writes its result, and the transcript is append-only, so the first later
// copy that holds the result extends the rewound one. A later increment
// stores either a whole copy or the bytes appended since the previous one:
// those extend base, the copy the rewind left, which holds baseLocal bytes
// of the local transcript (see TranscriptLocalSize); a part that does not
// start where the copy ends breaks the chain, and the search ends there. It
// returns nil (and no error) when no later copy holds the result; an
// increment that is not a readable archive is an error, a copy that does not
// parse up to the result is passed over.
func FindResultTranscript(ctx context.Context, next func(context.Context) (*LaterIncrement, error), session, toolUseID string, base []byte, baseLocal int64) (*LaterTranscript, error) {
	if err := checkSession(session); err != nil {
		return nil, err
	}
	if toolUseID == "" {
		return nil, fmt.Errorf("%w: no tool call to look for", ErrNoTranscript)
	}
	cur, local, chained := base, baseLocal, base != nil
	// callOnly is the first later copy that holds the call without its
	// result: the host may write even the call's own line after the hook
	// that captured it, so the rewound copy can lack the call altogether.
	var callOnly *LaterTranscript
	for read := 1; read <= MaxLaterIncrements; read++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		inc, err := next(ctx)
		if err != nil {
			return nil, err
		}
		if inc == nil {
			return callOnly, nil
		}
		sp, err := ReadPartFrom(bytes.NewReader(inc.Data), TranscriptRootName, session+".jsonl", maxTranscriptBytes)
		switch {
		case errors.Is(err, ErrNoMember):
			continue
		case err != nil:
			return nil, fmt.Errorf("increment %d: %w", inc.Position, err)
		}
		switch {
		case sp.Whole:
			cur, local, chained = sp.Data, sp.Length, true
		case chained && sp.Offset == local && int64(len(cur))+int64(len(sp.Data)) <= maxTranscriptBytes:
			cur = append(cur[:len(cur):len(cur)], sp.Data...)
			local += sp.Length
		default:
			return callOnly, nil
		}
		c, err := cutTranscript(cur, toolUseID)
		if err == nil && c.found {
			return &LaterTranscript{Position: inc.Position, Data: cur, Read: read, HoldsResult: true}, nil
		}
		if err == nil && callOnly == nil {
			callOnly = &LaterTranscript{Position: inc.Position, Data: cur, Read: read}
		}
	}
	return callOnly, nil
}

// TranscriptLocalSize returns how many bytes of the local transcript rel
// (a path in the TranscriptRootName root) the increments at paths, in
// order, leave: the end of the last part that stores it. ok is false when
// none records a part for it (increments written before parts, where the
// stored copy is the local one).
func TranscriptLocalSize(paths []string, rel string) (size int64, ok bool) {
	for _, p := range paths {
		m, err := ReadMeta(p)
		if err != nil {
			continue
		}
		for _, pt := range m.Transcripts {
			if pt.Root == TranscriptRootName && pt.Path == rel {
				size, ok = pt.Offset+pt.Length, true
			}
		}
	}
	return size, ok
}

// TranscriptHoldsResult reports whether transcript b holds the result of
// tool call toolUseID, parsed the way ResumeConversation cuts it.
func TranscriptHoldsResult(b []byte, toolUseID string) bool {
	c, err := cutTranscript(b, toolUseID)
	return err == nil && c.found
}
