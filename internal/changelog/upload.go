package changelog

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/redact"
	"github.com/klauspost/compress/gzip"
)

// The privacy boundary of the changelog: what of a local increment may
// leave the machine (docs/privacy.md). A local increment holds everything
// its capture roots hold, the Claude Code transcripts of a conversation
// root included unless the checkout is in metadata-only mode (then it
// holds references: convref.go). Secret files (redact.FileSet) never leave
// it in any mode: the uploaded form names them by path and digest. The
// form uploaded to a Hub holds conversation bodies only when the tool
// call's session is shared (the checkout in shared-conversation mode, the
// session started under it), and then only transcript copies redacted by
// internal/redact, line by line, with the counts in the metadata; in every
// other case the conversation roots are left out entirely (their members,
// their transcript parts and the roots themselves), and the metadata says
// so (Meta.Conversation, incmeta.ConvWithheld). Every path that sends an increment
// anywhere calls UploadForm; nothing else reads an increment for upload.

// Sharing is what may leave the machine of one session's conversation.
type Sharing struct {
	// Mode is the checkout's capture mode (metadata-only without a
	// binding).
	Mode string
	// Share is true only in shared-conversation mode, for a session that
	// started under it.
	Share bool
	// Reason explains a Share of false.
	Reason string
	// NoCopy is true for a checkout whose capture binding is in
	// metadata-only mode: the changelog then keeps no copy of the
	// conversation, even locally (Options.ConversationRefs).
	NoCopy bool
}

// SharingPolicy decides Sharing for the session of an increment. A nil
// policy shares nothing.
type SharingPolicy func(session string) Sharing

// UploadForm returns the form of the stored increment at pos that may
// leave the machine under policy and the changelog's secret-file set (see
// UploadFormOf), with its digest.
func (c *Changelog) UploadForm(pos int, policy SharingPolicy) (RemoteIncrement, error) {
	secret, err := SecretFiles(c.dir)
	if err != nil {
		return RemoteIncrement{}, err
	}
	return uploadFormFile(c.incrementPath(pos), pos, policy, secret)
}

func uploadFormFile(path string, pos int, policy SharingPolicy, secret redact.FileSet) (RemoteIncrement, error) {
	local, err := fsutil.ReadFileNoFollow(path, MaxRemoteBytes)
	if err != nil {
		return RemoteIncrement{}, fmt.Errorf("read increment %d for upload: %w", pos, err)
	}
	body, meta, err := UploadFormOf(local, policy, secret)
	if err != nil {
		return RemoteIncrement{}, fmt.Errorf("increment %d: %w", pos, err)
	}
	if meta.Position != pos {
		return RemoteIncrement{}, fmt.Errorf("increment %d: %w: its metadata names position %d", pos, ErrUnreadableArchive, meta.Position)
	}
	sum := sha256.Sum256(body)
	return RemoteIncrement{Position: pos, Session: meta.SessionID, Digest: hex.EncodeToString(sum[:]), Body: body,
		Conversation: meta.Conversation, Redactions: meta.Redactions}, nil
}

// transcriptSession is the session a path in a conversation root belongs
// to: <session>.jsonl or anything below <session>/.
func transcriptSession(rel string) string {
	first, _, _ := strings.Cut(rel, "/")
	if first == rel {
		return strings.TrimSuffix(rel, ".jsonl")
	}
	return first
}

// UploadFormOf is the pure transformation of a local increment into the
// bytes allowed to leave the machine under policy and the secret-file set
// secret, and their metadata. An increment without conversation roots and
// without a secret file is returned unchanged. Otherwise the archive is
// validated as an apply validates it and rewritten, workspace members
// copied as they are (the form stays a GNU incremental archive) but for the
// secret files: their bytes are left out, in every mode, and the metadata
// names each with its digest (Meta.WithheldFiles); their directories'
// listings still name them, so a replay leaves a local copy in place.
// Each file of a conversation root is decided by its own session
// (<session>.jsonl, <session>/...), whichever call's increment captured it:
// the file of a shared session is redacted line by line (transcript copies
// are whole lines, see transcript.go, so a part never splits a secret),
// any other file is left out. A conversation root with nothing shared (the
// increment's session not shared, no file of a shared session) is left out
// entirely: its members, its parts and the root itself.
func UploadFormOf(local []byte, policy SharingPolicy, secret redact.FileSet) ([]byte, *incmeta.Meta, error) {
	a, err := readArchive(bytes.NewReader(local), nil)
	if err != nil {
		return nil, nil, err
	}
	conv := map[string]bool{}
	for _, r := range a.Meta.Roots {
		if IsConversationRoot(r.Name, r.Path) {
			conv[r.Name] = true
		}
	}
	// The secret files of the workspace roots, by member ordinal.
	secrets := map[int]*incmeta.WithheldFile{}
	for i := range a.Members {
		m := &a.Members[i]
		if conv[m.Root] || m.Type != tar.TypeReg {
			continue
		}
		if p, ok := secret.Withheld(m.Rel); ok {
			secrets[m.offset] = &incmeta.WithheldFile{Root: m.Root, Path: m.Rel, Size: m.localLen(), Pattern: p}
		}
	}
	if len(conv) == 0 && len(secrets) == 0 && len(a.Meta.TranscriptRefs) == 0 {
		m := a.Meta
		return local, &m, nil
	}
	decided := map[string]Sharing{}
	decide := func(session string) Sharing {
		if sh, ok := decided[session]; ok {
			return sh
		}
		sh := Sharing{Mode: "metadata-only", Reason: "no sharing policy"}
		if policy != nil {
			sh = policy(session)
		}
		decided[session] = sh
		return sh
	}
	meta := a.Meta
	own := Sharing{}
	if len(conv) > 0 || len(a.Meta.TranscriptRefs) > 0 {
		own = decide(a.Meta.SessionID)
		meta.ConversationMode = own.Mode
	}
	// Which archive members (by ordinal) belong to a conversation root and
	// whether each is shared; which roots keep anything.
	type convMember struct {
		root       string
		share      bool
		redactions int
	}
	members := map[int]*convMember{}
	keepRoot := map[string]bool{}
	for i := range a.Members {
		m := &a.Members[i]
		if !conv[m.Root] {
			continue
		}
		cm := &convMember{root: m.Root}
		if m.Type == tar.TypeReg || m.Type == typeAppend {
			cm.share = m.Rel != "" && decide(transcriptSession(m.Rel)).Share
		}
		keepRoot[m.Root] = keepRoot[m.Root] || cm.share
		members[m.offset] = cm
	}
	for name := range conv {
		keepRoot[name] = keepRoot[name] || own.Share
	}
	// Dumpdirs and symlinks of a kept root stay (names only); files of a
	// session not shared go.
	var roots []incmeta.Root
	meta.WithheldRoots = nil
	for _, r := range a.Meta.Roots {
		if conv[r.Name] && !keepRoot[r.Name] {
			meta.WithheldRoots = append(meta.WithheldRoots, r.Name)
		} else {
			roots = append(roots, r)
		}
	}
	meta.Roots = roots
	removed := []string{}
	for _, n := range a.Meta.RemovedRoots {
		if !conv[n] || keepRoot[n] {
			removed = append(removed, n)
		}
	}
	meta.RemovedRoots = removed
	dropped := map[string]bool{} // root + "\x00" + rel of a file left out
	for i := range a.Members {
		m := &a.Members[i]
		cm := members[m.offset]
		if cm == nil || cm.share {
			continue
		}
		switch {
		case m.Type == tar.TypeReg || m.Type == typeAppend:
			meta.Files--
			meta.Bytes -= m.localLen()
			dropped[m.Root+"\x00"+m.Rel] = true
		case m.Type == tar.TypeSymlink && !keepRoot[m.Root]:
			meta.Files--
		}
	}
	for _, w := range secrets {
		meta.Files--
		meta.Bytes -= w.Size
	}
	meta.Files, meta.Bytes = max(meta.Files, 0), max(meta.Bytes, 0)
	meta.Transcripts = nil
	for _, pt := range a.Meta.Transcripts {
		if keepRoot[pt.Root] && !dropped[pt.Root+"\x00"+pt.Path] {
			meta.Transcripts = append(meta.Transcripts, pt)
		}
	}
	// Redaction counts and the secret files' digests, in a first pass
	// (the metadata comes first).
	total := 0
	err = eachMember(local, func(i int, h *tar.Header, r io.Reader) error {
		if w := secrets[i]; w != nil {
			d := sha256.New()
			if _, err := io.Copy(d, r); err != nil {
				return archiveError("member %q: %v", h.Name, err)
			}
			w.Digest = hex.EncodeToString(d.Sum(nil))
			return nil
		}
		cm := members[i]
		if cm == nil || !cm.share || (h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeRegA) {
			return nil
		}
		b, err := readAllBounded(r, maxTranscriptBytes)
		if err != nil {
			return archiveError("member %q: %v", h.Name, err)
		}
		_, cm.redactions = redactLines(b)
		total += cm.redactions
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	for i := range a.Members {
		m := &a.Members[i]
		if cm := members[m.offset]; cm != nil && cm.redactions > 0 {
			for j := range meta.Transcripts {
				if pt := &meta.Transcripts[j]; pt.Root == m.Root && pt.Path == m.Rel {
					pt.Redactions = cm.redactions
				}
			}
		}
	}
	meta.Redactions = total
	if len(conv) > 0 {
		meta.Conversation = incmeta.ConvWithheld
		for _, k := range keepRoot {
			if k {
				meta.Conversation = incmeta.ConvRedacted
			}
		}
	}
	if len(meta.TranscriptRefs) > 0 {
		// A metadata-only position: no copy to share, and its references
		// stay on this machine.
		for _, r := range meta.TranscriptRefs {
			if !slices.Contains(meta.WithheldRoots, r.Root) {
				meta.WithheldRoots = append(meta.WithheldRoots, r.Root)
			}
		}
		if meta.Conversation == "" {
			meta.Conversation = incmeta.ConvWithheld
		}
		meta.TranscriptRefs = nil
	}
	meta.WithheldFiles = nil
	for i := range a.Members {
		if w := secrets[a.Members[i].offset]; w != nil {
			meta.WithheldFiles = append(meta.WithheldFiles, *w)
		}
	}

	var out bytes.Buffer
	aw := newArchiveWriter(&out)
	if err := aw.meta(&meta); err != nil {
		return nil, nil, err
	}
	err = eachMember(local, func(i int, h *tar.Header, r io.Reader) error {
		if i == 0 || secrets[i] != nil {
			return nil // the metadata, written above; a secret file's bytes
		}
		cm := members[i]
		isFile := h.Typeflag == tar.TypeReg || h.Typeflag == tar.TypeRegA
		if cm != nil && (!keepRoot[cm.root] || isFile && !cm.share) {
			return nil
		}
		if cm != nil && isFile {
			b, err := readAllBounded(r, maxTranscriptBytes)
			if err != nil {
				return archiveError("member %q: %v", h.Name, err)
			}
			red, _ := redactLines(b)
			h.Size = int64(len(red))
			r = bytes.NewReader(red)
		}
		if err := aw.tw.WriteHeader(h); err != nil {
			return fmt.Errorf("write %s: %w", h.Name, err)
		}
		if h.Size > 0 {
			if _, err := io.CopyN(aw.tw, r, h.Size); err != nil {
				return fmt.Errorf("write %s: %w", h.Name, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if err := aw.close(); err != nil {
		return nil, nil, err
	}
	// The form must itself be a readable increment (what the Hub's readers
	// and apply --from-hub will check).
	if _, err := readArchive(bytes.NewReader(out.Bytes()), nil); err != nil {
		return nil, nil, fmt.Errorf("the upload form is not a readable increment: %w", err)
	}
	return out.Bytes(), &meta, nil
}

// eachMember calls fn with every member of the (already validated)
// increment b, in order, with its ordinal.
func eachMember(b []byte, fn func(i int, h *tar.Header, r io.Reader) error) error {
	gz, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return archiveError("%v", err)
	}
	defer gz.Close()
	gz.Multistream(false)
	tr := tar.NewReader(gz)
	for i := 0; ; i++ {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return archiveError("tar: %v", err)
		}
		if err := fn(i, h, tr); err != nil {
			return err
		}
	}
}

// redactLines redacts b one line at a time with the project's one
// redaction function, so that redacting a transcript part by part gives
// the redaction of the whole.
func redactLines(b []byte) ([]byte, int) {
	out := make([]byte, 0, len(b))
	n := 0
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line = b[:i+1]
		}
		b = b[len(line):]
		r := redact.Redact(string(line), redact.Options{JSON: true}) // a JSONL record
		out = append(out, r.Text...)
		n += r.Redactions
	}
	return out, n
}

// uploadBody returns the bytes of the local increment at pos that may leave
// the machine under policy: its UploadForm. Every upload, merged or not, is
// built from these bodies.
func (c *Changelog) uploadBody(pos int, policy SharingPolicy) ([]byte, error) {
	f, err := c.UploadForm(pos, policy)
	if err != nil {
		return nil, err
	}
	return f.Body, nil
}
