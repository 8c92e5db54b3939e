//go:build darwin

package fsutil

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// RenameNoReplace renames old (relative to olddirfd) to new (relative to
// newdirfd) and fails with EEXIST instead of replacing an existing new:
// renameat2(RENAME_NOREPLACE) on Linux, renameatx_np(RENAME_EXCL) on macOS.
func RenameNoReplace(olddirfd int, old string, newdirfd int, new string) error {
	return unix.RenameatxNp(olddirfd, old, newdirfd, new, unix.RENAME_EXCL)
}

// Getdents reads directory entries of the open directory fd into buf in
// the format syscall.ParseDirent and unix.ParseDirent read (getdirentries
// on macOS).
func Getdents(fd int, buf []byte) (int, error) {
	var base uintptr
	return unix.Getdirentries(fd, buf, &base)
}

// MtimeNS is the modification time of st in nanoseconds.
func MtimeNS(st *unix.Stat_t) int64 { return st.Mtim.Nano() }

// CtimeNS is the status change time of st in nanoseconds.
func CtimeNS(st *unix.Stat_t) int64 { return st.Ctim.Nano() }

// SysMtimeNS is MtimeNS for a syscall.Stat_t.
func SysMtimeNS(st *syscall.Stat_t) int64 { return st.Mtimespec.Nano() }

// SysCtimeNS is CtimeNS for a syscall.Stat_t.
func SysCtimeNS(st *syscall.Stat_t) int64 { return st.Ctimespec.Nano() }

// Syncfs makes everything written to the filesystem holding fd durable.
// macOS has no syncfs(2): sync(2) schedules every dirty buffer, then
// F_FULLFSYNC on fd asks the drive to flush its cache to permanent storage.
func Syncfs(fd int) error {
	unix.Sync()
	_, err := unix.FcntlInt(uintptr(fd), unix.F_FULLFSYNC, 0)
	return err
}

// Fdatasync flushes fd's data; macOS has no fdatasync(2) in its public
// interface, so this is fsync(2).
func Fdatasync(fd int) error { return unix.Fsync(fd) }
