package changelog

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
)

// Metadata-only: no increment (call, pre-apply, apply) holds a byte of the
// transcript; each call's increment references it by identity, length and
// digest; a rewind leaves the agent's transcript alone; the reference
// checks out until the agent removes, cuts or rewrites the transcript; the
// upload form carries neither the bytes nor the reference.
func TestConversationRefsKeepNoCopy(t *testing.T) {
	f := newTranscriptFixture(t)
	ctx := context.Background()
	c, err := Open(f.c.Dir(), Options{Roots: f.c.Roots(), ConversationRefs: true})
	if err != nil {
		t.Fatal(err)
	}
	line1 := `{"type":"user","sessionId":"S","message":{"content":"` + promptText + `"}}` + "\n"
	f.write("S.jsonl", line1+`{"partial":`)
	inc0, err := c.Capture(ctx, CaptureRequest{Position: 0, SessionID: "S", ToolUseID: "t1", Tool: "Bash"})
	if err != nil {
		t.Fatal(err)
	}
	ref := TranscriptRefFor(&inc0.Meta, "S")
	if ref == nil || ref.Root != TranscriptRootName || ref.Length != int64(len(line1)) || ref.Dev == 0 || ref.Ino == 0 {
		t.Fatalf("reference %+v, want %d bytes (to the last complete line)", ref, len(line1))
	}
	for _, r := range inc0.Meta.Roots {
		if r.Name == TranscriptRootName {
			t.Fatalf("the increment lists the conversation root: %+v", inc0.Meta.Roots)
		}
	}
	f.append("S.jsonl", `"no"}`+"\n"+`{"secret":"`+secretToken+`"}`+"\n")
	writeFile(t, filepath.Join(f.co, "b.txt"), "b")
	if _, err := c.Capture(ctx, CaptureRequest{Position: 1, SessionID: "S", ToolUseID: "t2", Tool: "Bash"}); err != nil {
		t.Fatal(err)
	}
	live, _ := os.ReadFile(filepath.Join(f.tr, "S.jsonl"))
	// Each reference's digest is that of the transcript's first Length
	// bytes, the later ones continued from the cached digest state (and
	// recomputed when the file was replaced).
	check := func(pos int) {
		t.Helper()
		m, err := ReadMeta(c.incrementPath(pos))
		if err != nil {
			t.Fatal(err)
		}
		r := TranscriptRefFor(m, "S")
		b, _ := os.ReadFile(filepath.Join(f.tr, "S.jsonl"))
		sum := sha256.Sum256(b[:r.Length])
		if r.Length != int64(bytes.LastIndexByte(b, '\n')+1) || r.Digest != hex.EncodeToString(sum[:]) {
			t.Fatalf("position %d: reference %+v, want the digest of %d bytes", pos, r, bytes.LastIndexByte(b, '\n')+1)
		}
	}
	check(1)
	if _, err := os.Stat(filepath.Join(c.Dir(), refsDir, "S.json")); err != nil {
		t.Fatalf("no digest state cached: %v", err)
	}
	f.append("S.jsonl", `{"more":1}`+"\n")
	if _, err := c.Capture(ctx, CaptureRequest{Position: 2, SessionID: "S", ToolUseID: "t3", Tool: "Bash"}); err != nil {
		t.Fatal(err)
	}
	check(2)
	replaced := filepath.Join(f.tr, "S.jsonl.new")
	writeFile(t, replaced, string(live)+`{"other":2}`+"\n")
	if err := os.Rename(replaced, filepath.Join(f.tr, "S.jsonl")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Capture(ctx, CaptureRequest{Position: 3, SessionID: "S", ToolUseID: "t4", Tool: "Bash"}); err != nil {
		t.Fatal(err)
	}
	check(3)
	writeFile(t, filepath.Join(f.tr, "S.jsonl"), string(live))
	live, _ = os.ReadFile(filepath.Join(f.tr, "S.jsonl"))
	res, err := c.Apply(ctx, ApplyRequest{To: 0})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Unrestorable) != 0 {
		t.Fatalf("a local rewind in metadata-only mode is partial: %+v", res.Unrestorable)
	}
	if _, err := os.Lstat(filepath.Join(f.co, "b.txt")); err == nil {
		t.Fatal("the rewind did not remove b.txt")
	}
	if now, _ := os.ReadFile(filepath.Join(f.tr, "S.jsonl")); !bytes.Equal(now, live) {
		t.Fatalf("the rewind changed the agent's transcript:\n%s", now)
	}
	// No increment holds the conversation.
	ents, _ := os.ReadDir(filepath.Join(c.Dir(), incrementsDir))
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(c.Dir(), incrementsDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if s := gunzipped(t, b); strings.Contains(s, promptText) || strings.Contains(s, secretToken) {
			t.Fatalf("increment %s holds the conversation", e.Name())
		}
	}
	// The reference checks out while the transcript still begins with what
	// position 0 saw.
	if err := CheckTranscriptRef(f.tr, ref); err != nil {
		t.Fatal(err)
	}
	for name, damage := range map[string]func(){
		"rewrote": func() {
			writeFile(t, filepath.Join(f.tr, "S.jsonl"), strings.Replace(string(live), promptText, "something else entirely!!!!!", 1))
		},
		"fewer":   func() { writeFile(t, filepath.Join(f.tr, "S.jsonl"), line1[:10]) },
		"removed": func() { os.Remove(filepath.Join(f.tr, "S.jsonl")) },
	} {
		damage()
		if err := CheckTranscriptRef(f.tr, ref); !errors.Is(err, ErrTranscriptChanged) || !strings.Contains(err.Error(), name) {
			t.Fatalf("%s: %v", name, err)
		}
	}
	// The upload form: no bytes, no reference, the root named withheld.
	u, err := c.UploadForm(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := ReadMetaFrom(bytes.NewReader(u.Body))
	if u.Conversation != incmeta.ConvWithheld || len(m.TranscriptRefs) != 0 || len(m.WithheldRoots) != 1 || m.WithheldRoots[0] != TranscriptRootName || strings.Contains(gunzipped(t, u.Body), promptText) {
		t.Fatalf("upload form of a metadata-only increment: %s %+v", u.Conversation, m)
	}
}

// A checkout switched to metadata-only after copies were kept: a rewind to
// a position that holds a copy leaves the agent's transcript alone too.
func TestConversationRefsRewindOverCopies(t *testing.T) {
	f := newTranscriptFixture(t)
	ctx := context.Background()
	f.write("S.jsonl", `{"n":1}`+"\n")
	if _, err := f.c.Capture(ctx, CaptureRequest{Position: 0, SessionID: "S", ToolUseID: "t1", Tool: "Bash"}); err != nil {
		t.Fatal(err)
	}
	c, err := Open(f.c.Dir(), Options{Roots: f.c.Roots(), ConversationRefs: true})
	if err != nil {
		t.Fatal(err)
	}
	f.append("S.jsonl", `{"n":2}`+"\n")
	writeFile(t, filepath.Join(f.co, "b.txt"), "b")
	if _, err := c.Capture(ctx, CaptureRequest{Position: 1, SessionID: "S", ToolUseID: "t2", Tool: "Bash"}); err != nil {
		t.Fatal(err)
	}
	live, _ := os.ReadFile(filepath.Join(f.tr, "S.jsonl"))
	if _, err := c.Apply(ctx, ApplyRequest{To: 0}); err != nil {
		t.Fatal(err)
	}
	if now, _ := os.ReadFile(filepath.Join(f.tr, "S.jsonl")); !bytes.Equal(now, live) {
		t.Fatalf("the rewind cut the agent's transcript to the old copy:\n%s", now)
	}
	if _, err := os.Lstat(filepath.Join(f.co, "b.txt")); err == nil {
		t.Fatal("the rewind did not remove b.txt")
	}
}
