package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRewindSafetyAndSnapshotFlags drives the safe rewind and the snapshot
// flags through the command line: exit statuses, the listed paths, the
// JSON forms, and the refusal of a snapshot inside a capture root.
func TestRewindSafetyAndSnapshotFlags(t *testing.T) {
	base := t.TempDir()
	home := filepath.Join(base, "home")
	repo := filepath.Join(base, "repo")
	os.MkdirAll(repo, 0o755)
	if out, err := exec.Command("git", "-C", repo, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	env := map[string]string{"HOME": home}
	at := func(rel string) string { return filepath.Join(repo, rel) }
	write := func(rel, s string) {
		os.MkdirAll(filepath.Dir(at(rel)), 0o755)
		if err := os.WriteFile(at(rel), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(rel string) string {
		b, err := os.ReadFile(at(rel))
		if err != nil {
			return "<missing>"
		}
		return string(b)
	}
	write("a.txt", "a0")
	if r := runMain(t, env, "", "changelog", "capture", "--root", repo); r.code != 0 {
		t.Fatalf("capture: %d %s", r.code, r.stderr)
	}
	write("b.txt", "b1")
	if r := runMain(t, env, "", "changelog", "capture", "--root", repo); r.code != 0 {
		t.Fatalf("capture: %d %s", r.code, r.stderr)
	}
	write("a.txt", "the user's edit")
	write("mine.txt", "the user's file")

	type pathJSON struct {
		Root   string `json:"root"`
		Path   string `json:"path"`
		Abs    string `json:"abs_path"`
		Change string `json:"change"`
		Since  string `json:"since"`
	}
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout []string // substrings
		stderr []string
		check  func(t *testing.T, stdout string)
	}{
		{name: "refused", args: []string{"rewind", "--root", repo, "--to", "0"}, code: ExitChangedSinceCapture,
			stderr: []string{"refused: 2 paths", "modified since, would be modified  " + at("a.txt"), "created  since, would be deleted   " + at("mine.txt"), "--discard-uncaptured-edits"}},
		{name: "refused json", args: []string{"changelog", "apply", "--root", repo, "--to", "0", "--format", "json"}, code: ExitChangedSinceCapture,
			check: func(t *testing.T, stdout string) {
				var out struct {
					Refused string     `json:"refused"`
					Paths   []pathJSON `json:"paths"`
				}
				if err := json.Unmarshal([]byte(stdout), &out); err != nil {
					t.Fatal(err)
				}
				if out.Refused != "changed_since_capture" || len(out.Paths) != 2 || out.Paths[0].Abs != at("a.txt") || out.Paths[1].Since != "created" {
					t.Errorf("refusal JSON %+v", out)
				}
			}},
		{name: "dry run", args: []string{"rewind", "--root", repo, "--to", "0", "--dry-run"},
			stdout: []string{"would create 0, modify 1 and delete 2 paths", "deleted  file    " + at("b.txt"), "would be refused (exit status 6)"}},
		{name: "dry run json", args: []string{"rewind", "--root", repo, "--to", "0", "--dry-run", "--format", "json"},
			check: func(t *testing.T, stdout string) {
				var out struct {
					DryRun   bool       `json:"dry_run"`
					Created  []pathJSON `json:"created"`
					Modified []pathJSON `json:"modified"`
					Deleted  []pathJSON `json:"deleted"`
					Refuse   bool       `json:"would_refuse"`
				}
				if err := json.Unmarshal([]byte(stdout), &out); err != nil {
					t.Fatal(err)
				}
				if !out.DryRun || len(out.Created) != 0 || len(out.Modified) != 1 || len(out.Deleted) != 2 || !out.Refuse || out.Deleted[1].Path != "mine.txt" {
					t.Errorf("dry run JSON %+v", out)
				}
			}},
		{name: "dry run cannot resume", args: []string{"rewind", "--root", repo, "--to", "0", "--dry-run", "--resume-conversation"}, code: ExitUsage},
		{name: "help names the exit status", args: []string{"rewind", "--help"}, stdout: []string{"exit status 6", "--dry-run", "--force", "--discard-uncaptured-edits", "--discard-outside-edits"}},
		{name: "snapshot inside the checkout", args: []string{"snapshot", "save", "--root", repo, "--file", at("snap.tgz")}, code: ExitUsage,
			stderr: []string{"lies inside the capture root checkout"}},
		{name: "snapshot inside the checkout, older flag", args: []string{"snapshot", "save", "--root", repo, "--out", at("sub/snap.tgz")}, code: ExitUsage},
		{name: "snapshot with two files", args: []string{"snapshot", "save", "--root", repo, "--file", filepath.Join(base, "x.tgz"), "--out", filepath.Join(base, "y.tgz")}, code: ExitUsage},
		{name: "snapshot without a file", args: []string{"snapshot", "load", "--root", repo}, code: ExitUsage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runMain(t, env, "", tc.args...)
			if r.code != tc.code {
				t.Fatalf("%v: exit %d, want %d\nstdout: %s\nstderr: %s", tc.args, r.code, tc.code, r.stdout, r.stderr)
			}
			for _, s := range tc.stdout {
				if !strings.Contains(r.stdout, s) {
					t.Errorf("stdout lacks %q:\n%s", s, r.stdout)
				}
			}
			for _, s := range tc.stderr {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("stderr lacks %q:\n%s", s, r.stderr)
				}
			}
			if tc.check != nil {
				tc.check(t, r.stdout)
			}
			if read("a.txt") != "the user's edit" || read("mine.txt") != "the user's file" || read("b.txt") != "b1" {
				t.Fatalf("%v changed the checkout", tc.args)
			}
		})
	}
	if _, err := os.Stat(at("snap.tgz")); err == nil {
		t.Errorf("a refused snapshot save left its file")
	}

	// --force (the deprecated alias of --discard-uncaptured-edits)
	// rewinds; the undo restores the user's edit and file.
	r := runMain(t, env, "", "rewind", "--root", repo, "--to", "0", "--force", "--format", "json")
	if r.code != 0 || !strings.Contains(r.stderr, "--discard-uncaptured-edits: 2 paths") || !strings.Contains(r.stderr, "--force is deprecated") {
		t.Fatalf("forced rewind: %d %s %s", r.code, r.stdout, r.stderr)
	}
	var res struct {
		Undo   int        `json:"undo_position"`
		Forced []pathJSON `json:"forced"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || len(res.Forced) != 2 {
		t.Fatalf("forced rewind JSON %s: %v", r.stdout, err)
	}
	if read("a.txt") != "a0" || read("b.txt") != "<missing>" || read("mine.txt") != "<missing>" {
		t.Fatalf("after the forced rewind: a=%q b=%q mine=%q", read("a.txt"), read("b.txt"), read("mine.txt"))
	}
	if r := runMain(t, env, "", "changelog", "apply", "--root", repo, "--to", itoa(res.Undo)); r.code != 0 {
		t.Fatalf("undo: %d %s", r.code, r.stderr)
	}
	if read("a.txt") != "the user's edit" || read("mine.txt") != "the user's file" || read("b.txt") != "b1" {
		t.Fatalf("after the undo: a=%q b=%q mine=%q", read("a.txt"), read("b.txt"), read("mine.txt"))
	}

	// Snapshot save and load with --file and --format json.
	snap := filepath.Join(base, "snap.tgz")
	r = runMain(t, env, "", "snapshot", "save", "--root", repo, "--file", snap, "--format", "json")
	var saved struct {
		File  string `json:"file"`
		Files int    `json:"files"`
		Size  int64  `json:"size"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &saved) != nil || saved.File != snap || saved.Files != 3 || saved.Size == 0 {
		t.Fatalf("snapshot save --format json: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := runMain(t, env, "", "changelog", "capture", "--root", repo); r.code != 0 {
		t.Fatalf("capture: %d %s", r.code, r.stderr)
	}
	os.Remove(at("b.txt"))
	if r := runMain(t, env, "", "changelog", "capture", "--root", repo); r.code != 0 {
		t.Fatalf("capture: %d %s", r.code, r.stderr)
	}
	r = runMain(t, env, "", "snapshot", "load", "--root", repo, "--file", snap, "--dry-run", "--format", "json")
	if r.code != 0 || !strings.Contains(r.stdout, `"dry_run": true`) || !strings.Contains(r.stdout, `"path": "b.txt"`) || read("b.txt") != "<missing>" {
		t.Fatalf("snapshot load --dry-run: %d %s %s", r.code, r.stdout, r.stderr)
	}
	r = runMain(t, env, "", "snapshot", "load", "--root", repo, "--file", snap, "--format", "json")
	var loaded struct {
		Undo int `json:"undo_position"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &loaded) != nil || read("b.txt") != "b1" {
		t.Fatalf("snapshot load: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := runMain(t, env, "", "changelog", "apply", "--root", repo, "--to", itoa(loaded.Undo)); r.code != 0 || read("b.txt") != "<missing>" {
		t.Fatalf("undo of the load: %d %s, b.txt %q", r.code, r.stderr, read("b.txt"))
	}

	// A checkout without a changelog gets one from its first load, which
	// refuses to overwrite anything there (nothing was ever captured); the
	// forced load's undo point restores it.
	fresh := filepath.Join(base, "fresh")
	os.MkdirAll(fresh, 0o755)
	os.WriteFile(filepath.Join(fresh, "a.txt"), []byte("fresh"), 0o644)
	if r := runMain(t, env, "", "snapshot", "load", "--root", fresh, "--file", snap); r.code != ExitChangedSinceCapture {
		t.Fatalf("load into an uncaptured checkout: %d %s", r.code, r.stderr)
	}
	r = runMain(t, env, "", "snapshot", "load", "--root", fresh, "--file", snap, "--force", "--format", "json")
	var first struct {
		Undo int `json:"undo_position"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &first) != nil {
		t.Fatalf("forced load into a fresh checkout: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := runMain(t, env, "", "changelog", "apply", "--root", fresh, "--to", itoa(first.Undo)); r.code != 0 {
		t.Fatalf("undo: %d %s", r.code, r.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(fresh, "a.txt")); string(b) != "fresh" {
		t.Fatalf("undo of the first load: a.txt = %q", b)
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
