package changelog

import (
	"bytes"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/scan"
)

// Transcript references. A checkout in metadata-only mode keeps no copy of
// a conversation (Options.ConversationRefs): each increment names its
// session's transcript by file identity, length and digest instead
// (Meta.TranscriptRefs). A rewind leaves the agent's transcripts alone, and
// resuming the conversation cuts the agent's own transcript, after checking
// that it still begins with the bytes the position saw.

// refSession is the session whose transcript an increment references.
func refSession(req CaptureRequest) string {
	if req.SessionID != "" {
		return req.SessionID
	}
	if req.Outside != nil {
		return req.Outside.SessionID
	}
	return ""
}

// refsDir holds, per session, where the digest of its transcript stopped
// (refCache), so the next position hashes only the bytes appended since:
// a cache, checked before use and rebuilt when it does not fit.
const refsDir = "transcript-refs"

// refCache is the SHA-256 state of a transcript's first Length bytes.
type refCache struct {
	Dev    uint64 `json:"dev"`
	Ino    uint64 `json:"ino"`
	Length int64  `json:"length"`
	// Tail is the hash of the (up to tailBytes) bytes before Length: the
	// state continues only while they are unchanged.
	Tail  []byte `json:"tail"`
	State []byte `json:"state"` // sha256 digest's MarshalBinary
}

// transcriptRef returns the reference to session's transcript in the
// conversation root r, nil when there is none (no session, no such file);
// cacheDir, when set, keeps the digest's state between positions.
func transcriptRef(r Root, session, cacheDir string) (*incmeta.TranscriptRef, error) {
	if session == "" || checkSession(session) != nil {
		return nil, nil
	}
	rel := session + ".jsonl"
	f, err := scan.OpenFile(r.Path, rel)
	if err != nil {
		if isVanished(err) || errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("reference the transcript %s: %w", rel, err)
	}
	defer f.Close()
	cache := ""
	if cacheDir != "" {
		cache = filepath.Join(cacheDir, refsDir, session+".json")
	}
	ref, err := refOf(f, cache)
	if err != nil {
		return nil, fmt.Errorf("reference the transcript %s: %w", rel, err)
	}
	ref.Root, ref.Path = r.Name, rel
	return ref, nil
}

// refOf is the reference of the open transcript f: its identity, its bytes
// up to the last complete line and their digest, continued from the state
// in the file cache ("" none) when it still fits f, and saved there.
func refOf(f *os.File, cache string) (*incmeta.TranscriptRef, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", f.Name())
	}
	ref := &incmeta.TranscriptRef{}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ref.Dev, ref.Ino = uint64(st.Dev), st.Ino
	}
	end, err := lastLineEnd(f, 0, fi.Size())
	if err != nil {
		return nil, err
	}
	h, from := resumeDigest(f, cache, ref, end)
	if n, err := io.Copy(h, io.NewSectionReader(f, from, end-from)); err != nil {
		return nil, err
	} else if n != end-from {
		return nil, fmt.Errorf("%s: %d bytes read, not %d", f.Name(), n, end-from)
	}
	ref.Length = end
	if cache != "" {
		saveRefCache(f, cache, ref, h)
	}
	ref.Digest = hex.EncodeToString(h.Sum(nil))
	return ref, nil
}

// resumeDigest returns the digest state of f's first bytes from the cache
// when it fits (same file, not longer than end, the bytes before its
// length unchanged), and how many bytes it holds; else a fresh one.
func resumeDigest(f *os.File, cache string, ref *incmeta.TranscriptRef, end int64) (hash.Hash, int64) {
	fresh := sha256.New()
	if cache == "" {
		return fresh, 0
	}
	b, err := fsutil.ReadFileNoFollow(cache, 4096)
	if err != nil {
		return fresh, 0
	}
	var rc refCache
	if json.Unmarshal(b, &rc) != nil || rc.Dev != ref.Dev || rc.Ino != ref.Ino || rc.Length <= 0 || rc.Length > end {
		return fresh, 0
	}
	tail, err := hashRange(f, rc.Length)
	if err != nil || !bytes.Equal(tail[:], rc.Tail) {
		return fresh, 0
	}
	h := sha256.New()
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(rc.State); err != nil {
		return fresh, 0
	}
	return h, rc.Length
}

// saveRefCache records h, the digest state of f's first ref.Length bytes,
// best effort (a lost or torn cache only costs a full hash).
func saveRefCache(f *os.File, cache string, ref *incmeta.TranscriptRef, h hash.Hash) {
	state, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		return
	}
	tail, err := hashRange(f, ref.Length)
	if err != nil {
		return
	}
	b, err := json.Marshal(refCache{Dev: ref.Dev, Ino: ref.Ino, Length: ref.Length, Tail: tail[:], State: state})
	if err != nil {
		return
	}
	if fsutil.MkdirPrivate(filepath.Dir(cache)) == nil {
		_ = fsutil.WriteAtomic(cache, b, fsutil.FileMode)
	}
}

// prefixDigest is the SHA-256 (hex) of f's first n bytes.
func prefixDigest(f *os.File, n int64) (string, error) {
	h := sha256.New()
	if m, err := io.Copy(h, io.NewSectionReader(f, 0, n)); err != nil {
		return "", err
	} else if m != n {
		return "", fmt.Errorf("%s: %d bytes read, not %d", f.Name(), m, n)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ErrTranscriptChanged reports that the agent's transcript no longer holds
// what a metadata-only position referenced: the conversation cannot be
// rebuilt from it.
var ErrTranscriptChanged = errors.New("the agent's transcript no longer holds the conversation as it was")

// TranscriptRefFor returns the reference m records for session's
// transcript, nil when m records none (a position that kept a copy, or no
// transcript).
func TranscriptRefFor(m *incmeta.Meta, session string) *incmeta.TranscriptRef {
	for i := range m.TranscriptRefs {
		if r := &m.TranscriptRefs[i]; r.Path == session+".jsonl" {
			return r
		}
	}
	return nil
}

// CheckTranscriptRef reports whether the transcript ref names, in the
// transcript directory dir, still begins with the bytes the position saw
// (ErrTranscriptChanged, saying how, when not). Another file identity with
// the same bytes (the agent rewrote it) still matches.
func CheckTranscriptRef(dir string, ref *incmeta.TranscriptRef) error {
	p := filepath.Join(dir, ref.Path)
	f, err := scan.OpenFile(dir, ref.Path)
	if err != nil {
		if isVanished(err) || errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %s was removed (the changelog keeps no copy in metadata-only mode)", ErrTranscriptChanged, p)
		}
		return fmt.Errorf("%w: %s: %v", ErrTranscriptChanged, p, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() < ref.Length {
		return fmt.Errorf("%w: %s holds %d bytes, fewer than the %d the position saw (the agent rotated or cut it; the changelog keeps no copy in metadata-only mode)", ErrTranscriptChanged, p, fi.Size(), ref.Length)
	}
	d, err := prefixDigest(f, ref.Length)
	if err != nil {
		return err
	}
	if d != ref.Digest {
		return fmt.Errorf("%w: the first %d bytes of %s differ from what the position saw (the agent rewrote it; the changelog keeps no copy in metadata-only mode)", ErrTranscriptChanged, ref.Length, p)
	}
	return nil
}
