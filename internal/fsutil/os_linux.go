//go:build linux

package fsutil

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// RenameNoReplace renames old (relative to olddirfd) to new (relative to
// newdirfd) and fails with EEXIST instead of replacing an existing new:
// renameat2(RENAME_NOREPLACE) on Linux, renameatx_np(RENAME_EXCL) on macOS.
func RenameNoReplace(olddirfd int, old string, newdirfd int, new string) error {
	return unix.Renameat2(olddirfd, old, newdirfd, new, unix.RENAME_NOREPLACE)
}

// Getdents reads directory entries of the open directory fd into buf in
// the format syscall.ParseDirent and unix.ParseDirent read.
func Getdents(fd int, buf []byte) (int, error) { return unix.Getdents(fd, buf) }

// MtimeNS is the modification time of st in nanoseconds.
func MtimeNS(st *unix.Stat_t) int64 { return st.Mtim.Nano() }

// CtimeNS is the status change time of st in nanoseconds.
func CtimeNS(st *unix.Stat_t) int64 { return st.Ctim.Nano() }

// SysMtimeNS is MtimeNS for a syscall.Stat_t.
func SysMtimeNS(st *syscall.Stat_t) int64 { return st.Mtim.Nano() }

// SysCtimeNS is CtimeNS for a syscall.Stat_t.
func SysCtimeNS(st *syscall.Stat_t) int64 { return st.Ctim.Nano() }

// Syncfs makes everything written to the filesystem holding fd durable
// (syncfs(2)).
func Syncfs(fd int) error { return unix.Syncfs(fd) }

// Fdatasync flushes fd's data (and the metadata needed to read it back).
func Fdatasync(fd int) error { return unix.Fdatasync(fd) }
