package changelog

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
)

// transcriptFixture is a checkout and a transcript root with a changelog.
type transcriptFixture struct {
	t      *testing.T
	base   string
	co, tr string
	c      *Changelog
	paths  []string
	// want holds each position's transcript root as a rebuild must give it.
	want []tree
}

func newTranscriptFixture(t *testing.T) *transcriptFixture {
	base := t.TempDir()
	f := &transcriptFixture{t: t, base: base, co: filepath.Join(base, "repo"), tr: filepath.Join(base, "home", ".claude", "projects", "-repo")}
	writeFile(t, filepath.Join(f.co, "a.txt"), "a")
	if err := os.MkdirAll(f.tr, 0o700); err != nil {
		t.Fatal(err)
	}
	c, err := Open(filepath.Join(base, "changelog"), Options{Roots: []Root{{Name: "checkout", Path: f.co}, {Name: TranscriptRootName, Path: f.tr}}})
	if err != nil {
		t.Fatal(err)
	}
	f.c = c
	return f
}

// capture stores the next increment and records the transcript root it
// must rebuild to: every file cut at its last complete line.
func (f *transcriptFixture) capture() *Increment {
	f.t.Helper()
	inc, err := f.c.Capture(context.Background(), CaptureRequest{Position: -1, SessionID: "S", Tool: "Bash"})
	if err != nil {
		f.t.Fatal(err)
	}
	f.paths = append(f.paths, inc.Path)
	want := tree{}
	for rel, v := range snapshot(f.t, f.tr, false, nil) {
		if strings.HasPrefix(v, "file ") && strings.HasSuffix(rel, ".jsonl") {
			b, _ := os.ReadFile(filepath.Join(f.tr, rel))
			if i := strings.LastIndexByte(string(b), '\n'); i >= 0 {
				b = b[:i+1]
			} else {
				b = nil
			}
			fi, _ := os.Stat(filepath.Join(f.tr, rel))
			v = fmt.Sprintf("file %o %q", fi.Mode().Perm(), b)
		}
		want[rel] = v
	}
	f.want = append(f.want, want)
	return inc
}

func (f *transcriptFixture) write(name, s string) {
	f.t.Helper()
	writeFile(f.t, filepath.Join(f.tr, name), s)
}

func (f *transcriptFixture) append(name, s string) {
	f.t.Helper()
	appendFile(f.t, filepath.Join(f.tr, name), s)
}

func (f *transcriptFixture) parts(inc *Increment) map[string]incmeta.Part {
	out := map[string]incmeta.Part{}
	for _, p := range inc.Meta.Transcripts {
		out[p.Path] = p
	}
	return out
}

// TestTranscriptDeltas: appended bytes are stored as parts (O(appended
// bytes)), a partial line waits, a truncated, rewritten or rotated
// transcript is stored whole once, and every position rebuilds exactly.
func TestTranscriptDeltas(t *testing.T) {
	f := newTranscriptFixture(t)
	big := strings.Repeat(`{"type":"user","message":{"content":"`+strings.Repeat("x", 200)+`"}}`+"\n", 2000) // ~430 KB
	f.write("S.jsonl", big)
	inc0 := f.capture()
	if p, ok := f.parts(inc0)["S.jsonl"]; !ok || p.Member != "" || p.Offset != 0 || p.Length != int64(len(big)) {
		t.Fatalf("first capture: part %+v, want a whole copy of %d bytes", p, len(big))
	}

	line := `{"type":"assistant","n":1}` + "\n"
	f.append("S.jsonl", line)
	inc1 := f.capture()
	p := f.parts(inc1)["S.jsonl"]
	if p.Member == "" || p.Offset != int64(len(big)) || p.Length != int64(len(line)) {
		t.Fatalf("append: part %+v, want %d bytes at %d", p, len(line), len(big))
	}
	if inc1.Size > 2048 {
		t.Fatalf("appending %d bytes to a %d-byte transcript made a %d-byte increment", len(line), len(big), inc1.Size)
	}

	// A partial line waits for the next increment.
	f.append("S.jsonl", `{"type":"partial"`)
	writeFile(t, filepath.Join(f.co, "b.txt"), "b")
	inc2 := f.capture()
	if _, ok := f.parts(inc2)["S.jsonl"]; ok {
		t.Fatalf("a partial line was stored: %+v", inc2.Meta.Transcripts)
	}
	f.append("S.jsonl", `,"n":2}`+"\n")
	inc3 := f.capture()
	if p := f.parts(inc3)["S.jsonl"]; p.Member == "" || p.Offset != int64(len(big)+len(line)) {
		t.Fatalf("completed line: part %+v", p)
	}

	// Truncated (same inode): stored whole once, then appends again.
	if err := os.Truncate(filepath.Join(f.tr, "S.jsonl"), int64(len(big))); err != nil {
		t.Fatal(err)
	}
	inc4 := f.capture()
	if p := f.parts(inc4)["S.jsonl"]; p.Member != "" || p.Length != int64(len(big)) {
		t.Fatalf("truncated: part %+v, want whole", p)
	}
	f.append("S.jsonl", line)
	if p := f.parts(f.capture())["S.jsonl"]; p.Member == "" {
		t.Fatalf("append after truncation: part %+v", p)
	}

	// Rewritten in place (same inode, longer, other bytes): whole.
	fh, err := os.OpenFile(filepath.Join(f.tr, "S.jsonl"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fh.WriteAt([]byte(strings.Repeat("y", len(big)+len(line)-1)+"\n"+line), 0)
	fh.Close()
	if p := f.parts(f.capture())["S.jsonl"]; p.Member != "" {
		t.Fatalf("rewritten in place: part %+v, want whole", p)
	}

	// Rotated: renamed away and a new file of the same name.
	if err := os.Rename(filepath.Join(f.tr, "S.jsonl"), filepath.Join(f.tr, "S-old.jsonl")); err != nil {
		t.Fatal(err)
	}
	f.write("S.jsonl", line)
	ps := f.parts(f.capture())
	if ps["S.jsonl"].Member != "" || ps["S.jsonl"].Length != int64(len(line)) {
		t.Fatalf("rotated: part %+v, want whole", ps["S.jsonl"])
	}
	// Replaced by rename over (a new inode): whole.
	f.write("new.tmp", line+line)
	if err := os.Rename(filepath.Join(f.tr, "new.tmp"), filepath.Join(f.tr, "S.jsonl")); err != nil {
		t.Fatal(err)
	}
	if p := f.parts(f.capture())["S.jsonl"]; p.Member != "" {
		t.Fatalf("replaced: part %+v, want whole", p)
	}
	// Another session, and a plain file (stored whole each time).
	f.write("T.jsonl", line)
	f.write("notes.txt", "no newline")
	f.capture()
	f.append("T.jsonl", line)
	f.append("S.jsonl", line)
	f.capture()

	// Every position rebuilds onto a fresh root exactly (cut at lines).
	for k := range f.paths {
		fresh := t.TempDir()
		roots := []Root{{Name: "checkout", Path: filepath.Join(fresh, "co")}, {Name: TranscriptRootName, Path: filepath.Join(fresh, "tr")}}
		if err := Replay(context.Background(), f.paths[:k+1], roots); err != nil {
			t.Fatalf("replay 0..%d: %v", k, err)
		}
		if d := diffTrees(f.want[k], snapshot(t, roots[1].Path, false, nil)); d != "" {
			t.Errorf("position %d rebuilds differently:\n%s", k, d)
		}
	}
}

// An appended part whose base is missing from the sequence is refused
// before anything is written.
func TestTranscriptPartWithoutBase(t *testing.T) {
	f := newTranscriptFixture(t)
	f.write("S.jsonl", "1\n")
	f.capture()
	f.append("S.jsonl", "2\n")
	f.capture()
	fresh := t.TempDir()
	roots := []Root{{Name: "checkout", Path: filepath.Join(fresh, "co")}, {Name: TranscriptRootName, Path: filepath.Join(fresh, "tr")}}
	err := Replay(context.Background(), f.paths[1:], roots)
	if err == nil || !strings.Contains(err.Error(), "appends at byte 2") {
		t.Fatalf("replay of the part alone: %v", err)
	}
	if _, err := os.Lstat(roots[1].Path); !os.IsNotExist(err) {
		t.Fatalf("something was written: %v", err)
	}
}

// GNU tar lists increments with appended parts and, excluding the metadata
// directory as documented, extracts their workspace members.
func TestTranscriptPartsGNUTar(t *testing.T) {
	needGNUTar(t)
	f := newTranscriptFixture(t)
	f.write("S.jsonl", "1\n")
	f.capture()
	f.append("S.jsonl", "2\n")
	writeFile(t, filepath.Join(f.co, "c.txt"), "c")
	f.capture()
	out := run(t, f.base, "tar", "--incremental", "-tzf", f.paths[1])
	if !strings.Contains(out, "append/000000") || !strings.Contains(out, "c.txt") {
		t.Fatalf("tar -t: %s", out)
	}
	gnu := t.TempDir()
	for _, p := range f.paths {
		run(t, gnu, "tar", "-C", gnu, "--incremental", "--anchored", "--exclude="+incmeta.Dir, "-xzf", p)
	}
	got := snapshot(t, filepath.Join(gnu, strings.TrimPrefix(f.co, "/")), false, nil)
	if d := diffTrees(snapshot(t, f.co, false, nil), got); d != "" {
		t.Fatalf("GNU tar extraction of the checkout differs:\n%s", d)
	}
}

// Rewinds and their undos never delete a conversation: a rewind cuts only
// the rewound session's transcript, another session's transcript (started
// after the target, or resumed after the rewind) survives the rewind and
// its undo, and the undo restores the cut transcript.
func TestRewindKeepsOtherConversations(t *testing.T) {
	f := newTranscriptFixture(t)
	ctx := context.Background()
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(f.tr, name))
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(b)
	}
	f.write("S.jsonl", "s1\n")
	if _, err := f.c.Capture(ctx, CaptureRequest{Position: 0, SessionID: "S", ToolUseID: "t1"}); err != nil {
		t.Fatal(err)
	}
	f.append("S.jsonl", "s2\n")
	writeFile(t, filepath.Join(f.co, "a.txt"), "a2")
	if _, err := f.c.Capture(ctx, CaptureRequest{Position: 1, SessionID: "S", ToolUseID: "t2"}); err != nil {
		t.Fatal(err)
	}
	// Another session after the target.
	f.write("U.jsonl", "u1\n")
	if _, err := f.c.Capture(ctx, CaptureRequest{Position: 2, SessionID: "U", ToolUseID: "u"}); err != nil {
		t.Fatal(err)
	}
	// A staging directory a crashed apply left is removed by the next.
	if err := os.MkdirAll(filepath.Join(f.c.Dir(), ".staging-crashed", "1"), 0o700); err != nil {
		t.Fatal(err)
	}
	res, err := f.c.Apply(ctx, ApplyRequest{To: 0})
	if err != nil {
		t.Fatal(err)
	}
	if got := read("S.jsonl"); got != "s1\n" {
		t.Fatalf("the rewound session's transcript: %q, want it cut at call 0", got)
	}
	if got := read("U.jsonl"); got != "u1\n" {
		t.Fatalf("another session's transcript after the rewind: %q", got)
	}
	if b, _ := os.ReadFile(filepath.Join(f.co, "a.txt")); string(b) != "a" {
		t.Fatalf("the checkout was not rewound: %q", b)
	}
	// The conversation is resumed under a new id, and goes on.
	f.write("R.jsonl", "s1\nr1\n")
	if _, err := f.c.Capture(ctx, CaptureRequest{Position: -1, SessionID: "R", ToolUseID: "r"}); err != nil {
		t.Fatal(err)
	}
	f.append("U.jsonl", "u2\n")
	// Undo: the checkout and S come back; R and U's later line stay.
	if _, err := f.c.Apply(ctx, ApplyRequest{To: res.PreApply.Position}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(f.co, "a.txt")); string(b) != "a2" {
		t.Fatalf("the undo did not restore the checkout: %q", b)
	}
	if got := read("S.jsonl"); got != "s1\ns2\n" {
		t.Fatalf("the undo did not restore the cut transcript: %q", got)
	}
	if got := read("R.jsonl"); got != "s1\nr1\n" {
		t.Fatalf("the undo deleted the resumed conversation: %q", got)
	}
	if got := read("U.jsonl"); got != "u1\nu2\n" {
		t.Fatalf("the undo shortened another session's transcript: %q", got)
	}
	// A rewind to before R and U existed keeps them too.
	if _, err := f.c.Apply(ctx, ApplyRequest{To: 0}); err != nil {
		t.Fatal(err)
	}
	if read("R.jsonl") != "s1\nr1\n" || read("U.jsonl") != "u1\nu2\n" || read("S.jsonl") != "s1\n" {
		t.Fatalf("second rewind: R %q U %q S %q", read("R.jsonl"), read("U.jsonl"), read("S.jsonl"))
	}
	// No staging directory is left behind.
	if m, _ := filepath.Glob(filepath.Join(f.c.Dir(), ".staging-*")); len(m) != 0 {
		t.Fatalf("staging left: %v", m)
	}
}

// Hostile transcript parts are refused as unreadable archives: a part
// member the metadata does not list, a listed part that is missing, a part
// member outside the append directory, a part in an undeclared root, a
// path escaping its root, and a part through a symlink.
func TestHostileTranscriptParts(t *testing.T) {
	root := "/x/p"
	prefix := strings.TrimPrefix(root, "/")
	meta := func(parts ...incmeta.Part) *incmeta.Meta {
		return &incmeta.Meta{Version: 1, Kind: KindCall, Roots: []incmeta.Root{{Name: TranscriptRootName, Path: root, Prefix: prefix, Exists: true}}, RemovedRoots: []string{}, Transcripts: parts}
	}
	part := func(path, member string) incmeta.Part {
		return incmeta.Part{Root: TranscriptRootName, Path: path, Member: member, Offset: 2, Length: 2}
	}
	app := incmeta.AppendDir + "/000000"
	cases := []struct {
		name    string
		meta    *incmeta.Meta
		members []hostileMember
	}{
		{"unlisted part", meta(), []hostileMember{{name: app, flag: tar.TypeReg, body: "2\n"}}},
		{"missing part", meta(part("S.jsonl", app)), nil},
		{"missing whole copy", meta(incmeta.Part{Root: TranscriptRootName, Path: "S.jsonl", Length: 2}), nil},
		{"member outside the append directory", meta(part("S.jsonl", incmeta.Dir+"/other")), []hostileMember{{name: incmeta.Dir + "/other", flag: tar.TypeReg, body: "2\n"}}},
		{"undeclared root", meta(incmeta.Part{Root: "elsewhere", Path: "S.jsonl", Member: app, Offset: 2, Length: 2}), []hostileMember{{name: app, flag: tar.TypeReg, body: "2\n"}}},
		{"dot-dot path", meta(part("../S.jsonl", app)), []hostileMember{{name: app, flag: tar.TypeReg, body: "2\n"}}},
		{"negative offset", meta(incmeta.Part{Root: TranscriptRootName, Path: "S.jsonl", Member: app, Offset: -1, Length: 2}), []hostileMember{{name: app, flag: tar.TypeReg, body: "2\n"}}},
		{"part below a symlink", meta(part("link/S.jsonl", app)), []hostileMember{{name: prefix + "/link", flag: tar.TypeSymlink, link: "/etc"}, {name: app, flag: tar.TypeReg, body: "2\n"}}},
		{"part listed twice", meta(part("S.jsonl", app), part("S.jsonl", incmeta.AppendDir+"/000001")), []hostileMember{{name: app, flag: tar.TypeReg, body: "2\n"}, {name: incmeta.AppendDir + "/000001", flag: tar.TypeReg, body: "3\n"}}},
		{"part and whole copy", meta(part("S.jsonl", app)), []hostileMember{{name: prefix + "/S.jsonl", flag: tar.TypeReg, body: "1\n"}, {name: app, flag: tar.TypeReg, body: "2\n"}}},
	}
	for _, tc := range cases {
		b := buildArchive(t, tc.meta, tc.members)
		_, err := readArchive(bytes.NewReader(b), nil)
		t.Logf("%s: %v", tc.name, err)
		if !errors.Is(err, ErrUnreadableArchive) {
			t.Errorf("%s: %v, want ErrUnreadableArchive", tc.name, err)
		}
	}
}
