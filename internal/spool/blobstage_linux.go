//go:build linux

package spool

import "golang.org/x/sys/unix"

// renameNoReplace renames old to new unless new exists (fs.ErrExist then):
// a staged blob's name is its digest, so an existing one already holds the
// bytes, and its inode stays the one a concurrent reader opened.
func renameNoReplace(old, new string) error {
	return unix.Renameat2(unix.AT_FDCWD, old, unix.AT_FDCWD, new, unix.RENAME_NOREPLACE)
}
