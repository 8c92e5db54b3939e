//go:build !linux

package watch

import (
	"net"
	"os"
	"syscall"
)

// peerUID: without SO_PEERCRED the private directory (0700, owner checked)
// is what keeps other users out.
func peerUID(conn *net.UnixConn) (int, error) { return os.Getuid(), nil }

func detached() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }
