package capsule

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/scan"
	"golang.org/x/sys/unix"
)

// RunSummary is one line of `agentdiff runs`.
type RunSummary struct {
	RunID     string    `json:"run_id"`
	CreatedAt time.Time `json:"created_at,omitzero"`
	Task      string    `json:"task"`
	Command   []string  `json:"command"`
	Status    string    `json:"status"` // result status, or "unsealed"/"unreadable"
	Changes   int       `json:"changes"`
	Score     int64     `json:"blast_radius_score"`
}

// ListRuns lists capsules below root, newest first, at most limit (0 = all).
// It reads each capsule's metadata and result but does not verify them.
func ListRuns(root string, limit int) ([]RunSummary, error) {
	runs := filepath.Join(root, StateDir, "runs")
	ents, err := os.ReadDir(runs)
	if errors.Is(err, fs.ErrNotExist) {
		return []RunSummary{}, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range ents {
		if e.IsDir() && ValidRunID(e.Name()) {
			ids = append(ids, e.Name())
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(ids)))
	if limit > 0 && len(ids) > limit {
		ids = ids[:limit]
	}
	out := []RunSummary{}
	for _, id := range ids {
		dir := filepath.Join(runs, id)
		s := RunSummary{RunID: id, Status: "unreadable"}
		var m Metadata
		if readJSON(dir, FileMetadata, &m) == nil {
			s.CreatedAt, s.Task, s.Command = m.CreatedAt, m.Task, m.Command
		}
		if _, err := os.Lstat(filepath.Join(dir, FileIntegrity)); err != nil {
			s.Status = "unsealed"
		} else {
			var r Result
			if readJSON(dir, FileResult, &r) == nil {
				s.Status, s.Changes, s.Score = r.Status, len(r.Changes), r.BlastRadius.Score
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// Inspection is `agentdiff inspect`: the verification report, metadata,
// result and any rollback attempts of one capsule.
type Inspection struct {
	Verify   *VerifyReport   `json:"verify"`
	Metadata *Metadata       `json:"metadata,omitempty"`
	Result   *Result         `json:"result,omitempty"`
	Rollback *RollbackResult `json:"rollback,omitempty"`
	Problems []string        `json:"problems"`
}

// Inspect verifies and reads one capsule.
func Inspect(ctx context.Context, root, id string) (*Inspection, error) {
	dir, err := CapsuleDir(root, id)
	if err != nil {
		return nil, err
	}
	rep, err := Verify(ctx, dir, id)
	if err != nil {
		return nil, err
	}
	in := &Inspection{Verify: rep, Problems: []string{}}
	var m Metadata
	if err := readJSON(dir, FileMetadata, &m); err != nil {
		in.Problems = append(in.Problems, err.Error())
	} else {
		in.Metadata = &m
	}
	var r Result
	if err := readJSON(dir, FileResult, &r); err != nil {
		in.Problems = append(in.Problems, err.Error())
	} else if err := r.applyRawPaths(); err != nil {
		in.Problems = append(in.Problems, err.Error())
	} else {
		in.Result = &r
	}
	if rep.Rollbacks > 0 {
		var rr RollbackResult
		if err := readJSON(dir, FileRollbackResult, &rr); err != nil {
			in.Problems = append(in.Problems, err.Error())
		} else {
			in.Rollback = &rr
		}
	}
	return in, nil
}

// Capability is one line of `agentdiff doctor`.
type Capability struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// Doctor reports what agentdiff can and cannot do on this machine for root.
func Doctor(root string) []Capability {
	var out []Capability
	add := func(name string, ok bool, detail string) { out = append(out, Capability{name, ok, detail}) }
	add("sandbox", false, "not sandboxed: the command runs as you, with your permissions, and can read and write anything you can")
	add("network_enforcement", false, "no network enforcement: the command can use the network freely; only listening TCP sockets are observed")
	add("process_group_cleanup", true, "the command runs in its own process group; on exit or timeout the group is killed (SIGTERM, then SIGKILL) and survivors are reported; processes that leave the group (setsid) escape")
	if _, err := listeningPorts(); err != nil {
		add("port_observation", false, "cannot read /proc/net/tcp{,6}: "+err.Error())
	} else {
		add("port_observation", true, "listening TCP sockets from /proc/net/tcp and /proc/net/tcp6 before, every 100 ms while the command runs, once before its process group is cleaned up (with the group's socket fds) and after; not causal attribution")
	}
	if b, err := os.ReadFile("/proc/sys/fs/inotify/max_user_watches"); err != nil {
		add("after_listing_watch", false, "no inotify: every after manifest lists the whole tree")
	} else {
		add("after_listing_watch", true, "inotify watches every directory while the command runs, so the after manifest re-lists only what changed (max_user_watches "+strings.TrimSpace(string(b))+"; beyond it the whole tree is listed)")
	}
	st, err := os.Stat(root)
	if err != nil || !st.IsDir() {
		add("root", false, fmt.Sprintf("root %s is not a readable directory", root))
		return out
	}
	add("root", true, root)
	n := 0
	err = scan.Walk(context.Background(), root, scan.Options{Skip: func(rel string, _ bool) bool { return rel == StateDir }}, func(*scan.Entry) error { n++; return nil })
	if err != nil {
		add("no_follow_manifest", false, err.Error())
	} else {
		add("no_follow_manifest", true, fmt.Sprintf("%d objects walked without following symlinks", n))
	}
	state := filepath.Join(root, StateDir)
	if fi, err := os.Lstat(state); err == nil {
		if !fi.IsDir() {
			add("state_dir", false, state+" is not a directory")
		} else {
			var size int64
			_ = filepath.WalkDir(filepath.Join(state, "objects"), func(_ string, d fs.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					if i, e := d.Info(); e == nil {
						size += i.Size()
					}
				}
				return nil
			})
			perm := fi.Mode().Perm()
			add("state_dir", perm&0o077 == 0, fmt.Sprintf("%s mode %04o; object store holds %d bytes and is never pruned automatically", state, perm, size))
		}
	} else {
		add("state_dir", true, state+" will be created (0700) on the first run")
	}
	// RENAME_NOREPLACE is what lets rollback recreate a deleted file without replacing later work.
	tmp, err := os.MkdirTemp(root, ".agentdiff-doctor-")
	if err == nil {
		a, b := filepath.Join(tmp, "a"), filepath.Join(tmp, "b")
		os.WriteFile(a, nil, 0o600)
		os.WriteFile(b, nil, 0o600)
		err = fsutil.RenameNoReplace(unix.AT_FDCWD, a, unix.AT_FDCWD, b)
		os.RemoveAll(tmp)
		switch {
		case err == unix.EEXIST:
			add("rename_noreplace", true, "rollback can recreate deleted files without replacing anything that appeared since")
		case err == unix.EINVAL || err == unix.ENOSYS || errors.Is(err, syscall.ENOTSUP):
			add("rename_noreplace", false, "this filesystem lacks RENAME_NOREPLACE; rollback of deleted files will fail safely")
		default:
			add("rename_noreplace", false, fmt.Sprintf("unexpected result %v", err))
		}
	} else {
		add("rename_noreplace", false, "cannot create a probe directory in the root: "+err.Error())
	}
	add("integrity", true, "SHA-256 checksums detect ordinary mutation of capsules; they are not signatures or remote attestation")
	add("redaction", true, "stored command arguments and event fields are redacted best effort; workspace files and backups can still contain secrets")
	return out
}
