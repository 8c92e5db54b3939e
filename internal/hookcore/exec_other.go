//go:build !linux

package hookcore

import (
	"os"
	"syscall"
)

// execHook replaces this process with `full change-capture hook-claude`
// reading payload on its stdin (an unlinked temporary file). It returns
// only when that failed.
func execHook(full string, payload []byte) error {
	f, err := os.CreateTemp("", "agentscm-hook-payload-")
	if err != nil {
		return err
	}
	os.Remove(f.Name())
	defer f.Close()
	if _, err := f.Write(payload); err != nil {
		return err
	}
	if _, err := f.Seek(0, 0); err != nil {
		return err
	}
	if err := syscall.Dup2(int(f.Fd()), 0); err != nil {
		return err
	}
	return syscall.Exec(full, []string{full, "change-capture", "hook-claude"}, os.Environ())
}
