package spool

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// fail is an injected failpoint, compiled in always and inert unless the
// AGENTSCM_SPOOL_FAILPOINT environment variable (read at open) names it:
// "name" kills the process with SIGKILL there (crash tests); "name=enospc"
// makes the write that follows fail with ENOSPC.
func (s *Spool) fail(name string) {
	if s.failpoint == "" {
		return
	}
	for _, fp := range strings.Split(s.failpoint, ",") {
		if fp == name {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // never returns
		}
	}
}

// injected reports whether an error is injected at name.
func (s *Spool) injected(name string) error {
	if s.failpoint == "" {
		return nil
	}
	for _, fp := range strings.Split(s.failpoint, ",") {
		if fp == name+"=enospc" {
			return fmt.Errorf("injected at %s: %w", name, syscall.ENOSPC)
		}
		if fp == name+"=eio" {
			return fmt.Errorf("injected at %s: %w", name, syscall.EIO)
		}
	}
	return nil
}

func (s *Spool) syncDir(dir string) error {
	if s.noSync {
		return nil
	}
	return fsutil.SyncDir(dir)
}

// writeTemp writes data to a new temporary file in dir, fsynced, and returns
// its path. It is fsutil's atomic write split open so that failpoints can sit
// between its steps and the caller can choose link (no replace) or rename.
func (s *Spool) writeTemp(dir string, data []byte, fp string) (string, error) {
	if err := s.injected(fp); err != nil {
		return "", err
	}
	name := filepath.Join(dir, fsutil.TempPrefix+randomHex(8))
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, fsutil.FileMode)
	if err != nil {
		return "", fmt.Errorf("create temporary file in %s: %w", dir, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(name)
		return "", fmt.Errorf("write %s: %w", name, err)
	}
	s.fail(fp + ".temp-written")
	if !s.noSync {
		if err := f.Sync(); err != nil {
			f.Close()
			os.Remove(name)
			return "", fmt.Errorf("sync %s: %w", name, err)
		}
	}
	if err := f.Close(); err != nil {
		os.Remove(name)
		return "", fmt.Errorf("close %s: %w", name, err)
	}
	s.fail(fp + ".temp-synced")
	return name, nil
}

// writeNew durably installs dir/name with data only if it does not exist yet
// (hard link from the temporary file). An existing identical file counts as
// success; an existing different file is an error wrapping fs.ErrExist.
func (s *Spool) writeNew(dir, name string, data []byte, fp string) error {
	if err := s.linkNew(dir, name, data, fp); err != nil {
		return err
	}
	return s.syncDir(dir)
}

// writeReplace durably replaces dir/name with data (rename).
func (s *Spool) writeReplace(dir, name string, data []byte, fp string) error {
	tmp, err := s.writeTemp(dir, data, fp)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("install %s: %w", name, err)
	}
	s.fail(fp + ".renamed")
	return s.syncDir(dir)
}
