package source

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false", "-c", "protocol.file.allow=always"}, args...)...)
	cmd.Env = GitEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func write(t testing.TB, dir, rel, content string) {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// newRepo is a real repository with one commit of files.
func newRepo(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	git(t, dir, "init", "-q", "-b", "main")
	for p, c := range files {
		write(t, dir, p, c)
	}
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "-q", "--allow-empty", "-m", "one")
	return dir
}

// newStore is a real spool and its held session.
func newStore(t testing.TB, lim spool.Limits) (*spool.Spool, *spool.Tx) {
	t.Helper()
	sp, err := spool.InitWith(context.Background(), filepath.Join(t.TempDir(), "spool"), spool.Config{Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	ss, err := sp.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ss.Close)
	return sp, ss
}

func entry(t testing.TB, m *Manifest, path string) *ManifestEntry {
	t.Helper()
	for i := range m.Entries {
		if m.Entries[i].Path == path {
			return &m.Entries[i]
		}
	}
	return nil
}

func TestParseStatusV2(t *testing.T) {
	oid := strings.Repeat("ab", 20)
	in := strings.Join([]string{
		"# branch.oid " + oid, "# branch.head main",
		"1 .M N... 100644 100644 100644 " + oid + " " + oid + " dir/a file.txt",
		"2 R. N... 100644 100644 100644 " + oid + " " + oid + " R100 new name", "old name",
		"u UU N... 100644 100644 100644 100644 " + oid + " " + oid + " " + oid + " conflict.txt",
		"1 .M S.M. 160000 160000 160000 " + oid + " " + oid + " sub",
		"? untracked x",
	}, "\x00") + "\x00"
	head, entries, err := parseStatusV2([]byte(in))
	if err != nil || head != oid {
		t.Fatal(head, err)
	}
	want := []statusEntry{{Path: "dir/a file.txt", Status: ".M"}, {Path: "new name", Status: "R."}, {Path: "old name", Status: "R.", Orig: true},
		{Path: "conflict.txt", Status: "UU"}, {Path: "sub", Status: ".M S"}, {Path: "untracked x", Status: "??"}}
	if !reflect.DeepEqual(entries, want) {
		t.Fatalf("entries %+v\nwant %+v", entries, want)
	}
	staged := []bool{false, true, false, true, false, false}
	for i, e := range entries {
		if e.staged() != staged[i] {
			t.Errorf("%+v staged=%v", e, e.staged())
		}
	}
	if head, _, err := parseStatusV2([]byte("# branch.oid (initial)\x00")); err != nil || head != "" {
		t.Fatalf("unborn: %q %v", head, err)
	}
	for _, bad := range []string{"1 .M\x00", "# branch.oid zz\x00", "x y\x00", "?\x00", "2 R. N... 100644 100644 100644 " + oid + " " + oid + " R100 new"} {
		if _, _, err := parseStatusV2([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// TestCleanBinding: a clean checkout binds head, tree and the merge-base
// with the base ref, exactly; a base ref that does not resolve leaves the
// merge-base out as an omission (partial).
func TestCleanBinding(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t, map[string]string{"a.txt": "one\n"})
	first := git(t, dir, "rev-parse", "HEAD")
	git(t, dir, "branch", "base")
	write(t, dir, "a.txt", "two\n")
	git(t, dir, "commit", "-q", "-am", "two")
	head := git(t, dir, "rev-parse", "HEAD")
	tree := git(t, dir, "rev-parse", "HEAD^{tree}")

	for _, tc := range []struct {
		name, base, mergeBase string
		omissions             []string
	}{
		{"no base ref", "", "", nil},
		{"base branch", "base", first, nil},
		{"base is head", "main", head, nil},
		{"unresolved", "origin/nope", "", []string{OmissionMergeBase}},
		{"option-like", "--all", "", []string{OmissionMergeBase}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache := filepath.Join(t.TempDir(), "trees")
			for range 2 { // the second answers from the caches
				sb, err := Capture(ctx, dir, Options{BaseRef: tc.base, TreeCache: cache})
				if err != nil {
					t.Fatal(err)
				}
				if sb.Head != head || sb.Tree != tree || sb.MergeBase != tc.mergeBase || sb.Dirty || sb.ManifestDigest != "" ||
					!slices.Equal(sb.Omissions, tc.omissions) || sb.Partial != (len(tc.omissions) > 0) || sb.Transformed || sb.Stopped != "" {
					t.Fatalf("%+v", sb)
				}
			}
			if tc.mergeBase != "" {
				if b, _ := os.ReadFile(cache + "-merge-base"); !strings.Contains(string(b), " "+tc.mergeBase) {
					t.Fatalf("merge-base cache %q", b)
				}
			}
		})
	}
	if _, err := ResolveBaseRef(ctx, dir, "base"); err != nil {
		t.Fatal(err)
	}
	if _, err := ResolveBaseRef(ctx, dir, "origin/nope"); err == nil || !strings.Contains(err.Error(), `"origin/nope"`) {
		t.Fatalf("an unresolved base ref: %v", err)
	}
	// A malformed cache is ignored whole.
	cache := filepath.Join(t.TempDir(), "trees")
	os.WriteFile(cache, []byte(head+" "+strings.Repeat("f", 40)+"\ngarbage\n"), 0o600)
	if sb, _ := Capture(ctx, dir, Options{TreeCache: cache}); sb.Tree != tree {
		t.Fatalf("a malformed cache was believed: %+v", sb)
	}
	if sb, _ := Capture(ctx, dir, Options{NoTree: true, BaseRef: "base"}); sb.Tree != "" || sb.MergeBase != "" || sb.Head != head || sb.Partial {
		t.Fatalf("drift capture %+v", sb)
	}
	if _, err := CaptureSource(ctx, t.TempDir()); err == nil {
		t.Fatal("a directory outside Git bound a source")
	}
}

// TestDirtyBinding: a dirty checkout's tracked and non-ignored untracked
// bytes and a manifest are retained in the spool; the binding names only
// the manifest identity; ignored files stay outside; staged index state is
// an omission; drift compares the manifests.
func TestDirtyBinding(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t, map[string]string{"a.txt": "one\n", "gone.txt": "x\n", "old.txt": "renamed\n", "run.sh": "echo\n", ".gitignore": "*.log\n"})
	write(t, dir, "a.txt", "two\n")
	write(t, dir, "new dir/u.txt", "untracked\n")
	write(t, dir, "x.log", "ignored noise")
	os.Remove(filepath.Join(dir, "gone.txt"))
	os.Chmod(filepath.Join(dir, "run.sh"), 0o755)
	os.Symlink("/etc/passwd", filepath.Join(dir, "link"))
	sp, ss := newStore(t, spool.Limits{})

	sb, err := Capture(ctx, dir, Options{Store: ss})
	if err != nil {
		t.Fatal(err)
	}
	if !sb.Dirty || sb.Partial || !sb.Retained || sb.ManifestDigest == "" || sb.ManifestBytes == 0 || len(sb.Omissions) != 0 || sb.Stopped != "" {
		t.Fatalf("dirty binding %+v", sb)
	}
	m, err := ReadManifest(sp, sb)
	if err != nil {
		t.Fatal(err)
	}
	if m.Scope != "delta" || len(m.Entries) != 5 {
		t.Fatalf("manifest %+v", m)
	}
	for _, w := range []struct{ path, kind, content, target string }{
		{"a.txt", "file", "two\n", ""}, {"new dir/u.txt", "file", "untracked\n", ""}, {"run.sh", "file", "echo\n", ""},
		{"gone.txt", "deleted", "", ""}, {"link", "symlink", "", "/etc/passwd"},
	} {
		e := entry(t, m, w.path)
		if e == nil || e.Kind != w.kind || e.Target != w.target {
			t.Fatalf("%s: %+v", w.path, e)
		}
		if w.kind == "file" {
			b, err := sp.ReadBlob(event.ArtifactRef{Digest: "sha256:" + e.SHA256, Bytes: e.Size})
			if err != nil || string(b) != w.content {
				t.Fatalf("%s: retained %q, %v", w.path, b, err)
			}
		}
	}
	if !entry(t, m, "run.sh").Executable || entry(t, m, "a.txt").Executable {
		t.Fatal("executable bits")
	}
	if entry(t, m, "x.log") != nil {
		t.Fatal("an ignored file is in the manifest")
	}
	// The manifest identity is what the spool retains and nothing else.
	mb, _ := sp.ReadBlob(event.ArtifactRef{Digest: "sha256:" + sb.ManifestDigest, Bytes: sb.ManifestBytes})
	if sum := sha256.Sum256(mb); hex.EncodeToString(sum[:]) != sb.ManifestDigest || bytes.Contains(mb, []byte("two")) {
		t.Fatalf("manifest %s", mb)
	}

	// Without a store: the same manifest identity, bytes_not_retained.
	nb, err := Capture(ctx, dir, Options{})
	if err != nil || nb.ManifestDigest != sb.ManifestDigest || nb.Retained || !nb.Partial || !slices.Equal(nb.Omissions, []string{OmissionNotRetained}) {
		t.Fatalf("digest-only capture %+v, %v", nb, err)
	}
	if Drift(sb, nb) != "none_observed" {
		t.Fatal("retention changed the drift")
	}
	write(t, dir, "a.txt", "three\n")
	d2, _ := Capture(ctx, dir, Options{NoTree: true})
	if Drift(sb, d2) != "changed" || Drift(nil, d2) != "unknown" || Drift(d2, &event.SourceBinding{Stopped: StopPathBound}) != "unknown" {
		t.Fatalf("content change not seen: %+v %+v", sb, d2)
	}

	// A staged change and a staged rename: index state is an omission,
	// and the rename's original path is recorded deleted.
	git(t, dir, "mv", "old.txt", "renamed.txt")
	sb, err = Capture(ctx, dir, Options{Store: ss})
	if err != nil || !sb.Partial || !slices.Equal(sb.Omissions, []string{OmissionIndex}) || !sb.Retained {
		t.Fatalf("staged: %+v, %v", sb, err)
	}
	m, _ = ReadManifest(sp, sb)
	if e := entry(t, m, "old.txt"); e == nil || e.Kind != "deleted" {
		t.Fatalf("rename source %+v", e)
	}
	if e := entry(t, m, "renamed.txt"); e == nil || e.Kind != "file" || !slices.Equal(m.Omissions, []string{OmissionIndex}) {
		t.Fatalf("rename target %+v, %v", e, m.Omissions)
	}
	// The capture never touched the index or refs.
	if st := git(t, dir, "status", "--porcelain"); !strings.Contains(st, "R  old.txt -> renamed.txt") {
		t.Fatalf("status after capture: %s", st)
	}
}

// TestTransforms: a clean checkout whose attributes or settings transform
// working bytes is captured from the worktree (every tracked path), never
// presented as the tree alone; an attribute that transforms nothing is not
// a transform.
func TestTransforms(t *testing.T) {
	ctx := context.Background()
	utf16 := "\xff\xfeh\x00i\x00\n\x00" // "hi\n" in UTF-16LE with BOM
	cases := []struct {
		name   string
		attrs  string
		config [][2]string
		kinds  []string
		// file is checked out with these working bytes.
		file, want string
	}{
		{"eol=crlf", "*.txt text eol=crlf\n", nil, []string{TransformEOL}, "f.txt", "a\r\nb\r\n"},
		{"autocrlf", "", [][2]string{{"core.autocrlf", "true"}}, []string{TransformCRLF}, "f.txt", "a\r\nb\r\n"},
		{"filter", "*.txt filter=rot\n", [][2]string{{"filter.rot.clean", "tr a-z n-za-m"}, {"filter.rot.smudge", "tr a-z n-za-m"}}, []string{TransformFilter}, "f.txt", "a\nb\n"},
		{"ident", "*.txt ident\n", nil, []string{TransformIdent}, "id.txt", ""},
		{"working-tree-encoding", "*.u16 working-tree-encoding=UTF-16LE-BOM\n", nil, []string{TransformEncoding}, "w.u16", utf16},
		{"eol=lf is none", "*.txt text eol=lf\n", nil, nil, "", ""},
		{"unconfigured filter is none", "*.txt filter=nothere\n", nil, nil, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			git(t, dir, "init", "-q", "-b", "main")
			for _, kv := range tc.config {
				git(t, dir, "config", kv[0], kv[1])
			}
			if tc.attrs != "" {
				write(t, dir, ".gitattributes", tc.attrs)
			}
			write(t, dir, "f.txt", "a\nb\n")
			write(t, dir, "id.txt", "$Id$\n")
			if tc.name == "working-tree-encoding" {
				write(t, dir, "w.u16", utf16)
			}
			git(t, dir, "add", "-A")
			git(t, dir, "commit", "-q", "-m", "one")
			// Materialize through the transforms.
			for _, f := range []string{"f.txt", "id.txt", "w.u16"} {
				os.Remove(filepath.Join(dir, f))
			}
			git(t, dir, "checkout", "--", ".")
			if st := git(t, dir, "status", "--porcelain"); st != "" {
				t.Fatalf("not clean: %s", st)
			}
			sp, ss := newStore(t, spool.Limits{})
			sb, err := Capture(ctx, dir, Options{Store: ss})
			if err != nil {
				t.Fatal(err)
			}
			if tc.kinds == nil {
				if sb.Transformed || sb.ManifestDigest != "" || sb.Partial || sb.Dirty {
					t.Fatalf("no transform, but %+v", sb)
				}
				return
			}
			if !sb.Transformed || sb.Dirty || sb.ManifestDigest == "" || !sb.Retained || sb.Partial {
				t.Fatalf("transformed clean checkout: %+v", sb)
			}
			m, err := ReadManifest(sp, sb)
			if err != nil {
				t.Fatal(err)
			}
			if m.Scope != "worktree" || !slices.Equal(m.Transforms, tc.kinds) || entry(t, m, ".gitattributes") == nil && tc.attrs != "" {
				t.Fatalf("manifest %+v", m)
			}
			e := entry(t, m, tc.file)
			if e == nil || e.Kind != "file" {
				t.Fatalf("%s: %+v", tc.file, e)
			}
			got, err := sp.ReadBlob(event.ArtifactRef{Digest: "sha256:" + e.SHA256, Bytes: e.Size})
			if err != nil {
				t.Fatal(err)
			}
			onDisk, _ := os.ReadFile(filepath.Join(dir, tc.file))
			if !bytes.Equal(got, onDisk) || tc.want != "" && string(got) != tc.want {
				t.Fatalf("%s retained %q, worktree %q, want %q", tc.file, got, onDisk, tc.want)
			}
			if blob := git(t, dir, "cat-file", "-p", "HEAD:"+tc.file); blob+"\n" == string(got) {
				t.Fatalf("%s: the worktree bytes are the blob's (%q): no transform to see", tc.file, blob)
			}
			if tc.name == "ident" && !strings.HasPrefix(string(got), "$Id: ") {
				t.Fatalf("ident not expanded: %q", got)
			}
		})
	}
}

// TestOmissions: submodule contents, unsupported file types and nested
// repositories are explicit omissions (partial, the rest retained).
func TestOmissions(t *testing.T) {
	ctx := context.Background()
	sub := newRepo(t, map[string]string{"s.txt": "sub\n"})
	dir := newRepo(t, map[string]string{"a.txt": "one\n", "pipe": "was a file\n"})
	git(t, dir, "submodule", "add", "-q", sub, "sub")
	git(t, dir, "commit", "-q", "-m", "sub")

	t.Run("submodule", func(t *testing.T) {
		write(t, filepath.Join(dir, "sub"), "s.txt", "changed inside\n")
		defer git(t, filepath.Join(dir, "sub"), "checkout", "--", ".")
		write(t, dir, "a.txt", "two\n")
		defer git(t, dir, "checkout", "--", "a.txt")
		sp, ss := newStore(t, spool.Limits{})
		sb, err := Capture(ctx, dir, Options{Store: ss})
		if err != nil || !sb.Partial || !slices.Equal(sb.Omissions, []string{OmissionSubmodule}) || !sb.Retained {
			t.Fatalf("%+v, %v", sb, err)
		}
		m, _ := ReadManifest(sp, sb)
		if e := entry(t, m, "sub"); e == nil || e.Kind != "omitted" || e.Reason != OmissionSubmodule {
			t.Fatalf("%+v", e)
		}
		if e := entry(t, m, "a.txt"); e == nil || e.Kind != "file" {
			t.Fatalf("%+v", e)
		}
	})
	t.Run("fifo and nested repository", func(t *testing.T) {
		os.Remove(filepath.Join(dir, "pipe"))
		if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644); err != nil {
			t.Skip("mkfifo:", err)
		}
		nested := filepath.Join(dir, "nested")
		os.Mkdir(nested, 0o755)
		git(t, nested, "init", "-q")
		write(t, nested, "n.txt", "n\n")
		git(t, nested, "add", "n.txt")
		git(t, nested, "commit", "-q", "-m", "n")
		sp, ss := newStore(t, spool.Limits{})
		sb, err := Capture(ctx, dir, Options{Store: ss})
		if err != nil || !sb.Partial || !slices.Equal(sb.Omissions, []string{OmissionUnsupported}) {
			t.Fatalf("%+v, %v", sb, err)
		}
		m, _ := ReadManifest(sp, sb)
		for _, p := range []string{"pipe", "nested/"} {
			if e := entry(t, m, p); e == nil || e.Kind != "omitted" || e.Reason != OmissionUnsupported {
				t.Fatalf("%s: %+v in %+v", p, e, m.Entries)
			}
		}
	})
}

// TestStops: unsafe and non-UTF-8 paths, symlink components, bounds and a
// refusing spool stop the capture: the binding names the reason, carries
// no manifest identity and is partial.
func TestStops(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string)
		opts  func(ss *spool.Tx) Options
		lim   spool.Limits
		want  string
	}{
		{"non-UTF-8 name", func(t *testing.T, dir string) { write(t, dir, "bad\xffname.txt", "x") }, nil, spool.Limits{}, StopNotUTF8},
		{"symlink component", func(t *testing.T, dir string) {
			// A tracked directory replaced by a symlink to a look-alike.
			other := t.TempDir()
			write(t, other, "f.txt", "elsewhere\n")
			os.RemoveAll(filepath.Join(dir, "d"))
			os.Symlink(other, filepath.Join(dir, "d"))
		}, nil, spool.Limits{}, StopSymlinkComponent},
		{"file bound", func(t *testing.T, dir string) { write(t, dir, "big.txt", strings.Repeat("x", 100)) },
			func(ss *spool.Tx) Options { return Options{Store: ss, Limits: Limits{FileBytes: 99}} }, spool.Limits{}, StopFileBound},
		{"total bound", func(t *testing.T, dir string) {
			write(t, dir, "u1.txt", strings.Repeat("x", 60))
			write(t, dir, "u2.txt", strings.Repeat("y", 60))
		}, func(ss *spool.Tx) Options { return Options{Store: ss, Limits: Limits{TotalBytes: 100}} }, spool.Limits{}, StopTotalBound},
		{"path bound", func(t *testing.T, dir string) {
			for i := range 4 {
				write(t, dir, "u"+strconv.Itoa(i), "x")
			}
		}, func(ss *spool.Tx) Options { return Options{Store: ss, Limits: Limits{Paths: 3}} }, spool.Limits{}, StopPathBound},
		{"spool artifact limit", func(t *testing.T, dir string) { write(t, dir, "big.txt", strings.Repeat("x", 5000)) },
			nil, spool.Limits{ArtifactBytes: 4096}, StopSpoolRefused},
		{"spool full", func(t *testing.T, dir string) { write(t, dir, "big.txt", strings.Repeat("x", 60<<10)) },
			nil, spool.Limits{Records: 64, Bytes: 64 << 10, ArtifactBytes: 63 << 10}, StopSpoolRefused},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := newRepo(t, map[string]string{"a.txt": "one\n", "d/f.txt": "in d\n"})
			tc.setup(t, dir)
			_, ss := newStore(t, tc.lim)
			o := Options{Store: ss}
			if tc.opts != nil {
				o = tc.opts(ss)
			}
			var logged error
			o.StopLog = func(err error) { logged = err }
			sb, err := Capture(ctx, dir, o)
			if err != nil {
				t.Fatal(err)
			}
			if sb.Stopped != tc.want || !sb.Partial || sb.ManifestDigest != "" || sb.Retained || logged == nil || len(sb.Head) != 40 {
				t.Fatalf("%+v (logged %v)", sb, logged)
			}
			t.Log(logged)
		})
	}
}

// TestRootHandle: reads walk from the retained root handle; a root whose
// pathname was replaced is detected; a symlink component is refused even
// when it points inside the root.
func TestRootHandle(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	write(t, root, "d/f.txt", "inside\n")
	os.Symlink("d", filepath.Join(root, "alias"))
	rd, err := openRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.close()
	if obj, err := rd.read("d/f.txt", []string{"d", "f.txt"}, 1<<20); err != nil || string(obj.data) != "inside\n" {
		t.Fatalf("%+v %v", obj, err)
	}
	if _, err := rd.read("alias/f.txt", []string{"alias", "f.txt"}, 1<<20); err == nil || !strings.Contains(err.Error(), StopSymlinkComponent) {
		t.Fatalf("a symlink component was followed: %v", err)
	}
	if obj, err := rd.read("alias", []string{"alias"}, 1<<20); err != nil || obj.kind != "symlink" || obj.target != "d" {
		t.Fatalf("a final symlink: %+v %v", obj, err)
	}
	for _, p := range []string{"../x", "a//b", "./a", ".git/config", "sub/.GIT/x", "/abs"} {
		if _, err := checkPath(p); err == nil || !strings.Contains(err.Error(), StopUnsafePath) {
			t.Errorf("%q: %v", p, err)
		}
	}
	if !rd.same() {
		t.Fatal("root identity")
	}
	// Replace the root: the handle still reads the original directory,
	// and the identity check notices.
	os.Rename(root, filepath.Join(base, "moved"))
	write(t, root, "d/f.txt", "impostor\n")
	if rd.same() {
		t.Fatal("a replaced root kept its identity")
	}
	if obj, _ := rd.read("d/f.txt", []string{"d", "f.txt"}, 1<<20); string(obj.data) != "inside\n" {
		t.Fatalf("read through a replaced root: %q", obj.data)
	}
}

// BenchmarkCaptureSource binds the source of a clean repository of 1000
// small files (concurrent git processes), next to `git status` alone.
func BenchmarkCaptureSource(b *testing.B) {
	files := map[string]string{}
	for i := range 1000 {
		files["pkg"+strconv.Itoa(i%50)+"/f"+strconv.Itoa(i)+".go"] = "package p\n"
	}
	dir := newRepo(b, files)
	git(b, dir, "branch", "base")
	ctx := context.Background()
	b.Run("CaptureSource", func(b *testing.B) {
		for b.Loop() {
			if sb, err := CaptureSource(ctx, dir); err != nil || sb.Dirty {
				b.Fatal(sb, err)
			}
		}
	})
	b.Run("Capture-cached-base-ref", func(b *testing.B) {
		cache := filepath.Join(b.TempDir(), "trees")
		for b.Loop() {
			if sb, err := Capture(ctx, dir, Options{TreeCache: cache, BaseRef: "base"}); err != nil || sb.Dirty || sb.Tree == "" || sb.MergeBase == "" {
				b.Fatal(sb, err)
			}
		}
	})
	b.Run("git-status-v2-branch", func(b *testing.B) {
		for b.Loop() {
			if _, err := RunGit(ctx, dir, maxGitOutput, "status", "--porcelain=v2", "--branch", "-z", "--untracked-files=all"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestNestedAndUntrackedAttributes: a .gitattributes below the root, or one
// not yet tracked, is an attributes source like the root's.
func TestNestedAndUntrackedAttributes(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t, map[string]string{"sub/.gitattributes": "*.txt ident\n", "sub/a.txt": "$Id$\n", "b.txt": "plain\n"})
	sb, err := Capture(ctx, dir, Options{})
	if err != nil || !sb.Transformed || sb.Dirty {
		t.Fatalf("nested attributes: %+v, %v", sb, err)
	}
	dir = newRepo(t, map[string]string{"b.txt": "plain\n"})
	write(t, dir, ".gitattributes", "*.txt eol=crlf\n")
	sb, err = Capture(ctx, dir, Options{})
	if err != nil || !sb.Transformed || !sb.Dirty || sb.Stopped != "" {
		t.Fatalf("untracked attributes: %+v, %v", sb, err)
	}
}
