package capsule

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/agentscm/agentscm/internal/fsutil"
	"golang.org/x/sys/unix"
)

// RollbackFailpointEnv names an injected crash point of rollback (tests): at
// that point the process kills itself with SIGKILL. Points: temp-written (a
// restored file's temporary copy is written and fsynced in .agentdiff/tmp,
// not yet renamed into place), before-seal (every path is handled, nothing
// of the attempt is recorded yet).
const RollbackFailpointEnv = "AGENTDIFF_ROLLBACK_FAILPOINT"

// RunFailpointEnv names an injected crash point of run (tests), like
// RollbackFailpointEnv. Points: seal-synced (every capsule file and the
// seal's temporary file are durable, the seal is not yet linked under its
// name).
const RunFailpointEnv = "AGENTDIFF_RUN_FAILPOINT"

// failpoint kills the process when RollbackFailpointEnv names point.
func failpoint(point string) { failpointOf(RollbackFailpointEnv, point) }

// failpointOf kills the process when the variable env names point.
func failpointOf(env, point string) {
	if os.Getenv(env) == point {
		_ = unix.Kill(os.Getpid(), unix.SIGKILL)
		select {} // the signal is delivered before this returns
	}
}

// Rollback's temporary copies live in <root>/.agentdiff/tmp (never in the
// workspace) and are renamed into place from there; an interrupted rollback
// leaves them there, and the next rollback or verify removes and reports them.
const (
	dirTmp             = "tmp"
	rollbackTempPrefix = "rollback-"
)

// openTmpDir creates (0700) and opens <state>/tmp without following a symlink.
func openTmpDir(state string) (*os.File, error) {
	p := filepath.Join(state, dirTmp)
	if err := os.Mkdir(p, fsutil.DirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("rollback temporary directory: %w", err)
	}
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s (symlinks are refused): %w", p, err)
	}
	return os.NewFile(uintptr(fd), p), nil
}

// clearRollbackTemps removes the rollback temporaries left in <state>/tmp
// and returns their names. The caller holds the root's lock.
func clearRollbackTemps(state string) ([]string, error) {
	p := filepath.Join(state, dirTmp)
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.ENOENT {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open %s (symlinks are refused): %w", p, err)
	}
	d := os.NewFile(uintptr(fd), p)
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []string
	for _, n := range names {
		if !strings.HasPrefix(n, rollbackTempPrefix) {
			continue
		}
		if err := unix.Unlinkat(fd, n, 0); err != nil && err != unix.ENOENT {
			return out, fmt.Errorf("remove rollback temporary %s: %w", n, err)
		}
		out = append(out, dirTmp+"/"+n)
	}
	if len(out) > 0 {
		if err := d.Sync(); err != nil {
			return out, err
		}
	}
	return out, nil
}
