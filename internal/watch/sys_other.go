//go:build !linux

package watch

import (
	"errors"
	"net"
	"os"
	"syscall"
)

// peerUID: without SO_PEERCRED the private directory (0700, owner checked)
// is what keeps other users out.
func peerUID(conn *net.UnixConn) (int, error) { return os.Getuid(), nil }

func detached() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }

func openDirPath(dir string) (int, error) {
	return -1, errors.New("there is no short path to it on this system")
}
