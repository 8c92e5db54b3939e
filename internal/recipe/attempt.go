// Package recipe is the managed recipe runner: `change-capture run-recipe`
// runs a registered recipe's argv as the single verification action of a
// managed Bash occurrence, and `change-capture reconcile-recipe` resolves
// an attempt a crash left unresolved. This file holds the private
// checkout-wide lock and the attempt records that fence a Work, canonical
// checkout and recipe while an invocation is unresolved.
package recipe

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// Layout under the agentscm config directory:
//
//	capture-recipes/<checkout key>/checkout.lock   the checkout-wide lock
//	capture-recipes/<checkout key>/attempts/<fence key>.json
//
// The checkout key hashes the canonical root, repository and worktree; the
// fence key hashes the Work, the canonical root and the recipe id.
const (
	recipesDir     = "capture-recipes"
	lockName       = "checkout.lock"
	attemptsDir    = "attempts"
	attemptVersion = 1
	maxAttemptSize = 64 << 10
	// MaxAttempts bounds the unresolved attempts listed for one checkout.
	MaxAttempts = 1024
)

// Attempt phases. A phase is what was persisted last: a durable start may
// exist while the phase still says reserved (the crash came before the
// phase write), so a reserved phase alone never proves that nothing ran.
const (
	PhaseReserved = "reserved"
	PhaseSpawned  = "spawned"
)

// Attempt is the durable record of one run-recipe invocation from its
// reservation until its terminal receipt is retained.
type Attempt struct {
	Version  int    `json:"version"`
	FenceKey string `json:"fence_key"`
	// Root is the canonical checkout root; Dev and Ino its identity while
	// the attempt is unresolved.
	Root       string `json:"root"`
	Dev        uint64 `json:"dev"`
	Ino        uint64 `json:"ino"`
	Repository string `json:"repository"`
	WorktreeID string `json:"worktree_id"`
	Spool      string `json:"spool"`
	// The original bindings: Work target, observed session and provider
	// tool-use id of the managed occurrence, recipe and its digest.
	WorkID           string `json:"work_id"`
	Generation       int64  `json:"generation"`
	CanonicalSession string `json:"canonical_session"`
	Session          string `json:"session"`
	ToolUseID        string `json:"tool_use_id"`
	ActionID         string `json:"action_id"`
	RecipeID         string `json:"recipe_id"`
	RecipeDigest     string `json:"recipe_digest"`
	Phase            string `json:"phase"`
	// Host identity: the boot of the running kernel and the machine id.
	BootID    string    `json:"boot_id"`
	MachineID string    `json:"machine_id"`
	PID       int       `json:"pid"`
	ChildPID  int       `json:"child_pid,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// checkoutDir is the private recipe directory of one checkout.
func checkoutDir(configDir, root, repository, worktree string) string {
	sum := sha256.Sum256([]byte("agentscm-recipe-checkout-v1\x00" + root + "\x00" + repository + "\x00" + worktree))
	return filepath.Join(configDir, recipesDir, hex.EncodeToString(sum[:12]))
}

// FenceKey identifies the fence of a Work, canonical checkout and recipe.
func FenceKey(work, root, recipeID string) string {
	sum := sha256.Sum256([]byte("agentscm-recipe-fence-v1\x00" + work + "\x00" + root + "\x00" + recipeID))
	return hex.EncodeToString(sum[:16])
}

// ErrLockBusy reports that another local caller holds the checkout lock.
var ErrLockBusy = errors.New("another recipe caller holds the checkout lock")

// checkoutLock is the private checkout-wide lock: held, it proves only that
// this caller is the one local recipe caller of the checkout right now.
type checkoutLock struct{ f *os.File }

// lockCheckout takes the checkout lock, waiting while another caller holds
// it until ctx ends (wait false: refuse at once with ErrLockBusy).
func lockCheckout(ctx context.Context, dir string, wait bool) (*checkoutLock, error) {
	if err := mkdirPrivateAll(dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, fsutil.FileMode)
	if err != nil {
		return nil, fmt.Errorf("open checkout lock %s: %w", path, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return &checkoutLock{f: f}, nil
		}
		if err != syscall.EWOULDBLOCK && err != syscall.EINTR {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if !wait {
			f.Close()
			return nil, ErrLockBusy
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("%w (waited until cancelled): %w", ErrLockBusy, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (l *checkoutLock) unlock() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

func mkdirPrivateAll(dir string) error {
	parent := filepath.Dir(dir)
	if err := fsutil.MkdirPrivate(parent); err != nil {
		return err
	}
	if err := fsutil.MkdirPrivate(dir); err != nil {
		return err
	}
	return fsutil.CheckPrivateDir(dir)
}

// attemptStore is the attempts directory of one checkout.
type attemptStore struct{ dir string }

func (s attemptStore) path(key string) string { return filepath.Join(s.dir, key+".json") }

func (s attemptStore) ensure() error { return mkdirPrivateAll(s.dir) }

// create durably writes a new attempt (no replace; the directory is
// synced): an existing attempt under the key is the fence.
func (s attemptStore) create(a *Attempt) error {
	if err := s.ensure(); err != nil {
		return err
	}
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	return fsutil.WriteNew(s.path(a.FenceKey), b, fsutil.FileMode)
}

// update atomically replaces an attempt (its phase).
func (s attemptStore) update(a *Attempt) error {
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	return fsutil.WriteAtomic(s.path(a.FenceKey), b, fsutil.FileMode)
}

// remove deletes a resolved attempt and syncs the directory.
func (s attemptStore) remove(key string) error {
	if err := os.Remove(s.path(key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return fsutil.SyncDir(s.dir)
}

func (s attemptStore) read(key string) (*Attempt, error) {
	b, err := fsutil.ReadFileNoFollow(s.path(key), maxAttemptSize)
	if err != nil {
		return nil, err
	}
	var a Attempt
	if err := json.Unmarshal(b, &a); err != nil || a.Version != attemptVersion || a.FenceKey != key {
		return nil, fmt.Errorf("attempt record %s is malformed", s.path(key))
	}
	return &a, nil
}

// list returns every attempt of the checkout (at most MaxAttempts).
func (s attemptStore) list() ([]*Attempt, error) {
	d, err := os.Open(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(MaxAttempts + 1)
	if err != nil && len(names) == 0 {
		return nil, nil
	}
	if len(names) > MaxAttempts {
		return nil, fmt.Errorf("more than %d attempt records in %s", MaxAttempts, s.dir)
	}
	var out []*Attempt
	for _, n := range names {
		key, ok := strings.CutSuffix(n, ".json")
		if !ok {
			continue
		}
		a, err := s.read(key)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// rootIdentity is the device and inode of the canonical root.
func rootIdentity(root string) (dev, ino uint64, err error) {
	fi, err := os.Lstat(root)
	if err != nil {
		return 0, 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.IsDir() {
		return 0, 0, fmt.Errorf("%s is not a directory", root)
	}
	return uint64(st.Dev), uint64(st.Ino), nil
}

// HostIdentity is the local host's boot and machine identity.
type HostIdentity struct {
	BootID    string
	MachineID string
}

// CurrentHost reads /proc/sys/kernel/random/boot_id and /etc/machine-id
// (or /var/lib/dbus/machine-id); a missing value is empty.
func CurrentHost() HostIdentity {
	read := func(paths ...string) string {
		for _, p := range paths {
			if b, err := fsutil.ReadFileNoFollow(p, 256); err == nil {
				if v := strings.TrimSpace(string(b)); v != "" {
					return v
				}
			}
		}
		return ""
	}
	return HostIdentity{BootID: read("/proc/sys/kernel/random/boot_id"), MachineID: read("/etc/machine-id", "/var/lib/dbus/machine-id")}
}
