package hookcore

import (
	"os"

	"golang.org/x/sys/unix"
)

// payloadFile is a memfd (closed on exec; its copy on fd 0 is not).
func payloadFile() (*os.File, error) {
	fd, err := unix.MemfdCreate("agentscm-hook-payload", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "payload"), nil
}

func dupStdin(f *os.File) error { return unix.Dup3(int(f.Fd()), 0, 0) }

func execve(path string, argv, env []string) error { return unix.Exec(path, argv, env) }
