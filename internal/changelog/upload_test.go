package changelog

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
)

const (
	secretToken = "ghp_" + "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"
	promptText  = "please print the magic word zanzibar"
)

func gunzipped(t *testing.T, b []byte) string {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(gz)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// The upload form of an increment: without the conversation roots outside
// shared mode, redacted in it, unchanged without a conversation root; and
// the redacted forms still rebuild and resume.
func TestUploadForm(t *testing.T) {
	f := newTranscriptFixture(t)
	ctx := context.Background()
	user := `{"type":"user","sessionId":"S","message":{"role":"user","content":"` + promptText + ` ` + secretToken + `"}}` + "\n"
	f.write("S.jsonl", user+lineUse1)
	if _, err := f.c.Capture(ctx, CaptureRequest{Position: 0, SessionID: "S", ToolUseID: "t1", Tool: "Bash"}); err != nil {
		t.Fatal(err)
	}
	result := `{"type":"user","sessionId":"S","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"token ` + secretToken + `"}]}}` + "\n"
	f.append("S.jsonl", result+lineUse2)
	writeFile(t, filepath.Join(f.co, "b.txt"), "b")
	if _, err := f.c.Capture(ctx, CaptureRequest{Position: 1, SessionID: "S", ToolUseID: "t2", Tool: "Bash"}); err != nil {
		t.Fatal(err)
	}
	withhold := func(string) Sharing { return Sharing{Mode: "metadata-only", Reason: "test"} }
	share := func(string) Sharing { return Sharing{Mode: "shared-conversation", Share: true} }

	base := t.TempDir()
	var withheld, shared []string
	for pos := 0; pos < 2; pos++ {
		w, err := f.c.UploadForm(pos, withhold)
		if err != nil {
			t.Fatal(err)
		}
		body := gunzipped(t, w.Body)
		if strings.Contains(body, promptText) || strings.Contains(body, secretToken) || strings.Contains(body, "tool_result") || strings.Contains(body, "projects/-repo") {
			t.Fatalf("withheld form of %d carries the conversation:\n%s", pos, body)
		}
		if w.Conversation != incmeta.ConvWithheld {
			t.Fatalf("withheld form: conversation %q", w.Conversation)
		}
		m, err := ReadMetaFrom(bytes.NewReader(w.Body))
		if err != nil || len(m.Roots) != 1 || m.Roots[0].Name != "checkout" || len(m.Transcripts) != 0 || m.WithheldRoots[0] != TranscriptRootName || m.ConversationMode != "metadata-only" {
			t.Fatalf("withheld meta %+v, %v", m, err)
		}
		s, err := f.c.UploadForm(pos, share)
		if err != nil {
			t.Fatal(err)
		}
		body = gunzipped(t, s.Body)
		if strings.Contains(body, secretToken) || !strings.Contains(body, "[REDACTED:github_token]") || !strings.Contains(body, promptText) && pos == 0 {
			t.Fatalf("shared form of %d:\n%s", pos, body)
		}
		if s.Conversation != incmeta.ConvRedacted || s.Redactions != 1 {
			t.Fatalf("shared form of %d: conversation %q, %d redactions", pos, s.Conversation, s.Redactions)
		}
		for i, b := range [][]byte{w.Body, s.Body} {
			p := filepath.Join(base, []string{"w", "s"}[i]+IncrementName(pos))
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				withheld = append(withheld, p)
			} else {
				shared = append(shared, p)
			}
		}
	}
	// The withheld forms restore the checkout only.
	fresh := t.TempDir()
	roots := []Root{{Name: "checkout", Path: filepath.Join(fresh, "co")}}
	if err := Replay(ctx, withheld, roots); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(fresh, "co", "b.txt")); string(b) != "b" {
		t.Fatalf("withheld forms do not restore the checkout: %q", b)
	}
	// The shared forms rebuild the redacted transcript, part by part.
	roots = []Root{{Name: "checkout", Path: filepath.Join(fresh, "co2")}, {Name: TranscriptRootName, Path: filepath.Join(fresh, "tr")}}
	if err := Replay(ctx, shared, roots); err != nil {
		t.Fatal(err)
	}
	want, _ := redactLines([]byte(user + lineUse1 + result + lineUse2))
	if got, _ := os.ReadFile(filepath.Join(fresh, "tr", "S.jsonl")); string(got) != string(want) {
		t.Fatalf("rebuilt redacted transcript:\n%s\nwant\n%s", got, want)
	}
	// Resume on a fresh machine from the redacted forms: position 0's copy
	// lacks t1's result, position 1's part supplies it.
	if err := Replay(ctx, shared[:1], []Root{{Name: "checkout", Path: filepath.Join(fresh, "co3")}, {Name: TranscriptRootName, Path: filepath.Join(fresh, "tr3")}}); err != nil {
		t.Fatal(err)
	}
	rewound, err := ReadTranscript(filepath.Join(fresh, "tr3"), "S")
	if err != nil {
		t.Fatal(err)
	}
	local, ok := TranscriptLocalSize(shared[:1], "S.jsonl")
	if !ok || local == int64(len(rewound)) {
		t.Fatalf("local size %d (%v) of a redacted copy of %d bytes", local, ok, len(rewound))
	}
	b1, _ := os.ReadFile(shared[1])
	i := 0
	next := func(context.Context) (*LaterIncrement, error) {
		if i > 0 {
			return nil, nil
		}
		i++
		return &LaterIncrement{Position: 1, Data: b1}, nil
	}
	lt, err := FindResultTranscript(ctx, next, "S", "t1", rewound, local)
	if err != nil || lt == nil || strings.Contains(string(lt.Data), secretToken) {
		t.Fatalf("FindResultTranscript on redacted forms: %+v, %v", lt, err)
	}
	if r, err := ResumeConversationFrom(filepath.Join(fresh, "tr3"), "S", "t1", lt.Data); err != nil || !r.IncludesResult {
		t.Fatalf("resume from redacted forms: %+v, %v", r, err)
	}

	// Without a conversation root, the form is the local increment.
	g, err := Open(filepath.Join(f.base, "changelog2"), Options{Roots: []Root{{Name: "checkout", Path: f.co}}})
	if err != nil {
		t.Fatal(err)
	}
	inc, err := g.Capture(ctx, CaptureRequest{Position: 0, SessionID: "S"})
	if err != nil {
		t.Fatal(err)
	}
	local0, _ := os.ReadFile(inc.Path)
	if u, err := g.UploadForm(0, nil); err != nil || !bytes.Equal(u.Body, local0) || u.Conversation != "" {
		t.Fatalf("form without a conversation root differs: %v", err)
	}
}

// Each transcript file is decided by its own session: an increment of a
// shared session never carries another session's transcript, and an
// increment of a session not shared still carries a shared session's.
func TestUploadFormPerSession(t *testing.T) {
	f := newTranscriptFixture(t)
	ctx := context.Background()
	f.write("S.jsonl", `{"s":"shared-`+promptText+`"}`+"\n")
	f.write("T.jsonl", `{"t":"private-one"}`+"\n")
	capture := func(session string) int {
		inc, err := f.c.Capture(ctx, CaptureRequest{Position: -1, SessionID: session})
		if err != nil {
			t.Fatal(err)
		}
		return inc.Position
	}
	p0 := capture("S")
	f.append("S.jsonl", `{"s":"more `+secretToken+`"}`+"\n")
	f.append("T.jsonl", `{"t":"private-two"}`+"\n")
	p1 := capture("T")
	policy := func(session string) Sharing {
		if session == "S" {
			return Sharing{Mode: "shared-conversation", Share: true}
		}
		return Sharing{Mode: "shared-conversation", Reason: "started before sharing"}
	}
	for _, pos := range []int{p0, p1} {
		u, err := f.c.UploadForm(pos, policy)
		if err != nil {
			t.Fatal(err)
		}
		body := gunzipped(t, u.Body)
		if strings.Contains(body, "private-") || strings.Contains(body, secretToken) {
			t.Fatalf("form of %d carries session T or the token:\n%s", pos, body)
		}
		want := "shared-" + promptText
		if pos == p1 {
			want = "more [REDACTED:github_token]"
		}
		if !strings.Contains(body, want) || u.Conversation != incmeta.ConvRedacted {
			t.Fatalf("form of %d lacks session S's %q (%s):\n%s", pos, want, u.Conversation, body)
		}
	}
	// An increment of T with nothing of S: the conversation root is left
	// out entirely.
	f.append("T.jsonl", `{"t":"private-three"}`+"\n")
	p2 := capture("T")
	u, err := f.c.UploadForm(p2, policy)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := ReadMetaFrom(bytes.NewReader(u.Body))
	if u.Conversation != incmeta.ConvWithheld || len(m.Roots) != 1 || strings.Contains(gunzipped(t, u.Body), "private-") {
		t.Fatalf("form of %d: %s %+v", p2, u.Conversation, m.Roots)
	}
}
