//go:build !linux

package hookcore

import (
	"os"
	"syscall"
)

// payloadFile is an unlinked temporary file.
func payloadFile() (*os.File, error) {
	f, err := os.CreateTemp("", "agentscm-hook-payload-")
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name())
	return f, nil
}

func dupStdin(f *os.File) error { return syscall.Dup2(int(f.Fd()), 0) }

func execve(path string, argv, env []string) error { return syscall.Exec(path, argv, env) }
