//go:build !(linux && (amd64 || arm64))

package scan

import (
	"golang.org/x/sys/unix"

	"github.com/agentscm/agentscm/internal/fsutil"
)

func fstatatRaw(dirfd int, name string, st *unix.Stat_t) error { return fstatat(dirfd, name, st) }

func getdentsRaw(fd int, buf []byte) (int, error) { return fsutil.Getdents(fd, buf) }
