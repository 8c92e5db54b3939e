package capsule

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/scan"
)

// An unchanged file above max_file_bytes has nothing to recover, so it is
// no reason to demote a run; a changed one is named, by reason.
func TestUnchangedLargeFileDoesNotDemote(t *testing.T) {
	pol := allowAll()
	pol.Backups.MaxFileBytes, pol.Backups.MaxTotalBytes = 1024, 1<<20
	for _, tc := range []struct {
		name, script string
		status       string
		warn         string
	}{
		{"unchanged large file", "echo y > a.txt", StatusPassed, ""},
		{"changed large file", "echo y > big.bin", StatusReview, "backup_too_large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := project(t)
			write(t, filepath.Join(root, "big.bin"), strings.Repeat("x", 4096))
			out := runIn(t, root, pol, 0, tc.script)
			if out.res.Status != tc.status {
				t.Fatalf("status %s, want %s; warnings %+v", out.res.Status, tc.status, out.res.ObservationWarnings)
			}
			got := slices.ContainsFunc(out.res.ObservationWarnings, func(w Warning) bool {
				return w.Code == "backup_too_large" && strings.HasPrefix(w.Message, "1 changed regular files")
			})
			if got != (tc.warn != "") {
				t.Fatalf("warnings %+v, want %q", out.res.ObservationWarnings, tc.warn)
			}
			verifyOK(t, out.dir)
		})
	}
}

// The backup budget goes to the working files before a repository's .git:
// with a budget smaller than .git's file count, the one file the command
// changes still has verified recovery.
func TestBackupBudgetSkipsGitFirst(t *testing.T) {
	root := project(t)
	for i := 0; i < 40; i++ {
		write(t, filepath.Join(root, ".git", "objects", "pack", "obj"+strings.Repeat("0", 3)+string(rune('a'+i%26))+string(rune('a'+i/26))), "packed object\n")
	}
	pol := allowAll()
	pol.Backups.MaxFiles = 5
	out := runIn(t, root, pol, 0, "echo changed > sub/b.txt")
	i := slices.IndexFunc(out.res.Changes, func(c Change) bool { return c.Path == "sub/b.txt" })
	if i < 0 || !out.res.Changes[i].Recovery.Available || out.res.Changes[i].Recovery.Method != "restore_backup" {
		t.Fatalf("changes %+v", out.res.Changes)
	}
	if out.res.Status != StatusPassed {
		t.Fatalf("status %s, warnings %+v", out.res.Status, out.res.ObservationWarnings)
	}
	if _, err := os.Stat(filepath.Join(out.dir, "backups")); err != nil {
		t.Fatal(err)
	}
}

// planBackups orders the budget: outside .git first, newest first; files
// over max_file_bytes are too_large whatever the budget.
func TestPlanBackups(t *testing.T) {
	f := func(p string, size, mtime int64) scan.Stat {
		return scan.Stat{Path: p, Type: scan.File, Size: size, MTime: mtime}
	}
	list := []scan.Stat{
		{Path: ".git", Type: scan.Dir},
		f(".git/HEAD", 10, 100),
		f(".git/objects/x", 10, 300),
		f("old.txt", 10, 50),
		f("new.txt", 10, 200),
		f("huge.bin", 5000, 400),
		f("sub/.git/config", 10, 500),
	}
	plan := planBackups(list, BackupBounds{MaxFileBytes: 1000, MaxTotalBytes: 1 << 20, MaxFiles: 3})
	// Kept: new.txt, old.txt (outside .git, newest first), then the newest
	// .git file (sub/.git/config).
	want := map[int]string{1: "budget_exhausted", 2: "budget_exhausted", 5: "too_large"}
	if len(plan) != len(want) {
		t.Fatalf("plan %v, want %v", plan, want)
	}
	for i, r := range want {
		if plan[i] != r {
			t.Fatalf("plan %v, want %v", plan, want)
		}
	}
}
