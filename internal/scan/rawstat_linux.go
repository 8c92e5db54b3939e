//go:build linux && (amd64 || arm64)

package scan

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// statNameMax bounds the names fstatatRaw handles on its stack buffer.
const statNameMax = 255

// fstatatRaw is fstatat(dirfd, name, AT_SYMLINK_NOFOLLOW) as a raw system
// call: a listing makes one per entry, each a few microseconds with the
// inode cached, and the scheduler's bookkeeping around an ordinary system
// call (handing the P off, the monitor thread waking every 20 us while
// calls keep entering it) cost a fifth of a 100,000-entry listing on two
// CPUs. A call that waits for the disk holds its P meanwhile, which a
// listing of at most GOMAXPROCS workers can afford.
func fstatatRaw(dirfd int, name string, st *unix.Stat_t) error {
	if len(name) > statNameMax || len(name) == 0 {
		return fstatat(dirfd, name, st)
	}
	var b [statNameMax + 1]byte
	for i := 0; i < len(name); i++ {
		if name[i] == 0 {
			return unix.EINVAL
		}
		b[i] = name[i]
	}
	for {
		_, _, e := unix.RawSyscall6(sysFstatat, uintptr(dirfd), uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(st)), unix.AT_SYMLINK_NOFOLLOW, 0, 0)
		switch e {
		case 0:
			return nil
		case unix.EINTR:
			continue
		case unix.ENOENT:
			return unix.ENOENT
		default:
			return e
		}
	}
}

// getdentsRaw is getdents64 as a raw system call (see fstatatRaw).
func getdentsRaw(fd int, buf []byte) (int, error) {
	if len(buf) == 0 {
		return 0, unix.EINVAL
	}
	n, _, e := unix.RawSyscall(unix.SYS_GETDENTS64, uintptr(fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}
