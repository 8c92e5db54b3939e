package hookcore

import (
	"os"

	"golang.org/x/sys/unix"
)

// execHook replaces this process with `full change-capture hook-claude`
// reading payload on its stdin (a memfd). It returns only when that failed.
func execHook(full string, payload []byte) error {
	fd, err := unix.MemfdCreate("agentscm-hook-payload", unix.MFD_CLOEXEC)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), "payload")
	defer f.Close()
	if _, err := f.Write(payload); err != nil {
		return err
	}
	if _, err := f.Seek(0, 0); err != nil {
		return err
	}
	if err := unix.Dup3(fd, 0, 0); err != nil {
		return err
	}
	return unix.Exec(full, []string{full, "change-capture", "hook-claude"}, os.Environ())
}
