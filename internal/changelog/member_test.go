package changelog

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/klauspost/compress/gzip"
)

// Transcript lines of session S as Claude Code appends them: call t1's
// tool_use is written before its PostToolUse hook runs, its tool_result
// only after.
const (
	lineUser    = `{"type":"user","sessionId":"S","message":{"role":"user","content":"go"}}` + "\n"
	lineUse1    = `{"type":"assistant","sessionId":"S","message":{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{}}]}}` + "\n"
	lineResult1 = `{"type":"user","sessionId":"S","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"R1"}]}}` + "\n"
	lineUse2    = `{"type":"assistant","sessionId":"S","message":{"role":"assistant","content":[{"type":"tool_use","id":"t2","name":"Bash","input":{}}]}}` + "\n"
)

// On a fresh machine the transcript restored at call 0 lacks call 0's
// result; the copy stored by a later increment holds it and becomes the
// source of the cut. Increment 1 does not store the transcript (only the
// checkout changed), increment 2 does.
func TestFindResultTranscriptInLaterIncrement(t *testing.T) {
	base := t.TempDir()
	co, tr := filepath.Join(base, "repo"), filepath.Join(base, "projects", "p")
	writeFile(t, filepath.Join(co, "a.txt"), "a")
	writeFile(t, filepath.Join(tr, "S.jsonl"), lineUser+lineUse1)
	roots := []Root{{Name: "checkout", Path: co}, {Name: TranscriptRootName, Path: tr}}
	c, err := Open(filepath.Join(base, "changelog"), Options{Roots: roots})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	capture := func(pos int, tool string) *Increment {
		t.Helper()
		inc, err := c.Capture(ctx, CaptureRequest{Position: pos, SessionID: "S", ToolUseID: tool, Tool: "Bash"})
		if err != nil {
			t.Fatalf("capture %d: %v", pos, err)
		}
		return inc
	}
	inc0 := capture(0, "t1")
	writeFile(t, filepath.Join(co, "b.txt"), "b")
	inc1 := capture(1, "t1b")
	appendFile(t, filepath.Join(tr, "S.jsonl"), lineResult1+lineUse2)
	inc2 := capture(2, "t2")

	// Increment 2 stores the bytes appended to the transcript; 1 does
	// not store it.
	f2, err := os.Open(inc2.Path)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ReadPartFrom(f2, TranscriptRootName, "S.jsonl", 1<<20)
	f2.Close()
	if err != nil || sp.Whole || sp.Offset != int64(len(lineUser+lineUse1)) || string(sp.Data) != lineResult1+lineUse2 {
		t.Fatalf("ReadPartFrom(2) = %+v, %v", sp, err)
	}
	if _, err := ReadMember(inc2.Path, TranscriptRootName, "S.jsonl", 1<<20); !errors.Is(err, ErrNoMember) {
		t.Fatalf("ReadMember(2) of an appended part: %v, want ErrNoMember", err)
	}
	if _, err := ReadMember(inc1.Path, TranscriptRootName, "S.jsonl", 1<<20); !errors.Is(err, ErrNoMember) {
		t.Fatalf("ReadMember(1): %v, want ErrNoMember", err)
	}

	// A fresh machine: replay increment 0 only.
	fresh := filepath.Join(base, "fresh")
	froots := []Root{{Name: "checkout", Path: filepath.Join(fresh, "repo")}, {Name: TranscriptRootName, Path: filepath.Join(fresh, "p")}}
	if err := Replay(ctx, []string{inc0.Path}, froots); err != nil {
		t.Fatal(err)
	}
	dir := froots[1].Path
	r, err := ResumeConversation(dir, "S", "t1")
	if err != nil || r.IncludesResult {
		t.Fatalf("resume from the rewound copy: %+v, %v (want includes_result false)", r, err)
	}

	later := func(incs ...*Increment) func(context.Context) (*LaterIncrement, error) {
		return func(context.Context) (*LaterIncrement, error) {
			if len(incs) == 0 {
				return nil, nil
			}
			b, err := os.ReadFile(incs[0].Path)
			pos := incs[0].Position
			incs = incs[1:]
			return &LaterIncrement{Position: pos, Data: b}, err
		}
	}
	rewound, err := ReadTranscript(dir, "S")
	if err != nil {
		t.Fatal(err)
	}
	local, ok := TranscriptLocalSize([]string{inc0.Path}, "S.jsonl")
	if !ok || local != int64(len(rewound)) {
		t.Fatalf("TranscriptLocalSize = %d, %v; the rewound copy has %d bytes", local, ok, len(rewound))
	}
	// Only increment 1: no later copy holds the result.
	if lt, err := FindResultTranscript(ctx, later(inc1), "S", "t1", rewound, local); err != nil || lt != nil {
		t.Fatalf("without increment 2: %+v, %v", lt, err)
	}
	// Without the rewound copy, the appended part has nothing to extend.
	if lt, err := FindResultTranscript(ctx, later(inc1, inc2), "S", "t1", nil, 0); err != nil || lt != nil {
		t.Fatalf("without a base: %+v, %v", lt, err)
	}
	// A base of another length breaks the chain.
	if lt, err := FindResultTranscript(ctx, later(inc1, inc2), "S", "t1", rewound, local-1); err != nil || lt != nil {
		t.Fatalf("with a misaligned base: %+v, %v", lt, err)
	}
	lt, err := FindResultTranscript(ctx, later(inc1, inc2), "S", "t1", rewound, local)
	if err != nil || lt == nil || lt.Position != 2 || lt.Read != 2 {
		t.Fatalf("FindResultTranscript = %+v, %v", lt, err)
	}
	r, err = ResumeConversationFrom(dir, "S", "t1", lt.Data)
	if err != nil || !r.IncludesResult {
		t.Fatalf("resume from the later copy: %+v, %v", r, err)
	}
	b, _ := os.ReadFile(r.Transcript)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 3 || !strings.Contains(lines[2], `"tool_use_id":"t1"`) || !strings.Contains(lines[2], `"R1"`) || strings.Contains(string(b), "t2") || strings.Contains(string(b), `"S"`) {
		t.Fatalf("resumed transcript does not end with t1's result:\n%s", b)
	}
}

// ReadMember validates the whole archive before reading a member, and
// bounds what it reads.
func TestReadMemberRefusals(t *testing.T) {
	root := "/x/p"
	prefix := strings.TrimPrefix(root, "/")
	meta := func() *incmeta.Meta {
		return &incmeta.Meta{Version: 1, Kind: KindCall, Roots: []incmeta.Root{{Name: TranscriptRootName, Path: root, Prefix: prefix, Exists: true}}, RemovedRoots: []string{}}
	}
	dump := func(entries ...dumpEntry) string { return string(encodeDumpdir(entries)) }
	good := buildArchive(t, meta(), []hostileMember{
		{name: prefix + "/", flag: typeDumpdir, body: dump(dumpEntry{'Y', "S.jsonl"}, dumpEntry{'D', "sub"})},
		{name: prefix + "/S.jsonl", flag: tar.TypeReg, body: "0123456789"},
		{name: prefix + "/sub/", flag: typeDumpdir, body: dump()},
	})
	if b, err := ReadMemberFrom(bytes.NewReader(good), TranscriptRootName, "S.jsonl", 10); err != nil || string(b) != "0123456789" {
		t.Fatalf("good archive: %q, %v", b, err)
	}
	hostile := buildArchive(t, meta(), []hostileMember{
		{name: prefix + "/S.jsonl", flag: tar.TypeReg, body: "x"},
		{name: prefix + "/../../etc/passwd", flag: tar.TypeReg, body: "x"},
	})
	cases := []struct {
		name, root, member string
		archive            []byte
		limit              int64
		want               error
	}{
		{"over the limit", TranscriptRootName, "S.jsonl", good, 9, fsutil.ErrTooLarge},
		{"absent", TranscriptRootName, "T.jsonl", good, 10, ErrNoMember},
		{"other root", "checkout", "S.jsonl", good, 10, ErrNoMember},
		{"a directory", TranscriptRootName, "sub", good, 10, ErrNoMember},
		{"hostile member after it", TranscriptRootName, "S.jsonl", hostile, 10, ErrUnreadableArchive},
		{"not an archive", TranscriptRootName, "S.jsonl", []byte("plain text"), 10, ErrUnreadableArchive},
		{"dot-dot path", TranscriptRootName, "../S.jsonl", good, 10, nil},
	}
	for _, tc := range cases {
		_, err := ReadMemberFrom(bytes.NewReader(tc.archive), tc.root, tc.member, tc.limit)
		if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// A hostile later increment stops the search with the archive error.
	next := func(context.Context) (*LaterIncrement, error) {
		return &LaterIncrement{Position: 3, Data: hostile}, nil
	}
	if _, err := FindResultTranscript(context.Background(), next, "S", "t1", nil, 0); !errors.Is(err, ErrUnreadableArchive) {
		t.Fatalf("hostile later increment: %v", err)
	}
}

func appendFile(t *testing.T, p, s string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// FuzzReadMember fuzzes the tar layer under a valid gzip stream: nothing may
// panic, and what ReadMember returns is within its bound and is the member
// the validated archive lists.
func FuzzReadMember(f *testing.F) {
	const prefix = "fuzz/root"
	meta := &incmeta.Meta{Version: 1, Kind: KindCall, Roots: []incmeta.Root{{Name: "r", Prefix: prefix, Exists: true}}, RemovedRoots: []string{}}
	t := &testing.T{}
	for _, ms := range [][]hostileMember{
		{
			{name: prefix + "/", flag: typeDumpdir, body: string(encodeDumpdir([]dumpEntry{{'Y', "a"}, {'D', "d"}}))},
			{name: prefix + "/d/", flag: typeDumpdir, body: "Ya\x00\x00"},
			{name: prefix + "/a", flag: tar.TypeReg, body: "0123456789"},
			{name: prefix + "/d/a", flag: tar.TypeReg, body: "x"},
		},
		{{name: prefix + "/a", flag: tar.TypeSymlink, link: "/etc/passwd"}},
	} {
		zr, _ := gzip.NewReader(bytes.NewReader(buildArchive(t, meta, ms)))
		raw, _ := io.ReadAll(zr)
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(raw)
		zw.Close()
		b, err := ReadMemberFrom(bytes.NewReader(buf.Bytes()), "r", "a", 16)
		if err != nil {
			return
		}
		a, err := readArchive(bytes.NewReader(buf.Bytes()), nil)
		if err != nil || len(b) > 16 {
			t.Fatalf("ReadMember accepted %d bytes of an archive readArchive refuses (%v)", len(b), err)
		}
		for _, m := range a.Members {
			if m.Root == "r" && m.Rel == "a" && (m.Type != tar.TypeReg || m.Size != int64(len(b))) {
				t.Fatalf("ReadMember returned %d bytes for member %+v", len(b), m)
			}
		}
	})
}

// The host may write even a call's own line after the hook that captured
// it: the copy restored at call 0 lacks the call, no later copy holds its
// result, and the first later copy that holds the call is the source of the
// cut (without the result). A copy read while the host was writing its last
// line is cut before that line.
func TestFindResultTranscriptCallOnlyAndTornLine(t *testing.T) {
	base := t.TempDir()
	co, tr := filepath.Join(base, "repo"), filepath.Join(base, "projects", "p")
	writeFile(t, filepath.Join(co, "a.txt"), "a")
	writeFile(t, filepath.Join(tr, "S.jsonl"), lineUser)
	roots := []Root{{Name: "checkout", Path: co}, {Name: TranscriptRootName, Path: tr}}
	c, err := Open(filepath.Join(base, "changelog"), Options{Roots: roots})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	inc0, err := c.Capture(ctx, CaptureRequest{Position: 0, SessionID: "S", ToolUseID: "t1", Tool: "Bash"})
	if err != nil {
		t.Fatal(err)
	}
	appendFile(t, filepath.Join(tr, "S.jsonl"), lineUse1)
	writeFile(t, filepath.Join(co, "b.txt"), "b")
	inc1, err := c.Capture(ctx, CaptureRequest{Position: 1, SessionID: "S", ToolUseID: "t2", Tool: "Bash"})
	if err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(base, "fresh")
	froots := []Root{{Name: "checkout", Path: filepath.Join(fresh, "repo")}, {Name: TranscriptRootName, Path: filepath.Join(fresh, "p")}}
	if err := Replay(ctx, []string{inc0.Path}, froots); err != nil {
		t.Fatal(err)
	}
	dir := froots[1].Path
	if _, err := ResumeConversation(dir, "S", "t1"); !errors.Is(err, ErrNoTranscript) {
		t.Fatalf("resume from a copy without the call: %v, want ErrNoTranscript", err)
	}
	rewound, err := ReadTranscript(dir, "S")
	if err != nil {
		t.Fatal(err)
	}
	local, _ := TranscriptLocalSize([]string{inc0.Path}, "S.jsonl")
	b1, err := os.ReadFile(inc1.Path)
	if err != nil {
		t.Fatal(err)
	}
	sent := false
	next := func(context.Context) (*LaterIncrement, error) {
		if sent {
			return nil, nil
		}
		sent = true
		return &LaterIncrement{Position: 1, Data: b1}, nil
	}
	lt, err := FindResultTranscript(ctx, next, "S", "t1", rewound, local)
	if err != nil || lt == nil || lt.HoldsResult || lt.Position != 1 {
		t.Fatalf("FindResultTranscript = %+v, %v; want the call-only copy of position 1", lt, err)
	}
	r, err := ResumeConversationFrom(dir, "S", "t1", lt.Data)
	if err != nil || r.IncludesResult {
		t.Fatalf("resume from the call-only copy: %+v, %v", r, err)
	}
	// A torn last line (no newline yet) ends the copy; a malformed line in
	// the middle is still refused.
	tornCopy := []byte(lineUser + lineUse1 + lineResult1[:len(lineResult1)/2])
	if r, err := ResumeConversationFrom(dir, "S", "t1", tornCopy); err != nil || r.IncludesResult {
		t.Fatalf("resume from a torn copy: %+v, %v", r, err)
	}
	bad := []byte(lineUser + lineResult1[:len(lineResult1)/2] + "\n" + lineUse1)
	if _, err := ResumeConversationFrom(dir, "S", "t1", bad); err == nil {
		t.Fatal("a malformed line in the middle was accepted")
	}
}
