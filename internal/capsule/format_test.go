package capsule

import (
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// A capsule written by the version-1 format (full before/after manifests,
// made by agentdiff before manifests became a base plus changes) still
// verifies and rolls back.
func TestVersion1CapsuleReadable(t *testing.T) {
	const id = "20261201T144912Z-5447217e"
	root := t.TempDir()
	dst := filepath.Join(root, StateDir, "runs", id)
	src := filepath.Join("testdata", "v1", id)
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o700)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	// The post-run state the capsule recorded.
	write(t, filepath.Join(root, "a.txt"), "changed\n")
	write(t, filepath.Join(root, "c.txt"), "new\n")
	if err := os.MkdirAll(filepath.Join(root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(root, "sub"), 0o755)
	dir, err := CapsuleDir(root, id)
	if err != nil {
		t.Fatal(err)
	}
	verifyOK(t, dir)
	att, _, err := Rollback(context.Background(), root, id, RollbackOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if att.Status != RollbackComplete {
		t.Fatalf("rollback of a version-1 capsule: %+v", att)
	}
	if read(t, filepath.Join(root, "a.txt")) != "alpha\n" || read(t, filepath.Join(root, "sub/b.txt")) != "beta\n" {
		t.Fatal("before-state not restored")
	}
	if _, err := os.Lstat(filepath.Join(root, "c.txt")); err == nil {
		t.Fatal("created file not removed")
	}
	verifyOK(t, dir)
}

// capsuleBytes sums the sizes of a capsule's files that are not hard links
// to shared content (the base manifest, backups).
func capsuleBytes(t *testing.T, dir string) (own, linked int64) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, _ := d.Info()
		if d.Name() == FileBase || strings.Contains(p, "/"+DirBackups+"/") {
			linked += fi.Size()
		} else {
			own += fi.Size()
		}
		return nil
	})
	return own, linked
}

// A one-file run on a larger tree writes kilobytes: the manifests are
// changes to a base manifest shared (hard-linked) between runs.
func TestOneFileRunWritesKilobytes(t *testing.T) {
	root := t.TempDir()
	for i := range 1000 {
		write(t, filepath.Join(root, fmt.Sprintf("d%02d/f%04d.txt", i/100, i)), fmt.Sprintf("file %d\n", i))
	}
	time.Sleep(racyWindow) // files older than the racy window, as on a tree not written just now
	keyDir := t.TempDir()
	run := func() (*Result, string) {
		t.Helper()
		res, dir, err := Run(context.Background(), RunOptions{Root: root, Policy: allowAll(), Argv: []string{"sh", "-c", "echo x >> d00/f0000.txt"}, Env: os.Environ(), KeyDir: keyDir})
		if err != nil {
			t.Fatal(err)
		}
		return res, dir
	}
	_, first := run()
	_, second := run()
	res, third := run()
	if len(res.Changes) != 1 || res.Changes[0].Path != "d00/f0000.txt" || !res.Changes[0].Recovery.Available {
		t.Fatalf("changes %+v", res.Changes)
	}
	own1, linked1 := capsuleBytes(t, first)
	own3, linked3 := capsuleBytes(t, third)
	if linked1 < 100_000 || own3 > 16<<10 || linked3 < linked1 {
		t.Fatalf("first capsule %d own + %d linked bytes, third %d own + %d linked", own1, linked1, own3, linked3)
	}
	var a, b fs.FileInfo
	a, _ = os.Stat(filepath.Join(first, FileBase))
	b, _ = os.Stat(filepath.Join(third, FileBase))
	if !os.SameFile(a, b) {
		t.Fatal("the base manifest is not shared between runs")
	}
	for _, d := range []string{first, second, third} {
		verifyOK(t, d)
	}
	if st, err := os.Stat(filepath.Join(root, StateDir, statCacheName)); err != nil || st.Size() > 64<<10 {
		t.Fatalf("stat cache %v %v", st.Size(), err)
	}
	// Each capsule still rolls back on its own, newest first.
	for _, d := range []string{third, second, first} {
		att, _, err := Rollback(context.Background(), root, filepath.Base(d), RollbackOptions{})
		if err != nil || att.Status != RollbackComplete {
			t.Fatalf("rollback %s: %+v %v", d, att, err)
		}
	}
	if read(t, filepath.Join(root, "d00/f0000.txt")) != "file 0\n" {
		t.Fatal("not rolled back")
	}
}

// fullManifest lists and hashes root from scratch (no base, no cache).
func fullManifest(t *testing.T, root string) []ManifestEntry {
	t.Helper()
	store, err := openStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer store.close()
	bs, err := newLister(root, store).takeBefore(context.Background(), nil, nil, BackupBounds{}, false)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]ManifestEntry, len(bs.entries))
	for i, e := range bs.entries {
		out[i] = *e
	}
	return out
}

func sameManifest(a, b []ManifestEntry) string {
	if len(a) != len(b) {
		return fmt.Sprintf("%d entries, want %d", len(a), len(b))
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Path != y.Path || x.Type != y.Type || x.Mode != y.Mode || x.SHA256 != y.SHA256 || x.Target != y.Target || (x.Type == "file" && x.Size != y.Size) {
			return fmt.Sprintf("entry %d: %+v, want %+v", i, x, y)
		}
	}
	return ""
}

// Property: over random edits, with the stat cache and the base carried from
// run to run, the before and after manifests a capsule resolves to are what
// a fresh full listing finds, and its changes are their difference.
func TestDeltaManifestsMatchFullListing(t *testing.T) {
	root := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	var paths []string
	for i := range 60 {
		p := fmt.Sprintf("d%d/e%d/f%d", i%4, i%3, i)
		write(t, filepath.Join(root, p), fmt.Sprint(i))
		paths = append(paths, p)
	}
	old := time.Now().Add(-time.Hour)
	for _, p := range paths {
		os.Chtimes(filepath.Join(root, p), old, old)
	}
	keyDir := t.TempDir()
	edit := func(n int) string {
		var sb strings.Builder
		for range n {
			p := paths[rng.IntN(len(paths))]
			switch rng.IntN(6) {
			case 0:
				fmt.Fprintf(&sb, "rm -f %s; ", p)
			case 1:
				fmt.Fprintf(&sb, "mkdir -p %s.d && echo n > %s.d/new; ", p, p)
			case 2:
				fmt.Fprintf(&sb, "chmod 600 %s 2>/dev/null; ", p)
			case 3:
				fmt.Fprintf(&sb, "ln -sf target %s.l; ", p)
			case 4:
				fmt.Fprintf(&sb, "touch %s 2>/dev/null; ", p)
			default:
				fmt.Fprintf(&sb, "echo %d >> %s; ", rng.IntN(1000), p)
			}
		}
		return sb.String() + "true"
	}
	for round := range 8 {
		// Edits between runs (seen by the before manifest) and during them.
		if out, err := runShell(root, edit(3)); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		want := fullManifest(t, root)
		res, dir, err := Run(context.Background(), RunOptions{Root: root, Policy: allowAll(), Argv: []string{"sh", "-c", edit(4)}, Env: os.Environ(), KeyDir: keyDir})
		if err != nil {
			t.Fatal(err)
		}
		before, after, _, err := checkCapsule(dir)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if d := sameManifest(before.Entries, want); d != "" {
			t.Fatalf("round %d before: %s", round, d)
		}
		if d := sameManifest(after.Entries, fullManifest(t, root)); d != "" {
			t.Fatalf("round %d after: %s", round, d)
		}
		got := diff(before, after)
		if len(got) != len(res.Changes) || !slices.EqualFunc(got, res.Changes, func(a, b Change) bool { return a.Path == b.Path && a.Change == b.Change }) {
			t.Fatalf("round %d: result %+v, manifests %+v", round, res.Changes, got)
		}
		verifyOK(t, dir)
		if round == 3 {
			time.Sleep(racyWindow) // let the cache start vouching for hashes
		}
	}
}

func runShell(dir, script string) ([]byte, error) {
	return execCommand(dir, "sh", "-c", script)
}

func execCommand(dir string, argv ...string) ([]byte, error) {
	c := exec.Command(argv[0], argv[1:]...)
	c.Dir = dir
	return c.CombinedOutput()
}

// runtimeOf reads a capsule's runtime.json.
func runtimeOf(t *testing.T, dir string) Runtime {
	t.Helper()
	var rt Runtime
	if err := readJSON(dir, FileRuntime, &rt); err != nil {
		t.Fatal(err)
	}
	return rt
}

// The watched after manifest: what it re-lists, and each case where the
// watch cannot vouch and the whole tree is listed instead; either way the
// manifests are what a full listing finds.
func TestWatchedAfterManifest(t *testing.T) {
	outside := t.TempDir()
	cases := []struct {
		name, setup, script, listing string
	}{
		{"one file", "", "echo x >> d1/e1/f", "watched: 3 of "},
		{"nothing", "", "true", "watched: 1 of "},
		{"new tree", "", "mkdir -p n/m && echo y > n/m/g", "watched: 1 of "},
		{"new dirs in a watched dir, filled", "", "mkdir -p d1/e1/new/deep && echo y > d1/e1/new/deep/g && echo z > d1/e1/new/h", "watched: 3 of "},
		{"dir moved inside the tree", "", "mv d1/e2 d2/moved && echo q >> d2/moved/f", "watched: 4 of "},
		{"dir replaced by a symlink", "", "rm -r d2/e2 && ln -s ../d1 d2/e2", "watched: 3 of "},
		{"chmod dir", "", "chmod 700 d2/e2", "watched: 3 of "},
		{"dir replaced", "", "mv d1/e1 moved && mkdir d1/e1 && echo z > d1/e1/other", "full: a re-listed directory was replaced"},
		{"hard link outside", "ln d2/e1/f " + outside + "/link", "echo w >> " + outside + "/link", "watched: 3 of "},
		{"many events", "", `i=0; while [ $i -lt 9000 ]; do echo >> d1/e1/f; echo >> d2/e2/f; i=$((i+1)); done`, "full: inotify lost events: queue overflow"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for _, p := range []string{"d1/e1/f", "d1/e2/f", "d2/e1/f", "d2/e2/f", "top"} {
				write(t, filepath.Join(root, p), p)
			}
			if tc.setup != "" {
				if out, err := runShell(root, tc.setup); err != nil {
					t.Fatalf("%v %s", err, out)
				}
			}
			if tc.name == "many events" {
				if b, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events"); err != nil || strings.TrimSpace(string(b)) != "16384" {
					t.Skip("max_queued_events is not the default 16384")
				}
			}
			res, dir, err := Run(context.Background(), RunOptions{Root: root, Policy: allowAll(), Argv: []string{"sh", "-c", tc.script}, Env: os.Environ(), KeyDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			rt := runtimeOf(t, dir)
			if !strings.HasPrefix(rt.AfterListing, tc.listing) {
				t.Fatalf("after listing %q, want %q", rt.AfterListing, tc.listing)
			}
			_, after, _, err := checkCapsule(dir)
			if err != nil {
				t.Fatal(err)
			}
			if d := sameManifest(after.Entries, fullManifest(t, root)); d != "" {
				t.Fatalf("after manifest: %s (changes %+v)", d, res.Changes)
			}
			if tc.name == "hard link outside" && (len(res.Changes) != 1 || res.Changes[0].Path != "d2/e1/f") {
				t.Fatalf("write through an outside link: changes %+v", res.Changes)
			}
		})
	}
	// --full-listing turns the watch off.
	root := project(t)
	_, dir, err := Run(context.Background(), RunOptions{Root: root, Policy: allowAll(), Argv: []string{"true"}, Env: os.Environ(), FullListing: true})
	if err != nil {
		t.Fatal(err)
	}
	if rt := runtimeOf(t, dir); rt.AfterListing != "full: --full-listing" {
		t.Fatalf("after listing %q", rt.AfterListing)
	}
}
